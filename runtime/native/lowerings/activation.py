"""Element-wise functions of one float tensor (math functions and
activations alike: one C kernel, ccn_unary_<dtype>, switching on an enum),
Softmax and LogSoftmax, and the gradient of Relu (this project's ReluGrad),
as calls into ccn_activation.c."""
import math

from ...ops.opset_rules import softmax_axes
from ...ops.registry import CUSTOM_DOMAIN
from ..cformat import cliteral
from ..lowering import Refuse, Step, lowers

FLOATS = ('float32', 'float64')

#: op -> (C enum, its attributes passed as alpha and beta with their
#: defaults).  Gelu and Clip pick theirs in _unary_args.
_UNARY = {
    'Abs': ('CCN_ABS', ()), 'Neg': ('CCN_NEG', ()), 'Exp': ('CCN_EXP', ()),
    'Log': ('CCN_LOG', ()), 'Sqrt': ('CCN_SQRT', ()), 'Reciprocal': ('CCN_RECIPROCAL', ()),
    'Floor': ('CCN_FLOOR', ()), 'Ceil': ('CCN_CEIL', ()), 'Round': ('CCN_ROUND', ()),
    'Sign': ('CCN_SIGN', ()), 'Erf': ('CCN_ERF', ()),
    'Sin': ('CCN_SIN', ()), 'Cos': ('CCN_COS', ()), 'Tan': ('CCN_TAN', ()),
    'Asin': ('CCN_ASIN', ()), 'Acos': ('CCN_ACOS', ()), 'Atan': ('CCN_ATAN', ()),
    'Sinh': ('CCN_SINH', ()), 'Cosh': ('CCN_COSH', ()), 'Asinh': ('CCN_ASINH', ()),
    'Acosh': ('CCN_ACOSH', ()), 'Atanh': ('CCN_ATANH', ()),
    'Relu': ('CCN_RELU', ()), 'LeakyRelu': ('CCN_LEAKY_RELU', (('alpha', 0.01),)),
    'Sigmoid': ('CCN_SIGMOID', ()), 'Swish': ('CCN_SWISH', (('alpha', 1.0),)),
    'Tanh': ('CCN_TANH', ()),
    'Softplus': ('CCN_SOFTPLUS', ()), 'Softsign': ('CCN_SOFTSIGN', ()),
    'Elu': ('CCN_ELU', (('alpha', 1.0),)),
    'Selu': ('CCN_SELU', (('alpha', 1.6732632423543772), ('gamma', 1.0507009873554805))),
    'Celu': ('CCN_CELU', (('alpha', 1.0),)),
    'HardSigmoid': ('CCN_HARD_SIGMOID', (('alpha', 0.2), ('beta', 0.5))),
    'HardSwish': ('CCN_HARD_SWISH', ()),
    'ThresholdedRelu': ('CCN_THRESHOLDED_RELU', (('alpha', 1.0),)),
    'Gelu': ('CCN_GELU', ()),
    'Clip': ('CCN_CLIP', ()),
}


def _clip_bound(em, inst, k: int, attr: str, default: float) -> float:
    """Clip's lower (k=1) or upper (k=2) bound: the attribute before opset
    11, a constant scalar input from 11 (absent: no bound)."""
    if inst.version < 11:
        return float(inst.attrs.get(attr, default))
    if not em.has(inst, k):
        return default
    value = em.const(inst.inputs[k])
    if value is None:
        raise Refuse('its %s must be a constant' % attr)
    if value.size != 1:
        raise Refuse('its %s must be a scalar, not of shape %s' % (attr, list(value.shape)))
    return float(value.reshape(-1)[0])


def _unary_args(em, inst) -> tuple[str, float, float]:
    """(C enum, alpha, beta) of an element-wise function."""
    op, attrs = _UNARY[inst.op]
    if inst.op == 'Gelu':
        approximate = inst.attrs['approximate']
        if approximate not in ('none', 'tanh'):
            raise Refuse("Gelu approximate must be 'none' or 'tanh', not %r" % approximate)
        return ('CCN_GELU_TANH' if approximate == 'tanh' else op), 0.0, 0.0
    if inst.op == 'Clip':
        return op, _clip_bound(em, inst, 1, 'min', -math.inf), \
            _clip_bound(em, inst, 2, 'max', math.inf)
    values = [float(inst.attrs.get(name, default)) for name, default in attrs]
    alpha, beta = (values + [0.0, 0.0])[:2]
    return op, alpha, beta


@lowers(*_UNARY)
def unary(em, inst) -> Step:
    sx = em.shape(inst, 0, dtypes=FLOATS)
    dtype = em.dtype(inst, 0)
    op, alpha, beta = _unary_args(em, inst)

    def render(ref, scratch):
        # The attributes are float32 in ONNX; as doubles they are exact.
        return ['ccn_unary_%s(%s, %d, %s, %s, %s, %s);' % (
            dtype, op, math.prod(sx), cliteral(alpha, 'float64'), cliteral(beta, 'float64'),
            ref(inst.inputs[0]), ref(inst.outputs[0]))]
    return Step('activation', [sx], render, in_place=(0,))


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
    # Softmax reads each value before writing it; LogSoftmax reads x again.
    return Step('activation', [sx], render, in_place=() if log else (0,))


@lowers(CUSTOM_DOMAIN + '::ReluGrad')
def relu_grad(em, inst) -> Step:
    sy, sg = em.shape(inst, 0), em.shape(inst, 1)
    if sy != sg:
        raise Refuse('Relu output %s and gradient %s differ in shape' % (list(sy), list(sg)))

    def render(ref, scratch):
        return ['ccn_relu_grad(%d, %s, %s, %s);' % (math.prod(sy), ref(inst.inputs[0]),
                                                     ref(inst.inputs[1]), ref(inst.outputs[0]))]
    return Step('activation', [sy], render, in_place=(0, 1))
