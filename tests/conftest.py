"""Shared fixtures: tiny ONNX models built with onnx.helper, and a memory
limit for tests that feed the compiler hostile input."""
import contextlib
import datetime
import os
import resource
import zlib

import numpy
import pytest
from hypothesis import HealthCheck, settings
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, initializers=(), opset=17, name='test'):
    """A checked ModelProto from nodes and (name, elem_type, shape) tuples."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(numpy.asarray(v), k) for k, v in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    model.ir_version = 8
    return model


@contextlib.contextmanager
def address_space_limit(extra_bytes):
    """Cap this process's address space at its current size plus
    ``extra_bytes`` while the block runs, so that a runaway allocation fails
    with MemoryError instead of taking the machine down."""
    with open('/proc/self/statm') as f:
        current = int(f.read().split()[0]) * resource.getpagesize()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = current + extra_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.fixture(scope='session', autouse=True)
def native_cache(tmp_path_factory):
    """One native library cache (CHAINER_COMPILER_CACHE) for the whole run:
    each kernel object is compiled once and every test that builds the same
    C reuses the library, instead of each test compiling into a cache of its
    own.  Under pytest-xdist the workers share it (the run's temporary
    folder, above each worker's), so the kernels are not compiled once per
    worker; the cache's atomic renames make concurrent builds safe.  Tests
    of the cache itself set their own folder.  The kernel objects of the
    emitted Makefiles that tests build with make are shared the same way
    (tests/runtime/native/helpers.py, make_folder)."""
    if os.environ.get('PYTEST_XDIST_WORKER'):
        folder = tmp_path_factory.getbasetemp().parent / 'native-cache'
        objects = tmp_path_factory.getbasetemp().parent / 'make-objects'
    else:
        folder = tmp_path_factory.mktemp('native-cache')
        objects = tmp_path_factory.mktemp('make-objects')
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('CHAINER_COMPILER_CACHE', str(folder))
        patch.setenv('CHAINER_COMPILER_TEST_OBJECTS', str(objects))
        yield folder


@pytest.fixture(autouse=True)
def seeded_global_random_state(request):
    """Seed NumPy's global generator from the test's own id before each test.
    Chainer's initializers and unseeded Dropout draw from it, so without this
    a test's weights depended on which tests ran before it in the same xdist
    worker: a test could fail one run in hundreds on an unlucky draw."""
    numpy.random.seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def mlp_model():
    """x[2,3] -> MatMul W[3,4] -> Add b -> Relu -> y[2,4]."""
    rng = numpy.random.RandomState(0)
    return make_model(
        [helper.make_node('MatMul', ['x', 'W'], ['h'], name='matmul'),
         helper.make_node('Add', ['h', 'b'], ['z'], name='add'),
         helper.make_node('Relu', ['z'], ['y'], name='relu')],
        [('x', TensorProto.FLOAT, [2, 3])], [('y', TensorProto.FLOAT, [2, 4])],
        [('W', rng.standard_normal((3, 4)).astype(numpy.float32)),
         ('b', rng.standard_normal(4).astype(numpy.float32))])


# Fuzz tests (tests/test_fuzz.py): the default run is small and the same on
# every machine; `--hypothesis-profile=thorough` draws thousands of fresh
# examples, and `make test-fast` passes `--hypothesis-profile=fast` (a
# quarter of the default's examples; `make test` and CI keep the default).
# Deadlines are generous: the machine is shared, and a deadline is there to
# catch unbounded work, not to time kernels.
settings.register_profile('default', max_examples=100, derandomize=True, database=None,
                          deadline=datetime.timedelta(seconds=20),
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile('fast', settings.get_profile('default'), max_examples=25)
settings.register_profile('thorough', max_examples=2000, deadline=datetime.timedelta(seconds=20),
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile('default')


# CHAINER_COMPILER_TEST_BACKEND=cupy runs the kernels the tests call on CuPy
# (tests/cupy_backend.py): the GPU check of issue 35 (benchmarks/gpu/).
TEST_BACKEND = os.environ.get('CHAINER_COMPILER_TEST_BACKEND', 'numpy')


def pytest_configure(config):
    if TEST_BACKEND == 'numpy':
        return
    if TEST_BACKEND != 'cupy':
        raise pytest.UsageError("CHAINER_COMPILER_TEST_BACKEND must be 'numpy' or 'cupy', got %r"
                                % TEST_BACKEND)
    from chainer_compiler.runtime import cupy_unavailable_reason
    reason = cupy_unavailable_reason()
    if reason:
        raise pytest.UsageError('CHAINER_COMPILER_TEST_BACKEND=cupy: ' + reason)
    from tests import cupy_backend
    cupy_backend.run_kernels_on_cupy()
    cupy_backend.return_host_arrays_from_cupy_executors()
