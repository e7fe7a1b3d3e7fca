"""chainer-compiler: export Chainer models to ONNX, compile them into a
register-VM Program and run it on NumPy or CuPy.

Attributes are imported lazily, so ``import chainer_compiler.runtime`` (all
a shipped model needs) pulls in neither Chainer nor ONNX.
"""
import importlib
import logging

__version__ = '0.1.0'

# Quiet unless the application configures logging (the command lines' -v).
logging.getLogger(__name__).addHandler(logging.NullHandler())

# public name -> module that defines it
_PUBLIC = {
    'export': 'chainer_compiler.exporting',
    'compile_onnx': 'chainer_compiler.compiled_model',
    'compile': 'chainer_compiler.compiled_model',
    'CompiledModel': 'chainer_compiler.compiled_model',
    'ModelMismatchError': 'chainer_compiler.errors',
    'compile_training_step': 'chainer_compiler.training_step',
    'TrainingStep': 'chainer_compiler.training_step',
    'TrainingStepUpdater': 'chainer_compiler.training_step',
    'FixedBatchDataset': 'chainer_compiler.datasets',
    'get_mnist': 'chainer_compiler.datasets',
    'use_unified_memory_allocator': 'chainer_compiler.allocators',
    'use_chainerx_shared_allocator': 'chainer_compiler.allocators',
    'build_program': 'chainer_compiler.pipeline',
    'load_onnx': 'chainer_compiler.frontend',
    'UnsupportedOperatorsError': 'chainer_compiler.errors',
    'InvalidModelError': 'chainer_compiler.errors',
    'InvalidTestDataError': 'chainer_compiler.errors',
}

__all__ = sorted(_PUBLIC) + ['__version__']


def __getattr__(name):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError('module chainer_compiler has no attribute %r' % name)
    return getattr(importlib.import_module(module), name)
