"""Converters for chainer.functions.noise."""
from .registry import converter  # noqa: F401
