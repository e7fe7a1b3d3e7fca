"""Converters for chainer.functions.math."""
from .registry import converter  # noqa: F401
