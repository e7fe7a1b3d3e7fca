"""Running the test suite's kernel calls on CuPy
(``CHAINER_COMPILER_TEST_BACKEND=cupy``, see tests/conftest.py).

The runtime's tests call kernels as ``fn(numpy, *inputs, **attributes)``
(directly, through ``lookup(...).fn``, or through an Executor on backend
'numpy') and check the results with NumPy.  ``run_kernels_on_cupy()``
replaces every registered kernel by a wrapper that, when called with
``numpy``, moves the array inputs to the device as the Executor moves a
Program's inputs, runs the kernel with ``xp=cupy``, copies the arrays it
updates in place back into the caller's arrays, and returns host arrays.
Calls made with ``cupy`` (by the Executor on backend 'cupy', or by one
kernel calling another) pass straight through.  Attributes stay as they
are: the Executor hands kernels NumPy attribute values on every backend.
"""
import dataclasses
import functools
import sys

import numpy

from chainer_compiler.runtime import backend
from chainer_compiler.runtime.ops import registry


def _to_host(value):
    if isinstance(value, (tuple, list)):
        return type(value)(_to_host(v) for v in value)
    return backend.to_numpy(value)


def _on_cupy(spec, cupy):
    fn = spec.fn
    updated = spec.record.updated_inputs

    @functools.wraps(fn)
    def call(xp, *inputs, **attributes):
        if xp is not numpy:
            return fn(xp, *inputs, **attributes)
        moved = [backend.to_backend(cupy, v) for v in inputs]
        result = fn(cupy, *moved, **attributes)
        for i in updated:  # in-place updates must reach the caller's arrays
            if i < len(inputs) and isinstance(inputs[i], numpy.ndarray):
                inputs[i][...] = backend.to_numpy(moved[i])
        return _to_host(result)
    call.runs_on_cupy = True
    return call


def run_kernels_on_cupy():
    """Wrap every registered kernel (in the registry and in its module) so
    that calls with ``numpy`` run on CuPy; returns how many were wrapped."""
    import cupy
    registry.lookup('Relu')  # loads every family
    count = 0
    for key, specs in registry._KERNELS.items():
        wrapped = []
        for spec in specs:
            if getattr(spec.fn, 'runs_on_cupy', False):
                wrapped.append(spec)
                continue
            call = _on_cupy(spec, cupy)
            module = sys.modules[spec.fn.__module__]
            if getattr(module, spec.fn.__name__, None) is spec.fn:
                setattr(module, spec.fn.__name__, call)
            wrapped.append(dataclasses.replace(spec, fn=call))
            count += 1
        registry._KERNELS[key] = wrapped
    return count


def return_host_arrays_from_cupy_executors():
    """Make ``Executor.run`` on backend 'cupy' return host arrays, which the
    tests' NumPy assertions take (run_positional, which sub-programs use,
    is left as it is)."""
    from chainer_compiler.runtime.executor import Executor
    run = Executor.run
    if getattr(run, 'returns_host_arrays', False):
        return

    @functools.wraps(run)
    def host_run(self, inputs):
        outputs = run(self, inputs)
        if self.backend != 'cupy':
            return outputs
        return {name: _to_host(value) for name, value in outputs.items()}
    host_run.returns_host_arrays = True
    Executor.run = host_run
