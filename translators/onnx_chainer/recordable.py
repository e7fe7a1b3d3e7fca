"""Make every Chainer function a traced model calls recordable.

``F.floor``, ``F.ceil``, ``F.sign`` and ``F.fix`` return a fresh Variable
with no creator, so a traced graph would bake their result in as a constant,
silently wrong for any other input.  While exporting, each of them applies a
FunctionNode the walker records (and a converter turns into ONNX).

``F.dropout`` outside training returns its input without a FunctionNode
too; it is recorded as ``InferenceDropout`` so the exported file keeps an
(identity) ONNX Dropout with its ratio, which compile_onnx turns into random
dropout when it compiles the file for training.

Chainer 7.8.1 also still uses ``numpy.float`` (``F.resize_images``), which
NumPy 1.24 removed; it is put back for the duration of the export.
"""
import contextlib
import types

import chainer
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


def _apply(node_class):
    def apply(x):
        return node_class().apply((x,))[0]
    return apply


def _recording_dropout(original):
    def dropout(x, ratio=.5, **kwargs):
        if chainer.config.train:
            return original(x, ratio, **kwargs)
        return InferenceDropout(ratio).apply((x,))[0]
    return dropout


def _replacements():
    """(function, its replacement given a callable copy of the original)."""
    from chainer.functions.math import ceil, fix, floor, sign
    from chainer.functions.noise import dropout
    return [(floor.floor, lambda _: _apply(Floor)), (ceil.ceil, lambda _: _apply(Ceil)),
            (sign.sign, lambda _: _apply(Sign)), (fix.fix, lambda _: _apply(Fix)),
            (dropout.dropout, _recording_dropout)]


@contextlib.contextmanager
def _rerouted(fn, make_replacement):
    """Make every reference to ``fn`` run a replacement, by swapping its code
    object: models often import these functions by name (Chainer's own VGG16
    does ``from chainer.functions.noise.dropout import dropout``), which
    patching module attributes would miss."""
    original = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__,
                                  fn.__defaults__, fn.__closure__)
    original.__kwdefaults__ = fn.__kwdefaults__
    key = '_chainer_compiler_%s' % fn.__name__
    namespace = {}
    exec('def forward(*args, **kwargs):\n    return %s(*args, **kwargs)\n' % key,  # noqa: S102
         namespace)
    saved = fn.__code__, fn.__defaults__, fn.__kwdefaults__
    fn.__globals__[key] = make_replacement(original)
    fn.__code__ = namespace['forward'].__code__
    try:
        yield
    finally:
        fn.__code__, fn.__defaults__, fn.__kwdefaults__ = saved
        del fn.__globals__[key]


@contextlib.contextmanager
def recordable_functions():
    """Reroute the functions above for the duration of an export."""
    missing_float = not hasattr(numpy, 'float')
    with contextlib.ExitStack() as stack:
        for fn, make_replacement in _replacements():
            stack.enter_context(_rerouted(fn, make_replacement))
        if missing_float:
            numpy.float = float
            stack.callback(delattr, numpy, 'float')
        yield
