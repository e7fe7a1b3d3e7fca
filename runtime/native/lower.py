"""The native backend's first stage: a filled, fused Program to a Lowered.

One walk over the instructions evaluates what is known at emit time
(folding.py: its outputs become constants) and lowers every other
instruction with its family's lowering (lowerings/, through lowering.py),
noting each value's static shape and dtype.  Every refused instruction is
listed in one UnsupportedNativeOpsError.
"""
import math
from dataclasses import dataclass, replace

import numpy

from ..program import NO_REGISTER, Instruction, Program, RegisterType, ValueInfo
from . import lowerings  # noqa: F401  (registers every lowering)
from .cformat import C_TYPES, Shape, shape_text
from .errors import NativeEmitError, UnsupportedNativeOpsError
from .folding import fold
from .fusion import written_inputs
from .lowering import FLOAT32, Refuse, Step, Unknown, lowering_for

#: Highest rank of a value (CCN_MAX_RANK in C).
MAX_RANK = 8


def _agrees(declared: RegisterType, shape: Shape, dtype: str) -> bool:
    """Whether a tensor of ``shape`` and ``dtype`` has the ``declared`` type:
    what it leaves unknown (dtype, rank, symbolic dimensions) agrees."""
    if declared.kind != 'tensor' or declared.dtype not in (None, dtype):
        return False
    return declared.shape is None or len(declared.shape) == len(shape) and all(
        not isinstance(d, int) or d == n for d, n in zip(declared.shape, shape))


def _type_text(t: RegisterType) -> str:
    """``float32[N, 3]``, or ``a sequence of float32`` without a shape."""
    if t.shape is None or t.kind != 'tensor':
        return 'a %s of %s' % (t.kind, t.dtype or 'unknown dtype')
    return '%s[%s]' % (t.dtype or '?', ', '.join('?' if d is None else str(d) for d in t.shape))



@dataclass
class Lowered:
    """What lower() makes of a Program: the Program after fusion (with the
    inputs the lowerings added after its own: ``uniform_inputs``), one Step
    per instruction (None: evaluated at emit time), the static shape and
    dtype of every value, the constants (the Program's and the folded
    ones) and the arrays the lowerings made at emit time by C name
    (``weights``: NAME_<suffix>, e.g. a transposed weight)."""
    program: Program
    name: str
    steps: list[Step | None]
    shapes: dict[int, Shape]
    dtypes: dict[int, str]
    consts: dict[int, numpy.ndarray]
    weights: dict[str, numpy.ndarray]
    input_of: dict[int, int]
    uniform_inputs: list[Shape]

    def nbytes(self, r: int) -> int:
        """Size of register ``r``'s data in bytes."""
        return _nbytes(self.shapes[r], self.dtypes[r])


def _nbytes(shape: Shape, dtype: str) -> int:
    return math.prod(shape) * numpy.dtype(dtype).itemsize


def has_input(inst: Instruction, k: int) -> bool:
    """Whether ``inst`` has an input ``k`` (present, not omitted)."""
    return k < len(inst.inputs) and inst.inputs[k] != NO_REGISTER


def lower(program: Program, name: str) -> Lowered:
    """Evaluate what is known at emit time (folding.py) and lower every
    other instruction (lowerings/) of ``program`` (filled and fused:
    NATIVE_BACKEND's passes before) for the model ``name``.  Raises
    UnsupportedNativeOpsError listing every instruction the kernels cannot
    run, NativeEmitError for an input or output the C cannot take."""
    em = _Lowerer(program, name)
    return Lowered(em.p, name, em.steps, em.shapes, em.dtypes, em.consts, em.weights,
                   em.input_of, em.uniform_inputs)


class _Lowerer:
    """Lowers every instruction; the lowerings see it through ``shape``,
    ``dtype``, ``has``, ``const``, ``nbytes``, ``is_output``,
    ``only_first_output``, ``weight``, ``constant_array`` and
    ``uniform_input``."""

    def __init__(self, program: Program, name: str):
        self.p = program
        self.name = name
        self.shapes: dict[int, Shape] = {}
        self.dtypes: dict[int, str] = {}
        self.consts = {r: numpy.asarray(v) for r, v in program.constants.items()}
        #: C name -> array for NAME_weights.c
        self.weights: dict[str, numpy.ndarray] = {}
        self.input_of: dict[int, int] = {}
        self.uniform_inputs: list[Shape] = []
        self._readers = {r for inst in program.instructions for r in inst.inputs} | \
            {v.register for v in program.outputs}
        for k, v in enumerate(program.inputs):
            self._check_input(v)
            self.input_of.setdefault(v.register, k)
            self.shapes[v.register] = tuple(d for d in v.shape or () if isinstance(d, int))
            self.dtypes[v.register] = str(v.dtype)  # checked: one of C_TYPES
        for r, a in self.consts.items():
            self.shapes[r] = tuple(a.shape)
            self.dtypes[r] = a.dtype.name
        self.steps: list[Step | None] = []
        problems = []
        for i, inst in enumerate(program.instructions):
            values = fold(inst, self.consts, self.shapes, self.dtypes)
            if values is not None:
                self._record_constants(inst, values)
                self.steps.append(None)
                continue
            try:
                step = self._lower(inst)
            except Refuse as e:
                problems.append((i, program.describe_instruction(i), str(e)))
                self._assume_declared(inst)
                step = None
            except Unknown:
                step = None
            self.steps.append(step)
            if step is not None:
                self._record(i, inst, step, problems)
                for r in written_inputs(inst):
                    if r in self.consts:
                        problems.append((i, program.describe_instruction(i),
                                         'it updates the constant %s in place; the C backend '
                                         'keeps constants read-only' % self._describe(r)))
        if problems:
            raise UnsupportedNativeOpsError(problems)
        self._check_outputs()

    def _lower(self, inst: Instruction) -> Step:
        lowering = lowering_for(inst.op, inst.domain)
        if lowering is None:
            raise Refuse('no C kernel for operator %s' % inst.qualified_op)
        if any(isinstance(v, Program) for v in inst.attrs.values()):
            raise Refuse('sub-programs are not supported')
        return lowering(self, inst)

    def _record_constants(self, inst: Instruction, values: list):
        """``inst`` was evaluated at emit time: its outputs are constants."""
        for r, a in zip(inst.outputs, values):
            if r != NO_REGISTER and a is not None:
                if a.dtype.name not in C_TYPES:
                    continue  # (unused, or refused by its reader)
                self.consts[r] = a
                self.shapes[r] = tuple(a.shape)
                self.dtypes[r] = a.dtype.name

    def _assume_declared(self, inst: Instruction):
        """The outputs of refused ``inst`` take their static types from the
        Program, so that the instructions after it are lowered too and the
        refusal lists every instruction the kernels cannot run, not only
        the first of a chain."""
        for r in inst.outputs:
            t = self.p.types.get(r)
            if t is None or t.kind != 'tensor' or t.dtype not in C_TYPES or t.shape is None:
                continue
            dims = tuple(d for d in t.shape if isinstance(d, int))
            if len(dims) == len(t.shape):
                self.shapes[r] = dims
                self.dtypes[r] = t.dtype

    def _record(self, i: int, inst: Instruction, step: Step, problems: list):
        """Note the shapes and dtypes of ``step``'s outputs."""
        default = self.dtypes.get(inst.inputs[0], 'float32') if inst.inputs else 'float32'
        dtypes = step.dtypes or [default] * len(step.shapes)
        for r, s, d in zip(inst.outputs, step.shapes, dtypes):
            if s is None or r == NO_REGISTER:
                continue
            if len(s) > MAX_RANK:
                problems.append((i, self.p.describe_instruction(i),
                                 'its result has rank %d; at most %d is supported'
                                 % (len(s), MAX_RANK)))
            self.shapes[r] = tuple(s)
            self.dtypes[r] = d or default
            declared = self.p.types.get(r)
            if declared is not None and not _agrees(declared, self.shapes[r], self.dtypes[r]):
                problems.append((i, self.p.describe_instruction(i), (
                    'its lowering computes output %s as %s, but the Program declares it %s'
                    % (self._describe(r), shape_text(self.dtypes[r], self.shapes[r]),
                       _type_text(declared)))))

    def _describe(self, r: int) -> str:
        name = self.p.register_names.get(r)
        for v in self.p.inputs + self.p.outputs:
            if v.register == r:
                name = v.name
        return '%%%d %s' % (r, name) if name else '%%%d' % r

    def _check_input(self, v):
        if v.kind != 'tensor' or v.dtype not in C_TYPES:
            raise NativeEmitError("input '%s' is a %s; the C backend handles tensors of %s"
                                  % (v.name, v.dtype or v.kind, ', '.join(C_TYPES)))
        if v.shape is None or not all(isinstance(d, int) and d >= 0 for d in v.shape):
            raise NativeEmitError("input '%s' has shape %s, not a static one; the C backend "
                                  'needs every shape fixed (export with concrete input shapes, '
                                  'or size them: emit-c --symbolic-dims NAME=SIZE)'
                                  % (v.name, None if v.shape is None else list(v.shape)))
        if len(v.shape) > MAX_RANK:
            raise NativeEmitError("input '%s' has rank %d; at most %d is supported"
                                  % (v.name, len(v.shape), MAX_RANK))

    def _check_outputs(self):
        for v in self.p.outputs:
            r = v.register
            if self.dtypes.get(r) not in C_TYPES:
                raise NativeEmitError("output '%s' is %s; the C backend handles %s"
                                      % (v.name, self.dtypes.get(r), ', '.join(C_TYPES)))
            shape = self.shapes.get(r)
            if shape is None:
                raise NativeEmitError("output '%s' has no static shape" % v.name)
            if len(shape) > MAX_RANK:
                raise NativeEmitError("output '%s' has rank %d; at most %d is supported"
                                      % (v.name, len(shape), MAX_RANK))
            declared = v.shape
            if declared is not None and all(isinstance(d, int) for d in declared) \
                    and tuple(declared) != shape:
                raise NativeEmitError("output '%s' is declared %s but computes to %s"
                                      % (v.name, list(declared), list(shape)))

    def shape(self, inst: Instruction, k: int, dtypes=FLOAT32) -> Shape:
        """Static shape of input ``k`` of ``inst``, refused unless present
        and of one of ``dtypes``."""
        if not self.has(inst, k):
            raise Refuse('input %d is missing' % k)
        r = inst.inputs[k]
        if r not in self.shapes:
            raise Unknown()
        if self.dtypes[r] not in dtypes:
            raise Refuse('input %d (%s) is %s; this kernel takes %s'
                         % (k, self.p.register_name(r), self.dtypes[r], ' or '.join(dtypes)))
        return self.shapes[r]

    def dtype(self, inst: Instruction, k: int) -> str:
        """Dtype name of input ``k`` of ``inst`` (present and known)."""
        self.shape(inst, k, tuple(C_TYPES))
        return self.dtypes[inst.inputs[k]]

    def uniform_input(self, inst: Instruction, shape: Shape) -> int:
        """A new program input, after the Program's own, of float64 uniform
        numbers in [0, 1) of ``shape`` that the caller draws for ``inst``
        at every call (EmitResult.uniform_inputs); returns its register.
        Random numbers come from the caller, not from C, so the native
        program draws exactly what the NumPy VM draws."""
        r = self.p.num_registers
        name = '%s_uniforms' % (inst.name or self.p.register_name(inst.outputs[0]))
        info = ValueInfo(name, r, dtype='float64', shape=tuple(shape))
        # A copy: the caller's Program keeps its inputs.
        self.p = replace(self.p, inputs=self.p.inputs + [info], num_registers=r + 1)
        self.input_of[r] = len(self.p.inputs) - 1
        self.uniform_inputs.append(tuple(shape))
        self.shapes[r] = tuple(shape)
        self.dtypes[r] = 'float64'
        return r

    def has(self, inst: Instruction, k: int) -> bool:
        """Whether ``inst`` has an input ``k``."""
        return has_input(inst, k)

    def const(self, r: int):
        """The value of register ``r`` when it is a constant, else None."""
        return self.consts.get(r)

    def nbytes(self, r: int) -> int:
        """Size of register ``r``'s data in bytes."""
        return _nbytes(self.shapes[r], self.dtypes[r])

    def is_output(self, r: int) -> bool:
        """Whether register ``r`` is a program output."""
        return any(v.register == r for v in self.p.outputs)

    def only_first_output(self, inst: Instruction, what: str):
        """Refuse ``inst`` when an output after the first is read."""
        for r in inst.outputs[1:]:
            if r != NO_REGISTER and r in self._readers:
                raise Refuse('its %s output is used; only the first output is supported'
                             % what)

    def constant_array(self, suffix: str, array) -> str:
        """The C name of an array made at emit time (``NAME_<suffix>`` in
        NAME_weights.c), e.g. a weight laid out for a kernel."""
        return array_name(self.weights, self.name, suffix, array)


def array_name(weights: dict, name: str, suffix: str, array) -> str:
    """The C name ``NAME_<suffix>`` of an array of NAME_weights.c, added to
    ``weights`` the first time it is asked for."""
    key = '%s_%s' % (name, suffix)
    if key not in weights:
        weights[key] = numpy.ascontiguousarray(array)
    return key

