"""Attention family: FusedAttention (the native fusion of an attention's
MatMul, scale, mask, Softmax and MatMul; runtime/native/fusion.py), one
ccn_attention call that holds the scores of a block of query rows at a
time."""
import math

from ...ops.registry import CUSTOM_DOMAIN
from ..cformat import CStruct
from ..fusion import ATTENTION_MAX_KEYS, mask_fits
from ..lowering import Refuse, Step, lowers

ATTENTION_GEOMETRY = CStruct('ccn_attention_geometry', (
    'batch', 'M', 'N', 'D', 'E', 'scale', 'rank', 'mask_rs', 'dims', 'mask_strides'))


@lowers(CUSTOM_DOMAIN + '::FusedAttention')
def fused_attention(em, inst) -> Step:
    """Softmax(scale * q kt + mask) v for q (..., M, D), kt (..., D, N) and
    v (..., N, E) of the same leading dims, and a mask that broadcasts to
    the scores (..., M, N) along every axis but the keys'."""
    q, kt, v = (em.shape(inst, k) for k in range(3))
    batch = q[:-2]
    if not (len(q) >= 2 and kt[:-2] == batch and v[:-2] == batch and q[-1] == kt[-2]
            and kt[-1] == v[-2]) or 0 in q + kt + v:
        raise Refuse('q %s, kt %s and v %s are not non-empty (..., M, D), (..., D, N) and '
                     '(..., N, E)' % (list(q), list(kt), list(v)))
    if kt[-1] > ATTENTION_MAX_KEYS:
        raise Refuse('%d keys, more than the %d a block of scores holds'
                     % (kt[-1], ATTENTION_MAX_KEYS))
    M, D, N, E = q[-2], q[-1], kt[-1], v[-1]
    mask = em.has(inst, 3)
    strides, mask_rs = [0] * len(batch), 0
    if mask:
        shape = tuple(em.shape(inst, 3))
        if not mask_fits(shape, batch + (M, N)):
            raise Refuse('mask %s does not broadcast to the scores %s' % (
                list(shape), list(batch + (M, N))))
        full = (1,) * (len(q) - len(shape)) + shape
        mask_rs = N if full[-2] == M else 0
        for d in range(len(batch)):
            strides[d] = 0 if full[d] == 1 else math.prod(full[d + 1:])
    geometry = ATTENTION_GEOMETRY.literal(
        batch=math.prod(batch), M=M, N=N, D=D, E=E, scale=float(inst.attrs['scale']),
        rank=len(batch), mask_rs=mask_rs, dims=tuple(batch) or (1,),
        mask_strides=tuple(strides) or (0,))

    def render(ref, scratch):
        return ['ccn_attention(%s,' % geometry, '    %s, %s, %s, %s, %s);' % (
            ref(inst.inputs[0]), ref(inst.inputs[1]), ref(inst.inputs[2]),
            ref(inst.inputs[3]) if mask else 'NULL', ref(inst.outputs[0]))]
    return Step('attention', [batch + (M, E)], render, also=('activation', 'gemm'))
