"""Make every Chainer function a traced model calls recordable.

``F.floor``, ``F.ceil``, ``F.sign`` and ``F.fix`` return a fresh Variable
with no creator, so a traced graph would bake their result in as a constant,
silently wrong for any other input.  While exporting, ``chainer.functions``
is patched so each of them applies a FunctionNode the walker records (and a
converter turns into ONNX).

``F.dropout`` outside training returns its input without a FunctionNode
too; it is recorded as ``InferenceDropout`` so the exported file keeps an
(identity) ONNX Dropout with its ratio, which compile_onnx turns into random
dropout when it compiles the file for training.

Chainer 7.8.1 also still uses ``numpy.float`` (``F.resize_images``), which
NumPy 1.24 removed; it is put back for the duration of the export.
"""
import contextlib

import chainer
import chainer.functions
import numpy
from chainer import utils


class _Elementwise(chainer.FunctionNode):
    """Element-wise, piecewise-constant function: no gradient."""

    def forward(self, inputs):
        x, = inputs
        xp = chainer.backend.get_array_module(x)
        return utils.force_array(self.compute(xp, x), x.dtype),


class Floor(_Elementwise):
    @staticmethod
    def compute(xp, x):
        return xp.floor(x)


class Ceil(_Elementwise):
    @staticmethod
    def compute(xp, x):
        return xp.ceil(x)


class Sign(_Elementwise):
    @staticmethod
    def compute(xp, x):
        return xp.sign(x)


class Fix(_Elementwise):
    @staticmethod
    def compute(xp, x):
        return xp.fix(x)


class InferenceDropout(chainer.FunctionNode):
    """F.dropout outside training: the identity, remembering the ratio."""

    def __init__(self, ratio):
        self.dropout_ratio = ratio

    def forward(self, inputs):
        return inputs[0],


_PATCHED = {'floor': Floor, 'ceil': Ceil, 'sign': Sign, 'fix': Fix}


def _recording_dropout(original):
    def dropout(x, ratio=.5, **kwargs):
        if chainer.config.train:
            return original(x, ratio, **kwargs)
        return InferenceDropout(ratio).apply((x,))[0]
    return dropout


@contextlib.contextmanager
def recordable_functions():
    """Patch ``chainer.functions`` for the duration of an export."""
    originals = {name: getattr(chainer.functions, name) for name in list(_PATCHED) + ['dropout']}

    def wrap(node_class):
        def apply(x):
            return node_class().apply((x,))[0]
        return apply

    missing_float = not hasattr(numpy, 'float')
    try:
        for name, node_class in _PATCHED.items():
            setattr(chainer.functions, name, wrap(node_class))
        chainer.functions.dropout = _recording_dropout(originals['dropout'])
        if missing_float:
            numpy.float = float
        yield
    finally:
        for name, fn in originals.items():
            setattr(chainer.functions, name, fn)
        if missing_float:
            del numpy.float
