"""The executor: runs a Program on a backend.

Kernels and their static attributes are bound once, when the Executor is
built.  A plain run calls a Python function generated from the Program
(straight_line.py), which keeps the VM's own cost per instruction near a
function call; tracing, NaN checks and memory tracking run a step-by-step
loop over the prepared steps instead.  Backend 'native' runs none of
that: it calls the Program compiled to C (native/library.py).

On CuPy, values of dtypes CuPy cannot hold (strings, ml_dtypes' float8,
int4...) stay on the host, and a node runs there, with NumPy, when its
record says so (host_only: Cast to float8...) or when an input is on the
host; its outputs of device dtypes go back to the device (as onnxruntime's
CUDA provider hands such nodes to the CPU one).  Only steps that may meet
host values check their inputs, so a Program without any pays nothing.
"""
import contextlib
import functools
import logging
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy

from . import ops
from .backend import (
    BackendUnavailableError,
    cupy_pool,
    default_backend,
    device_dtype,
    get_array_module,
    on_host,
    to_backend,
    to_numpy,
)
from .errors import (
    ConfigurationError,
    InputValidationError,
    KernelError,
    NonFiniteError,
    RuntimeVMError,
)
from .host_memory import keep_freed_memory
from .profiling import Tracer, describe_value
from .program import NO_REGISTER, Program
from .signatures import validate_inputs, validate_outputs
from .straight_line import StraightLineRun
from .validation import validate_program

_log = logging.getLogger(__name__)


class _Step:
    __slots__ = ('index', 'inst', 'fn', 'kernel', 'static', 'inputs', 'outputs', 'frees',
                 'subprograms', 'captures', 'simple', 'host', 'host_fn', 'updated')

    def __init__(self, index, inst, kernel, xp, static, subprograms, host=None, updated=()):
        self.index = index
        self.inst = inst
        self.kernel = kernel  # the kernel function and its static attributes...
        self.static = static
        self.fn = functools.partial(kernel, xp, **static)  # ...bound together
        # NO_REGISTER (-1) reads the spare register at the end, always None.
        self.inputs = tuple(inst.inputs)
        self.outputs = tuple(inst.outputs)
        self.frees = tuple(inst.frees)
        self.subprograms = subprograms  # attribute name -> child Executor
        self.captures = tuple(inst.captures)
        # None: on the backend; True: on the host; False: on the host when
        # an input is (see Executor._place).
        self.host = host
        self.host_fn = None if host is None else functools.partial(kernel, numpy, **static)
        self.updated = updated
        # One output, no bodies, on the backend: a direct kernel call in the
        # straight-line run.
        self.simple = (host is None and not subprograms and len(self.outputs) == 1
                       and self.outputs[0] != NO_REGISTER)


class Executor:
    """Runs ``program``.

    Options: ``backend`` ('numpy', 'cupy', 'native' for the Program compiled
    to C with a local C compiler, 'auto' for native when it can run the
    Program, else NumPy (native/auto.py; one INFO log line says which and
    why, and a native build that fails falls back to NumPy with a
    WARNING), or None for CuPy when CuPy and a GPU are present, else
    NumPy), ``trace`` (print op, shapes and time of
    every instruction to stderr), ``tracer`` (a Tracer collecting the same
    events, e.g. for Chrome tracing; on backend 'native', timed in C by a
    profiling build of the library), ``check_nans`` (raise NonFiniteError naming the first
    instruction that produces NaN or Inf), ``validate_inputs`` (check input
    names, dtypes and shapes against the Program's declaration, and on the
    first run of each input signature the outputs' too),
    ``track_memory`` (keep ``peak_bytes``: the most bytes held by live
    registers at once, constants included, over all runs so far),
    ``threads`` (how many threads the native backend's loops use; default
    $CHAINER_COMPILER_THREADS, else one per CPU this process may use; a
    bad count raises ConfigurationError naming it), ``donate_inputs``
    (positions of inputs the caller gives up; native: the library may keep
    values in their memory after their last read, a smaller arena; a
    run_positional(consume=True) that holds the only reference to such an
    input overwrites it, any other run copies it first: NativeRun).

    ``program`` is validated whole first (validate_program): a malformed
    one raises ProgramFormatError before any code is generated from it.
    The first NumPy Executor of a process makes glibc's malloc keep freed
    memory for the next arrays (host_memory.py; opt out with
    ``CHAINER_COMPILER_KEEP_FREED_MEMORY=0``).
    """

    def __init__(self, program: Program, backend: str | None = None, trace: bool = False,
                 check_nans: bool = False, validate_inputs: bool = True,
                 tracer: Tracer | None = None, track_memory: bool = False,
                 threads: int | None = None, donate_inputs: Collection[int] = ()) -> None:
        validate_program(program, '<program %s>' % getattr(program, 'name', '?'))
        if any(type(k) is not int or not 0 <= k < len(program.inputs) for k in donate_inputs):
            raise ConfigurationError('donate_inputs=%r: expected positions of inputs of program '
                                     '%s, 0 to %d' % (donate_inputs, program.name,
                                                      len(program.inputs) - 1))
        self.program = program
        self.backend = backend or default_backend()
        self.xp = get_array_module(self.backend)
        if tracer is None and trace:
            tracer = Tracer(stream=sys.stderr)
        # The native backend times its instructions in C (a profiling build).
        instrumented = [k for k, on in (('check_nans', check_nans),
                                        ('track_memory', track_memory)) if on]
        if self.backend == 'native' and instrumented:
            raise BackendUnavailableError("backend 'native' does not support %s; use backend "
                                          "'numpy' or 'cupy' for them" % ', '.join(instrumented))
        # The C library replaces the kernels: none are bound for it.
        self._native = self._native_run(tracer, instrumented, threads, donate_inputs) \
            if self.backend in ('native', 'auto') else None
        if self.backend == 'numpy':
            keep_freed_memory()
        self.tracer = tracer
        self.check_nans = check_nans
        self.validate_inputs = validate_inputs
        self.track_memory = track_memory
        self.peak_bytes = 0
        kernels = self._native is None
        self._template = [None] * (program.num_registers + 1)  # + the spare, see _Step
        with self._allocating():  # constants count in the VM's pool too
            for reg, value in (program.constants if kernels else {}).items():
                self._template[reg] = to_backend(self.xp, value)
        # Registers that may hold host values on CuPy: inputs not declared
        # as tensors of a device dtype, constants left on the host, and the
        # outputs of steps that may run on the host.
        self._maybe_host = {v.register for v in program.inputs
                            if v.kind != 'tensor' or v.dtype is None
                            or not device_dtype(v.dtype)}
        self._maybe_host.update(r for r in program.constants if on_host(self._template[r]))
        self._steps = [self._bind(i, inst) for i, inst in enumerate(program.instructions)
                       if kernels]
        self._array_types = (self.xp.ndarray, numpy.ndarray)
        self._validated: list | None = None  # the input signature last validated
        self._straight_line: StraightLineRun | None = None  # generated on the first plain run

    def _native_run(self, tracer, instrumented, threads, donate):
        """The NativeRun of backend 'native', or of 'auto' when it chooses
        native (self.backend becomes the choice); None when 'auto' runs the
        VM.  The native package is imported only here, when it is used."""
        from .native.library import NativeRun, native_threads
        threads = native_threads(threads)  # a bad count is an error whichever runs
        if self.backend == 'native':
            return NativeRun(self.program, tracer, threads, donate)
        from .native.auto import choose_backend
        self.backend, why = choose_backend(self.program, instrumented)
        _log.info('backend auto: %s (%s)', self.backend, why)
        if self.backend == 'numpy':
            return None
        try:
            return NativeRun(self.program, tracer, threads, donate)
        except RuntimeVMError as e:  # the C refused something, or the build failed
            _log.warning('backend auto: native failed, running on numpy instead: %s',
                         ' '.join(str(e).split()))
            self.backend = 'numpy'
            return None

    # -- binding ---------------------------------------------------------
    def _bind(self, index, inst):
        spec = ops.lookup(inst.op, inst.domain, inst.version, inst.name)
        static = {k: v for k, v in inst.attrs.items() if not isinstance(v, Program)}
        subprograms = {k: Executor(v, backend=self.backend, check_nans=self.check_nans,
                                   validate_inputs=False, tracer=self.tracer)
                       for k, v in inst.attrs.items() if isinstance(v, Program)}
        if spec.accepts_n_outputs:
            static['n_outputs'] = len(inst.outputs)
        host = self._place(spec.record, static, inst.inputs, subprograms)
        if host is not None:
            self._maybe_host.update(inst.outputs)
        return _Step(index, inst, spec.fn, self.xp, static, subprograms, host,
                     spec.record.updated_inputs)

    def _place(self, record, static, inputs, subprograms):
        """Where a step runs on CuPy (see _Step.host); sub-program steps
        stay on the backend, their bodies placing their own steps."""
        if self.xp is numpy or subprograms:
            return None
        if record.on_host(static):
            return True
        return False if self._maybe_host.intersection(inputs) else None

    # -- running ---------------------------------------------------------
    def run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, Any]:
        """Run with ``inputs`` (a dict by name, or a list in declaration
        order) and return a dict of outputs by name."""
        values = self._arrange_inputs(inputs)
        results = self.run_positional(values)
        return {v.name: r for v, r in zip(self.program.outputs, results)}

    def run_positional(self, values: Sequence[Any], *, consume: bool = False) -> list[Any]:
        """Run with input values in declaration order; return a list of
        outputs in declaration order.

        ``consume=True`` hands the list ``values`` to the Executor, which
        empties it as the run starts: the run then holds the only
        references the list gave, and frees each input after its last read
        (NumPy and CuPy; the native backend reads its inputs until it
        returns, and with ``donate_inputs`` writes values into those it
        read for the last time).  The bridges pass the values backward
        retains this way."""
        if consume and not isinstance(values, list):
            raise TypeError('run_positional(consume=True) takes a list, not %s'
                            % type(values).__name__)
        # Below, the run owns its list and empties it.
        values = values if consume else list(values)
        if self.validate_inputs:
            if len(values) != len(self.program.inputs):
                raise InputValidationError('program %s takes %d input(s) (%s), got %d' % (
                    self.program.name, len(self.program.inputs),
                    ', '.join(v.name for v in self.program.inputs), len(values)))
            # Training loops feed the same shapes every step: check each
            # new signature, and the outputs it gives, once.
            # Host arrays too: a CuPy run takes NumPy inputs.
            array_types = self._array_types
            signature = [(v.shape, v.dtype) if type(v) in array_types else type(v)
                         for v in values]
            if signature != self._validated:
                program = self.program
                symbols = validate_inputs(program.inputs, values, program.name)
                outputs = self._run_on_backend(values, consume)
                validate_outputs(program.outputs, outputs, symbols, program.name)
                self._validated = signature
                return outputs
        return self._run_on_backend(values, consume)

    def _run_on_backend(self, values, consume):
        if self._native is not None:
            try:
                return self._native.run(values, consume)
            finally:
                values.clear()
        with self._allocating():
            return self._run(values)

    def _allocating(self):
        """On CuPy, allocate from the VM's pool (backend.cupy_pool)."""
        if self.backend != 'cupy':
            return contextlib.nullcontext()
        import cupy
        return cupy.cuda.using_allocator(cupy_pool().malloc)

    def _run(self, values):
        if self.xp is not numpy:
            values[:] = [to_backend(self.xp, v) for v in values]
        if not (self.tracer or self.check_nans or self.track_memory):
            return self._run_straight_line(values)
        regs = list(self._template)
        # No loop variable may keep an input alive: the registers own them.
        for k, info in enumerate(self.program.inputs):
            regs[info.register] = values[k]
        values.clear()
        self._run_instrumented(regs)
        return [regs[v.register] for v in self.program.outputs]

    def _run_straight_line(self, values):
        if self._straight_line is None:
            constants = {r: self._template[r] for r in self.program.constants}
            self._straight_line = StraightLineRun(
                self.program, self._steps, constants, self.xp, _single_output,
                self._call_general)
        try:
            return self._straight_line.run(values)
        except RuntimeVMError:
            raise
        except Exception as e:
            step = self._straight_line.step_at(e.__traceback__)
            if step is None:
                raise
            registers = self._straight_line.registers_at(e.__traceback__)
            args = [registers.get(r) for r in step.inputs]
            raise self._kernel_error(step, args, e) from e

    def _call_general(self, step, args, captured):
        """Run a step with several outputs, sub-programs or a place on the
        host; returns one value per output."""
        if step.host or (step.host is False and any(on_host(a) for a in args)):
            result = self._run_on_host(step, args)
        else:
            result = self._invoke(step, args, captured)
        outs = step.outputs
        if len(outs) == 1:
            return (_single_output(result),)
        if not isinstance(result, tuple):
            result = (result,)
        if len(result) < len(outs):
            raise KernelError('%s returned %d outputs, the node asks for %d' % (
                self.program.describe_instruction(step.index), len(result), len(outs)))
        return tuple(numpy.asarray(v) if isinstance(v, numpy.generic) else v
                     for v in result[:len(outs)])

    @staticmethod
    def _invoke(step, args, captured):
        if step.subprograms:
            return step.fn(*args, **{k: _Body(child, captured)
                                     for k, child in step.subprograms.items()})
        return step.fn(*args)

    def _run_on_host(self, step, args):
        """Run ``step`` with NumPy on host copies of ``args``; results of
        device dtypes, and the inputs it updates, go back to the device."""
        host_args = [to_numpy(a) for a in args]
        result = step.host_fn(*host_args)
        for i in step.updated:
            if i < len(args) and args[i] is not host_args[i]:
                args[i][...] = to_backend(self.xp, host_args[i])
        if isinstance(result, tuple):
            return tuple(_to_device(self.xp, r) for r in result)
        return _to_device(self.xp, result)

    def _kernel_error(self, step, args, error):
        return KernelError('%s failed on inputs (%s): %s: %s' % (
            self.program.describe_instruction(step.index),
            ', '.join(describe_value(a) for a in args), type(error).__name__, error))

    def _run_instrumented(self, regs):
        live = _LiveArrays(regs) if self.track_memory else None
        tracer = self.tracer
        for step in self._steps:
            args = [regs[r] for r in step.inputs]
            start = time.perf_counter() if tracer else 0.0
            try:
                produced = self._call_general(step, args, [regs[r] for r in step.captures])
            except RuntimeVMError:
                raise
            except Exception as e:
                raise self._kernel_error(step, args, e) from e
            for r, value in zip(step.outputs, produced):
                if r != NO_REGISTER:
                    regs[r] = value
            if tracer:
                tracer.record(self.program.name, step.index, step.inst, args, produced,
                              start, time.perf_counter())
            if self.check_nans:
                self._check_finite(step, step.outputs, regs)
            if live is not None:  # an output no register takes is dropped at once
                live.add(v for r, v in zip(step.outputs, produced) if r != NO_REGISTER)
                self.peak_bytes = max(self.peak_bytes, live.bytes)
                live.drop(regs[r] for r in step.frees)
            for r in step.frees:
                regs[r] = None

    def _check_finite(self, step, outs, regs):
        xp = self.xp
        for r in outs:
            if r == NO_REGISTER:
                continue
            v = regs[r]
            dtype = getattr(v, 'dtype', None)
            if dtype is None or dtype.kind not in 'fc':
                continue
            if not bool(xp.all(xp.isfinite(v))):
                kinds = []
                if bool(xp.any(xp.isnan(v))):
                    kinds.append('NaN')
                if bool(xp.any(xp.isinf(v))):
                    kinds.append('Inf')
                raise NonFiniteError('%s produced %s in output %s' % (
                    self.program.describe_instruction(step.index), ' and '.join(kinds),
                    self.program.register_name(r)))

    def _arrange_inputs(self, inputs):
        declared = self.program.inputs
        if isinstance(inputs, dict):
            unknown = sorted(set(inputs) - {v.name for v in declared})
            missing = [v.name for v in declared if v.name not in inputs]
            if unknown or missing:
                raise InputValidationError(
                    'program %s: %s%s(expected inputs: %s)' % (
                        self.program.name,
                        'unknown input(s) %s; ' % ', '.join(unknown) if unknown else '',
                        'missing input(s) %s; ' % ', '.join(missing) if missing else '',
                        ', '.join(v.name for v in declared)))
            values = [inputs[v.name] for v in declared]
        else:
            values = list(inputs)
        return values


def _single_output(result):
    """A kernel's one result as a register value: 1-tuples unwrapped, NumPy
    scalars as 0-d arrays."""
    if isinstance(result, tuple):
        result = result[0]
    if isinstance(result, numpy.generic):
        result = numpy.asarray(result)
    return result


def _to_device(xp, value):
    """A host kernel's result as a CuPy register value (see to_backend)."""
    if isinstance(value, numpy.generic):
        value = numpy.asarray(value)
    return to_backend(xp, value)


class _LiveArrays:
    """The bytes of the arrays live registers hold (track_memory), each
    array once: a view counts as the array it views, for as long as any
    register holds either, as the process really holds it."""

    def __init__(self, values):
        self.bytes = 0
        self._held = {}  # id of an array -> [the array, registers holding it]
        self.add(values)

    def add(self, values):
        for array in _arrays(values):
            held = self._held.setdefault(id(array), [array, 0])
            held[1] += 1
            self.bytes += array.nbytes if held[1] == 1 else 0

    def drop(self, values):
        for array in _arrays(values):
            held = self._held[id(array)]
            held[1] -= 1
            if not held[1]:
                del self._held[id(array)]
                self.bytes -= array.nbytes


def _arrays(values):
    """The arrays that hold ``values``' data: a view's base, the elements
    of a sequence."""
    for value in values:
        if isinstance(value, list):
            yield from _arrays(value)
        elif hasattr(value, 'nbytes'):
            while hasattr(getattr(value, 'base', None), 'nbytes'):
                value = value.base
            yield value


class _Body:
    """A sub-program as a callable taking its own inputs, returning a list.
    ``outputs`` are its declared outputs: Loop/Scan with zero iterations
    still need their types."""

    def __init__(self, child, captured):
        self.child, self.captured = child, captured
        self.outputs = child.program.outputs

    def __call__(self, *args):
        return self.child.run_positional(list(args) + self.captured)
