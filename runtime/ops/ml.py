"""ml kernels."""
from .registry import kernel  # noqa: F401
