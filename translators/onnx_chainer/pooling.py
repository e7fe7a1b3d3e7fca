"""Converters for chainer.functions.pooling."""
from .registry import converter  # noqa: F401
