"""Emit-time evaluation: an instruction whose result the emitter can know
becomes a constant instead of C code.

Shapes are static in the C backend, so ``Shape`` and ``Size`` are known
from their input's shape alone, and whatever computes on them (the shape
arithmetic of a Reshape or Expand target, ConstantOfShape, Range) has only
constant inputs.  Such an instruction runs once here, through the NumPy VM's
own kernel, and its outputs join the Program's constants; the lowerings
downstream then see constant targets, axes and indices.

Operators whose record says they draw random numbers are never evaluated
(a mask frozen into the C would be the same on every run).  Otherwise only
the operators of shape arithmetic are evaluated, and only when their
results, sized here from the inputs before anything runs, pass the size
rule the compiler's constant folding applies too (runtime/limits.py).
"""
import math
from typing import Any

import numpy

from .. import ops
from ..limits import may_fold
from ..ops.registry import draws_random
from ..program import NO_REGISTER, Instruction, Program

#: Ops whose result depends only on their input's shape and dtype.
SHAPE_ONLY = frozenset({'Shape', 'Size'})
#: Constant inputs larger than this are left to the C code: folding is for
#: shape arithmetic, not for computing on weights.
MAX_ELEMENTS = 1 << 16
#: Ops none of whose results is larger than their first input.
_NO_LARGER = frozenset({
    'Identity', 'Cast', 'CastLike', 'Neg', 'Abs', 'Not', 'Sign', 'Ceil', 'Floor', 'Round',
    'Reciprocal', 'Sqrt', 'Reshape', 'Flatten', 'Squeeze', 'Unsqueeze', 'Transpose', 'Slice',
    'ReduceSum', 'ReduceProd', 'ReduceMax', 'ReduceMin', 'ReduceMean', 'ArgMax', 'ArgMin'})
#: Ops whose result has the broadcast shape of their inputs.
_BROADCAST = frozenset({
    'Add', 'Sub', 'Mul', 'Div', 'Mod', 'Pow', 'Max', 'Min', 'Sum', 'Mean', 'Equal', 'Less',
    'LessOrEqual', 'Greater', 'GreaterOrEqual', 'And', 'Or', 'Xor', 'Where'})


def fold(inst: Instruction, consts: dict, shapes: dict, dtypes: dict) -> list | None:
    """The outputs of ``inst`` as arrays when they can be known at emit
    time, else None."""
    if inst.domain not in ('', 'ai.onnx') or draws_random(inst.op, inst.domain) or \
            any(isinstance(v, Program) for v in inst.attrs.values()):
        return None
    args: list[numpy.ndarray | None] = []
    for r in inst.inputs:
        if r == NO_REGISTER:
            args.append(None)
        elif inst.op in SHAPE_ONLY and r in shapes:
            # The kernel reads only the shape: a broadcast scalar has it,
            # however large, without memory.
            args.append(numpy.broadcast_to(numpy.empty((), dtype=dtypes[r]), shapes[r]))
        elif r in consts and consts[r].size <= MAX_ELEMENTS:
            args.append(consts[r])
        else:
            return None
    if not ops.has_kernel(inst.op, inst.domain, inst.version) or \
            not may_fold(_result_bounds(inst.op, args, inst.attrs)):
        return None
    # A failure is not folded: the instruction is lowered (or refused) as usual.
    return ops.lookup(inst.op, inst.domain, inst.version, inst.name).evaluate(
        args, inst.attrs, len(inst.outputs))


def _result_bounds(op: str, args: list, attrs: dict) -> list:
    """For each result of ``op`` on ``args``, worked out without running
    it, a shape with at least as many elements; [None] (not foldable) for
    the ops this module does not size and for inputs their kernel refuses."""
    shapes: list[Any] = [None if a is None else tuple(a.shape) for a in args]
    try:
        if op == 'Shape':
            return [(len(shapes[0]),)]
        if op == 'Size':
            return [()]
        if op in _NO_LARGER:
            return [shapes[0]]
        if op in _BROADCAST:
            return [numpy.broadcast_shapes(*(s for s in shapes if s is not None))]
        if op == 'Concat':
            return [(sum(math.prod(s) for s in shapes),)]
        if op == 'Gather':
            axis = attrs.get('axis', 0) % len(shapes[0])
            return [shapes[0][:axis] + shapes[1] + shapes[0][axis + 1:]]
        if op == 'ConstantOfShape':
            return [tuple(int(d) for d in args[0].reshape(-1))]
        if op == 'Expand':
            return [numpy.broadcast_shapes(shapes[0], tuple(int(d) for d in args[1].reshape(-1)))]
        if op == 'Range':
            start, limit, delta = (a.item() for a in args)
            return [(max(math.ceil((limit - start) / delta), 0),)]
    except (ValueError, TypeError, OverflowError, ZeroDivisionError, IndexError, AttributeError):
        pass  # inputs that do not bound the result: its size is unknown, so it is not folded
    return [None]
