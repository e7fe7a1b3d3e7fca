"""The tracing translator: run a Chainer model once, walk the recorded
FunctionNode graph and convert each function through a registry of
converters grouped by Chainer's own families.

Imported as ``chainer_compiler.translators.onnx_chainer``; it never shadows
the top-level ``onnx_chainer`` package Chainer installs.
"""
import importlib

FAMILY_NAMES = ('activation', 'array', 'connection', 'loss', 'math', 'noise',
                'normalization', 'pooling', 'rnn', 'roi_pooling')

FAMILIES = {name: importlib.import_module('.' + name, __name__) for name in FAMILY_NAMES}

from .registry import converter, supported_functions  # noqa: E402
from .tracing import UnsupportedFunctionError, export_model  # noqa: E402

__all__ = ['FAMILY_NAMES', 'UnsupportedFunctionError', 'converter', 'export_model',
           'supported_functions']
