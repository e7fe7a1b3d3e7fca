"""backend='native' inside Python: the Program compiled to C once, cached
by content, loaded with ctypes, and called with NumPy arrays."""
import os
import shutil

import chainer
import numpy
import onnx
import pytest
from onnx import TensorProto, helper

from chainer_compiler import compile_onnx
from chainer_compiler.cli import main as cli_main
from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.backend import BackendUnavailableError
from chainer_compiler.runtime.errors import InputValidationError, NativeBuildError
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import UnsupportedNativeOpsError, emit_c
from chainer_compiler.runtime.native.library import NativeRun
from tests.runtime.native.helpers import check_native, make_model

CC = shutil.which('cc') or shutil.which('gcc') or shutil.which('clang')
pytestmark = pytest.mark.skipif(CC is None, reason='no C compiler (cc, gcc, clang) on PATH')
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache of the test's own (the others share the run's)."""
    folder = tmp_path / 'cache'
    monkeypatch.setenv('CHAINER_COMPILER_CACHE', str(folder))
    return folder


def _mlp_model(seed=0, batch=3, width=7):
    rng = numpy.random.RandomState(seed)
    f32 = TensorProto.FLOAT
    inits = [onnx.numpy_helper.from_array(rng.uniform(-1, 1, shape).astype(numpy.float32), n)
             for n, shape in (('W0', (width, width)), ('b0', (width,)),
                              ('W1', (width, 4)), ('b1', (4,)))]
    graph = helper.make_graph(
        [helper.make_node('Gemm', ['x', 'W0', 'b0'], ['h']),
         helper.make_node('Relu', ['h'], ['a']),
         helper.make_node('Gemm', ['a', 'W1', 'b1'], ['y'])],
        'mlp', [helper.make_tensor_value_info('x', f32, [batch, width])],
        [helper.make_tensor_value_info('y', f32, [batch, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])


def _x(batch=3, width=7):
    return numpy.random.RandomState(5).uniform(-1, 1, (batch, width)).astype(numpy.float32)


@pytest.mark.native_build
def test_lenet5_matches_the_numpy_executor(tmp_path):
    import chainer_compiler
    from tests.models import LeNet5
    numpy.random.seed(0)
    x = numpy.random.rand(2, 1, 28, 28).astype(numpy.float32)
    model = LeNet5()
    model(x)
    chainer_compiler.export(model, x, str(tmp_path / 'lenet.onnx'))
    program = build_program(str(tmp_path / 'lenet.onnx'))
    got = Executor(program, backend='native').run_positional([x])
    want = Executor(program, backend='numpy').run_positional([x])
    numpy.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=ATOL)


@pytest.mark.native_build
def test_library_is_built_once_and_reused(cache):
    program = build_program(_mlp_model())
    first = NativeRun(program)
    libraries = [p for p in os.listdir(cache) if p.endswith('.so')]
    assert libraries == [os.path.basename(first.path)]
    mtime = os.stat(first.path).st_mtime_ns
    second = NativeRun(build_program(_mlp_model()))
    assert second.path == first.path and os.stat(first.path).st_mtime_ns == mtime
    # Nothing half-built is left behind; the kernels are compiled once, for
    # every model, into objects/.
    assert sorted(os.listdir(cache)) == libraries + ['objects']
    objects = sorted(os.listdir(cache / 'objects'))
    assert objects and all(o.startswith('ccn_') and o.endswith('.o') for o in objects)
    leaky = _mlp_model()
    leaky.graph.node[1].op_type = 'LeakyRelu'
    NativeRun(build_program(leaky))
    assert sorted(os.listdir(cache / 'objects')) == objects  # reused, none added


@pytest.mark.native_build
def test_a_changed_program_never_reuses_a_stale_library(cache):
    x = _x()
    leaky = _mlp_model()
    leaky.graph.node[1].op_type = 'LeakyRelu'
    runs = {}
    for name, model in (('seed0', _mlp_model(seed=0)), ('seed1', _mlp_model(seed=1)),
                        ('leaky', leaky)):
        program = build_program(model)
        runs[name] = Executor(program, backend='native')
        numpy.testing.assert_allclose(runs[name].run_positional([x])[0],
                                      Executor(program).run_positional([x])[0],
                                      rtol=RTOL, atol=ATOL)
    # Weights are passed at run time: new values reuse the library, a new
    # computation gets its own.
    assert runs['seed0']._native.path == runs['seed1']._native.path
    assert runs['leaky']._native.path != runs['seed0']._native.path


@pytest.mark.native_build
def test_cache_folder_follows_xdg_when_not_overridden(tmp_path, monkeypatch):
    monkeypatch.delenv('CHAINER_COMPILER_CACHE')
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
    run = NativeRun(build_program(_mlp_model()))
    assert os.path.dirname(run.path) == str(tmp_path / 'xdg' / 'chainer_compiler')


# Not native_build: make test-fast's smoke test of the native backend.
def test_inputs_of_other_layouts_are_converted_and_wrong_shapes_refused():
    program = build_program(_mlp_model())
    run = Executor(program, backend='native', validate_inputs=False)
    x = _x()
    want = Executor(program).run_positional([x])[0]
    fortran = numpy.asfortranarray(x)
    numpy.testing.assert_allclose(run.run_positional([fortran])[0], want, rtol=RTOL)
    numpy.testing.assert_allclose(run.run_positional([x.astype(numpy.float64)])[0], want,
                                  rtol=RTOL)
    with pytest.raises(InputValidationError, match=r"input 'x'.*\(3, 8\).*\(3, 7\)"):
        run.run_positional([numpy.zeros((3, 8), numpy.float32)])
    # A read-only array is read where it lies too (its address is taken
    # another way than a writable one's), and each new array is read anew.
    for scale in (1, 2):
        read_only = x * scale
        read_only.flags.writeable = False
        numpy.testing.assert_allclose(run.run_positional([read_only])[0],
                                      Executor(program).run_positional([x * scale])[0],
                                      rtol=RTOL)


def test_no_compiler_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv('PATH', str(tmp_path))  # no cc, gcc or clang there
    monkeypatch.delenv('CC', raising=False)
    with pytest.raises(NativeBuildError, match='needs a C compiler.*none was found'):
        Executor(build_program(_mlp_model()), backend='native')
    monkeypatch.setenv('CC', 'no-such-cc')
    with pytest.raises(NativeBuildError, match="CC is 'no-such-cc'"):
        Executor(build_program(_mlp_model()), backend='native')


def test_compiler_failure_quotes_its_errors(monkeypatch, tmp_path):
    fake = tmp_path / 'badcc'
    fake.write_text('#!/bin/sh\necho "model.c:1: error: something broke" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv('CC', str(fake))
    with pytest.raises(NativeBuildError, match='(?s)exit 1.*something broke'):
        Executor(build_program(_mlp_model()), backend='native')


def test_ops_without_kernels_are_listed_with_no_fallback():
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node('Hardmax', ['x'], ['h']), helper.make_node('Relu', ['h'], ['r']),
         helper.make_node('Det', ['r'], ['d'])],
        'g', [helper.make_tensor_value_info('x', f32, [3, 3])],
        [helper.make_tensor_value_info('d', f32, [])])
    program = build_program(helper.make_model(graph, opset_imports=[
        helper.make_opsetid('', 13)]))
    with pytest.raises(UnsupportedNativeOpsError) as info:
        Executor(program, backend='native')
    assert len(info.value.problems) == 2
    assert 'Hardmax' in str(info.value) and 'Det' in str(info.value)


def test_instrumentation_is_refused():
    """Tracing is not (test_emit_c_deploy.py: a profiling build)."""
    program = build_program(_mlp_model())
    for option in ('check_nans', 'track_memory'):
        with pytest.raises(BackendUnavailableError, match=option):
            Executor(program, backend='native', **{option: True})


# native_build: beside the smoke test above, make test-fast's two workers
# compiled the same kernels at once.
@pytest.mark.native_build
def test_cli_run_on_the_native_backend(tmp_path, capsys):
    model = _mlp_model()
    data = tmp_path / 'test_data_set_0'
    data.mkdir()
    x = _x()
    y = Executor(build_program(model)).run_positional([x])[0]
    for name, array in (('input_0', x), ('output_0', y)):
        (data / (name + '.pb')).write_bytes(
            onnx.numpy_helper.from_array(array).SerializeToString())
    onnx.save(model, tmp_path / 'model.onnx')
    assert cli_main(['run', '--test', str(tmp_path), '--backend', 'native']) == 0
    assert 'OK' in capsys.readouterr().out
    (data / 'output_0.pb').write_bytes(
        onnx.numpy_helper.from_array(y + 1).SerializeToString())
    assert cli_main(['run', '--test', str(tmp_path), '--backend', 'native']) != 0


@pytest.mark.native_build
def test_compile_onnx_runs_inference_and_training_forward_natively(tmp_path):
    import chainer_compiler
    from tests.models import MLP
    numpy.random.seed(0)
    x = numpy.random.rand(4, 13).astype(numpy.float32)
    model = MLP(n_units=17, n_out=5)
    want = model(x).array
    chainer_compiler.export(model, x, str(tmp_path / 'mlp.onnx'))
    compiled = compile_onnx(model, str(tmp_path / 'mlp.onnx'),
                            runtime_kwargs={'backend': 'native'})
    with chainer.using_config('train', False):
        got = compiled(x)
    numpy.testing.assert_allclose(got.array, want, rtol=RTOL, atol=ATOL)
    # Training too (test_native_training.py checks its gradients and updates).
    numpy.testing.assert_allclose(compiled(x).array, want, rtol=RTOL, atol=ATOL)


@pytest.mark.native_build
def test_shape_arithmetic_is_evaluated_at_emit_time(tmp_path):
    """Shapes are static: Shape, Size and what computes on them become
    constants, so a Reshape whose target is computed from its input works
    and no C is emitted for them."""
    nodes = [helper.make_node('Shape', ['x'], ['s']),
             helper.make_node('Gather', ['s', 'first'], ['g'], axis=0),
             helper.make_node('Concat', ['g', 'minus_one'], ['target'], axis=0),
             helper.make_node('Reshape', ['x', 'target'], ['y']),
             helper.make_node('Size', ['x'], ['n'])]
    model = make_model(nodes, [('x', 'float32', [2, 3, 4])],
                       [('y', 'float32', [2, 12]), ('n', 'int64', []), ('s', 'int64', [3])],
                       {'first': numpy.array([0]), 'minus_one': numpy.array([-1])})
    x = numpy.random.RandomState(0).rand(2, 3, 4).astype(numpy.float32)
    y, n, s = check_native(model, [x])
    assert n == 24 and list(s) == [2, 3, 4]
    emit_c(build_program(model), tmp_path)
    text = (tmp_path / 'model.c').read_text()
    assert text.count('evaluated at emit time') == 4  # all but the Reshape
