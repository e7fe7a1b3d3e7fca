"""Converters for chainer.functions.rnn."""
from .registry import converter  # noqa: F401
