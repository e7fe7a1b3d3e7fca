"""Gradient rules for the noise family."""
from .registry import gradient, no_gradient  # noqa: F401
