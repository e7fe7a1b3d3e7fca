"""The ch2o translator: compile the Python source of a Chainer model's
``forward`` (loops, conditionals, lists, calls) to ONNX Loop, If and
sequence ops.

Imported as ``chainer_compiler.translators.ch2o``.  ``export_model`` is the
entry point; ``chainer_compiler.export(..., translator='ch2o')`` writes the
file.  Chainer functions and links go through the tracing translator's
converters (functions.py).
"""
from .translator import export_model
from .values import TranslationError

__all__ = ['TranslationError', 'export_model']
