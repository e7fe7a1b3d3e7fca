"""The C emitter end to end: emit, `make`, run the executable with no Python
in its environment, and compare with the NumPy Executor.  Each model is
built once per module (builds dominate the run time)."""
import os
import re
import shutil
import subprocess

import numpy
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from chainer_compiler.cli import main as cli_main
from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import NativeEmitError, UnsupportedNativeOpsError, emit_c
from chainer_compiler.runtime.native.lowering import native_operators
from chainer_compiler.runtime.serialization import save_program
from tests.runtime.native.helpers import ATOL, RTOL, Built, make_folder, sanitize

CC = shutil.which('cc') or shutil.which('gcc')
pytestmark = pytest.mark.skipif(CC is None or shutil.which('make') is None,
                                reason='no C compiler (cc/gcc) or make on PATH')
def _build(program, folder, name='model'):
    return _build_with(program, folder, name)


def _build_with(program, folder, name='model', **options):
    result = emit_c(program, folder, name, **options)
    return Built(program, str(folder), name, result, make_folder(folder))


def _export(model, x, path):
    import chainer_compiler
    numpy.random.seed(0)
    model(x)  # initialise lazily-shaped parameters
    chainer_compiler.export(model, x, str(path))
    return build_program(str(path))


@pytest.fixture(scope='module')
def mlp(tmp_path_factory):
    """tests.models.MLP, emitted from a saved Program file through the CLI."""
    from tests.models import MLP
    tmp = tmp_path_factory.mktemp('mlp')
    numpy.random.seed(0)
    x = numpy.random.rand(3, 13).astype(numpy.float32)
    program = _export(MLP(n_units=37, n_out=10), x, tmp / 'mlp.onnx')
    save_program(program, tmp / 'mlp.npz')
    assert cli_main(['emit-c', str(tmp / 'mlp.npz'), '-o', str(tmp / 'c'), '--name', 'mlp']) == 0
    result = emit_c(program, tmp / 'check', 'mlp')  # only for its numbers
    built = Built(program, str(tmp / 'c'), 'mlp', result, make_folder(tmp / 'c'))
    built.x = x
    return built


@pytest.fixture(scope='module')
def lenet(tmp_path_factory):
    """tests.models.LeNet5, emitted from its ONNX file through the CLI."""
    from tests.models import LeNet5
    tmp = tmp_path_factory.mktemp('lenet')
    numpy.random.seed(0)
    x = numpy.random.rand(2, 1, 28, 28).astype(numpy.float32)
    program = _export(LeNet5(), x, tmp / 'lenet.onnx')
    assert cli_main(['emit-c', str(tmp / 'lenet.onnx'), '-o', str(tmp / 'c')]) == 0
    result = emit_c(program, tmp / 'check')
    built = Built(program, str(tmp / 'c'), 'model', result, make_folder(tmp / 'c'))
    built.x = x
    return built


@pytest.fixture(scope='module')
def lenet_file(tmp_path_factory, lenet):
    """The same LeNet-5 with its weights in model_weights.bin."""
    tmp = tmp_path_factory.mktemp('lenet_file')
    built = _build_with(lenet.program, tmp / 'c', weights='file')
    built.x = lenet.x
    return built


def _init(name, array):
    return numpy_helper.from_array(numpy.asarray(array, dtype=numpy.float32), name)


def _kernels_graph():
    """One graph using every kernel with awkward shapes: grouped, strided,
    dilated, unevenly padded Conv; ceil_mode pooling; count_include_pad both
    ways; broadcasting of every kind; a non-constant transposed Gemm B;
    Softmax on the last axis and LogSoftmax on axis 0; an output whose name
    needs sanitising."""
    rng = numpy.random.RandomState(1)
    r = lambda *shape: rng.uniform(-1, 1, shape)  # noqa: E731
    node = helper.make_node
    nodes = [
        node('Conv', ['X', 'W', 'Wb'], ['C1'], group=2, strides=[2, 1], pads=[1, 0, 2, 1],
             dilations=[1, 2], kernel_shape=[3, 3]),
        node('BatchNormalization', ['C1', 'bn_s', 'bn_b', 'bn_m', 'bn_v'], ['B1'],
             epsilon=1e-3),
        node('LeakyRelu', ['B1'], ['L1'], alpha=0.2),
        node('MaxPool', ['L1'], ['P1'], kernel_shape=[3, 2], strides=[2, 2],
             pads=[1, 0, 1, 1], ceil_mode=1),
        node('AveragePool', ['L1'], ['A1'], kernel_shape=[2, 3], strides=[2, 2],
             pads=[0, 1, 1, 1], ceil_mode=1, count_include_pad=1),
        node('AveragePool', ['L1'], ['A2'], kernel_shape=[2, 3], strides=[2, 2],
             pads=[0, 1, 1, 1], ceil_mode=1, count_include_pad=0),
        node('GlobalAveragePool', ['P1'], ['G1']),
        node('Sigmoid', ['A1'], ['S1']),
        node('Tanh', ['A2'], ['T1']),
        node('Add', ['P1', 'G1'], ['E1']),
        node('Sub', ['E1', 'k3'], ['E2']),
        node('Mul', ['k611', 'E2'], ['E3']),
        node('Div', ['E3', 'k1131'], ['E4']),
        node('Flatten', ['E4'], ['F1'], axis=1),
        node('Dropout', ['F1'], ['D1']),
        node('Identity', ['D1'], ['I1']),
        node('Gemm', ['I1', 'W2', 'bias21'], ['G2'], alpha=0.5, beta=2.0),
        node('Reshape', ['I1', 'shape'], ['R1']),
        node('MatMul', ['R1', 'W3'], ['M1']),
        node('Reshape', ['M1', 'shape86'], ['R2']),
        node('Gemm', ['R2', 'Y', 'bias0'], ['G3'], transA=1, transB=1, beta=0.25),
        node('Softmax', ['G3'], ['soft/max:0']),
        node('LogSoftmax', ['G2'], ['LS'], axis=0),
        node('Relu', ['M1'], ['RL']),
    ]
    inits = [_init('W', r(6, 2, 3, 3)), _init('Wb', r(6)), _init('bn_s', r(6)),
             _init('bn_b', r(6)), _init('bn_m', r(6)), _init('bn_v', rng.uniform(0.5, 2, 6)),
             _init('k3', r(3)), _init('k611', r(6, 1, 1)),
             _init('k1131', rng.uniform(0.5, 2, (1, 1, 3, 1))),
             _init('W2', r(54, 5)), _init('bias21', r(2, 1)), _init('W3', r(9, 4)),
             _init('bias0', r()),
             numpy_helper.from_array(numpy.array([0, -1, 9], dtype=numpy.int64), 'shape'),
             numpy_helper.from_array(numpy.array([8, 6], dtype=numpy.int64), 'shape86')]
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, 'kernels',
        [helper.make_tensor_value_info('X', f32, [2, 4, 7, 9]),
         helper.make_tensor_value_info('Y', f32, [5, 8])],
        [helper.make_tensor_value_info(n, f32, shape) for n, shape in (
            ('soft/max:0', [6, 5]), ('LS', [2, 5]), ('RL', [2, 6, 4]),
            # (symbolic: the emitter and executor compute these shapes)
            ('S1', ['n', 'c', 'h', 'w']), ('T1', ['n', 'c', 'h', 'w']))],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])
    inputs = [rng.uniform(-1, 1, (2, 4, 7, 9)).astype(numpy.float32),
              rng.uniform(-1, 1, (5, 8)).astype(numpy.float32)]
    return model, inputs


@pytest.fixture(scope='module')
def kernels(tmp_path_factory):
    model, inputs = _kernels_graph()
    # Unfused: the VM would fold the BatchNormalization whose kernel this checks.
    built = _build(build_program(model, fuse=False), tmp_path_factory.mktemp('kernels') / 'c',
                   'kern')
    built.inputs = inputs
    return built


def _deep_mlp(layers=4, batch=3, width=11):
    """Gemm+Relu layers: after fusion a chain of FusedGemms, whose first
    hidden value is dead by the time the third is written."""
    rng = numpy.random.RandomState(2)
    nodes, inits, prev = [], [], 'x'
    for i in range(layers):
        inits += [_init('W%d' % i, rng.uniform(-1, 1, (width, width))),
                  _init('b%d' % i, rng.uniform(-1, 1, width))]
        nodes += [helper.make_node('Gemm', [prev, 'W%d' % i, 'b%d' % i], ['h%d' % i]),
                  helper.make_node('Relu', ['h%d' % i], ['a%d' % i])]
        prev = 'a%d' % i
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(nodes, 'deep', [helper.make_tensor_value_info('x', f32,
                                                                            [batch, width])],
                              [helper.make_tensor_value_info(prev, f32, [batch, width])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])


# -- results -----------------------------------------------------------------------

@pytest.mark.native_build
def test_mlp_matches_the_numpy_executor(mlp, tmp_path):
    mlp.check_against_executor([mlp.x], tmp_path)


@pytest.mark.native_build
def test_lenet5_matches_the_numpy_executor(lenet, tmp_path):
    lenet.check_against_executor([lenet.x], tmp_path)


@pytest.mark.native_build
def test_every_kernel_matches_the_numpy_executor(kernels, tmp_path):
    ops = {inst.op for inst in kernels.program.instructions}
    assert {'Conv', 'MaxPool', 'AveragePool', 'GlobalAveragePool', 'BatchNormalization',
            'Gemm', 'MatMul', 'Softmax', 'LogSoftmax', 'Add', 'Sub', 'Mul', 'Div',
            'Reshape', 'Flatten', 'LeakyRelu', 'Sigmoid', 'Tanh', 'Relu'} <= ops
    kernels.check_against_executor(kernels.inputs, tmp_path)
    assert (tmp_path / 'out' / 'soft_max_0.npy').exists()


@pytest.mark.native_build
def test_builds_without_warnings_and_without_python(mlp, lenet, kernels):
    for built in (mlp, lenet, kernels):
        assert 'warning:' not in built.make_output, built.make_output
        assert '-Wall -Wextra' in built.make_output
        assert os.path.exists(os.path.join(built.folder, 'lib%s.so' % built.name))
        if shutil.which('ldd'):
            linked = subprocess.run(['ldd', built.exe], capture_output=True, text=True).stdout
            assert 'python' not in linked.lower(), linked


@pytest.mark.native_build
def test_generated_code_numbers_each_instruction_and_names_none(lenet):
    """Comments give instruction indices, operators and registers; the
    Program's names are only in the tables of inputs and outputs
    (test_emit_c_injection.py checks every byte of them) and in the
    profiling table at the end (string literals too)."""
    text = open(os.path.join(lenet.folder, 'model.c')).read().split('model_profile_events')[0]
    commented = re.findall(r'/\* (\d+): %\d+ = ([\w.:]+)\(', text)
    # Fusion made some instructions one (Conv+Relu): the comments follow it.
    assert 0 < len(commented) < len(lenet.program.instructions)
    assert {op for _, op in commented} <= set(native_operators())
    for inst in lenet.program.instructions:
        assert inst.name not in text
    header = open(os.path.join(lenet.folder, 'model.h')).read()
    assert 'extern "C"' in header
    assert '#define MODEL_ARENA_BYTES %dUL' % lenet.result.arena_bytes in header
    assert '#define MODEL_INPUT_0_SHAPE {2, 1, 28, 28}' in header


@pytest.mark.native_build
def test_iterations_prints_timings(mlp, tmp_path):
    numpy.save(tmp_path / 'x.npy', mlp.x)
    done = mlp.run(['--iterations', '5', 'x.npy'], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = re.search(r'5 iterations: mean ([0-9.]+) ms, median ([0-9.]+) ms, best ([0-9.]+) ms',
                     done.stdout)
    assert line, done.stdout
    mean, median, best = map(float, line.groups())
    assert 0 <= best <= median and best <= mean
    assert (tmp_path / 'output_0.npy').exists()


@pytest.mark.native_build
def test_weights_file_model_matches_and_loads_its_file_from_beside_the_program(
        lenet_file, tmp_path):
    assert 'warning:' not in lenet_file.make_output, lenet_file.make_output
    weights = os.path.join(lenet_file.folder, 'model_weights.bin')
    assert os.path.getsize(weights) == 32 + lenet_file.result.weights.nbytes
    header = open(os.path.join(lenet_file.folder, 'model.h')).read()
    assert 'model_model *model_create(const char *weights_path' in header
    assert not os.path.exists(os.path.join(lenet_file.folder, 'model_weights.o')) or \
        os.path.getsize(os.path.join(lenet_file.folder, 'model.c')) < 100_000
    # run from elsewhere: the default weights path is beside the executable
    lenet_file.check_against_executor([lenet_file.x], tmp_path)


@pytest.mark.parametrize('case', ['other-model', 'truncated', 'not-weights', 'missing'])
@pytest.mark.native_build
def test_bad_weights_files_exit_2_naming_the_file(lenet_file, mlp, tmp_path, case):
    numpy.save(tmp_path / 'x.npy', lenet_file.x)
    path = tmp_path / 'w.bin'
    own = open(os.path.join(lenet_file.folder, 'model_weights.bin'), 'rb').read()
    if case == 'other-model':
        emit_c(mlp.program, tmp_path / 'other', weights='file')
        shutil.copy(tmp_path / 'other' / 'model_weights.bin', path)
    elif case == 'truncated':
        path.write_bytes(own[:-4])
    elif case == 'not-weights':
        path.write_bytes(b'\x93NUMPY' + own[8:])
    done = lenet_file.run(['--weights', path, 'x.npy'], cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert str(path) in done.stderr and len(done.stderr.strip().splitlines()) == 1
    expected = {'other-model': 'another model', 'truncated': 'truncated',
                'not-weights': 'not a weights file', 'missing': 'No such file'}[case]
    assert expected in done.stderr


@pytest.mark.native_build
def test_new_weights_for_the_same_model_load_without_a_rebuild(lenet_file, tmp_path):
    """A weights file of the same layout (e.g. after more training) is accepted."""
    program = lenet_file.program
    program.constants = {r: v * 0.5 if v.dtype == numpy.float32 else v
                         for r, v in program.constants.items()}
    try:
        emit_c(program, tmp_path / 'half', weights='file')
        numpy.save(tmp_path / 'x.npy', lenet_file.x)
        done = lenet_file.run(['--weights', tmp_path / 'half' / 'model_weights.bin', '-o',
                               tmp_path / 'out', 'x.npy'], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        want = Executor(program).run_positional([lenet_file.x])[0]
    finally:
        program.constants = {r: v * 2 if v.dtype == numpy.float32 else v
                             for r, v in program.constants.items()}
    got = numpy.load(tmp_path / 'out' / (sanitize(program.outputs[0].name) + '.npy'))
    numpy.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.skipif(shutil.which('g++') is None and shutil.which('c++') is None,
                    reason='no C++ compiler')
@pytest.mark.native_build
def test_header_is_usable_from_cpp(lenet, lenet_file, tmp_path):
    cxx = shutil.which('g++') or shutil.which('c++')
    for built, call in ((lenet, 'model_run(nullptr, nullptr)'),
                        (lenet_file, 'model_destroy(model_create("w", nullptr, 0))')):
        source = tmp_path / 'use.cpp'
        source.write_text('#include "model.h"\nint main() { return %s == 0; }\n' % call
                          if 'run' in call else
                          '#include "model.h"\nint main() { %s; return 0; }\n' % call)
        done = subprocess.run([cxx, '-Wall', '-Wextra', '-Werror', '-c', '-I', built.folder,
                               str(source), '-o', str(tmp_path / 'use.o')],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


# -- arena ---------------------------------------------------------------------------

@pytest.mark.native_build
def test_arena_is_no_larger_than_the_intermediates(mlp, lenet, kernels):
    for built in (mlp, lenet, kernels):
        assert 0 < built.result.arena_bytes <= built.result.intermediate_bytes
    # LeNet's convolution outputs die early: their space is reused.
    assert lenet.result.arena_bytes < lenet.result.intermediate_bytes


def test_arena_reuses_the_space_of_dead_values(tmp_path):
    result = emit_c(build_program(_deep_mlp()), tmp_path)
    assert result.arena_bytes < result.intermediate_bytes
    # Buffers live at the same time never overlap.
    for key, off, size, start, end in result.buffers:
        for key2, off2, size2, start2, end2 in result.buffers:
            if key != key2 and start <= end2 and start2 <= end:
                assert off + size <= off2 or off2 + size2 <= off


@pytest.mark.native_build
def test_element_wise_results_take_the_memory_of_inputs_read_for_the_last_time(tmp_path):
    """An element-wise chain needs one buffer, not one per value."""
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node('Neg', ['x'], ['b2_src']), helper.make_node('Abs', ['b2_src'], ['b2']),
         helper.make_node('Sigmoid', ['x'], ['a']), helper.make_node('Tanh', ['a'], ['b']),
         helper.make_node('Exp', ['b'], ['c']), helper.make_node('Add', ['c', 'b2'], ['d']),
         helper.make_node('Relu', ['d'], ['y'])],
        'chain', [helper.make_tensor_value_info('x', f32, [64, 64])],
        [helper.make_tensor_value_info('y', f32, [64, 64])])
    program = build_program(helper.make_model(graph, opset_imports=[
        helper.make_opsetid('', 13)]))
    built = _build(program, tmp_path / 'c')
    # Two values are alive at once (the chain and Abs(Neg(x))): two buffers.
    assert built.result.arena_bytes == 2 * 64 * 64 * 4
    x = numpy.random.RandomState(0).uniform(-1, 1, (64, 64)).astype(numpy.float32)
    built.check_against_executor([x], tmp_path)


# -- refusals --------------------------------------------------------------------------

@pytest.mark.parametrize('case', ['float64', 'shape', 'big-endian', 'fortran', 'truncated',
                                  'not-npy', 'missing'])
@pytest.mark.native_build
def test_bad_npy_inputs_exit_2_naming_the_file(mlp, tmp_path, case):
    path = tmp_path / ('bad-%s.npy' % case)
    x = mlp.x
    if case == 'float64':
        numpy.save(path, x.astype(numpy.float64))
    elif case == 'shape':
        numpy.save(path, x[:2])
    elif case == 'big-endian':
        numpy.save(path, x.astype('>f4'))
    elif case == 'fortran':
        numpy.save(path, numpy.asfortranarray(x))
    elif case == 'truncated':
        numpy.save(path, x)
        path.write_bytes(path.read_bytes()[:-10])
    elif case == 'not-npy':
        path.write_text('hello, world\n')
    done = mlp.run([path], cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert str(path) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_unsupported_ops_are_listed_together(tmp_path):
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node('Hardmax', ['x'], ['e']), helper.make_node('Relu', ['e'], ['r']),
         helper.make_node('Det', ['r'], ['t'])],
        'g', [helper.make_tensor_value_info('x', f32, [3, 3])],
        [helper.make_tensor_value_info('t', f32, [])])
    program = build_program(helper.make_model(graph, opset_imports=[
        helper.make_opsetid('', 13)]))
    with pytest.raises(UnsupportedNativeOpsError) as info:
        emit_c(program, tmp_path / 'c')
    message = str(info.value)
    assert 'Hardmax' in message and 'Det' in message and 'Relu' not in message
    assert len(info.value.problems) == 2
    assert not (tmp_path / 'c').exists()


def test_symbolic_shapes_are_refused_naming_the_value(tmp_path):
    f32 = TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node('Relu', ['x'], ['y'])], 'g',
                              [helper.make_tensor_value_info('x', f32, ['N', 3])],
                              [helper.make_tensor_value_info('y', f32, ['N', 3])])
    program = build_program(helper.make_model(graph, opset_imports=[
        helper.make_opsetid('', 13)]))
    with pytest.raises(NativeEmitError, match="input 'x'.*static"):
        emit_c(program, tmp_path)


def test_cli_reports_emit_errors_as_one_line(tmp_path, capsys):
    f32 = TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node('Det', ['x'], ['y'])], 'g',
                              [helper.make_tensor_value_info('x', f32, [2, 2])],
                              [helper.make_tensor_value_info('y', f32, [])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)]),
              tmp_path / 'm.onnx')
    assert cli_main(['emit-c', str(tmp_path / 'm.onnx'), '-o', str(tmp_path / 'c')]) == 2
    err = capsys.readouterr().err
    assert 'Det' in err and len(err.strip().splitlines()) == 1
    assert cli_main(['emit-c', str(tmp_path / 'm.onnx'), '-o', str(tmp_path / 'c'),
                     '--name', 'not a name']) == 2
