"""Reshape, Flatten, Identity and Dropout: views of their input's memory,
or a copy (ccn_array.c) when the result is a program output."""
import math

from ...program import NO_REGISTER
from ..lowering import ANY_DTYPE, Refuse, Step, lowers


@lowers('Reshape', 'Flatten', 'Identity', 'Dropout')
def reshape_like(em, inst) -> Step:
    sx = em.shape(inst, 0, ANY_DTYPE)
    a = inst.attrs
    if inst.op == 'Reshape':
        out = _reshape_target(em, inst, sx)
    elif inst.op == 'Flatten':
        axis = int(a.get('axis', 1))
        if not -len(sx) <= axis <= len(sx):
            raise Refuse('axis %d is out of range for rank %d' % (axis, len(sx)))
        axis = axis + len(sx) if axis < 0 else axis
        out = (math.prod(sx[:axis]), math.prod(sx[axis:]))
    else:
        out = sx
        if inst.op == 'Dropout':
            _check_dropout(em, inst)
    return view(em, inst, out)


def view(em, inst, out) -> Step:
    """Output 0 is input 0's data under the shape ``out``: it shares the
    input's memory unless it is a program output, which must land in the
    caller's buffer."""
    alias = not em.is_output(inst.outputs[0])
    nbytes = em.nbytes(inst.inputs[0])

    def render(ref, scratch):
        if alias:
            return ['/* no copy: %%%d shares the memory of %%%d */'
                    % (inst.outputs[0], inst.inputs[0])]
        return ['ccn_copy(%d, %s, %s);' % (nbytes, ref(inst.inputs[0]), ref(inst.outputs[0]))]
    return Step('array', [out] + [None] * (len(inst.outputs) - 1), render, alias=alias)


def _reshape_target(em, inst, sx):
    if inst.version < 5:
        target = [int(d) for d in inst.attrs.get('shape', ())]
    else:
        r = inst.inputs[1] if len(inst.inputs) > 1 else NO_REGISTER
        if em.const(r) is None:
            raise Refuse('the target shape must be a constant')
        target = [int(d) for d in em.const(r).reshape(-1)]
    allowzero = int(inst.attrs.get('allowzero', 0))
    dims = [sx[i] if d == 0 and not allowzero and i < len(sx) else d
            for i, d in enumerate(target)]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise Refuse('bad target shape %s' % target)
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or math.prod(sx) % known:
            raise Refuse('cannot reshape %s to %s' % (list(sx), target))
        dims[dims.index(-1)] = math.prod(sx) // known
    if math.prod(dims) != math.prod(sx):
        raise Refuse('cannot reshape %s to %s' % (list(sx), target))
    return tuple(dims)


def _check_dropout(em, inst):
    em.only_first_output(inst, 'mask')
    a = inst.attrs
    if inst.version < 7 and not a.get('is_test', 0):
        raise Refuse('training-mode Dropout (is_test=0) is not supported')
    if inst.version >= 12 and em.has(inst, 2):
        mode = em.const(inst.inputs[2])
        if mode is None or bool(mode):
            raise Refuse('Dropout with training_mode other than a constant false')
