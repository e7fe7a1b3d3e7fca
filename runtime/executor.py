"""The executor: runs a Program on a backend.

Kernels and their static attributes are bound once, when the Executor is
built; running is then a loop over prepared steps with no per-instruction
look-ups.
"""
import functools
import sys
import time

import numpy

from . import ops
from .backend import cupy_pool, default_backend, get_array_module, to_backend
from .errors import (InputValidationError, KernelBindError, KernelError,
                     NonFiniteError, RuntimeVMError)
from .profiling import Tracer, describe_value
from .program import NO_REGISTER, Program


class _Step:
    __slots__ = ('index', 'inst', 'fn', 'inputs', 'outputs', 'frees', 'subprograms',
                 'captures')

    def __init__(self, index, inst, fn, subprograms):
        self.index = index
        self.inst = inst
        self.fn = fn
        self.inputs = tuple(inst.inputs)
        self.outputs = tuple(inst.outputs)
        self.frees = tuple(inst.frees)
        self.subprograms = subprograms  # attribute name -> child Executor
        self.captures = tuple(inst.captures)


class Executor:
    """Runs ``program``.

    Options: ``backend`` ('numpy', 'cupy' or None for CuPy when CuPy and a
    GPU are present, else NumPy), ``trace`` (print op, shapes and time of
    every instruction to stderr), ``tracer`` (a Tracer collecting the same
    events, e.g. for Chrome tracing), ``check_nans`` (raise NonFiniteError naming the first
    instruction that produces NaN or Inf), ``validate_inputs`` (check input
    names, dtypes and shapes against the Program's declaration),
    ``track_memory`` (keep ``peak_bytes``: the most bytes held by live
    registers at once, constants included, over all runs so far).
    """

    def __init__(self, program, backend=None, trace=False, check_nans=False,
                 validate_inputs=True, tracer=None, track_memory=False):
        self.program = program
        self.backend = backend or default_backend()
        self.xp = get_array_module(self.backend)
        if tracer is None and trace:
            tracer = Tracer(stream=sys.stderr)
        self.tracer = tracer
        self.check_nans = check_nans
        self.validate_inputs = validate_inputs
        self.track_memory = track_memory
        self.peak_bytes = 0
        self._steps = [self._bind(i, inst) for i, inst in enumerate(program.instructions)]
        self._template = [None] * program.num_registers
        for reg, value in program.constants.items():
            self._template[reg] = to_backend(self.xp, value)

    # -- binding ---------------------------------------------------------
    def _bind(self, index, inst):
        spec = ops.lookup(inst.op, inst.domain, inst.version, inst.name)
        static = {k: v for k, v in inst.attrs.items() if not isinstance(v, Program)}
        subprograms = {k: Executor(v, backend=self.backend, check_nans=self.check_nans,
                                   validate_inputs=False, tracer=self.tracer)
                       for k, v in inst.attrs.items() if isinstance(v, Program)}
        names = set(static) | set(subprograms)
        if spec.attribute_names is not None:
            unknown = sorted(names - spec.attribute_names)
            if unknown:
                raise KernelBindError(
                    '%s: attribute(s) %s not supported by the kernel (it accepts: %s)'
                    % (self._where(index, inst), ', '.join(unknown),
                       ', '.join(sorted(spec.attribute_names)) or 'none'))
        if spec.accepts_n_outputs:
            static['n_outputs'] = len(inst.outputs)
        fn = functools.partial(spec.fn, self.xp, **static)
        return _Step(index, inst, fn, subprograms)

    def _where(self, index, inst):
        text = 'instruction %d (%s' % (index, inst.qualified_op)
        if inst.name:
            text += ", node '%s'" % inst.name
        if self.program.name != 'main':
            text += ', in program %s' % self.program.name
        return text + ')'

    # -- running ---------------------------------------------------------
    def run(self, inputs):
        """Run with ``inputs`` (a dict by name, or a list in declaration
        order) and return a dict of outputs by name."""
        values = self._arrange_inputs(inputs)
        results = self.run_positional(values)
        return {v.name: r for v, r in zip(self.program.outputs, results)}

    def run_positional(self, values):
        """Run with input values in declaration order; return a list of
        outputs in declaration order."""
        if self.validate_inputs:
            if len(values) != len(self.program.inputs):
                raise InputValidationError('program %s takes %d input(s) (%s), got %d' % (
                    self.program.name, len(self.program.inputs),
                    ', '.join(v.name for v in self.program.inputs), len(values)))
            validate_inputs(self.program.inputs, values, self.program.name)
        if self.backend == 'cupy':
            import cupy
            with cupy.cuda.using_allocator(cupy_pool().malloc):
                return self._run(values)
        return self._run(values)

    def _run(self, values):
        regs = list(self._template)
        for info, value in zip(self.program.inputs, values):
            regs[info.register] = to_backend(self.xp, value)
        live_bytes = sum(_nbytes(v) for v in regs) if self.track_memory else 0
        tracer = self.tracer
        for step in self._steps:
            args = [None if r == NO_REGISTER else regs[r] for r in step.inputs]
            start = time.perf_counter() if tracer else 0.0
            try:
                if step.subprograms:
                    captured = [regs[r] for r in step.captures]
                    result = step.fn(*args, **{k: _body(child, captured)
                                               for k, child in step.subprograms.items()})
                else:
                    result = step.fn(*args)
            except RuntimeVMError:
                raise
            except Exception as e:
                raise KernelError('%s failed on inputs (%s): %s: %s' % (
                    self._where(step.index, step.inst),
                    ', '.join(describe_value(a) for a in args), type(e).__name__, e)) from e
            outs = step.outputs
            if len(outs) == 1:
                if isinstance(result, tuple):
                    result = result[0]
                if isinstance(result, numpy.generic):
                    result = numpy.asarray(result)
                regs[outs[0]] = result
                produced = (result,)
            else:
                if not isinstance(result, tuple):
                    result = (result,)
                if len(result) < len(outs):
                    raise KernelError('%s returned %d outputs, the node asks for %d' % (
                        self._where(step.index, step.inst), len(result), len(outs)))
                produced = []
                for r, v in zip(outs, result):
                    if isinstance(v, numpy.generic):
                        v = numpy.asarray(v)
                    if r != NO_REGISTER:
                        regs[r] = v
                    produced.append(v)
            if tracer:
                tracer.record(self.program.name, step.index, step.inst, args, produced,
                              start, time.perf_counter())
            if self.check_nans:
                self._check_finite(step, outs, regs)
            if self.track_memory:
                live_bytes += sum(_nbytes(v) for v in produced)
                self.peak_bytes = max(self.peak_bytes, live_bytes)
                live_bytes -= sum(_nbytes(regs[r]) for r in step.frees)
            for r in step.frees:
                regs[r] = None
        return [regs[v.register] for v in self.program.outputs]

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
                    self._where(step.index, step.inst), ' and '.join(kinds),
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


def _nbytes(value):
    if isinstance(value, list):
        return sum(_nbytes(v) for v in value)
    return getattr(value, 'nbytes', 0)


def _body(child, captured):
    """A sub-program as a callable taking its own inputs, returning a list."""
    def call(*args):
        return child.run_positional(list(args) + captured)
    # Loop/Scan with zero iterations still need the declared output types.
    call.outputs = child.program.outputs
    return call


def validate_inputs(declared, values, program_name='main'):
    """Check tensors against declared dtypes and shapes; symbolic dimensions
    must take one value across all inputs."""
    symbols = {}
    for info, value in zip(declared, values):
        if info.kind != 'tensor' or value is None:
            continue
        shape = getattr(value, 'shape', None)
        dtype = getattr(value, 'dtype', None)
        if shape is None or dtype is None:
            raise InputValidationError("program %s: input '%s' must be an array, got %s"
                                       % (program_name, info.name, type(value).__name__))
        if info.dtype is not None and numpy.dtype(dtype).name != info.dtype:
            raise InputValidationError("program %s: input '%s' has dtype %s, expected %s"
                                       % (program_name, info.name, numpy.dtype(dtype).name,
                                          info.dtype))
        if info.shape is None:
            continue
        expected = tuple('?' if d is None else d for d in info.shape)
        if len(shape) != len(info.shape):
            raise InputValidationError("program %s: input '%s' has shape %s, expected %s"
                                       % (program_name, info.name, tuple(shape), expected))
        for axis, (want, got) in enumerate(zip(info.shape, shape)):
            if isinstance(want, int) and want != got:
                raise InputValidationError(
                    "program %s: input '%s' has shape %s, expected %s (axis %d)"
                    % (program_name, info.name, tuple(shape), expected, axis))
            if isinstance(want, str):
                seen = symbols.setdefault(want, (got, info.name))
                if seen[0] != got:
                    raise InputValidationError(
                        "program %s: input '%s' has %s=%d on axis %d, but input '%s' has %s=%d"
                        % (program_name, info.name, want, got, axis, seen[1], want, seen[0]))
