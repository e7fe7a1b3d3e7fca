"""The permutes around a channels-last section of an NCHW network, folded
into the kernels on either side (a pass of the native backend, after
fusion).

ConvNeXt's block runs its LayerNormalization and 1x1 MLP channels-last
between two Transposes: a depthwise Conv (NCHW), Transpose(0, 2, 3, 1),
LayerNormalization over the last axis, the MatMuls, Transpose(0, 3, 1, 2),
the layer scale's Mul by a (C, 1, 1) constant and the residual Add.  This
pass makes

- a Transpose(m, perm=(0, 3, 1, 2)) read only by a Mul by a float32
  constant of C values along axis 1, itself read only by an Add of another
  tensor of the output's shape, one ChannelsFirstScaleAdd(m, scale,
  residual) (ccn_scale_add_nhwc): NHWC in, NCHW out, one pass for three;
- a depthwise Conv without epilogue read only by a Transpose(0, 2, 3, 1),
  when ccn_depthwise.c takes it by channels (lowerings/depthwise.py's
  band_rows: ConvNeXt's 7x7 at 56x56 in bands of rows, at 28x28 and
  below whole), one DepthwiseConvNhwc:
  the kernel's block of pixels with the channels in the lanes is stored
  pixel by pixel, as the Transpose would have laid it out.

Both compute the same operations in the same order (the same bits); any
other graph keeps its nodes.  (A LayerNormalization reading NCHW and
writing NHWC was no faster than the Transpose and the LayerNormalization;
benchmarks/NOTES.md, "ConvNeXt's blocks without permutes".)  The pass
reads the static shapes of the Program's types; without them it changes
nothing.
"""
import dataclasses

import numpy

from ..ops.registry import CUSTOM_DOMAIN
from ..program import Instruction, Program
from .blocked import _static as static_shape
from .lowering import Refuse, window
from .lowerings.depthwise import band_rows, is_depthwise

_DEFAULT_DOMAINS = ('', 'ai.onnx')


def fold_permutes(program: Program) -> Program:
    """``program`` with each Transpose, Mul and Add of a channels-last
    section's end as one ChannelsFirstScaleAdd (see the module); the same
    object when there is none."""
    insts: list[Instruction | None] = list(program.instructions)
    readers: dict[int, list[int]] = {}
    for i, inst in enumerate(program.instructions):
        for r in inst.inputs + inst.captures:
            readers.setdefault(r, []).append(i)
    outputs = {v.register for v in program.outputs}

    def only_transpose(conv: Instruction) -> Instruction | None:
        users = readers.get(conv.outputs[0], []) if len(conv.outputs) == 1 else []
        reader = program.instructions[users[0]] if len(users) == 1 else None
        if conv.outputs[0] in outputs or reader is None or reader.op != 'Transpose' \
                or reader.domain not in _DEFAULT_DOMAINS \
                or list(reader.attrs.get('perm') or ()) != [0, 2, 3, 1]:
            return None
        return reader

    def only_reader(r: int, op: str) -> Instruction | None:
        users = readers.get(r, [])
        reader = program.instructions[users[0]] if len(users) == 1 else None
        if r in outputs or reader is None or reader.op != op \
                or reader.domain not in _DEFAULT_DOMAINS or len(reader.inputs) != 2 \
                or static_shape(program, reader.outputs[0]) != static_shape(program, r):
            return None
        return reader

    changed = False
    for i, conv in enumerate(program.instructions):
        transpose = only_transpose(conv) if conv.op == 'Conv' else None
        if transpose is not None and _channel_blocks(program, conv):
            j = readers[conv.outputs[0]][0]
            frees = set(conv.frees + transpose.frees) - {conv.outputs[0]}
            insts[j] = None
            insts[i] = dataclasses.replace(
                conv, op='DepthwiseConvNhwc', domain=CUSTOM_DOMAIN, outputs=transpose.outputs,
                frees=tuple(sorted(frees)), name='+'.join(
                    n for n in (conv.name, transpose.name) if n))
            changed = True
    for i, transpose in enumerate(program.instructions):
        if transpose.op != 'Transpose' or transpose.domain not in _DEFAULT_DOMAINS \
                or list(transpose.attrs.get('perm') or ()) != [0, 3, 1, 2] \
                or len(transpose.outputs) != 1 \
                or static_shape(program, transpose.inputs[0]) is None:
            continue
        t = transpose.outputs[0]
        out = static_shape(program, t)
        if out is None:
            continue
        mul = only_reader(t, 'Mul')
        add = None if mul is None else only_reader(mul.outputs[0], 'Add')
        if mul is None or add is None or add.inputs[0] == add.inputs[1]:
            continue
        scale = mul.inputs[1] if mul.inputs[0] == t else mul.inputs[0]
        value = program.constants.get(scale)
        # C values along axis 1 of the output: (C, 1, 1) or (1, C, 1, 1).
        if value is None or numpy.asarray(value).dtype != numpy.float32 \
                or (1,) * (4 - numpy.ndim(value)) + numpy.shape(value) != (1, out[1], 1, 1):
            continue
        residual = add.inputs[1] if add.inputs[0] == mul.outputs[0] else add.inputs[0]
        if static_shape(program, residual) != static_shape(program, add.outputs[0]):
            continue
        j, k = readers[t][0], readers[mul.outputs[0]][0]
        frees = set(transpose.frees + mul.frees + add.frees) - {t, mul.outputs[0]}
        insts[i] = insts[j] = None
        # At the Add's place, where the residual has been made.
        insts[k] = Instruction(
            'ChannelsFirstScaleAdd', (transpose.inputs[0], scale, residual), add.outputs,
            domain=CUSTOM_DOMAIN, frees=tuple(sorted(frees)),
            name='+'.join(n for n in (transpose.name, mul.name, add.name) if n))
        changed = True
    if not changed:
        return program
    return dataclasses.replace(program, instructions=[i for i in insts if i is not None])


def _channel_blocks(program: Program, conv: Instruction) -> bool:
    """Whether ``conv`` is a depthwise Conv of float32 (x, weights[, bias])
    without epilogue that ccn_depthwise.c takes by channels."""
    x, w = (static_shape(program, r) for r in conv.inputs[:2])
    group = conv.attrs.get('group', 1)
    if conv.domain not in _DEFAULT_DOMAINS or not 2 <= len(conv.inputs) <= 3 \
            or 'activation' in conv.attrs or x is None or w is None or len(x) != 4 \
            or len(w) != 4 or not isinstance(group, int) or not is_depthwise(x[1], w[0], group):
        return False
    try:
        win = window(conv.attrs, x[2:], w[2:])
    except Refuse:
        return False
    return band_rows(win.out, w[2:], win.strides, win.dilations) > 0
