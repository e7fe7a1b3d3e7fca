"""chainer-compiler: export Chainer models to ONNX, compile them into a
register-VM Program and run it on NumPy or CuPy.

Attributes are imported lazily, so ``import chainer_compiler.runtime`` (all
a shipped model needs) pulls in neither Chainer nor ONNX.  Each attribute
belongs to an install tier (see README: Set-up); using one whose tier is not
installed raises `MissingExtraError`, which names the extra to install.
"""
import importlib
import logging

__version__ = '0.1.0'

# Quiet unless the application configures logging (the command lines' -v).
logging.getLogger(__name__).addHandler(logging.NullHandler())


class MissingExtraError(ModuleNotFoundError):
    """A feature needs a package that only an install extra brings; the
    message names the feature, the missing module and the extra."""


# public name -> (module that defines it (or is it), the extra it needs; None: NumPy alone)
_PUBLIC = {
    'export': ('chainer_compiler.exporting', 'chainer'),
    'compile_onnx': ('chainer_compiler.compiled_model', 'chainer'),
    'compile': ('chainer_compiler.compiled_model', 'chainer'),
    'CompiledModel': ('chainer_compiler.compiled_model', 'chainer'),
    'compile_training_step': ('chainer_compiler.training_step', 'chainer'),
    'TrainingStep': ('chainer_compiler.training_step', 'chainer'),
    'TrainingStepUpdater': ('chainer_compiler.training_step', 'chainer'),
    'FixedBatchDataset': ('chainer_compiler.datasets', 'chainer'),
    'get_mnist': ('chainer_compiler.datasets', 'chainer'),
    'use_unified_memory_allocator': ('chainer_compiler.allocators', 'chainer'),
    'use_chainerx_shared_allocator': ('chainer_compiler.allocators', 'chainer'),
    'build_program': ('chainer_compiler.pipeline', 'onnx'),
    'load_onnx': ('chainer_compiler.frontend', 'onnx'),
    'ModelMismatchError': ('chainer_compiler.errors', None),
    'UnsupportedOperatorsError': ('chainer_compiler.errors', None),
    'InvalidModelError': ('chainer_compiler.errors', None),
    'InvalidTestDataError': ('chainer_compiler.errors', None),
    'runtime': ('chainer_compiler.runtime', None),  # the subpackage a shipped model needs
}

__all__ = sorted(_PUBLIC) + ['MissingExtraError', '__version__']


#: extra -> the top-level modules it installs (what a missing import may name)
_EXTRA_MODULES = {
    'onnx': {'onnx', 'ml_dtypes'},
    'chainer': {'chainer', 'onnx', 'ml_dtypes', 'onnxruntime', 'pkg_resources'},
}


def _missing_extra(error, feature, extra):
    """``error``, a ModuleNotFoundError met while importing what ``feature``
    needs, as a MissingExtraError naming ``extra``; None when the missing
    module is not one that ``extra`` installs (a bug or a broken install,
    not a tier)."""
    if (error.name or '').split('.')[0] not in _EXTRA_MODULES[extra]:
        return None
    return MissingExtraError(
        "%s needs the '%s' extra (No module named %r): install chainer-compiler[%s] "
        "(see README: Set-up)" % (feature, extra, error.name, extra), name=error.name)


def __getattr__(name):
    if name not in _PUBLIC:
        raise AttributeError('module chainer_compiler has no attribute %r' % name)
    module, extra = _PUBLIC[name]
    try:
        imported = importlib.import_module(module)
        value = imported if module == '%s.%s' % (__name__, name) else getattr(imported, name)
    except ModuleNotFoundError as e:
        missing = extra and _missing_extra(e, 'chainer_compiler.' + name, extra)
        if missing is None:
            raise
        raise missing from e
    # Kept, so that the next look-up (and pdoc, which reads __dict__) finds it.
    globals()[name] = value
    return value


def __dir__():
    """The public API and the module's own dunders, for REPLs, IDEs and pydoc."""
    return sorted(set(__all__) | {name for name in globals() if name.startswith('__')})
