"""Chainer's optimizer updates (this project's SGDUpdate, MomentumSGDUpdate
and AdamUpdate) as calls into ccn_training.c.

Each updates a parameter and its state arrays in place, as the NumPy
kernels do: when they are inputs of the Program, the emitter declares
those inputs writable and the caller passes its own arrays (the model's
parameters, the optimizer's states).  The result is the parameter itself,
so the Step aliases input 0.  Hyperparameters are 0-d inputs read at every
call, because schedules change them between steps."""
import math

from ...ops.registry import CUSTOM_DOMAIN
from ..cformat import cfloat
from ..lowering import Refuse, Step, lowers
from .connection import GEMM_GEOMETRY

FLOATS = ('float32', 'float64')

#: op -> (C function, number of state arrays after the gradient, number
#: of hyperparameters after them).
_UPDATES = {
    'SGDUpdate': ('ccn_sgd_update', 0, 1),
    'MomentumSGDUpdate': ('ccn_momentum_sgd_update', 1, 2),
    'AdamUpdate': ('ccn_adam_update', 2, 6),
}


@lowers(*(CUSTOM_DOMAIN + '::' + op for op in _UPDATES))
def optimizer_update(em, inst) -> Step:
    function, n_states, n_hyper = _UPDATES[inst.op]
    if len(inst.inputs) != 2 + n_states + n_hyper:
        raise Refuse('%s takes %d inputs, got %d' % (inst.op, 2 + n_states + n_hyper,
                                                     len(inst.inputs)))
    shape = em.shape(inst, 0)
    for k in range(1, 2 + n_states):
        if em.shape(inst, k) != shape:
            raise Refuse('input %d has shape %s, the parameter %s'
                         % (k, list(em.shape(inst, k)), list(shape)))
    for k in range(2 + n_states, len(inst.inputs)):
        if math.prod(em.shape(inst, k, dtypes=FLOATS)) != 1:
            raise Refuse('hyperparameter input %d must hold one value' % k)

    def render(ref, scratch):
        hyper = ['%s[0]' % ref(r) for r in inst.inputs[2 + n_states:]]
        arrays = [ref(r) for r in inst.inputs[:2 + n_states]]
        return ['%s(%d, %s);' % (function, math.prod(shape), ', '.join(hyper + arrays))]
    return Step('training', [shape], render, alias=True)


@lowers(CUSTOM_DOMAIN + '::GemmSGDUpdate')
def gemm_sgd_update(em, inst) -> Step:
    """param (M x N) -= lr * alpha * op(A) B, the product added straight into
    the parameter by ccn_gemm_ex (fusion.py makes the instruction)."""
    if len(inst.inputs) != 4 or inst.attrs['transB']:
        raise Refuse('GemmSGDUpdate takes param, A, B (not transposed) and lr')
    shape, a, b = (em.shape(inst, k) for k in range(3))
    trans_a = int(inst.attrs['transA'])
    if len(shape) != 2 or len(a) != 2 or len(b) != 2:
        raise Refuse('GemmSGDUpdate takes matrices')
    M, N = shape
    K = a[0] if trans_a else a[1]
    if (a[1] if trans_a else a[0]) != M or b != (K, N):
        raise Refuse('op(A) %s times B %s does not make the parameter %s'
                     % (list(a), list(b), list(shape)))
    if math.prod(em.shape(inst, 3, dtypes=FLOATS)) != 1:
        raise Refuse('the learning rate must hold one value')
    alpha = float(inst.attrs['alpha'])
    geometry = GEMM_GEOMETRY.literal(M=M, N=N, K=K, a_rs=1 if trans_a else K,
                                     a_cs=M if trans_a else 1, ldb=N, ldc=N, act='CCN_ACT_NONE',
                                     act_alpha=0.0)

    def render(ref, scratch):
        return ['ccn_gemm_ex(%s,' % geometry, '    %s, %s, -(%s) * (float)%s[0], %s);' % (
            ref(inst.inputs[1]), ref(inst.inputs[2]), cfloat(alpha), ref(inst.inputs[3]),
            ref(inst.inputs[0]))]
    return Step('gemm', [shape], render, alias=True)
