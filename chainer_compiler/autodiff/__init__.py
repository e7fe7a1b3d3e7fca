"""Reverse-mode automatic differentiation of ONNX graphs.

Gradient rules live in one module per operator family, under the same names
as the translators' converters and the runtime's kernels.
"""
import importlib

FAMILY_NAMES = ('activation', 'array', 'connection', 'control_flow', 'loss', 'math', 'noise',
                'normalization', 'pooling', 'rnn', 'sequence')

FAMILIES = {name: importlib.import_module('.' + name, __name__) for name in FAMILY_NAMES}

from .generate import BackwardGraph, differentiate  # noqa: E402
from .registry import GradientError, differentiable_ops, gradient  # noqa: E402

__all__ = ['BackwardGraph', 'FAMILY_NAMES', 'GradientError', 'differentiable_ops',
           'differentiate', 'gradient']
