"""Element-wise activations, Softmax and LogSoftmax as calls into
ccn_activation.c."""
import math

from ...ops.opset_rules import softmax_axes
from ..cformat import cfloat
from ..lowering import Refuse, Step, lowers

#: Activations with no attribute but alpha: op -> (C kernel, default alpha or None).
_ACTIVATIONS = {'Relu': ('ccn_relu', None), 'Sigmoid': ('ccn_sigmoid', None),
                'Tanh': ('ccn_tanh', None), 'LeakyRelu': ('ccn_leaky_relu', 0.01)}


@lowers(*_ACTIVATIONS)
def activation(em, inst) -> Step:
    sx = em.shape(inst, 0)
    n = math.prod(sx)
    kernel, default_alpha = _ACTIVATIONS[inst.op]
    extra = '' if default_alpha is None else \
        ' %s,' % cfloat(inst.attrs.get('alpha', default_alpha))

    def render(ref, scratch):
        return ['%s(%d,%s %s, %s);' % (kernel, n, extra, ref(inst.inputs[0]),
                                       ref(inst.outputs[0]))]
    return Step('activation', [sx], render)


@lowers('Softmax', 'LogSoftmax')
def softmax(em, inst) -> Step:
    sx = em.shape(inst, 0)
    if not sx:
        raise Refuse('%s of a 0-d input is not supported' % inst.op)
    axis = inst.attrs.get('axis')
    if axis is not None and not -len(sx) <= axis < len(sx):
        raise Refuse('axis %d is out of range for rank %d' % (axis, len(sx)))
    axes = softmax_axes(inst.version, len(sx), axis)
    first, last = (axes[0], axes[-1]) if axes else (len(sx), len(sx) - 1)
    outer, length = math.prod(sx[:first]), math.prod(sx[first:last + 1])
    inner = math.prod(sx[last + 1:])
    log = int(inst.op == 'LogSoftmax')

    def render(ref, scratch):
        return ['ccn_softmax(%d, %d, %d, %d, %s, %s);' % (
            outer, length, inner, log, ref(inst.inputs[0]), ref(inst.outputs[0]))]
    return Step('activation', [sx], render)
