"""Checking a converter: export, then run in onnxruntime and in our VM, and
compare both with Chainer's own output."""
import chainer
import numpy
import onnx
import onnxruntime

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime import Executor
from chainer_compiler.translators.onnx_chainer import export_model
from chainer_compiler.translators.onnx_chainer.tracing import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET

#: The opsets every converter is checked at: the oldest, the default, the newest.
OPSETS = (MIN_OPSET, DEFAULT_OPSET, MAX_OPSET)


class FunctionModel(chainer.Chain):
    """Wraps a function of Variables as a model (for single-function tests)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs, **named):
        return self.fn(*xs, **named)


def _as_list(outputs):
    if isinstance(outputs, dict):
        outputs = list(outputs.values())
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    return [o.array if isinstance(o, chainer.Variable) else o for o in outputs]


def check_export(model, inputs, opsets=OPSETS, rtol=1e-5, atol=1e-5, train=False,
                 runtimes=('onnxruntime', 'vm'), **export_kwargs):
    """Export ``model`` (a Link, or a function wrapped in FunctionModel) at
    each opset; assert onnxruntime and the VM reproduce Chainer's outputs.
    Returns the models, one per opset."""
    if not isinstance(model, chainer.Link):
        model = FunctionModel(model)
    args = inputs if isinstance(inputs, (tuple, list, dict)) else (inputs,)
    with chainer.using_config('train', train), chainer.using_config('enable_backprop', False):
        expected = _as_list(model(**args) if isinstance(args, dict) else model(*args))
    feeds = list(args.values()) if isinstance(args, dict) else list(args)
    feeds = [f.array if isinstance(f, chainer.Variable) else f for f in feeds]
    models = []
    for opset in opsets:
        proto = export_model(model, inputs, opset_version=opset, train=train, **export_kwargs)
        onnx.checker.check_model(proto)
        names = [v.name for v in proto.graph.input]
        if 'onnxruntime' in runtimes:
            session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                                   providers=['CPUExecutionProvider'])
            actual = session.run(None, dict(zip(names, feeds)))
            _compare('onnxruntime', opset, expected, actual, rtol, atol)
        if 'vm' in runtimes:
            result = Executor(build_program(proto), backend='numpy').run(dict(zip(names, feeds)))
            _compare('VM', opset, expected, [result[v.name] for v in proto.graph.output],
                     rtol, atol)
        models.append(proto)
    return models


def _compare(runtime, opset, expected, actual, rtol, atol):
    assert len(expected) == len(actual), (runtime, opset)
    for i, (e, a) in enumerate(zip(expected, actual)):
        numpy.testing.assert_allclose(
            numpy.asarray(a), numpy.asarray(e), rtol=rtol, atol=atol,
            err_msg='%s at opset %d, output %d' % (runtime, opset, i))


def op_types(model):
    """Operator names used in an exported model, in graph order."""
    return [n.op_type for n in model.graph.node]
