"""SliceGrad and GatherGrad (custom domain, chainer_compiler/autodiff/array.py)
as calls into ccn_array_grad.c: the adjoints of Slice and Gather, zeros of
the ``shape`` attribute with the gradient put back where the selection
read.  They reuse the array family's reading of Slice's ranges, so the two
directions agree on every clamp and step."""
import math

from ...ops.registry import CUSTOM_DOMAIN
from ..cformat import clist
from ..lowering import ANY_DTYPE, Refuse, Step, lowers
from .array import (
    INDEX_DTYPES,
    c_strides,
    checked_axis,
    coalesce,
    const_ints,
    dtype_itemsize,
    slice_ranges,
)


@lowers(CUSTOM_DOMAIN + '::SliceGrad')
def slice_grad(em, inst) -> Step:
    shape = tuple(int(d) for d in inst.attrs['shape'])
    sg = em.shape(inst, 0, ANY_DTYPE)
    ranges = slice_ranges(shape, const_ints(em, inst, 1, 'starts') or [],
                           const_ints(em, inst, 2, 'ends') or [],
                           const_ints(em, inst, 3, 'axes'), const_ints(em, inst, 4, 'steps'))
    if tuple(len(r) for r in ranges) != sg:
        raise Refuse('a gradient of shape %s for a slice of shape %s'
                     % (list(sg), [len(r) for r in ranges]))
    ys = c_strides(shape)
    offset = sum(r.start * s for r, s in zip(ranges, ys)) if math.prod(sg) else 0
    dims, (gs, steps) = coalesce(sg, [c_strides(sg), [r.step * s for r, s in zip(ranges, ys)]])
    elem = dtype_itemsize(em.dtype(inst, 0))

    def render(ref, scratch):
        return ['{', '    static const long shape[] = %s, gs[] = %s, ys[] = %s;'
                % (clist(dims), clist(gs), clist(steps)),
                '    ccn_slice_grad(%d, %d, %d, shape, %s, gs, %d, ys, %s);'
                % (elem, math.prod(shape), len(dims), ref(inst.inputs[0]), offset,
                   ref(inst.outputs[0])), '}']
    return Step('array_grad', [shape], render, also=('array',))


@lowers(CUSTOM_DOMAIN + '::GatherGrad')
def gather_grad(em, inst) -> Step:
    shape = tuple(int(d) for d in inst.attrs['shape'])
    axis = checked_axis(int(inst.attrs['axis']), len(shape))
    si = em.shape(inst, 1, INDEX_DTYPES)
    expected = shape[:axis] + tuple(si) + shape[axis + 1:]
    if em.shape(inst, 0) != expected:
        raise Refuse('a gradient of shape %s, expected %s'
                     % (list(em.shape(inst, 0)), list(expected)))

    def render(ref, scratch):
        return ['ccn_gather_grad(%d, %d, %d, %d, %s, %s, %d, %s);'
                % (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]),
                   math.prod(si), ref(inst.inputs[0]), ref(inst.inputs[1]),
                   dtype_itemsize(em.dtype(inst, 1)), ref(inst.outputs[0]))]
    # ccn_array_grad.c calls ccn_array.c's ccn_strided_copy.
    return Step('array_grad', [shape], render, also=('array',))
