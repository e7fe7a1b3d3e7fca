"""Reduce* over any set of axes, ArgMax and ArgMin as calls into
ccn_reduction.c."""
import math

from ..cformat import clist
from ..lowering import Refuse, Step, lowers
from .array import given_axes

FLOATS = ('float32', 'float64')

#: Reduce* op -> C enum.
_REDUCTIONS = {
    'ReduceSum': 'CCN_REDUCE_SUM', 'ReduceMean': 'CCN_REDUCE_MEAN',
    'ReduceMax': 'CCN_REDUCE_MAX', 'ReduceMin': 'CCN_REDUCE_MIN',
    'ReduceProd': 'CCN_REDUCE_PROD', 'ReduceL1': 'CCN_REDUCE_L1', 'ReduceL2': 'CCN_REDUCE_L2',
    'ReduceLogSum': 'CCN_REDUCE_LOG_SUM', 'ReduceLogSumExp': 'CCN_REDUCE_LOG_SUM_EXP',
    'ReduceSumSquare': 'CCN_REDUCE_SUM_SQUARE',
}

#: The most values a float32 ReduceMean over trailing axes sums in
#: ccn_global_avgpool's 16 float lanes (4096 each: rounding within 2.5e-4
#: of the sum of magnitudes); longer ones keep ccn_reduce's double sum.
_LANE_MEAN_MAX = 1 << 16


def _reduced_axes(em, inst, rank: int) -> list[int]:
    """The sorted axes a Reduce* instruction reduces (array.given_axes):
    none given means all, unless ``noop_with_empty_axes`` (an attribute
    of the versions that take the axes as an input)."""
    axes = given_axes(em, inst)
    if not axes:
        return [] if inst.attrs.get('noop_with_empty_axes', 0) else list(range(rank))
    for a in axes:
        if not -max(rank, 1) <= a < max(rank, 1):
            raise Refuse('axis %d is out of range for rank %d' % (a, rank))
    return sorted({a % rank for a in axes}) if rank else []


@lowers(*_REDUCTIONS)
def reduce(em, inst) -> Step:
    sx = em.shape(inst, 0, dtypes=FLOATS)
    dtype = em.dtype(inst, 0)
    axes = _reduced_axes(em, inst, len(sx))
    if inst.attrs['keepdims']:
        out = tuple(1 if k in axes else d for k, d in enumerate(sx))
    else:
        out = tuple(d for k, d in enumerate(sx) if k not in axes)

    k = len(sx) - len(axes)
    if inst.op == 'ReduceMean' and dtype == 'float32' and axes == list(range(k, len(sx))) \
            and math.prod(sx[k:]) <= _LANE_MEAN_MAX:
        # The trailing axes (MixNet's squeeze-and-excitation mean over H, W):
        # GlobalAveragePool's vector lanes, not one double sum at a time.
        def render_planes(ref, scratch):
            return ['ccn_global_avgpool(%d, %d, %s, %s);' % (
                math.prod(sx[:k]), math.prod(sx[k:]), ref(inst.inputs[0]),
                ref(inst.outputs[0]))]
        return Step('reduction', [out], render_planes, also=('pooling',))

    def render(ref, scratch):
        return reduce_lines(_REDUCTIONS[inst.op], dtype, sx, axes, ref(inst.inputs[0]),
                             ref(inst.outputs[0]))
    return Step('reduction', [out], render)


def reduce_lines(op: str, dtype: str, sx, axes, x: str, y: str) -> list[str]:
    """The C that reduces the C-order array ``x`` of shape ``sx`` over
    ``axes`` (sorted) with ``op`` (a CCN_REDUCE_* name) into ``y`` (from a
    lowering of another family too, whose Step then names 'reduction' in
    ``also``)."""
    strides = [math.prod(sx[k + 1:]) for k in range(len(sx))]
    kept = [k for k in range(len(sx)) if k not in axes]
    return ['{',
            '    static const long kept_shape[] = %s, kept_strides[] = %s;'
            % (clist(sx[k] for k in kept), clist(strides[k] for k in kept)),
            '    static const long shape[] = %s, strides[] = %s;'
            % (clist(sx[k] for k in axes), clist(strides[k] for k in axes)),
            '    ccn_reduce_%s(%s, %d, kept_shape, kept_strides, %d, shape, strides, %s, %s);'
            % (dtype, op, len(kept), len(axes), x, y),
            '}']


@lowers('ArgMax', 'ArgMin')
def arg_extreme(em, inst) -> Step:
    sx = em.shape(inst, 0, dtypes=FLOATS + ('int64', 'int32'))
    dtype = em.dtype(inst, 0)
    if not sx:
        raise Refuse('%s of a 0-d input is not supported' % inst.op)
    axis = inst.attrs['axis']
    if not -len(sx) <= axis < len(sx):
        raise Refuse('axis %d is out of range for rank %d' % (axis, len(sx)))
    axis %= len(sx)
    if sx[axis] == 0:
        raise Refuse('%s along an empty axis has no result' % inst.op)
    outer, length, inner = math.prod(sx[:axis]), sx[axis], math.prod(sx[axis + 1:])
    if inst.attrs['keepdims']:
        out = sx[:axis] + (1,) + sx[axis + 1:]
    else:
        out = sx[:axis] + sx[axis + 1:]
    largest, last = int(inst.op == 'ArgMax'), int(inst.attrs['select_last_index'])

    def render(ref, scratch):
        return ['ccn_arg_extreme_%s(%d, %d, %d, %d, %d, %s, %s);' % (
            dtype, largest, last, outer, length, inner, ref(inst.inputs[0]),
            ref(inst.outputs[0]))]
    return Step('reduction', [out], render, dtypes=['int64'])
