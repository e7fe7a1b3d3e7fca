"""Running the test suite's kernel calls on CuPy
(``CHAINER_COMPILER_TEST_BACKEND=cupy``, see tests/conftest.py).

The runtime's tests call kernels as ``fn(numpy, *inputs, **attributes)``
(directly, through ``lookup(...).fn``, or through an Executor on backend
'numpy') and check the results with NumPy.  ``run_kernels_on_cupy()``
replaces every registered kernel by a wrapper that, when called with
``numpy``, moves the array inputs to the device as the Executor moves a
Program's inputs, runs the kernel with ``xp=cupy`` (or with NumPy where the
Executor would run the node on the host), copies the arrays it updates in
place back into the caller's arrays, and returns host arrays (the caller's
own where the kernel returned an input).  Sub-graph callables the tests
write with NumPy get host values and give device ones back.
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


def _move(cupy, value, originals):
    """``value`` on the device; ``originals`` remembers the host object each
    moved one came from, so that a kernel returning its input (Identity,
    inference Dropout, SequenceAt...) gives the caller's object back."""
    moved = backend.to_backend(cupy, value)
    for m, v in zip(moved, value) if isinstance(value, list) else ():
        originals[id(m)] = (m, v)
    originals[id(moved)] = (moved, value)
    return moved


def _to_host(value, originals):
    known = originals.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    if isinstance(value, (tuple, list)):
        return type(value)(_to_host(v, originals) for v in value)
    return backend.to_numpy(value)


def _host_body(body, cupy, originals):
    """A test's NumPy sub-graph callable (Loop's body, FlexAttention's
    score_mod...) as the kernel on CuPy calls it: device values in and out."""
    @functools.wraps(body)  # keeps ``outputs``, the declared types
    def call(*args):
        outputs = body(*(_to_host(a, {}) for a in args))
        return [_move(cupy, numpy.asarray(v) if isinstance(v, numpy.generic) else v, originals)
                for v in outputs]
    return call


def _on_cupy(spec, cupy):
    fn = spec.fn
    record = spec.record

    @functools.wraps(fn)
    def call(xp, *inputs, **attributes):
        if xp is not numpy:
            return fn(xp, *inputs, **attributes)
        originals = {}
        moved = [_move(cupy, v, originals) for v in inputs]
        # Placed as the Executor places nodes: host-only ones, and those
        # with inputs of dtypes CuPy cannot hold, run with NumPy.
        if record.on_host(attributes) or any(backend.on_host(v) for v in moved):
            return fn(numpy, *inputs, **attributes)
        attributes = {k: _host_body(v, cupy, originals)
                      if callable(v) and not isinstance(v, type) else v
                      for k, v in attributes.items()}
        result = fn(cupy, *moved, **attributes)
        for i in record.updated_inputs:  # in-place updates must reach the caller's arrays
            if i < len(inputs) and isinstance(inputs[i], numpy.ndarray):
                inputs[i][...] = backend.to_numpy(moved[i])
        return _to_host(result, originals)
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
        return {name: _to_host(value, {}) for name, value in outputs.items()}
    host_run.returns_host_arrays = True
    Executor.run = host_run
