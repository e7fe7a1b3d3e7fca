"""Converters for chainer.functions.array."""
from .registry import converter  # noqa: F401
