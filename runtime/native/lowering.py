"""How one Program instruction becomes C: the interface between the
emitter (lower.py, render.py) and the per-family lowerings (lowerings/).

A lowering is a function ``(emitter, instruction) -> Step`` registered for
one or more ONNX operators with ``@lowers``, which attaches it to their
OpRecords as their 'native' stage (runtime/ops/registry.py): the record is
the one index of what covers an operator.  It reads static shapes,
dtypes and constants through the emitter (``em.shape``, ``em.dtype``,
``em.const``), raises Refuse with a reason when the kernels cannot run the
instruction, and returns a Step whose ``render`` writes the C lines once
the arena is planned.

A rendering writes C from numbers (through cformat), its own words and
``ref``, never from text of the Program: a string attribute is looked up in
the lowering's own table and the table's entry is written; names stay out
(render.py puts the input and output names in tables, as cformat.cstring
literals).  tests/runtime/native/test_emit_c_injection.py checks that names
and string attributes change nothing in the C outside string literals.
"""
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..ops.connection import window_geometry
from ..ops.registry import attach, fill_defaults, operator_record, records
from ..program import Program
from .cformat import CStruct, Shape

#: (C expression of a register's pointer, C expression of the scratch) -> lines
Render = Callable[[Callable[[int], str], str], list[str]]
#: Input dtypes a float kernel accepts (the default of ``em.shape``).
FLOAT32 = ('float32',)
#: Every dtype the C backend stores (cformat.C_TYPES).
ANY_DTYPE = ('float32', 'float64', 'int64', 'int32', 'bool')


#: Channels per block of the NCHWc layout (ccn_nchwc.h's CCN_NCHWC_BLOCK),
#: which the NCHWc pass (blocked.py) and the lowerings writing it share.
BLOCK = 16


def blocked_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The NCHWc shape (N, ceil(C / BLOCK), H, W, BLOCK) of an (N, C, H, W) tensor."""
    n, c, h, w = shape
    return (n, -(-c // BLOCK), h, w, BLOCK)


class Refuse(Exception):
    """One instruction the kernels cannot run; the message says why."""


class Unknown(Exception):
    """An input's shape is unknown because an earlier instruction was
    refused: not a problem of this instruction, which is left out."""


@dataclass
class Step:
    """How one instruction becomes C.  ``shapes`` has one entry per output
    (None for an optional output left uncomputed); ``dtypes`` likewise (None:
    every output has input 0's dtype); ``alias`` means output 0 shares input
    0's memory; ``in_place`` lists the inputs whose memory output 0 may take
    when they are read for the last time here (the kernel reads each element
    before it writes the same one); ``scratch`` is in floats; ``family``
    names the kernel file (ccn_<family>.c) and ``also`` any other family the
    rendering calls.  A kernel that can refuse its inputs at run time
    returns nonzero then: its lines ``return CCN_FAILED;`` (the run's status
    for this instruction, which the emitter defines), and ``error`` says
    what went wrong, as the NumPy VM's exception would ("IndexError: ...").
    ``parts`` lists (input k, element offset) where input k is one
    contiguous block of output 0 (a Concat at batch 1): the planner may have
    input k's producer write it there, and the rendering then copies
    nothing for it (``ref`` of the input is ``at(ref(output 0), offset)``)."""
    family: str
    shapes: list[Shape | None]
    render: Render
    scratch: int = 0
    alias: bool = False
    also: tuple[str, ...] = ()
    dtypes: list[str | None] | None = None
    in_place: tuple[int, ...] = ()
    error: str = ''
    parts: tuple[tuple[int, int], ...] = ()


def at(pointer: str, offset: int) -> str:
    """The C expression of ``pointer`` advanced by ``offset`` elements, one
    primary expression (it may be indexed or cast)."""
    return pointer if offset == 0 else '(%s + %d)' % (pointer, offset)


def lowers(*ops: str):
    """Register the decorated function as the lowering of ``ops`` (ONNX
    operators of the default domain, or 'domain::op')."""
    def register(fn):
        for op in ops:
            domain, _, name = op.rpartition('::')
            attach('native', name, domain=domain)(fn)
        return fn
    return register


def lowering_for(op: str, domain: str = '') -> Callable[[Any, Any], Step] | None:
    """The lowering of ``op``, None when it has none."""
    from . import lowerings  # noqa: F401  (registers every lowering)
    record = operator_record(op, domain)
    return None if record is None else record.stages.get('native')


def native_operators() -> list[str]:
    """Every operator with a lowering: its name in the default domain,
    'domain::op' elsewhere."""
    from . import lowerings  # noqa: F401  (registers every lowering)
    return [r.op if not r.domain else '%s::%s' % (r.domain, r.op)
            for r in records() if 'native' in r.stages]


def with_defaults(program: Program) -> Program:
    """``program`` with its kernels' attribute defaults filled in, as the
    compiler fills them (codegen): a Program made elsewhere (by hand, or
    saved before) reaches the lowerings and fusion complete too."""
    return dataclasses.replace(program, instructions=[
        dataclasses.replace(i, attrs=fill_defaults(i.op, i.domain, i.version, i.attrs))
        for i in program.instructions])


#: ccn_connection.h's geometry of a 2-D convolution, which every Conv path takes.
CONV_GEOMETRY = CStruct('ccn_conv_geometry', (
    'batch', 'in_channels', 'in_h', 'in_w', 'out_channels', 'out_h', 'out_w', 'kernel_h',
    'kernel_w', 'group', 'stride_h', 'stride_w', 'dil_h', 'dil_w', 'pad_top', 'pad_left'))


def conv_geometry(batch, channels, in_size, out_channels, out_size, kernel, group, strides,
                  dilations, pads_begin) -> str:
    """The C pointer to the ccn_conv_geometry of a 2-D convolution (or
    transposed convolution) of ``batch`` images of ``channels`` x
    ``in_size`` into ``out_channels`` x ``out_size``; the rest are pairs."""
    return CONV_GEOMETRY.literal(
        batch=batch, in_channels=channels, in_h=in_size[0], in_w=in_size[1],
        out_channels=out_channels, out_h=out_size[0], out_w=out_size[1], kernel_h=kernel[0],
        kernel_w=kernel[1], group=group, stride_h=strides[0], stride_w=strides[1],
        dil_h=dilations[0], dil_w=dilations[1], pad_top=pads_begin[0], pad_left=pads_begin[1])


def window(attrs, spatial, kernel, ceil_mode=0):
    """window_geometry of a Conv or pool, a bad attribute refused."""
    try:
        return window_geometry(spatial, kernel, attrs.get('strides'), attrs.get('dilations'),
                               attrs.get('pads'), attrs.get('auto_pad', 'NOTSET'), ceil_mode)
    except (ValueError, IndexError, TypeError) as e:
        raise Refuse(str(e)) from None


class _UnitHeight:
    """The emitter as a 2-D lowering of a 1-D instruction sees it: inputs
    ``lifted`` (of rank 3) of ``inst`` have a unit height, axis 2, inserted,
    in their shapes and, for constants (a weight), their values."""

    def __init__(self, em, inst, lifted):
        self._em, self._lifted = em, lifted
        self._registers = {inst.inputs[k] for k in lifted if k < len(inst.inputs)}

    def __getattr__(self, name):
        return getattr(self._em, name)

    def shape(self, inst, k, *args, **kwargs):
        s = self._em.shape(inst, k, *args, **kwargs)
        return s[:2] + (1,) + s[2:] if k in self._lifted and len(s) == 3 else s

    def const(self, r):
        a = self._em.const(r)
        if a is not None and r in self._registers and a.ndim == 3:
            return a.reshape(a.shape[:2] + (1,) + a.shape[2:])
        return a


def unit_height(lowering, em, inst, lifted=(0,)) -> Step:
    """The Step of 1-D ``inst`` (a Conv, ConvTranspose or pool over (N, C,
    W)) as ``lowering``, a 2-D one, makes it for a height of 1: the memory
    of (N, C, W) is that of (N, C, 1, W), so only the shapes of the inputs
    ``lifted`` and the outputs, and the window attributes, change."""
    a = dict(inst.attrs)
    for key, unit in (('kernel_shape', 1), ('strides', 1), ('dilations', 1),
                      ('output_padding', 0), ('output_shape', 1)):
        if a.get(key) is not None and len(a[key]) == 1:
            a[key] = [unit] + list(a[key])
    if a.get('pads') is not None and len(a['pads']) == 2:
        a['pads'] = [0, a['pads'][0], 0, a['pads'][1]]
    step = lowering(_UnitHeight(em, inst, lifted), dataclasses.replace(inst, attrs=a))
    step.shapes = [s if s is None else s[:2] + s[3:] for s in step.shapes]
    return step

