"""The Program: what the compiler hands the VM.

An ordered list of instructions over numbered registers.  Each instruction
names an operator, reads input registers, writes output registers, carries
its static attributes, and lists the registers whose last use it is, so the
executor can drop them as soon as they are dead.  ``types`` gives each
register the type the compiler inferred for it, once, for the stages after
it (memory model, native emitter) to read rather than re-derive.
"""
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy

#: Register number standing for an omitted optional input or unused output.
NO_REGISTER = -1


@dataclass
class Instruction:
    """One operator application.

    ``version`` is the ONNX schema version the operator resolved to for the
    model's opset; the registry picks the kernel from it.  ``captures`` lists
    outer registers that sub-programs (Loop/If/Scan bodies) read; they are
    passed to each sub-program after its own inputs.
    """
    op: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ''
    version: int = 1
    name: str = ''
    frees: tuple[int, ...] = ()
    captures: tuple[int, ...] = ()

    @property
    def qualified_op(self) -> str:
        """``domain::op``, or just ``op`` in the default domain."""
        return '%s::%s' % (self.domain, self.op) if self.domain else self.op


@dataclass
class ValueInfo:
    """A named program input or output.

    ``kind`` is 'tensor', 'sequence', 'optional' or 'unknown'.  For tensors,
    ``dtype`` is a NumPy dtype name and ``shape`` a tuple whose entries are
    ints (fixed), strings (symbolic, must agree across inputs) or None.
    """
    name: str
    register: int
    kind: str = 'tensor'
    dtype: str | None = None
    shape: tuple[int | str | None, ...] | None = None


@dataclass(frozen=True)
class RegisterType:
    """The type of the values a register holds, as the compiler inferred it.

    ``kind`` is one of ValueInfo's kinds.  ``dtype`` (a NumPy dtype name)
    and ``shape`` describe the tensor, or for a sequence or an optional the
    tensors it holds; either is None where inference could not tell.  Shape
    entries are as in ValueInfo: ints, symbols (strings: the same symbol is
    the same size wherever it appears in the program) or None.
    """
    kind: str = 'tensor'
    dtype: str | None = None
    shape: tuple[int | str | None, ...] | None = None


@dataclass
class Program:
    """Instructions over ``num_registers`` registers; ``constants`` fill
    some registers before the run, ``inputs`` others from the caller, and
    ``outputs`` are read back after the last instruction."""
    instructions: list[Instruction]
    inputs: list[ValueInfo]
    outputs: list[ValueInfo]
    constants: dict[int, Any] = field(default_factory=dict)  # register -> array
    num_registers: int = 0
    register_names: dict[int, str] = field(default_factory=dict)  # register -> ONNX value name
    name: str = 'main'
    types: dict[int, RegisterType] = field(default_factory=dict)  # absent: unknown

    def register_name(self, reg: int) -> str:
        """The ONNX value name of register ``reg``, or ``%reg``."""
        return self.register_names.get(reg, '%%%d' % reg)

    def describe_instruction(self, index: int) -> str:
        """How errors name instruction ``index``: "instruction 3 (Relu, node
        'relu')", plus the program's name when it is a sub-program."""
        inst = self.instructions[index]
        text = 'instruction %d (%s' % (index, inst.qualified_op)
        if inst.name:
            text += ", node '%s'" % inst.name
        if self.name != 'main':
            text += ', in program %s' % self.name
        return text + ')'

    def subprograms(self) -> Iterator[tuple[Instruction, str, 'Program']]:
        """(instruction, attribute name, Program) for every nested body."""
        for inst in self.instructions:
            for key, value in inst.attrs.items():
                if isinstance(value, Program):
                    yield inst, key, value

    def dump(self) -> str:
        """A readable text listing of the program (and its sub-programs)."""
        return '\n'.join(self._dump_lines(''))

    def _dump_lines(self, indent):
        def reg(r):
            return '_' if r == NO_REGISTER else '%%%d' % r

        def named(r):
            name = self.register_names.get(r)
            return '%s(%s)' % (reg(r), name) if name else reg(r)

        lines = ['%sprogram %s: %d instructions, %d registers' % (
            indent, self.name, len(self.instructions), self.num_registers)]
        for v in self.inputs:
            lines.append('%s  input  %s = %s %s%s' % (
                indent, reg(v.register), v.name, v.dtype or v.kind,
                list(v.shape) if v.shape is not None else ''))
        for r, value in sorted(self.constants.items()):
            lines.append('%s  const  %s = %s' % (indent, named(r), _describe_array(value)))
        for i, inst in enumerate(self.instructions):
            outs = ', '.join(reg(r) for r in inst.outputs)
            ins = ', '.join(reg(r) for r in inst.inputs)
            attrs = ', '.join('%s=%s' % (k, _describe_attr(v))
                              for k, v in sorted(inst.attrs.items()))
            text = '%s  %4d: %s = %s(%s)' % (indent, i, outs, inst.qualified_op, ins)
            if attrs:
                text += ' {%s}' % attrs
            if inst.captures:
                text += ' captures[%s]' % ', '.join(reg(r) for r in inst.captures)
            if inst.frees:
                text += '  free %s' % ', '.join(reg(r) for r in inst.frees)
            if inst.name:
                text += '  # ' + inst.name
            lines.append(text)
            for key, value in sorted(inst.attrs.items()):
                if isinstance(value, Program):
                    lines.append('%s        %s:' % (indent, key))
                    lines.extend(value._dump_lines(indent + '        '))
        for v in self.outputs:
            lines.append('%s  output %s = %s' % (indent, v.name, reg(v.register)))
        return lines


def _describe_array(a):
    a = numpy.asarray(a)
    if a.size <= 4 and a.dtype != object:
        return '%s%s %s' % (a.dtype, list(a.shape), a.tolist())
    return '%s%s' % (a.dtype, list(a.shape))


def _describe_attr(v):
    if isinstance(v, Program):
        return '<program %s>' % v.name
    if isinstance(v, numpy.ndarray):
        return _describe_array(v)
    if isinstance(v, numpy.dtype):
        return v.name
    return repr(v)
