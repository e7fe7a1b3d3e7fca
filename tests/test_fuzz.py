"""Fuzzing the loaders with hypothesis: mutated ONNX models, Program files
and ONNX test-data sets.

For every mutation three things must hold:
- it is accepted (and then runs or fails with a project error), or refused
  with one of the project's own error types, never a raw exception;
- nothing is written outside the scratch folder (an audit hook watches
  every open-for-writing, rename, removal and mkdir of the process);
- compile time and memory stay bounded: each example runs under an
  address-space limit and a per-example deadline.

The default profile runs a few hundred examples, derandomized so CI sees the
same ones every time; ``pytest --hypothesis-profile=thorough tests/test_fuzz.py``
runs thousands of random ones (profiles are registered in tests/conftest.py).
``--hypothesis-show-statistics`` prints how many examples ended in which
outcome.
"""
import contextlib
import io
import json
import os
import sys

import numpy
import onnx
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from chainer_compiler.cli import main as cli_main
from chainer_compiler.errors import (
    InvalidModelError,
    InvalidTestDataError,
    UnsupportedOperatorsError,
)
from chainer_compiler.onnx_test_data import load_test_cases
from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.errors import RuntimeVMError
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.random_inputs import random_inputs
from chainer_compiler.runtime.serialization import load_program, save_program
from tests.conftest import address_space_limit, make_model

#: What a mutated input may raise: the project's own error types.
PROJECT_ERRORS = (InvalidModelError, UnsupportedOperatorsError, RuntimeVMError,
                  InvalidTestDataError)

#: Head-room above the process's current size for one example.
MEMORY_LIMIT = 1 << 30


# -- the seeds: small valid models covering the loaders' paths ---------------
def _seed_models():
    rng = numpy.random.RandomState(0)
    f32 = TensorProto.FLOAT
    mlp = make_model(
        [helper.make_node('Gemm', ['x', 'W', 'b'], ['h'], transB=1),
         helper.make_node('Relu', ['h'], ['y'])],
        [('x', f32, [2, 3])], [('y', f32, [2, 4])],
        [('W', rng.standard_normal((4, 3)).astype(numpy.float32)),
         ('b', numpy.zeros(4, numpy.float32))])
    conv = make_model(
        [helper.make_node('Conv', ['x', 'K'], ['c'], pads=[1, 1, 1, 1], strides=[1, 1]),
         helper.make_node('MaxPool', ['c'], ['y'], kernel_shape=[2, 2], strides=[2, 2])],
        [('x', f32, [1, 1, 4, 4])], [('y', f32, [1, 2, 2, 2])],
        [('K', rng.standard_normal((2, 1, 3, 3)).astype(numpy.float32))])
    shapes = make_model(
        [helper.make_node('Shape', ['x'], ['s']),
         helper.make_node('ConstantOfShape', ['s'], ['z'],
                          value=helper.make_tensor('v', f32, [1], [1.0])),
         helper.make_node('Add', ['x', 'z'], ['a']),
         helper.make_node('Reshape', ['a', 'new_shape'], ['r']),
         helper.make_node('Gather', ['r', 'idx'], ['y'], axis=0)],
        [('x', f32, [2, 3])], [('y', f32, [2, 6])],
        [('new_shape', numpy.array([1, 6], numpy.int64)),
         ('idx', numpy.array([0, 0], numpy.int64))])
    body = helper.make_graph(
        [helper.make_node('Add', ['v_in', 'x'], ['v_out']),
         helper.make_node('Identity', ['cond_in'], ['cond_out'])], 'body',
        [helper.make_tensor_value_info('i', TensorProto.INT64, []),
         helper.make_tensor_value_info('cond_in', TensorProto.BOOL, []),
         helper.make_tensor_value_info('v_in', f32, [2])],
        [helper.make_tensor_value_info('cond_out', TensorProto.BOOL, []),
         helper.make_tensor_value_info('v_out', f32, [2])])
    loop = make_model([helper.make_node('Loop', ['n', '', 'v0'], ['y'], body=body)],
                      [('n', TensorProto.INT64, []), ('v0', f32, [2]), ('x', f32, [2])],
                      [('y', f32, [2])])
    return {'mlp': mlp, 'conv': conv, 'shapes': shapes, 'loop': loop}


SEEDS = _seed_models()
seed_names = st.sampled_from(sorted(SEEDS))


# -- the watch on writes ------------------------------------------------------
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_watch = {'root': None, 'writes': []}


def _audit(name, args):
    root = _watch['root']
    if root is None:
        return
    if name == 'open':
        path, mode, flags = args
        writing = (any(c in mode for c in 'wax+') if isinstance(mode, str)
                   else bool(flags & _WRITE_FLAGS))
        paths = [path] if writing else []
    elif name in ('os.rename', 'os.remove', 'os.mkdir', 'os.rmdir', 'os.symlink',
                  'os.truncate', 'os.link', 'shutil.rmtree', 'shutil.move', 'shutil.copyfile'):
        paths = [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
    else:
        return
    for path in paths:
        if isinstance(path, int):  # a file descriptor already opened
            continue
        real = os.path.realpath(os.fsdecode(path))
        if os.path.commonpath([real, root]) != root:
            _watch['writes'].append((name, real))


sys.addaudithook(_audit)  # audit hooks cannot be removed; idle unless watching


@contextlib.contextmanager
def confined(scratch):
    """Run with ``scratch`` as working directory, under the memory limit,
    and fail if anything is written outside ``scratch``."""
    scratch = os.path.realpath(scratch)
    old_cwd = os.getcwd()
    os.chdir(scratch)
    _watch['root'], _watch['writes'] = scratch, []
    try:
        with address_space_limit(MEMORY_LIMIT):
            yield
    finally:
        _watch['root'] = None
        os.chdir(old_cwd)
    assert not _watch['writes'], 'wrote outside the scratch folder: %s' % _watch['writes']


@pytest.fixture(scope='module')
def scratch(tmp_path_factory):
    """The module's scratch folder; each hypothesis example makes its own
    sub-folder in it (see _example_dir)."""
    return tmp_path_factory.mktemp('fuzz')


_counter = [0]


def _example_dir(scratch):
    _counter[0] += 1
    path = scratch / ('ex%d' % _counter[0])
    path.mkdir()
    return path


def _outcome(run):
    """Call ``run``; record and return 'accepted' or the project error's
    name.  Anything else propagates and fails the property."""
    try:
        run()
    except PROJECT_ERRORS as e:
        event('refused: %s' % type(e).__name__)
        return type(e).__name__
    event('accepted')
    return 'accepted'


def _compile_and_run(model, check):
    program = build_program(model, check=check)
    executor = Executor(program)
    executor.run(random_inputs(program, numpy.random.RandomState(0)))


# -- mutations ----------------------------------------------------------------
def _mutate_bytes(data, blob):
    """Bit flips, a truncation or inserted bytes."""
    blob = bytearray(blob)
    kind = data.draw(st.sampled_from(['flip', 'truncate', 'insert']))
    event('bytes: %s' % kind)
    if kind == 'truncate':
        return bytes(blob[:data.draw(st.integers(0, len(blob) - 1))])
    if kind == 'insert':
        at = data.draw(st.integers(0, len(blob)))
        return bytes(blob[:at] + data.draw(st.binary(min_size=1, max_size=16)) + blob[at:])
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] ^= 1 << data.draw(st.integers(0, 7))
    return bytes(blob)


#: Values that break assumptions: zero, negatives, huge, off by one.
awkward_ints = st.one_of(st.integers(-3, 8), st.sampled_from([-2 ** 31, 2 ** 31, 2 ** 40,
                                                               10 ** 9, 2 ** 63 - 1]))


def _mutate_fields(data, model):
    """One structural edit of a ModelProto: dims, element types, attributes,
    node wiring, op types, opsets."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    kind = data.draw(st.sampled_from(['input_dim', 'elem_type', 'initializer_dims',
                                      'initializer_type', 'attribute', 'wiring', 'op_type',
                                      'opset', 'output_type', 'drop_node']))
    event('field: %s' % kind)
    if kind in ('input_dim', 'elem_type', 'output_type'):
        values = graph.output if kind == 'output_type' else graph.input
        t = data.draw(st.sampled_from(list(values))).type.tensor_type
        if kind == 'elem_type' or not t.shape.dim:
            t.elem_type = data.draw(st.integers(0, 25))
        else:
            dim = data.draw(st.sampled_from(list(t.shape.dim)))
            dim.dim_value = max(data.draw(awkward_ints), 0) if kind == 'input_dim' else \
                data.draw(st.integers(0, 9))
    elif kind in ('initializer_dims', 'initializer_type') and graph.initializer:
        t = data.draw(st.sampled_from(list(graph.initializer)))
        if kind == 'initializer_type':
            t.data_type = data.draw(st.integers(0, 25))
        elif t.dims:
            t.dims[data.draw(st.integers(0, len(t.dims) - 1))] = data.draw(awkward_ints)
    elif kind == 'attribute':
        node = data.draw(st.sampled_from(list(graph.node)))
        if node.attribute:
            attr = data.draw(st.sampled_from(list(node.attribute)))
            if attr.type == onnx.AttributeProto.INT:
                attr.i = data.draw(awkward_ints)
            elif attr.type == onnx.AttributeProto.INTS and attr.ints:
                attr.ints[data.draw(st.integers(0, len(attr.ints) - 1))] = data.draw(awkward_ints)
            else:
                attr.name = data.draw(st.sampled_from(['axis', 'bogus', 'to', 'perm']))
    elif kind == 'wiring':
        node = data.draw(st.sampled_from(list(graph.node)))
        names = [v.name for v in graph.input] + [t.name for t in graph.initializer] + ['', 'nope']
        if node.input:
            node.input[data.draw(st.integers(0, len(node.input) - 1))] = \
                data.draw(st.sampled_from(names))
        else:
            node.input.append(data.draw(st.sampled_from(names)))
    elif kind == 'op_type':
        node = data.draw(st.sampled_from(list(graph.node)))
        node.op_type = data.draw(st.sampled_from(
            ['Relu', 'Add', 'MatMul', 'Reshape', 'Transpose', 'Concat', 'Slice', 'Softmax',
             'Conv', 'Expand', 'Tile', 'ConstantOfShape', 'NoSuchOp']))
    elif kind == 'opset':
        model.opset_import[0].version = data.draw(st.integers(1, 30))
    elif kind == 'drop_node' and len(graph.node) > 1:
        del graph.node[data.draw(st.integers(0, len(graph.node) - 1))]
    return model


# -- properties ----------------------------------------------------------------
@given(data=st.data(), name=seed_names)
def test_mutated_onnx_bytes(scratch, data, name):
    blob = _mutate_bytes(data, SEEDS[name].SerializeToString())
    with confined(_example_dir(scratch)):
        _outcome(lambda: _compile_and_run(blob, check=True))


@given(data=st.data(), name=seed_names, check=st.booleans())
def test_mutated_onnx_fields(scratch, data, name, check):
    model = _mutate_fields(data, SEEDS[name])
    with confined(_example_dir(scratch)):
        _outcome(lambda: _compile_and_run(model, check=check))


#: Programs of the seeds, saved once.
_PROGRAMS = {}


def _program_file(name, folder):
    if name not in _PROGRAMS:
        _PROGRAMS[name] = build_program(SEEDS[name])
    path = folder / 'model.npz'
    save_program(_PROGRAMS[name], str(path))
    return path


def _json_paths(value, prefix=()):
    """Every path into a decoded JSON document."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _json_paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _json_paths(v, prefix + (i,))


json_values = st.one_of(st.none(), st.booleans(), awkward_ints, st.floats(allow_nan=True),
                        st.sampled_from(['', 'bogus', 'float32', 'int64', 'Relu', 'a0']),
                        st.lists(awkward_ints, max_size=3), st.just({}))


def _mutate_program_header(data, path):
    """Replace one value anywhere in the Program file's JSON header."""
    with numpy.load(path, allow_pickle=False) as archive:
        arrays = {k: archive[k] for k in archive.files}
    header = json.loads(bytes(arrays['program.json']).decode('utf-8'))
    target = data.draw(st.sampled_from(list(_json_paths(header))[1:]))
    event('program header: %s' % [p for p in target if isinstance(p, str)][-1])
    parent = header
    for key in target[:-1]:
        parent = parent[key]
    parent[target[-1]] = data.draw(json_values)
    arrays['program.json'] = numpy.frombuffer(json.dumps(header).encode('utf-8'), numpy.uint8)
    with open(path, 'wb') as f:
        numpy.savez(f, **arrays)


def _run_program_file(path):
    program = load_program(str(path))
    Executor(program).run(random_inputs(program, numpy.random.RandomState(0)))


@given(data=st.data(), name=seed_names, where=st.sampled_from(['header', 'bytes', 'array']))
def test_mutated_program_files(scratch, data, name, where):
    folder = _example_dir(scratch)
    path = _program_file(name, folder)
    event('program file: %s' % where)
    if where == 'header':
        _mutate_program_header(data, path)
    elif where == 'bytes':
        path.write_bytes(_mutate_bytes(data, path.read_bytes()))
    else:  # swap a stored array for one of another dtype or shape
        with numpy.load(path, allow_pickle=False) as archive:
            arrays = {k: archive[k] for k in archive.files}
        keys = sorted(k for k in arrays if k != 'program.json')
        if keys:
            key = data.draw(st.sampled_from(keys))
            arrays[key] = numpy.zeros(data.draw(st.lists(st.integers(0, 3), max_size=3)),
                                      data.draw(st.sampled_from(['int64', 'float64', 'bool'])))
        with open(path, 'wb') as f:
            numpy.savez(f, **arrays)
    with confined(folder):
        _outcome(lambda: _run_program_file(path))


def _test_dir(folder, name):
    """An ONNX test directory for a seed: model.onnx and one data set with
    the VM's own outputs."""
    model = SEEDS[name]
    onnx.save(model, str(folder / 'model.onnx'))
    program = build_program(model)
    inputs = random_inputs(program, numpy.random.RandomState(0))
    outputs = Executor(program).run(inputs)
    case = folder / 'test_data_set_0'
    case.mkdir()
    for i, info in enumerate(program.inputs):
        (case / ('input_%d.pb' % i)).write_bytes(
            numpy_helper.from_array(inputs[info.name]).SerializeToString())
    for i, info in enumerate(program.outputs):
        (case / ('output_%d.pb' % i)).write_bytes(
            numpy_helper.from_array(numpy.asarray(outputs[info.name])).SerializeToString())
    return case


def _mutate_test_data(data, case):
    files = sorted(case.iterdir())
    target = data.draw(st.sampled_from(files))
    kind = data.draw(st.sampled_from(['bytes', 'rename', 'delete', 'extra', 'dims', 'external']))
    event('test data: %s' % kind)
    if kind == 'bytes':
        target.write_bytes(_mutate_bytes(data, target.read_bytes()))
    elif kind == 'rename':
        target.rename(case / data.draw(st.sampled_from(
            ['input_7.pb', 'output_3.pb', 'input_01.pb', 'output_-1.pb', 'input.pb', 'x.pb'])))
    elif kind == 'delete':
        target.unlink()
    elif kind == 'extra':
        (case / data.draw(st.sampled_from(['input_9.pb', 'output_9.pb', 'notes.txt']))) \
            .write_bytes(target.read_bytes())
    else:
        tensor = TensorProto.FromString(target.read_bytes())
        if kind == 'dims' and tensor.dims:
            tensor.dims[0] = data.draw(awkward_ints)
        else:
            tensor.ClearField('raw_data')
            tensor.data_location = TensorProto.EXTERNAL
            entry = tensor.external_data.add()
            entry.key, entry.value = 'location', data.draw(st.sampled_from(
                ['secret.bin', '../secret.bin', '/etc/hostname', 'missing.bin', '']))
        target.write_bytes(tensor.SerializeToString())


@given(data=st.data(), name=seed_names)
def test_mutated_test_data_sets(scratch, data, name):
    folder = _example_dir(scratch)
    case = _test_dir(folder, name)
    (folder / 'secret.bin').write_bytes(b'\x00' * 64)  # outside the data set folder
    _mutate_test_data(data, case)
    stderr = io.StringIO()
    with confined(folder), contextlib.redirect_stderr(stderr), \
            contextlib.redirect_stdout(io.StringIO()):
        _outcome(lambda: load_test_cases(str(folder)))
        status = cli_main(['run', '--test', str(folder), '--backend', 'numpy'])
    err = stderr.getvalue()
    assert status in (0, 1, 2)
    if status:
        assert len(err.strip().splitlines()) == 1, err
    event('cli status %d' % status)


@pytest.mark.parametrize('name', sorted(SEEDS))
def test_unmutated_seeds_are_accepted(tmp_path, name):
    # Guards the fuzzers themselves: each seed compiles, runs, survives a
    # Program file round trip and passes as a test directory, so a refused
    # mutation is the mutation's doing.
    _compile_and_run(SEEDS[name], check=True)
    _run_program_file(_program_file(name, tmp_path))
    _test_dir(tmp_path, name)
    assert cli_main(['run', '--test', str(tmp_path), '--backend', 'numpy']) == 0
