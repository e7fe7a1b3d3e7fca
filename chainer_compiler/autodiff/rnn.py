"""Gradient rules for the rnn family."""
from .registry import gradient, no_gradient  # noqa: F401
