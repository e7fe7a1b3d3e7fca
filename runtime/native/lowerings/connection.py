"""Gemm, FusedGemm, MatMul and Conv as calls into ccn_connection.c."""
import math

from ...ops.registry import CUSTOM_DOMAIN
from ..cformat import cfloat
from ..lowering import Refuse, Step, lowers, window


@lowers('Gemm', CUSTOM_DOMAIN + '::FusedGemm')
def gemm(em, inst) -> Step:
    a = inst.attrs
    fused = inst.op == 'FusedGemm'
    if fused and a.get('activation') != 'Relu':
        raise Refuse("FusedGemm activation %r is not 'Relu'" % a.get('activation'))
    sa, sb = em.shape(inst, 0), em.shape(inst, 1)
    if len(sa) != 2 or len(sb) != 2:
        raise Refuse('Gemm needs 2-D A and B, got %s and %s' % (list(sa), list(sb)))
    trans_a, trans_b = int(a.get('transA', 0)), int(a.get('transB', 0))
    alpha, beta = float(a.get('alpha', 1.0)), float(a.get('beta', 1.0))
    M, K = (sa[1], sa[0]) if trans_a else sa
    Kb, N = (sb[1], sb[0]) if trans_b else sb
    if K != Kb:
        raise Refuse('Gemm inner sizes differ: %s x %s' % (list(sa), list(sb)))
    bias_rs = bias_cs = 0
    if em.has(inst, 2):
        sc = em.shape(inst, 2)
        padded = (1,) * (2 - len(sc)) + sc if len(sc) <= 2 else None
        if padded is None or padded[0] not in (1, M) or padded[1] not in (1, N):
            raise Refuse('Gemm bias of shape %s does not broadcast to %s' % (list(sc), [M, N]))
        bias_cs = 1 if padded[1] != 1 else 0
        bias_rs = padded[1] if padded[0] != 1 else 0
    return _product(em, inst, (M, N), M, N, K, 1 if trans_a else K, M if trans_a else 1,
                    trans_b, alpha, beta, fused, bias_rs, bias_cs)


@lowers('MatMul')
def matmul(em, inst) -> Step:
    sa, sb = em.shape(inst, 0), em.shape(inst, 1)
    if len(sa) < 2 or len(sb) != 2 or sa[-1] != sb[0]:
        raise Refuse('MatMul supports (..., M, K) x (K, N) only, got %s x %s'
                     % (list(sa), list(sb)))
    M, K, N = math.prod(sa[:-1]), sa[-1], sb[1]
    return _product(em, inst, sa[:-1] + (N,), M, N, K, K, 1, 0, 1.0, 0.0, False)


def _product(em, inst, out_shape, M, N, K, a_rs, a_cs, trans_b, alpha, beta, relu,
             bias_rs=0, bias_cs=0) -> Step:
    """Gemm and MatMul: B goes to the kernel as row-major K x N, from a
    pre-transposed constant or transposed into scratch at run time."""
    b_reg = inst.inputs[1]
    b_const = em.const(b_reg) is not None
    b_name = em.weight(b_reg, transposed=bool(trans_b)) if b_const else None
    has_bias = em.has(inst, 2)

    def render(ref, scratch):
        y = ref(inst.outputs[0])
        lines = []
        b = b_name or ref(b_reg)
        if trans_b and not b_const:
            lines.append('ccn_transpose(%d, %d, %s, %s);' % (N, K, ref(b_reg), scratch))
            b = scratch
        lines.append('ccn_gemm_init(%d, %d, %s, %s, %d, %d, %s);' % (
            M, N, y, ref(inst.inputs[2]) if has_bias else 'NULL', bias_rs, bias_cs,
            cfloat(beta)))
        lines.append('ccn_gemm(%d, %d, %d, %s, %d, %d, %s, %s, %s);' % (
            M, N, K, ref(inst.inputs[0]), a_rs, a_cs, b, cfloat(alpha), y))
        if relu:
            lines.append('ccn_relu(%d, %s, %s);' % (M * N, y, y))
        return lines
    scratch = K * N if trans_b and not b_const else 0
    return Step('connection', [out_shape], render, scratch=scratch,
                also=('activation',) if relu else ())


@lowers('Conv')
def conv(em, inst) -> Step:
    a = inst.attrs
    sx, sw = em.shape(inst, 0), em.shape(inst, 1)
    if len(sx) != 4 or len(sw) != 4:
        raise Refuse('only 2-D convolution (4-D input and weight) is supported, got '
                     '%s and %s' % (list(sx), list(sw)))
    N, C, H, W = sx
    M, Cg, KH, KW = sw
    group = int(a.get('group', 1))
    if a.get('kernel_shape') is not None and tuple(a['kernel_shape']) != (KH, KW):
        raise Refuse('kernel_shape %s differs from the weight' % list(a['kernel_shape']))
    if group < 1 or C % group or M % group or Cg * group != C:
        raise Refuse('group=%d does not fit input %s and weight %s'
                     % (group, list(sx), list(sw)))
    if em.has(inst, 2) and em.shape(inst, 2) != (M,):
        raise Refuse('bias shape %s is not (%d,)' % (list(em.shape(inst, 2)), M))
    win = window(a, (H, W), (KH, KW))
    OH, OW = win.out
    direct = (KH, KW, OH, OW) == (1, 1, H, W) and win.strides == (1, 1) \
        and win.pads_begin == (0, 0)
    has_bias = em.has(inst, 2)

    def render(ref, scratch):
        return ['ccn_conv2d(%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d,'
                % (N, C, H, W, M, KH, KW, OH, OW, group, win.strides[0], win.strides[1],
                   win.dilations[0], win.dilations[1], win.pads_begin[0], win.pads_begin[1]),
                '           %s, %s, %s, %s, %s);' % (
                    ref(inst.inputs[0]), ref(inst.inputs[1]),
                    ref(inst.inputs[2]) if has_bias else 'NULL', ref(inst.outputs[0]),
                    'NULL' if direct else scratch)]
    return Step('connection', [(N, M, OH, OW)], render,
                scratch=0 if direct else Cg * KH * KW * OH * OW)
