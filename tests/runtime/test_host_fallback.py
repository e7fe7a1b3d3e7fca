"""Values CuPy cannot hold stay on the host and their nodes run there
(executor.py), checked here on a stand-in for CuPy: NumPy arrays of a
subclass that, like CuPy's, refuse ml_dtypes' types, strings and objects."""
import contextlib

import ml_dtypes
import numpy
import pytest

from chainer_compiler.runtime import Executor, InputValidationError, Instruction, Program, ValueInfo
from chainer_compiler.runtime import executor as executor_module
from chainer_compiler.runtime.ops import noise

# float8_e5m2's kind is 'f', as NumPy's floats': the dtype a kind test misplaces.
F8 = numpy.dtype(ml_dtypes.float8_e5m2)


def _refuse(dtype):
    # CuPy holds NumPy's own numeric types and nothing else.
    if dtype is not None and numpy.dtype(dtype).char not in '?bhilqBHILQefdFD':
        raise ValueError('Unsupported dtype %s' % numpy.dtype(dtype))


def test_only_numpys_own_numeric_dtypes_go_to_the_device():
    from chainer_compiler.runtime.backend import device_dtype
    for char in '?bhilqBHILQefdFD':
        assert device_dtype(numpy.dtype(char))
    for name in ('float8_e5m2', 'float8_e4m3fn', 'float8_e4m3fnuz', 'float8_e5m2fnuz',
                 'float8_e8m0fnu', 'float4_e2m1fn', 'int4', 'uint4', 'int2', 'uint2',
                 'bfloat16'):
        assert not device_dtype(getattr(ml_dtypes, name)), name
    for dtype in (object, 'U3', 'S3', '>f4'):
        assert not device_dtype(dtype)


class DeviceArray(numpy.ndarray):
    """An array on the stand-in device."""

    def astype(self, dtype, *args, **kwargs):
        _refuse(dtype)
        return super().astype(dtype, *args, **kwargs)

    def get(self):
        return numpy.array(self)


DeviceArray.__module__ = 'cupy.standin'  # backend.to_numpy knows CuPy arrays by module


class _Random:
    """A device generator whose seeded stream differs from NumPy's, as CuPy's does."""

    def __getattr__(self, name):
        return getattr(numpy.random, name)

    @staticmethod
    def RandomState(seed):
        return numpy.random.RandomState(seed ^ 1)


class StandInCupy:
    ndarray = DeviceArray
    random = _Random()

    @staticmethod
    def asarray(value, dtype=None):
        _refuse(getattr(value, 'dtype', dtype))
        return numpy.asarray(value, dtype).view(DeviceArray)

    def __getattr__(self, name):
        return getattr(numpy, name)


@pytest.fixture
def device(monkeypatch):
    cupy = StandInCupy()
    monkeypatch.setattr(executor_module, 'get_array_module',
                        lambda backend: cupy if backend == 'cupy' else numpy)
    monkeypatch.setattr(Executor, '_allocating', lambda self: contextlib.nullcontext())
    return cupy


def _float8_round_trip():
    """y = x + float(float8(x)); q (float8) -> relu(float(q)); f8 = float8(x)."""
    return Program(
        instructions=[Instruction('Cast', (0,), (2,), attrs={'to': F8}, version=19),
                      Instruction('Cast', (2,), (3,), attrs={'to': numpy.dtype('float32')},
                                  version=19),
                      Instruction('Add', (0, 3), (4,), version=14),
                      Instruction('Cast', (1,), (5,), attrs={'to': numpy.dtype('float32')},
                                  version=19),
                      Instruction('Relu', (5,), (6,), version=14)],
        inputs=[ValueInfo('x', 0, 'tensor', 'float32', (4,)),
                ValueInfo('q', 1, 'tensor', 'float8_e5m2', (2,))],
        outputs=[ValueInfo('y', 4), ValueInfo('r', 6), ValueInfo('f8', 2)], num_registers=7)


@pytest.mark.parametrize('options', [{}, {'check_nans': True}, {'track_memory': True}])
def test_float8_values_stay_on_the_host_and_their_nodes_run_there(device, options):
    inputs = {'x': numpy.array([0.3, -2.0, 500.0, 1.0], numpy.float32),
              'q': numpy.array([-1.5, 3.0], F8)}
    expected = Executor(_float8_round_trip(), backend='numpy').run(inputs)
    executor = Executor(_float8_round_trip(), backend='cupy', **options)
    got = dict(zip(('y', 'r', 'f8'), executor.run_positional([inputs['x'], inputs['q']])))
    for name in ('y', 'r', 'f8'):
        numpy.testing.assert_array_equal(numpy.asarray(got[name]), expected[name])
    # Results of device dtypes are back on the device; float8 stays on the host.
    assert type(got['y']) is DeviceArray and type(got['r']) is DeviceArray
    assert type(got['f8']) is numpy.ndarray and got['f8'].dtype == F8


def test_only_steps_that_may_meet_host_values_check_their_inputs(device):
    steps = Executor(_float8_round_trip(), backend='cupy')._steps
    # Cast to float8 runs on the host by its record; its readers and the
    # float8 input's check each call; the rest are plain device calls.
    assert [s.host for s in steps] == [True, False, False, False, False]
    plain = Program(instructions=[Instruction('Relu', (0,), (1,), version=14)],
                    inputs=[ValueInfo('x', 0, 'tensor', 'float32', (4,))],
                    outputs=[ValueInfo('y', 1)], num_registers=2)
    (step,) = Executor(plain, backend='cupy')._steps
    assert step.host is None and step.simple


def test_a_scatter_multiplying_runs_on_the_host(device):
    program = Program(
        instructions=[Instruction('ScatterElements', (0, 1, 2), (3,),
                                  attrs={'reduction': 'mul'}, version=18)],
        inputs=[ValueInfo('data', 0, 'tensor', 'float32', (4,)),
                ValueInfo('indices', 1, 'tensor', 'int64', (3,)),
                ValueInfo('updates', 2, 'tensor', 'float32', (3,))],
        outputs=[ValueInfo('y', 3)], num_registers=4)
    executor = Executor(program, backend='cupy')
    assert executor._steps[0].host is True  # CuPy has no multiply.at
    (y,) = executor.run_positional([numpy.ones(4, numpy.float32), numpy.array([1, 1, 3]),
                                    numpy.array([2, 3, 5], numpy.float32)])
    assert type(y) is DeviceArray
    numpy.testing.assert_array_equal(y.get(), [1, 6, 1, 5])


def test_a_seeded_dropout_draws_numpys_mask_on_the_device(device):
    x = numpy.ones((4, 5), numpy.float32)
    args = (numpy.array(0.5, numpy.float32), numpy.array(True))
    expected = noise.dropout(numpy, x, *args, seed=3, n_outputs=2)[1]
    got = noise.dropout(device, device.asarray(x), *args, seed=3, n_outputs=2)[1]
    assert type(got) is DeviceArray
    numpy.testing.assert_array_equal(got.get(), expected)


def test_host_inputs_are_validated_per_signature_on_the_device_backend(device):
    # A CuPy run takes NumPy inputs: their shapes are part of the signature.
    program = Program(instructions=[Instruction('Add', (0, 1), (2,), version=14)],
                      inputs=[ValueInfo('a', 0, 'tensor', 'float32', ('N', 2)),
                              ValueInfo('b', 1, 'tensor', 'float32', ('N', 2))],
                      outputs=[ValueInfo('c', 2)], num_registers=3)
    executor = Executor(program, backend='cupy')
    executor.run({'a': numpy.ones((5, 2), numpy.float32), 'b': numpy.ones((5, 2), numpy.float32)})
    with pytest.raises(InputValidationError, match="'b' has N=4 on axis 0, but input 'a' has N=5"):
        executor.run({'a': numpy.ones((5, 2), numpy.float32),
                      'b': numpy.ones((4, 2), numpy.float32)})
