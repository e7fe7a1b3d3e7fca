"""Emit-time evaluation: an instruction whose result the emitter can know
becomes a constant instead of C code.

Shapes are static in the C backend, so ``Shape`` and ``Size`` are known
from their input's shape alone, and whatever computes on them (the shape
arithmetic of a Reshape or Expand target, ConstantOfShape, Range) has only
constant inputs.  Such an instruction runs once here, through the NumPy VM's
own kernel, and its outputs join the Program's constants; the lowerings
downstream then see constant targets, axes and indices.
"""
import math

import numpy

from .. import ops
from ..program import NO_REGISTER, Instruction, Program

#: Ops whose result depends only on their input's shape and dtype.
SHAPE_ONLY = frozenset({'Shape', 'Size'})
#: Constant inputs and results larger than this are left to the C code:
#: folding is for shape arithmetic, not for computing on weights.
MAX_ELEMENTS = 1 << 16


def fold(inst: Instruction, consts: dict, shapes: dict, dtypes: dict) -> list | None:
    """The outputs of ``inst`` as arrays when they can be known at emit
    time, else None."""
    if inst.domain not in ('', 'ai.onnx') or _random(inst.op) or \
            any(isinstance(v, Program) for v in inst.attrs.values()):
        return None
    args: list[numpy.ndarray | None] = []
    for r in inst.inputs:
        if r == NO_REGISTER:
            args.append(None)
        elif inst.op in SHAPE_ONLY and r in shapes:
            # The kernel reads only the shape: an unwritten array has it.
            args.append(numpy.empty(shapes[r], dtype=dtypes[r]))
        elif r in consts and consts[r].size <= MAX_ELEMENTS:
            args.append(consts[r])
        else:
            return None
    if not ops.has_kernel(inst.op, inst.domain, inst.version):
        return None
    spec = ops.lookup(inst.op, inst.domain, inst.version, inst.name)
    static = dict(inst.attrs)
    if spec.accepts_n_outputs:
        static['n_outputs'] = len(inst.outputs)
    try:
        results = spec.fn(numpy, *args, **static)
    except Exception:  # the instruction is lowered (or refused) as usual
        return None
    results = list(results) if isinstance(results, (tuple, list)) else [results]
    arrays = [None if r is None else numpy.asarray(r) for r in results]
    if len(arrays) != len(inst.outputs) or any(
            a is not None and math.prod(a.shape) > MAX_ELEMENTS for a in arrays):
        return None
    return arrays


def _random(op: str) -> bool:
    """Ops whose every run differs: never folded."""
    return op.startswith('Random') or op in ('Bernoulli', 'Multinomial')
