"""Kernels, one module per operator family.

The first nine families are Chainer's own (the same names appear in
``translators/onnx_chainer/`` and ``chainer_compiler/autodiff/``); the rest
hold ONNX operators Chainer has no family for.
"""
import importlib

FAMILY_NAMES = (
    # Chainer's families
    'activation', 'array', 'connection', 'loss', 'math', 'noise',
    'normalization', 'pooling', 'rnn',
    # ONNX-only families
    'attention', 'control_flow', 'sequence', 'quantization', 'signal',
    'text', 'vision', 'training', 'ml',
)

FAMILIES = {name: importlib.import_module('.' + name, __name__) for name in FAMILY_NAMES}

from .registry import (  # noqa: E402
    CUSTOM_DOMAIN,
    KernelSpec,
    OpRecord,
    has_kernel,
    kernel,
    lookup,
    operator_record,
    recomputable,
    registered_kernels,
)

__all__ = ['CUSTOM_DOMAIN', 'FAMILY_NAMES', 'KernelSpec', 'OpRecord', 'has_kernel', 'kernel',
           'lookup', 'operator_record', 'recomputable', 'registered_kernels']
