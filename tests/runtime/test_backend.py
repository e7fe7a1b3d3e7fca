import numpy
import pytest

from chainer_compiler import build_program
from chainer_compiler.runtime import Executor, cupy_unavailable_reason, get_array_module
from chainer_compiler.runtime.backend import BackendUnavailableError, to_numpy

CUPY_REASON = cupy_unavailable_reason()


def test_numpy_backend_is_numpy():
    assert get_array_module('numpy') is numpy


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(BackendUnavailableError, match="unknown backend 'tpu'"):
        get_array_module('tpu')


@pytest.mark.skipif(CUPY_REASON is None, reason='CuPy is usable here')
def test_cupy_backend_without_cupy_says_why():
    with pytest.raises(BackendUnavailableError, match='backend cupy is unavailable'):
        get_array_module('cupy')


@pytest.mark.gpu
@pytest.mark.skipif(CUPY_REASON is not None, reason=str(CUPY_REASON))
def test_cupy_backend_matches_numpy(mlp_model):
    program = build_program(mlp_model)
    x = numpy.random.RandomState(0).standard_normal((2, 3)).astype(numpy.float32)
    expected = Executor(program, backend='numpy').run({'x': x})['y']
    actual = Executor(program, backend='cupy').run({'x': x})['y']
    numpy.testing.assert_allclose(to_numpy(actual), expected, rtol=1e-5, atol=1e-6)
