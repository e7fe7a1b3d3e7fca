"""Gradient rules for the loss family."""
from .registry import gradient, no_gradient  # noqa: F401
