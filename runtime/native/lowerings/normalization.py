"""BatchNormalization (inference, training, and its gradient, this
project's BatchNormalizationGrad), LayerNormalization (and this project's
LayerNormalizationGrad), InstanceNormalization and LRN as calls into
ccn_normalization.c."""
import math

import numpy

from ...ops.opset_rules import batch_norm_trains
from ...ops.registry import CUSTOM_DOMAIN
from ...program import NO_REGISTER
from ..cformat import cfloat, clist
from ..fusion import NORM_EPILOGUES
from ..lowering import Refuse, Step, lowers
from .connection import activation
from .math import broadcast_strides
from .reduction import reduce_lines


@lowers('BatchNormalization')
def batch_norm(em, inst) -> Step:
    a = inst.attrs
    if not a.get('spatial', 1):
        raise Refuse('BatchNormalization with spatial=0 is not supported')
    if batch_norm_trains(inst.version, len(inst.outputs), a.get('training_mode', 0),
                         a.get('is_test', 0)):
        return _batch_norm_training(em, inst)
    em.only_first_output(inst, 'statistics')
    sx = _channels_first(em, inst)
    for k in range(1, 5):
        _per_channel(em, inst, k, sx[1])
    eps = float(a['epsilon'])
    # An activation fused after it (fusion.py): one the kernel applies.
    if a.get('activation', NORM_EPILOGUES[0]) not in NORM_EPILOGUES:
        raise Refuse('activation %r is not one of %s' % (a['activation'],
                                                         ', '.join(NORM_EPILOGUES)))
    act, act_alpha = activation(inst)

    def render(ref, scratch):
        return ['ccn_batchnorm(%d, %d, %d, %s, %s, %s, %s, %s, %s, %s, %s, %s);' % (
            sx[0], sx[1], math.prod(sx[2:]), cfloat(eps),
            *(ref(r) for r in inst.inputs[:5]), act, cfloat(act_alpha), ref(inst.outputs[0]))]
    return Step('normalization', [sx] + [None] * (len(inst.outputs) - 1), render,
                in_place=(0,))


def _batch_norm_training(em, inst) -> Step:
    """BatchNormalization with the batch's statistics: Y, then (each
    optional) the running mean and variance and, before opset 14, the
    batch's mean and variance."""
    sx = _channels_first(em, inst)
    for k in range(1, 5):
        _per_channel(em, inst, k, sx[1])
    eps = float(inst.attrs['epsilon'])
    momentum = float(inst.attrs['momentum'])
    outputs = list(inst.outputs) + [NO_REGISTER] * (5 - len(inst.outputs))

    def render(ref, scratch):
        stats = ', '.join('NULL' if r == NO_REGISTER else ref(r) for r in outputs[1:])
        return ['ccn_batchnorm_training(%d, %d, %d, %s, %s, %s, %s, %s, %s, %s, %s, %s);' % (
            sx[0], sx[1], math.prod(sx[2:]), cfloat(eps), cfloat(momentum),
            *(ref(r) for r in inst.inputs[:5]), ref(outputs[0]), stats)]
    shapes = [sx] + [None if r == NO_REGISTER else (sx[1],) for r in inst.outputs[1:]]
    return Step('normalization', shapes, render)


@lowers(CUSTOM_DOMAIN + '::BatchNormalizationGrad')
def batch_norm_grad(em, inst) -> Step:
    a = inst.attrs
    if not a['spatial']:
        raise Refuse('BatchNormalizationGrad with spatial=0 is not supported')
    sx = _channels_first(em, inst)
    if em.shape(inst, 2) != sx:
        raise Refuse('gradient of shape %s, not %s' % (list(em.shape(inst, 2)), list(sx)))
    _per_channel(em, inst, 1, sx[1])
    given = em.has(inst, 3)
    if given != em.has(inst, 4):
        raise Refuse('mean and var must be given together')
    for k in (3, 4) if given else ():
        _per_channel(em, inst, k, sx[1])
    eps = float(a['epsilon'])
    training = int(a['training'])
    outputs = list(inst.outputs) + [NO_REGISTER] * (5 - len(inst.outputs))

    def render(ref, scratch):
        args = [ref(r) for r in inst.inputs[:3]] + [
            ref(inst.inputs[k]) if given else 'NULL' for k in (3, 4)]
        # The kernel always writes gscale and gbias: scratch takes them when unread.
        unread = ['NULL', 'NULL', scratch, '%s + %d' % (scratch, sx[1]), 'NULL']
        outs = [ref(r) if r != NO_REGISTER else unread[k] for k, r in enumerate(outputs)]
        return ['ccn_batchnorm_grad(%d, %d, %d, %s, %d, %s, %s);' % (
            sx[0], sx[1], math.prod(sx[2:]), cfloat(eps), training, ', '.join(args),
            ', '.join(outs))]
    shapes = [sx] + [None if r == NO_REGISTER else (sx[1],) for r in inst.outputs[1:]]
    return Step('normalization', shapes, render, scratch=2 * sx[1])


@lowers('InstanceNormalization')
def instance_norm(em, inst) -> Step:
    sx = _channels_first(em, inst, 3)
    for k in (1, 2):
        _per_channel(em, inst, k, sx[1])
    eps = float(inst.attrs['epsilon'])

    def render(ref, scratch):
        # Row r = (n, c) takes scale[c] for all its elements: period C, inner stride 0.
        return ['ccn_standardize(%d, %d, %s, %s, %s, %s, (ccn_param_layout){%d, 1, 0}, %s, '
                'NULL, NULL);' % (sx[0] * sx[1], math.prod(sx[2:]), cfloat(eps),
                                  *(ref(r) for r in inst.inputs[:3]), sx[1],
                                  ref(inst.outputs[0]))]
    return Step('normalization', [sx], render)


@lowers('LayerNormalization')
def layer_norm(em, inst) -> Step:
    a = inst.attrs
    if int(a['stash_type']) != 1:
        raise Refuse('stash_type %s is not supported (only 1, float32)' % a['stash_type'])
    params = [1] + ([2] if em.has(inst, 2) else [])  # Scale is required, B optional
    sx, axis, full, target, layouts = _layer_norm_geometry(em, inst, params)
    rows, size = math.prod(sx[:axis]), math.prod(sx[axis:])
    stats = [r != NO_REGISTER for r in inst.outputs[1:3]]
    stat_shape = sx[:axis] + (1,) * (len(sx) - axis)

    def render(ref, scratch_name):
        lines, names = _expand_params(inst, layouts, target, ref, scratch_name)
        outs = [ref(r) if present else 'NULL'
                for r, present in zip(inst.outputs[1:3], stats)] + ['NULL'] * (2 - len(stats))
        lines.append('ccn_standardize(%d, %d, %s, %s, %s, %s, (ccn_param_layout){%d, %d, 1}, '
                     '%s, %s, %s);' % (rows, size, cfloat(float(a['epsilon'])),
                                       ref(inst.inputs[0]), names[1], names.get(2, 'NULL'),
                                       rows if full else 1, size, ref(inst.outputs[0]), *outs))
        return lines
    shapes = [sx] + [stat_shape if present else None for present in stats]
    return Step('normalization', shapes, render, scratch=_expanded_size(layouts, target),
                dtypes=['float32'] * len(shapes))


@lowers(CUSTOM_DOMAIN + '::ChannelsFirstScaleAdd')
def channels_first_scale_add(em, inst) -> Step:
    """channels_last.py's (N, H, W, C) X back to (N, C, H, W), times a
    scale of C values per channel, plus a residual of that shape."""
    if len(inst.inputs) != 3 or len(em.shape(inst, 0)) != 4:
        raise Refuse('ChannelsFirstScaleAdd takes an (N, H, W, C) X, scale and residual')
    n, h, w, c = em.shape(inst, 0)
    if math.prod(em.shape(inst, 1)) != c:
        raise Refuse('scale of shape %s is not %d values' % (list(em.shape(inst, 1)), c))
    if em.shape(inst, 2) != (n, c, h, w):
        raise Refuse('residual of shape %s is not %s' % (list(em.shape(inst, 2)), [n, c, h, w]))

    def render(ref, scratch):
        return ['ccn_scale_add_nhwc(%d, %d, %d, %s, %s, %s, %s);' % (
            n, c, h * w, *(ref(r) for r in inst.inputs), ref(inst.outputs[0]))]
    return Step('normalization', [(n, c, h, w)], render, in_place=(2,))


@lowers(CUSTOM_DOMAIN + '::LayerNormalizationGrad')
def layer_norm_grad(em, inst) -> Step:
    """gX and gscale (Scale's shape) from X, Scale, gY and the forward's
    saved Mean and InvStdDev, or without them (recomputed)."""
    sx, axis, full, target, layouts = _layer_norm_geometry(em, inst, [1])
    if em.shape(inst, 2) != sx:
        raise Refuse('gradient of shape %s, not %s' % (list(em.shape(inst, 2)), list(sx)))
    rows, size = math.prod(sx[:axis]), math.prod(sx[axis:])
    given = em.has(inst, 3)
    if given != em.has(inst, 4):
        raise Refuse('mean and inv_std must be given together')
    stat_shape = sx[:axis] + (1,) * (len(sx) - axis)
    for k in (3, 4) if given else ():
        if em.shape(inst, k) != stat_shape:
            raise Refuse('input %d has shape %s, not %s'
                         % (k, list(em.shape(inst, k)), list(stat_shape)))
    scale_shape = em.shape(inst, 1)
    wanted = len(inst.outputs) > 1 and inst.outputs[1] != NO_REGISTER
    # The kernel sums gscale in the target layout; a smaller Scale takes
    # the sum of that over the axes it broadcasts along.
    fitted = _fit(scale_shape, len(target))
    summed = [d for d, n in enumerate(target) if fitted[d] == 1 and n != 1] if wanted else []
    expanded = _expanded_size(layouts, target)
    sums = math.prod(target) if summed else 0

    def render(ref, scratch_name):
        lines, names = _expand_params(inst, layouts, target, ref, scratch_name)
        gscale = ref(inst.outputs[1]) if wanted else 'NULL'
        if summed:
            gscale = '%s + %d' % (scratch_name, expanded)
        stats = [ref(inst.inputs[k]) for k in (3, 4)] if given else ['NULL', 'NULL']
        # No rows need no statistics (and may have no scratch).
        recomputed = ('NULL' if given or not rows
                      else '%s + %d' % (scratch_name, expanded + sums))
        lines.append('ccn_layernorm_grad(%d, %d, %d, %s, %s, %s, %s, %s, %s, %s, %s, %s);'
                     % (rows, size, rows if full else 1, cfloat(float(inst.attrs['epsilon'])),
                        ref(inst.inputs[0]), names[1], ref(inst.inputs[2]), *stats,
                        ref(inst.outputs[0]), gscale, recomputed))
        if summed:
            lines += reduce_lines('CCN_REDUCE_SUM', 'float32', target, summed, gscale,
                                  ref(inst.outputs[1]))
        return lines
    shapes = [sx] + ([scale_shape] if wanted else [None] * (len(inst.outputs) - 1))
    return Step('normalization', shapes, render, also=('reduction',) if summed else (),
                scratch=expanded + sums + (0 if given else 2 * rows),
                dtypes=['float32'] * len(shapes))


@lowers('LRN')
def lrn(em, inst) -> Step:
    a = inst.attrs
    sx = _channels_first(em, inst)
    size = int(a.get('size', 0))
    if size < 1:
        raise Refuse('LRN size %d is not positive' % size)
    alpha, beta, bias = (float(a.get(k, d)) for k, d in
                         (('alpha', 1e-4), ('beta', 0.75), ('bias', 1.0)))

    def render(ref, scratch):
        return ['ccn_lrn(%d, %d, %d, %d, %s, %s, %s, %s, %s);' % (
            sx[0], sx[1], math.prod(sx[2:]), size, cfloat(alpha), cfloat(beta), cfloat(bias),
            ref(inst.inputs[0]), ref(inst.outputs[0]))]
    return Step('normalization', [sx], render)


def _channels_first(em, inst, min_rank=2):
    """Input 0's shape, refused unless it is (N, C, ...) of rank >= min_rank."""
    sx = em.shape(inst, 0)
    if len(sx) < min_rank:
        raise Refuse('%s needs an (N, C%s) input, got %s'
                     % (inst.op, ', D1, ...' if min_rank > 2 else ', ...', list(sx)))
    return sx


def _per_channel(em, inst, k, channels):
    """Refuse unless input ``k`` is a vector of ``channels`` values."""
    if em.shape(inst, k) != (channels,):
        raise Refuse('input %d has shape %s, not (%d,)'
                     % (k, list(em.shape(inst, k)), channels))


def _fit(shape, rank):
    """``shape`` right-aligned to ``rank`` axes: leading ones added, or
    dropped where it has more axes (which the caller knows to be ones)."""
    return ((1,) * rank + tuple(shape))[-rank:]


def _check_unidirectional(shape, sx, k):
    """Refuse unless ``shape`` broadcasts to ``sx`` without changing it."""
    if len(shape) > len(sx) or any(d not in (1, n) for d, n in
                                   zip(_fit(shape, len(sx)), sx)):
        raise Refuse('input %d of shape %s does not broadcast to X %s'
                     % (k, list(shape), list(sx)))


def _layer_norm_geometry(em, inst, params):
    """X's shape, the axis (non-negative), whether the parameters
    ``params`` (input indices) are laid out in X's full shape (one varies
    along an axis before the axis) rather than per row, that target shape,
    and the _param_layout of each parameter."""
    sx = em.shape(inst, 0)
    rank = len(sx)
    axis = int(inst.attrs['axis'])
    if not -rank <= axis < rank:
        raise Refuse('axis %d is out of range for rank %d' % (axis, rank))
    axis %= rank
    for k in params:
        _check_unidirectional(em.shape(inst, k), sx, k)
    full = any(_fit(em.shape(inst, k), rank)[i] != 1 for k in params for i in range(axis))
    target = sx if full else sx[axis:]
    return sx, axis, full, target, {k: _param_layout(em, inst, k, target) for k in params}


def _expanded_size(layouts, target):
    """Floats of scratch that _expand_params copies parameters into."""
    return sum(math.prod(target) for kind, _ in layouts.values() if kind == 'expand')


def _expand_params(inst, layouts, target, ref, scratch_name):
    """The lines that copy the parameters laid out 'expand' to the start of
    scratch, and the C name of every parameter in the target layout."""
    lines, names, offset = [], {}, 0
    for k, (kind, value) in layouts.items():
        if kind == 'expand':
            dst = '%s + %d' % (scratch_name, offset)
            offset += math.prod(target)
            lines += ['{',
                      '    static const long shape[] = %s, strides[] = %s;'
                      % (clist(target), clist(value)),
                      '    ccn_broadcast_copy(%d, shape, %s, strides, %s);'
                      % (len(target), ref(inst.inputs[k]), dst),
                      '}']
            names[k] = dst
        else:
            names[k] = value or ref(inst.inputs[k])
    return lines, names


def _param_layout(em, inst, k, target):
    """How the kernel gets parameter ``k`` as a C-order array of shape
    ``target``: ('direct', None) when it already is one, ('direct', C name)
    for a constant broadcast at emit time, ('expand', source strides) for a
    copy into scratch at run time."""
    shape = em.shape(inst, k)
    if math.prod(shape) == math.prod(target):
        return 'direct', None
    value = em.const(inst.inputs[k])
    if value is not None:
        array = numpy.broadcast_to(value.reshape(_fit(shape, len(target))), target)
        return 'direct', em.constant_array('ln%d_in%d' % (inst.outputs[0], k), array)
    return 'expand', broadcast_strides(_fit(shape, len(target)), target)
