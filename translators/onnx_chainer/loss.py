"""Converters for chainer.functions.loss."""
from .registry import converter  # noqa: F401
