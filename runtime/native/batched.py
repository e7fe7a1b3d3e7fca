"""``emit-c --max NAME=VALUE``: C that takes any batch of 1 to VALUE samples.

The C is planned for static shapes, so a model whose inputs have the
symbolic batch as one of their axes is emitted for one sample and for a few
batch sizes (bucket_sizes: 2, 4, 8... up to BUCKET_LIMIT), and
NAME_run_n(n, ...) runs the n samples as chunks of those sizes, the largest
that fits first.  That is the batched program only when every sample's
results depend on that sample alone: check_separable proves it from the model lowered at two batch
sizes (PROBE_SIZES), before anything is written, following the batch axis
through the program.  Every value computed at run time must have one batch
axis, the one axis whose size differs between the two sizes, and it must be
the batch itself in the inputs and outputs, or c rows per sample inside the
model (a Reshape of (N, T, D) to (N * T, D): each sample's rows stay one
block).  A value computed from the batch size may only size a reshape, an
expansion or a tiling (the input its operator's record names
``shape_input``), and every instruction must keep the samples along that
axis apart: its record's ``samples`` (runtime/ops/registry.py) says how its
operator treats them, and _mixing checks the axes it works along, where it
needs the batch (axis 0, or the recurrences' layout) and the operators whose
attributes decide.  Anything else is refused with one error naming the
instruction; training steps and random draws are refused whole.
"""
import math
from dataclasses import dataclass

import numpy

from ..ops.opset_rules import node_axes
from ..ops.registry import OpRecord, operator_record
from ..program import NO_REGISTER, Instruction
from .fusion import written_inputs

#: The two batch sizes the model is lowered at to check it: two sizes tell a
#: batch axis from a fixed one, and neither is 1 (which broadcasts).
PROBE_SIZES = (2, 3)
#: Largest maximum emit-c --max takes: the executable allocates this many
#: samples of every input and output.
MAX_BATCH_LIMIT = 1 << 20
#: Largest bucket (bucket_sizes): a product of 64 rows runs near the speed of
#: a larger one, and each bucket is one more program to compile and plan.
BUCKET_LIMIT = 64
#: Largest arena of a bucket: emit_c drops the buckets whose arena is larger
#: (the library keeps one arena of the largest bucket it has).
BUCKET_ARENA_LIMIT = 256 << 20
#: Operators that keep their input's elements in C order (a new shape, no
#: copy): the samples stay apart when as many elements come before the
#: batch axis in the output as in the input.
_RESHAPES = ('Reshape', 'Flatten', 'Squeeze', 'Unsqueeze')
#: Recurrences (ONNX layout 0): the batch axis of each run-time input (X,
#: sequence_lens, initial_h, initial_c) and output (Y, Y_h, Y_c); layout 1
#: has it first in all of them.
_RECURRENT_AXES = {'inputs': {0: 1, 4: 0, 5: 1, 6: 1}, 'outputs': {0: 2, 1: 1, 2: 1}}


class NotSeparableError(ValueError):
    """The model's samples are not independent (emit_c turns it into its
    NativeEmitError)."""


@dataclass(frozen=True)
class MaxBatch:
    """What ``emit-c --max`` asks of emit_c: the program of one sample is
    run on each of 1 to ``maximum`` samples of the symbol ``symbol``;
    ``probes`` are (size, Program) of the model compiled at PROBE_SIZES,
    which emit_c lowers for check_separable; ``buckets`` (size, Program) at
    bucket_sizes(maximum), the programs NAME_run_n runs chunks of samples on.  ``input_axes`` and
    ``output_axes``, the batch axis of each input and output, are what
    check_separable found (emit_c fills them in)."""
    symbol: str
    maximum: int
    probes: tuple = ()
    buckets: tuple = ()
    input_axes: tuple[int, ...] = ()
    output_axes: tuple[int, ...] = ()


def bucket_sizes(maximum: int) -> tuple[int, ...]:
    """The batch sizes besides 1 that ``emit-c --max`` emits the model for
    (buckets): the powers of two up to min(maximum, BUCKET_LIMIT) and
    ``maximum`` itself when within BUCKET_LIMIT; at most log2(BUCKET_LIMIT)
    = 6 of them (7 programs with the one-sample one).  NAME_run_n runs n
    samples as chunks of these sizes, the largest that fits first (n = 13
    by 1, 2, 4 and 8: 8, 4, 1)."""
    top = min(maximum, BUCKET_LIMIT)
    sizes = {1 << k for k in range(1, top.bit_length())}
    return tuple(sorted(sizes | ({maximum} if 1 < maximum <= BUCKET_LIMIT else set())))


def check_separable(probes, symbol: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Raise NotSeparableError unless running the model on each sample alone
    equals running it on the batch, else return the batch axis of each input
    and of each output.  ``probes`` are (size, Lowered) of the same model
    with the batch ``symbol`` set to each of PROBE_SIZES."""
    (a, low_a), (b, low_b) = probes
    p = low_a.program
    if [(i.op, i.inputs, i.outputs) for i in p.instructions] != \
            [(i.op, i.inputs, i.outputs) for i in low_b.program.instructions] or \
            [s is None for s in low_a.steps] != [s is None for s in low_b.steps]:
        raise NotSeparableError('the program compiled for %s=%d differs from the one for %s=%d'
                                % (symbol, a, symbol, b))
    if low_a.uniform_inputs:
        raise NotSeparableError('the model draws random numbers (training-mode Dropout)')
    sized = {r for r in low_a.consts if r in low_b.consts and not (
        low_a.consts[r].shape == low_b.consts[r].shape
        and numpy.array_equal(low_a.consts[r], low_b.consts[r]))}

    def batch_axis(r: int, what: str, exact: bool = True) -> tuple[int, int]:
        """(axis, rows per sample) of ``r``'s batch axis; an input or output
        (``exact``) has one row per sample."""
        found = _batch_axis(low_a.shapes[r], low_b.shapes[r], a, b)
        if found is None or exact and found[1] != 1:
            raise NotSeparableError('%s has shape %s at %s=%d and %s at %s=%d: every value '
                                    'computed at run time needs one axis of size %s%s' % (
                                        what, list(low_a.shapes[r]), symbol, a,
                                        list(low_b.shapes[r]), symbol, b, symbol,
                                        '' if exact else ' (or a multiple of it)'))
        return found

    input_axes = tuple(batch_axis(v.register, 'input %d (%r)' % (k, v.name))[0]
                       for k, v in enumerate(p.inputs))
    output_axes = tuple(batch_axis(v.register, 'output %d (%r)' % (k, v.name))[0]
                        for k, v in enumerate(p.outputs))

    for i, (inst, step) in enumerate(zip(p.instructions, low_a.steps)):
        if step is None:  # evaluated at emit time: its readers are checked
            continue
        where = p.describe_instruction(i)
        record = _record(inst)
        if written_inputs(inst):
            raise NotSeparableError('%s updates its inputs in place (a training step)' % where)
        runtime = {}
        for k, r in enumerate(inst.inputs):
            if r == NO_REGISTER:
                continue
            # A target shape is 1 for one sample where it is N for N.
            if r in sized and k != record.shape_input:
                raise NotSeparableError('%s reads input %d, which is computed from the batch '
                                        'size %s: one sample would see 1 there' % (where, k,
                                                                                   symbol))
            if r not in low_a.consts:
                runtime[k] = batch_axis(r, '%s: input %d' % (where, k), exact=False)
        outputs = {k: batch_axis(r, '%s: output %d' % (where, k), exact=False)
                   for k, r in enumerate(inst.outputs) if r != NO_REGISTER}
        reason = _mixing(inst, record, runtime, outputs, low_a)
        if reason:
            raise NotSeparableError('%s %s' % (where, reason))
    return input_axes, output_axes


def _batch_axis(shape_a, shape_b, a: int, b: int) -> tuple[int, int] | None:
    """(axis, c) when a value of ``shape_a`` at batch ``a`` and ``shape_b``
    at ``b`` differ in that axis alone, c * a and c * b; else None."""
    differ = [d for d, (x, y) in enumerate(zip(shape_a, shape_b)) if x != y]
    if len(shape_a) != len(shape_b) or len(differ) != 1:
        return None
    d = differ[0]
    c = shape_a[d] // a
    return (d, c) if c and shape_a[d] == c * a and shape_b[d] == c * b else None


def _record(inst: Instruction) -> OpRecord:
    """``inst``'s operator's record (an empty one, declaring nothing, for
    an operator no stage knows)."""
    return operator_record(inst.op, inst.domain) or OpRecord(inst.op, inst.domain)


def _mixing(inst: Instruction, record: OpRecord, runtime: dict, outputs: dict,
            low) -> str | None:
    """Why ``inst`` (of the operator of ``record``) may mix the samples of
    its batch, or None when it cannot.  ``runtime`` and ``outputs`` map its
    run-time inputs and its outputs by index to (batch axis, rows per
    sample).  Its attributes are filled with their defaults (emit_c lowers
    the probes after with_defaults)."""
    op, attrs, samples = inst.op, inst.attrs, record.samples
    first = min(runtime)  # a run-time input (a step has one)
    d = runtime[first][0]
    rank = len(low.shapes[inst.inputs[first]])

    def axis(name: str, default: int) -> int:
        value = attrs.get(name, default)
        return value + rank if value < 0 else value

    def const(k: int):
        """Input ``k`` (axes, pads...) as a list, None when absent."""
        if k < len(inst.inputs) and inst.inputs[k] != NO_REGISTER:
            return low.consts[inst.inputs[k]].reshape(-1).tolist()
        return None

    # Broadcasting, products and permutations leave the batch axis where
    # the shapes found it in the output: summing over it would leave an
    # output without one, refused by its shape.
    if samples == 'elementwise' or op in ('MatMul', 'Gemm', 'FusedGemm', 'Transpose',
                                          'Expand'):
        return None
    if op == 'BatchNormalization':
        return None if len([r for r in inst.outputs if r != NO_REGISTER]) == 1 and \
            not attrs.get('training_mode', 0) else 'computes batch statistics (training mode)'
    if (samples == 'reduction' or op in ('Slice', 'Pad')) and any(k > 0 for k in runtime):
        return 'takes its axes, starts or pads at run time'
    if op == 'LayerNormalization':  # over the axes from `axis` on
        return None if axis('axis', -1) > d else 'normalizes over the batch axis'
    if samples == 'along_axis':
        return None if axis('axis', 0) != d else 'works along the batch axis'
    if op in _RESHAPES:
        # Sample k's elements are one block after each of the elements
        # before the batch axis: as many before it in the output as in the
        # input keeps the blocks (a (T, N, D) to (T * N, D) interleaves them).
        return None if math.prod(low.shapes[inst.inputs[0]][:d]) == \
            math.prod(low.shapes[inst.outputs[0]][:outputs[0][0]]) \
            else 'folds the batch axis into the axes before it'
    if op == 'Tile':
        return None if outputs[0][1] == runtime[0][1] else 'repeats the batch axis'
    if samples == 'per_sample':
        return _off_axis(inst, runtime, outputs)
    if op == 'Gather':
        if 0 in runtime and (axis('axis', 0) == d or 1 in runtime):
            return 'gathers along the batch axis or by run-time indices'
        return None
    if samples == 'reduction':
        axes = node_axes(op, inst.version, attrs, lambda: const(1))
        if axes is None or not axes:
            return None if attrs.get('noop_with_empty_axes', 0) and axes is not None \
                else 'reduces every axis, the batch included'
        return 'reduces the batch axis' if d in [x + rank if x < 0 else x for x in axes] \
            else None
    if op == 'Slice':
        axes = const(3)
        axes = list(range(len(const(1) or ()))) if axes is None else axes
        return 'slices the batch axis' if d in [x + rank if x < 0 else x for x in axes] \
            else None
    if op == 'Pad':
        pads = const(1)
        if const(3) is not None or not pads or pads[d] or pads[d + rank]:
            return 'pads the batch axis'
        return None
    return 'is not known to keep the samples of a batch apart (%s)' % op


def _off_axis(inst: Instruction, runtime: dict, outputs: dict) -> str | None:
    """Why ``inst``, of a 'per_sample' operator (it keeps the rows of one
    axis apart), may mix samples: a run-time input or an output has the
    batch on another axis than that one, the first, or where the
    recurrences' layout puts it."""
    recurrent = inst.op in ('LSTM', 'GRU', 'RNN') and not inst.attrs.get('layout', 0)
    for kind, found in (('inputs', runtime), ('outputs', outputs)):
        for k, (d, _) in sorted(found.items()):
            if d != (_RECURRENT_AXES[kind].get(k) if recurrent else 0):
                return 'has the batch on axis %d of %s %d, where it works across samples' % (
                    d, kind[:-1], k)
    return None
