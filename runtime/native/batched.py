"""``emit-c --max NAME=VALUE``: C that takes any batch of 1 to VALUE samples.

The C is planned for static shapes, so a model whose first axis is the
symbolic batch is emitted for one sample, and NAME_run_n(n, ...) runs that
program on each of the n samples in turn (the inputs' and outputs' rows are
contiguous in C order).  That is the batched program only when every
sample's results depend on that sample alone: check_separable proves it
from the model lowered at two batch sizes (PROBE_SIZES), before anything is
written.  Every value computed at run time must have the batch as its first
axis at both sizes, or c rows per sample inside the model (so no
instruction sums, concatenates or transposes across samples), a value
computed from the batch size may only size a reshape, an expansion or a
tiling (the input its operator's record names ``shape_input``), and every
instruction must be one that keeps the rows of its first axis apart: its
record's ``samples`` (runtime/ops/registry.py) says how its operator
treats them, and _mixing checks the axes it works along and the operators
whose attributes decide.  Anything else is refused with one error naming
the instruction; training steps and random draws are refused whole.
"""
from dataclasses import dataclass

import numpy

from ..ops.registry import OpRecord, operator_record
from ..program import NO_REGISTER, Instruction
from .fusion import written_inputs

#: The two batch sizes the model is lowered at to check it: two sizes tell a
#: batch axis from a fixed one, and neither is 1 (which broadcasts).
PROBE_SIZES = (2, 3)
#: Largest maximum emit-c --max takes: the executable allocates this many
#: samples of every input and output.
MAX_BATCH_LIMIT = 1 << 20



class NotSeparableError(ValueError):
    """The model's samples are not independent (emit_c turns it into its
    NativeEmitError)."""


@dataclass(frozen=True)
class MaxBatch:
    """What ``emit-c --max`` asks of emit_c: the program of one sample is
    run on each of 1 to ``maximum`` samples of the symbol ``symbol``;
    ``probes`` are (size, Program) of the model compiled at PROBE_SIZES,
    which emit_c lowers for check_separable."""
    symbol: str
    maximum: int
    probes: tuple = ()


def check_separable(probes, symbol: str) -> None:
    """Raise NotSeparableError unless running the model on each sample alone
    equals running it on the batch.  ``probes`` are (size, Lowered) of the
    same model with the batch ``symbol`` set to each of PROBE_SIZES."""
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

    def rows_per_sample(r: int) -> int:
        """c when ``r``'s first axis is c rows per sample (c * the batch at
        both sizes, the other axes fixed), else 0."""
        sa, sb = low_a.shapes[r], low_b.shapes[r]
        if len(sa) != len(sb) or not sa or sa[1:] != sb[1:] or sa[0] % a or sb[0] % b:
            return 0
        return sa[0] // a if sa[0] // a == sb[0] // b else 0

    def check(r: int, what: str, exact: bool = True) -> None:
        # An intermediate value may hold c rows per sample (a Reshape of
        # (N, T, D) to (N * T, D)): each sample's rows stay one block.
        rows = rows_per_sample(r)
        if not rows or exact and rows != 1:
            raise NotSeparableError('%s has shape %s at %s=%d and %s at %s=%d: every value '
                                    'computed at run time needs %s as its first axis%s' % (
                                        what, list(low_a.shapes[r]), symbol, a,
                                        list(low_b.shapes[r]), symbol, b, symbol,
                                        '' if exact else ' (or a multiple of it)'))

    for k, v in enumerate(p.inputs):
        check(v.register, 'input %d (%r)' % (k, v.name))
    for k, v in enumerate(p.outputs):
        check(v.register, 'output %d (%r)' % (k, v.name))

    for i, (inst, step) in enumerate(zip(p.instructions, low_a.steps)):
        if step is None:  # evaluated at emit time: its readers are checked
            continue
        where = 'instruction %s' % p.describe_instruction(i)
        record = _record(inst)
        if written_inputs(inst):
            raise NotSeparableError('%s updates its inputs in place (a training step)' % where)
        runtime = []
        for k, r in enumerate(inst.inputs):
            if r == NO_REGISTER:
                continue
            # A target shape is 1 for one sample where it is N for N.
            if r in sized and k != record.shape_input:
                raise NotSeparableError('%s reads input %d, which is computed from the batch '
                                        'size %s: one sample would see 1 there' % (where, k,
                                                                                   symbol))
            if r not in low_a.consts:
                check(r, '%s: input %d' % (where, k), exact=False)
                runtime.append(k)
        for k, r in enumerate(inst.outputs):
            if r != NO_REGISTER:
                check(r, '%s: output %d' % (where, k), exact=False)
        reason = _mixing(inst, record, runtime, low_a)
        if reason:
            raise NotSeparableError('%s %s' % (where, reason))


def _record(inst: Instruction) -> OpRecord:
    """``inst``'s operator's record (an empty one, declaring nothing, for
    an operator no stage knows)."""
    return operator_record(inst.op, inst.domain) or OpRecord(inst.op, inst.domain)


def _mixing(inst: Instruction, record: OpRecord, runtime: list[int], low) -> str | None:
    """Why ``inst`` (of the operator of ``record``) may mix the samples of
    its batch (the rows of the first axis of its run-time inputs
    ``runtime``), or None when it cannot.  Its attributes are filled with
    their defaults (emit_c lowers the probes after with_defaults)."""
    op, attrs, samples = inst.op, inst.attrs, record.samples
    rank = len(low.shapes[inst.inputs[0]])

    def axis(name: str, default: int) -> int:
        value = attrs.get(name, default)
        return value + rank if value < 0 else value

    def const(k: int):
        """Input ``k`` (axes, pads...) as a list, None when absent."""
        if k < len(inst.inputs) and inst.inputs[k] != NO_REGISTER:
            return low.consts[inst.inputs[k]].reshape(-1).tolist()
        return None

    if samples in ('elementwise', 'per_sample'):
        return None
    if op == 'BatchNormalization':
        return None if len([r for r in inst.outputs if r != NO_REGISTER]) == 1 and \
            not attrs.get('training_mode', 0) else 'computes batch statistics (training mode)'
    if (samples == 'reduction' or op in ('Slice', 'Pad')) and any(k > 0 for k in runtime):
        return 'takes its axes, starts or pads at run time'
    if op in ('Gemm', 'FusedGemm'):
        return 'multiplies by a run-time B or transposes A' if 1 in runtime or \
            attrs.get('transA', 0) else None
    if op == 'MatMul':
        ranks = [len(low.shapes[r]) for r in inst.inputs[:2]]
        return None if all(ranks[k] >= 3 or (k == 0 and ranks[0] == 2) for k in runtime) \
            else 'contracts over the batch axis'
    if op == 'Transpose':
        return None if list(attrs.get('perm', ()))[:1] == [0] else 'moves the batch axis'
    if samples == 'along_axis':
        return None if axis('axis', 0) != 0 else 'works along the batch axis'
    if op == 'Gather':
        if 0 in runtime and (axis('axis', 0) == 0 or 1 in runtime):
            return 'gathers along the batch axis or by run-time indices'
        return None
    if samples == 'reduction':
        axes = attrs.get('axes', const(1))
        if axes is None or not axes:
            return None if attrs.get('noop_with_empty_axes', 0) and axes is not None \
                else 'reduces every axis, the batch included'
        return 'reduces the batch axis' if 0 in [x + rank if x < 0 else x for x in axes] \
            else None
    if op == 'Slice':
        axes = const(3)
        axes = list(range(len(const(1) or ()))) if axes is None else axes
        return 'slices the batch axis' if 0 in [x + rank if x < 0 else x for x in axes] \
            else None
    if op == 'Pad':
        pads = const(1)
        if const(3) is not None or not pads or pads[0] or pads[rank]:
            return 'pads the batch axis'
        return None
    return 'is not known to keep the samples of a batch apart (%s)' % op
