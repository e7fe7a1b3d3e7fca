"""Checking a Program's structure before anything runs or is generated from it.

A Program file is untrusted input, and its register numbers become Python
identifiers in the straight-line run (straight_line.py) and list indices in
the step-by-step loop.  ``validate_program`` checks the whole structure,
sub-programs included, so that a bad Program is refused with one error naming
its source and the first problem, instead of failing somewhere later.
"""
import numbers
import re
import reprlib

import numpy

from . import ops
from .errors import KernelBindError, ProgramFormatError, UnsupportedOperatorError
from .program import NO_REGISTER, Instruction, Program, RegisterType, ValueInfo

#: What a ValueInfo's ``kind`` may be.
VALUE_KINDS = ('tensor', 'sequence', 'optional', 'unknown')

#: The dtypes a RegisterType may name: those of ONNX's element types.
REGISTER_DTYPES = frozenset((
    'bool', 'int2', 'int4', 'int8', 'int16', 'int32', 'int64', 'uint2', 'uint4', 'uint8',
    'uint16', 'uint32', 'uint64', 'float16', 'float32', 'float64', 'bfloat16', 'complex64',
    'complex128', 'object', 'float8_e4m3fn', 'float8_e4m3fnuz', 'float8_e5m2',
    'float8_e5m2fnuz', 'float8_e8m0fnu', 'float4_e2m1fn'))
#: Highest rank a RegisterType may state: NumPy's own limit.
MAX_TYPE_RANK = 64
#: Longest symbolic dimension of a RegisterType; ONNX's own are like 'unk__12'.
MAX_SYMBOL_LENGTH = 128
_SYMBOL = re.compile('[A-Za-z_][A-Za-z0-9_]{0,%d}' % (MAX_SYMBOL_LENGTH - 1))


def is_symbol(dim) -> bool:
    """Whether ``dim`` may be a symbolic dimension of a RegisterType: an
    identifier of at most MAX_SYMBOL_LENGTH characters."""
    return isinstance(dim, str) and _SYMBOL.fullmatch(dim) is not None


#: Attribute values a Program can hold (and its file format store), besides
#: lists and tuples of them.
_ATTRIBUTE_VALUE_TYPES = (type(None), bool, int, float, str, bytes, numpy.dtype,
                          numpy.ndarray, numpy.generic, Program)

#: How messages name the types of KernelSpec.attribute_types.
_TYPE_NAMES = {numbers.Integral: 'an integer', numbers.Real: 'a number', str: 'a string',
               (list, tuple): 'a list'}


def validate_program(program, source):
    """Check ``program`` and its sub-programs whole: registers in range and
    defined before use, outputs defined, nothing read after an instruction
    freed it or updated it in place (the inputs its kernel's OpRecord
    declares ``in_place``), well-formed names, dtypes and shapes (register
    types: dtypes of REGISTER_DTYPES, at most MAX_TYPE_RANK dimensions, each
    an int64 >= 0, None or a symbol: is_symbol), known operators and the
    attributes their kernels take.

    Raises ProgramFormatError (its subclass KernelBindError for an attribute
    a kernel does not take, or of a type it does not take) with one line
    naming ``source`` (a file name, or a description such as '<program
    main>') and the first problem found.
    """
    if not isinstance(program, Program):
        raise ProgramFormatError('%s: expected a Program, got %s'
                                 % (source, type(program).__name__))
    _Checker(program, source).check()


#: repr() of a value from the Program in a message: shortened, since a file
#: may hold a huge one.
_short = reprlib.repr


def _is_int(value):
    # Plain ints first: an isinstance check against an ABC is slow.
    return type(value) is int or (isinstance(value, numbers.Integral)
                                  and not isinstance(value, bool))


def _holdable(value):
    """Whether an attribute may hold ``value``."""
    if isinstance(value, (list, tuple)):
        return all(_holdable(v) for v in value)
    return isinstance(value, _ATTRIBUTE_VALUE_TYPES)


def _kind_problem(kind):
    """Why ``kind`` is not a ValueInfo kind, or None when it is one."""
    if kind in VALUE_KINDS:
        return None
    return 'kind %s is not one of %s' % (_short(kind), ', '.join(VALUE_KINDS))


def _dtype_problem(dtype):
    """Why ``dtype`` is not a ValueInfo dtype (a NumPy dtype's own name, or
    None), or None when it is one."""
    if dtype is None:
        return None
    if not isinstance(dtype, str):
        return 'dtype %s is not a string' % _short(dtype)
    try:
        name = numpy.dtype(dtype).name
    except (TypeError, ValueError):
        return 'dtype %s is not a NumPy dtype' % _short(dtype)
    if name != dtype:
        return 'dtype %s is not a NumPy dtype name (%s is)' % (_short(dtype), name)
    return None


def _shape_problem(shape):
    """Why ``shape`` is not a ValueInfo shape (a tuple of ints >= 0, symbol
    names and Nones, or None), or None when it is one."""
    if shape is None:
        return None
    if not isinstance(shape, tuple):
        return 'shape %s is not a tuple' % _short(shape)
    for d in shape:
        if not (d is None or isinstance(d, str) or (_is_int(d) and d >= 0)):
            return 'shape %s has dimension %s (expected an int >= 0, a name or None)' % (
                _short(shape), _short(d))
    return None


def _register_type_problem(t):
    """Why ``t`` is not a RegisterType the format allows, or None."""
    if not isinstance(t, RegisterType):
        return 'the type has type %s, expected RegisterType' % type(t).__name__
    if _kind_problem(t.kind):
        return _kind_problem(t.kind)
    if t.dtype is not None and (not isinstance(t.dtype, str) or t.dtype not in REGISTER_DTYPES):
        return 'dtype %s is not one of %s' % (_short(t.dtype), ', '.join(sorted(REGISTER_DTYPES)))
    if t.shape is None:
        return None
    if not isinstance(t.shape, tuple) or len(t.shape) > MAX_TYPE_RANK:
        return 'shape %s is not a tuple of at most %d dimensions' % (_short(t.shape),
                                                                    MAX_TYPE_RANK)
    for d in t.shape:
        if not (d is None or is_symbol(d) or (type(d) is int and 0 <= d < 1 << 63)):
            return ('shape %s has dimension %s (expected an int64 >= 0, None or an identifier '
                    'of at most %d characters)' % (_short(t.shape), _short(d),
                                                   MAX_SYMBOL_LENGTH))
    return None


class _Checker:
    """Walks one Program in execution order, tracking which registers hold a
    value, as the executor would at run time."""

    def __init__(self, program, source):
        self.program = program
        self.source = source
        self.live = set()  # registers holding a value at this point
        self.freed = {}  # register -> index of the instruction that freed it
        self.updated = {}  # register -> index of the instruction that updated it in place

    def fail(self, problem, error=ProgramFormatError):
        raise error('%s: %s' % (self.source, problem))

    def here(self, text):
        """``text`` about this program, naming it when it is a sub-program
        (messages about an instruction name its program already)."""
        return text if self.program.name == 'main' else 'program %s: %s' % (
            self.program.name, text)

    def check(self):
        self.check_fields()
        for info in self.program.inputs:
            self.check_value_info(info, 'input')
            if info.register in self.live:
                self.fail(self.here("input '%s' uses register %d, as another input does"
                                    % (info.name, info.register)))
            self.live.add(info.register)
        self.check_constants()
        for index, inst in enumerate(self.program.instructions):
            self.check_instruction(index, inst)
        for info in self.program.outputs:
            self.check_value_info(info, 'output')
            self.read(info.register, self.here("output '%s' reads" % info.name))
        self.check_register_names()
        self.check_register_count()
        for reg, t in self.program.types.items():
            self.check_register(reg, self.here('types gives a type to'))
            problem = _register_type_problem(t)
            if problem:
                self.fail(self.here('the type of register %d: %s' % (reg, problem)))

    def check_fields(self):
        p = self.program
        if not isinstance(p.name, str):
            self.fail('program name %s is not a string' % _short(p.name))
        for field, kind in (('instructions', list), ('inputs', list), ('outputs', list),
                            ('constants', dict), ('register_names', dict), ('types', dict)):
            if not isinstance(getattr(p, field), kind):
                self.fail(self.here('%s has type %s, expected %s' % (
                    field, type(getattr(p, field)).__name__, kind.__name__)))
        if not (_is_int(p.num_registers) and p.num_registers >= 0):
            self.fail(self.here('num_registers is %s, not an int >= 0'
                                % _short(p.num_registers)))

    def check_register_count(self):
        # A register is defined before it is read, so a program needs no more
        # registers than it has definitions; this bounds what the executor
        # allocates by the size of the program.
        p = self.program
        definitions = len(p.inputs) + len(p.constants) + sum(
            len(inst.outputs) for inst in p.instructions)
        if p.num_registers > definitions:
            self.fail(self.here('num_registers is %d, but the program defines only %d values'
                                % (p.num_registers, definitions)))

    def check_value_info(self, info, role):
        if not isinstance(info, ValueInfo):
            self.fail(self.here('an %s has type %s, expected ValueInfo'
                                % (role, type(info).__name__)))
        if not isinstance(info.name, str):
            self.fail(self.here('an %s has name %s, not a string' % (role, _short(info.name))))
        what = self.here("%s '%s'" % (role, info.name))
        self.check_register(info.register, what + ' uses')
        problem = (_kind_problem(info.kind) or _dtype_problem(info.dtype)
                   or _shape_problem(info.shape))
        if problem:
            self.fail('%s: %s' % (what, problem))

    def check_constants(self):
        for reg, value in self.program.constants.items():
            self.check_register(reg, self.here('a constant is stored in'))
            if reg in self.live:
                self.fail(self.here('register %d is both an input and a constant' % reg))
            if not isinstance(value, numpy.ndarray):
                self.fail(self.here('the constant in register %d has type %s, expected ndarray'
                                    % (reg, type(value).__name__)))
            self.live.add(reg)

    def check_register_names(self):
        for reg, name in self.program.register_names.items():
            self.check_register(reg, self.here('register_names names'))
            if not isinstance(name, str):
                self.fail(self.here('register_names gives register %d the name %s, '
                                    'not a string' % (reg, _short(name))))

    def check_register(self, reg, what, omittable=False):
        """``what`` (e.g. "instruction 3 (Relu) reads") names a register
        that must be one of the program's, or NO_REGISTER when ``omittable``."""
        if omittable and _is_int(reg) and reg == NO_REGISTER:
            return
        if not (_is_int(reg) and 0 <= reg < self.program.num_registers):
            self.fail('%s register %s, but the program has %d registers'
                      % (what, _short(reg), self.program.num_registers))

    # -- instructions ----------------------------------------------------
    def check_instruction(self, index, inst):
        if not isinstance(inst, Instruction):
            self.fail(self.here('instruction %d has type %s, expected Instruction'
                                % (index, type(inst).__name__)))
        self.check_instruction_fields(index, inst)
        where = self.program.describe_instruction(index)
        spec = self.kernel(where, inst)
        self.check_attributes(where, inst, spec)
        for reg in inst.inputs:
            self.read(reg, where + ' reads', omittable=True)
        for reg in inst.captures:
            self.read(reg, where + ' captures')
        for position in spec.record.updated_inputs:
            # Its kernel overwrites these arrays: a later read would see the
            # new values where the program means the old ones.
            if position < len(inst.inputs) and inst.inputs[position] != NO_REGISTER:
                self.updated[inst.inputs[position]] = index
        for reg in inst.outputs:
            self.write(reg, where)
        for reg in inst.frees:
            self.free(reg, where, index)

    def check_instruction_fields(self, index, inst):
        for field, kind in (('op', str), ('domain', str), ('name', str), ('inputs', tuple),
                            ('outputs', tuple), ('frees', tuple), ('captures', tuple),
                            ('attrs', dict)):
            if not isinstance(getattr(inst, field), kind):
                self.fail(self.here('instruction %d: %s has type %s, expected %s' % (
                    index, field, type(getattr(inst, field)).__name__, kind.__name__)))
        if not _is_int(inst.version):
            self.fail(self.here('instruction %d: version %s is not an int'
                                % (index, _short(inst.version))))
        if not all(isinstance(key, str) for key in inst.attrs):
            self.fail(self.here('instruction %d: attribute names %s are not all strings'
                                % (index, _short(list(inst.attrs)))))

    def kernel(self, where, inst):
        try:
            return ops.lookup(inst.op, inst.domain, inst.version)
        except UnsupportedOperatorError:
            self.fail('%s has no kernel at opset version %d' % (where, inst.version))

    def check_attributes(self, where, inst, spec):
        if spec.attribute_names is not None:
            unknown = sorted(set(inst.attrs) - spec.attribute_names)
            if unknown:
                self.fail('%s: attribute(s) %s not supported by the kernel (it accepts: %s)'
                          % (where, ', '.join(unknown),
                             ', '.join(sorted(spec.attribute_names)) or 'none'),
                          KernelBindError)
        for name, value in inst.attrs.items():
            if not _holdable(value):
                self.fail('%s: attribute %s has type %s, which no Program attribute can have'
                          % (where, name, type(value).__name__))
            expected = spec.attribute_types.get(name, object)
            if not isinstance(value, expected):
                self.fail('%s: attribute %s has type %s, but the kernel takes %s'
                          % (where, name, type(value).__name__, _TYPE_NAMES[expected]),
                          KernelBindError)
            if isinstance(value, Program):
                self.check_body(where, inst, name, value)

    def check_body(self, where, inst, name, body):
        _Checker(body, self.source).check()
        # A body receives the instruction's captures after its own inputs.
        if len(inst.captures) > len(body.inputs):
            self.fail('%s captures %d registers, but its body %s has only %d inputs'
                      % (where, len(inst.captures), name, len(body.inputs)))

    # -- register states -------------------------------------------------
    def read(self, reg, what, omittable=False):
        self.check_register(reg, what, omittable)
        if reg in self.updated:
            self.fail('%s register %d after %s updated it in place' % (
                what, reg, self.program.describe_instruction(self.updated[reg])))
        if reg == NO_REGISTER or reg in self.live:
            return
        if reg in self.freed:
            self.fail('%s register %d after %s freed it' % (
                what, reg, self.program.describe_instruction(self.freed[reg])))
        self.fail('%s register %d before any input, constant or instruction defines it'
                  % (what, reg))

    def write(self, reg, where):
        self.check_register(reg, where + ' writes', omittable=True)
        if reg == NO_REGISTER:
            return
        if reg in self.program.constants:
            # The straight-line run reads constants as globals of its
            # function; an assignment would make them locals instead.
            self.fail('%s writes register %d, which holds a constant' % (where, reg))
        self.live.add(reg)
        self.freed.pop(reg, None)
        self.updated.pop(reg, None)

    def free(self, reg, where, index):
        self.check_register(reg, where + ' frees')
        if reg not in self.live:
            self.fail('%s frees register %d, which holds no value there' % (where, reg))
        self.live.discard(reg)
        self.updated.pop(reg, None)
        self.freed[reg] = index
