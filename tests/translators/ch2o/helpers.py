"""Checking a ch2o export: translate ``forward``'s source, then run the file
in onnxruntime and in our VM, and compare both with Chainer's own forward;
and compile it for training and compare its gradients with Chainer's."""
import chainer
import numpy
import onnx
import onnxruntime

from chainer_compiler import compile_onnx, export
from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime import Executor
from chainer_compiler.translators.ch2o import export_model
from chainer_compiler.translators.onnx_chainer.tracing import DEFAULT_OPSET, MAX_OPSET

#: These tests check the bridge, not the backend: the NumPy VM, where the
#: default ('auto') would build C for each model.
ON_THE_VM = {'backend': 'numpy'}

#: Every ch2o export is checked at the default opset and the newest.
OPSETS = (DEFAULT_OPSET, MAX_OPSET)


def expected_outputs(result):
    """Chainer's result of ``forward`` as the graph outputs ch2o makes of it:
    a tuple is one output per element, anything else one output; a list
    (or a tuple inside the returned tuple) is one sequence, None is False."""
    items = list(result) if isinstance(result, tuple) else [result]
    return [_expected(item) for item in items]


def _expected(value):
    if isinstance(value, (list, tuple, range)):
        return [_expected(v) for v in value]
    if value is None:
        return numpy.asarray(False)
    if isinstance(value, chainer.Variable):
        value = value.array
    return numpy.asarray(value)


def feeds(args):
    """The graph's input values for ``forward``'s arguments ``args``: arrays,
    Python and NumPy scalars as 0-d arrays, lists of arrays as lists."""
    return [_feed(a) for a in args]


def _feed(arg):
    if isinstance(arg, (list, tuple)):
        return [_feed(a) for a in arg]
    if arg is None:
        return numpy.asarray(False)
    if isinstance(arg, chainer.Variable):
        return arg.array
    if isinstance(arg, bool):
        return numpy.asarray(arg)
    if isinstance(arg, int):
        return numpy.asarray(arg, numpy.int64)
    if isinstance(arg, float):
        return numpy.asarray(arg, numpy.float32)
    return numpy.asarray(arg)


def check_ch2o(model, args, opsets=OPSETS, rtol=1e-5, atol=1e-6,
               runtimes=('onnxruntime', 'vm'), run_args=()):
    """Export ``model`` with ch2o on ``args`` at each opset; assert that
    onnxruntime and the VM reproduce Chainer's forward on ``args`` and on
    every tuple of arguments in ``run_args`` (other lengths, trip counts:
    what tracing would have baked in).  Returns the ModelProtos."""
    runs = [tuple(args)] + [tuple(a) for a in run_args]
    with chainer.using_config('train', False), chainer.using_config('enable_backprop', False):
        expected = [expected_outputs(model(*run)) for run in runs]
    protos = []
    for opset in opsets:
        proto = export_model(model, list(args), opset_version=opset)
        onnx.checker.check_model(proto, full_check=True)
        names = [v.name for v in proto.graph.input]
        for run, want in zip(runs, expected):
            inputs = dict(zip(names, feeds(run)))
            if 'onnxruntime' in runtimes:
                session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                                       providers=['CPUExecutionProvider'])
                compare('onnxruntime', opset, want, session.run(None, inputs), rtol, atol)
            if 'vm' in runtimes:
                result = Executor(build_program(proto), backend='numpy').run(inputs)
                compare('VM', opset, want, [result[v.name] for v in proto.graph.output],
                        rtol, atol)
        protos.append(proto)
    return protos


def compare(runtime, opset, expected, actual, rtol, atol, where='output'):
    """Assert ``actual`` outputs equal ``expected`` (sequences item by item)."""
    assert len(expected) == len(actual), '%s at opset %d: %d outputs, expected %d' % (
        runtime, opset, len(actual), len(expected))
    for i, (e, a) in enumerate(zip(expected, actual)):
        label = '%s at opset %d, %s %d' % (runtime, opset, where, i)
        if isinstance(e, list):
            assert isinstance(a, list), '%s: expected a sequence, got %s' % (label, type(a))
            compare(runtime, opset, e, a, rtol, atol, where='%s %d, item' % (where, i))
            continue
        a = numpy.asarray(a)
        assert a.shape == e.shape, '%s: shape %s, expected %s' % (label, a.shape, e.shape)
        numpy.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=label)


def check_ch2o_gradients(model, args, tmp_path, loss=None, rtol=1e-5, atol=1e-6):
    """Compile ``model``'s ch2o export for training; assert the compiled
    forward equals Chainer's and that the gradients of every parameter (and
    of float array arguments) equal Chainer's, for the loss ``loss(outputs)``
    (default: the sum of all float outputs, each weighted by a fixed
    random array so that no gradient is trivially uniform)."""
    path = str(tmp_path / 'model.onnx')
    export(model, list(args), path, translator='ch2o')
    compiled = compile_onnx(model, path, 'ch2o', runtime_kwargs=ON_THE_VM)

    def run(fn, convert=lambda a: a):
        model.cleargrads()
        variables = [chainer.Variable(numpy.array(a)) if _is_float_array(a) else convert(a)
                     for a in args]
        with chainer.using_config('train', True):
            outputs = fn(*variables)
        total = _loss(outputs, loss)
        total.backward()
        params = {name: p.grad.copy() for name, p in model.namedparams() if p.grad is not None}
        inputs = [v.grad for v in variables if isinstance(v, chainer.Variable)]
        return _expected(total), params, inputs

    want_loss, want_params, want_inputs = run(model)
    got_loss, got_params, got_inputs = run(compiled, _feed)
    numpy.testing.assert_allclose(got_loss, want_loss, rtol=rtol, atol=atol, err_msg='loss')
    assert sorted(got_params) == sorted(want_params), 'parameters with gradients differ'
    for name in want_params:
        numpy.testing.assert_allclose(got_params[name], want_params[name], rtol=rtol, atol=atol,
                                      err_msg='gradient of ' + name)
    for i, (g, w) in enumerate(zip(got_inputs, want_inputs)):
        numpy.testing.assert_allclose(g, w, rtol=rtol, atol=atol,
                                      err_msg='gradient of argument %d' % i)
    return compiled


def _is_float_array(a):
    return isinstance(a, numpy.ndarray) and a.dtype.kind == 'f'


def _loss(outputs, loss):
    if loss is not None:
        return loss(outputs)
    items = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    total = None
    rng = numpy.random.RandomState(7)
    for item in items:
        if not isinstance(item, chainer.Variable) or item.dtype.kind != 'f':
            continue
        weight = rng.uniform(0.5, 1.5, item.shape).astype(item.dtype)
        term = chainer.functions.sum(item * weight)
        total = term if total is None else total + term
    assert total is not None, 'no float output to differentiate'
    return total
