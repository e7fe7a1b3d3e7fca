"""Converters for chainer.functions.normalization."""
from .registry import converter  # noqa: F401
