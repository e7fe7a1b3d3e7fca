"""Depthwise convolutions (group == channels) on the native backend: the
direct kernel of ccn_depthwise.c against the NumPy VM and onnxruntime, for
the unrolled sizes (3x3 and 5x5, strides 1 and 2, dilated or not), other
sizes and strides, asymmetric and no padding, widths and heights that are
not whole vectors and blocks of rows, random geometries, with and without
bias, run-time weights and every activation fused into the kernel."""
import os
import subprocess

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native.emit_c import emit_c
from chainer_compiler.runtime.native.lowerings.depthwise import band_rows, is_depthwise

from .helpers import check_native, make_model, uniform

F32 = numpy.float32
#: (kernel, strides, pads, dilations, bias, batch x channels x height x width)
CASES = [
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, (1, 8, 9, 11)),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, (2, 8, 9, 11)),
    ((5, 5), (1, 1), (2, 2, 2, 2), (1, 1), False, (1, 6, 7, 20)),
    ((5, 5), (2, 2), (2, 2, 2, 2), (1, 1), True, (1, 6, 12, 12)),
    ((3, 3), (1, 1), (0, 0, 0, 0), (1, 1), True, (1, 5, 6, 6)),      # no padding: no copy
    ((3, 3), (2, 2), (0, 1, 1, 0), (1, 1), True, (1, 4, 8, 7)),      # asymmetric padding
    ((3, 1), (1, 2), (1, 0, 1, 0), (1, 1), True, (2, 4, 6, 9)),      # general code
    ((3, 3), (1, 1), (2, 2, 2, 2), (2, 2), True, (1, 4, 7, 8)),      # dilation
    ((7, 7), (1, 1), (3, 3, 3, 3), (1, 1), True, (1, 3, 4, 5)),      # taps past the input
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, (2, 32, 24, 24)),   # split between threads
    # Dilated taps on the fast paths: DeepLabV3's 5x5 by 2 (padding wider
    # than the 3x5 input: every output a border one), dilation 3, stride 2
    # with even and odd dilation (phases), unequal dilations, odd sizes.
    ((5, 5), (1, 1), (4, 4, 4, 4), (2, 2), True, (1, 6, 3, 5)),
    ((5, 5), (1, 1), (4, 4, 4, 4), (2, 2), False, (1, 5, 14, 13)),
    ((3, 3), (1, 1), (3, 3, 3, 3), (3, 3), True, (1, 4, 11, 9)),
    ((5, 5), (2, 2), (4, 4, 4, 4), (2, 2), True, (1, 4, 13, 11)),
    ((3, 3), (2, 2), (3, 2, 1, 3), (3, 3), True, (2, 3, 10, 9)),
    ((3, 3), (1, 1), (2, 3, 2, 3), (2, 3), True, (1, 3, 7, 10)),
    ((7, 7), (2, 2), (3, 3, 3, 3), (1, 2), True, (1, 3, 12, 15)),    # 7x7 at stride 2
    # Rows of several vectors, the last one partial (odd widths: 37 and
    # 33 columns), heights that leave rows after the blocks of four,
    # planes narrower than the kernel, one column, stride 3 and 2 x 1.
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, (1, 3, 9, 37)),
    ((5, 5), (2, 2), (2, 2, 2, 2), (1, 1), True, (1, 3, 11, 33)),
    ((5, 5), (1, 1), (2, 2, 2, 2), (1, 1), True, (1, 4, 7, 7)),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, (1, 3, 7, 35)),
    ((5, 5), (1, 1), (2, 2, 2, 2), (1, 1), True, (1, 2, 3, 2)),
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, (1, 2, 6, 1)),
    ((3, 3), (3, 3), (1, 1, 1, 1), (1, 1), True, (1, 3, 10, 20)),
    ((3, 3), (2, 1), (1, 1, 1, 1), (1, 1), True, (1, 3, 9, 18)),
    ((5, 5), (1, 1), (0, 0, 0, 0), (1, 1), True, (1, 3, 21, 40)),    # no padding, wide
    # Narrow planes summed as flat vectors (AVX-512): more than four of
    # them, and too many masks (by strips again).
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, (2, 3, 20, 8)),
    ((5, 5), (1, 1), (2, 2, 2, 2), (1, 1), True, (1, 2, 40, 8)),
    # Wider than the 16 columns of taps whose masks a strip keeps: lane by
    # lane.
    ((1, 17), (1, 1), (0, 8, 0, 8), (1, 1), True, (1, 2, 3, 40)),
    # Rows of half a vector or less with 25 taps or more, or 49 taps: the
    # channels in the lanes (16 with AVX-512), the last block partial and
    # one block split between images; stride 2; inputs past the taps'
    # reach (no padding); dilated and asymmetric.  Six rows: a block of
    # four and one of two.
    ((7, 7), (1, 1), (3, 3, 3, 3), (1, 1), True, (2, 20, 7, 7)),
    ((7, 7), (1, 1), (3, 3, 3, 3), (1, 1), False, (1, 18, 14, 14)),
    ((5, 5), (2, 2), (2, 2, 2, 2), (1, 1), False, (1, 17, 14, 13)),
    ((5, 5), (2, 2), (0, 0, 0, 0), (1, 1), True, (1, 3, 12, 12)),
    ((5, 5), (1, 1), (4, 1, 3, 2), (2, 1), True, (1, 5, 6, 4)),
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, (1, 3, 6, 37)),
    # MixNet's: 7x7 at stride 2 in bands of 7 of the 28 output rows (the
    # last block of channels partial), 11x11 at stride 2 whole.
    ((7, 7), (2, 2), (3, 3, 3, 3), (1, 1), True, (1, 17, 56, 56)),
    ((11, 11), (2, 2), (5, 5, 5, 5), (1, 1), False, (1, 18, 14, 14)),
]


def _random_cases(rng, count):
    """``count`` geometries drawn from rng, in CASES' form: kernels 1 to 7,
    strides 1 to 3, dilations 1 and 2, pads 0 to 3 on each side, planes
    of 1 to 40 columns."""
    cases = []
    while len(cases) < count:
        kernel = tuple(int(k) for k in rng.randint(1, 8, 2))
        strides = tuple(int(v) for v in rng.randint(1, 4, 2))
        dilations = tuple(int(v) for v in rng.randint(1, 3, 2))
        pads = tuple(int(v) for v in rng.randint(0, 4, 4))
        shape = (1, int(rng.randint(1, 4)), int(rng.randint(1, 20)), int(rng.randint(1, 41)))
        if all(_out(shape[2 + d], kernel[d], strides[d], pads[d] + pads[d + 2],
                    dilations[d]) > 0 and pads[d] < (kernel[d] - 1) * dilations[d] + 1
               and pads[d + 2] < (kernel[d] - 1) * dilations[d] + 1 for d in (0, 1)):
            cases.append((kernel, strides, pads, dilations, bool(rng.randint(2)), shape))
    return cases


def _out(size, k, s, pad, d):
    return (size + pad - (k - 1) * d - 1) // s + 1


def _model(rng, cases=CASES):
    """One model holding every case (one build), plus run-time weights
    and a Relu the fusion makes the kernel's epilogue."""
    nodes, inputs, outputs, inits, values = [], [], [], {}, []
    for i, (kernel, strides, pads, dilations, bias, shape) in enumerate(cases):
        n, c, h, w = shape
        inputs.append(('x%d' % i, F32, list(shape)))
        values.append(uniform(rng, *shape))
        inits['w%d' % i] = uniform(rng, c, 1, *kernel)
        names = ['x%d' % i, 'w%d' % i]
        if bias:
            inits['b%d' % i] = uniform(rng, c)
            names.append('b%d' % i)
        nodes.append(helper.make_node('Conv', names, ['y%d' % i], group=c, kernel_shape=kernel,
                                      strides=strides, pads=pads, dilations=dilations))
        outputs.append(('y%d' % i, F32, [n, c, _out(h, kernel[0], strides[0],
                                                    pads[0] + pads[2], dilations[0]),
                                         _out(w, kernel[1], strides[1], pads[1] + pads[3],
                                              dilations[1])]))
    inputs.append(('xr', F32, [1, 6, 10, 10]))
    inputs.append(('wr', F32, [6, 1, 3, 3]))
    values += [uniform(rng, 1, 6, 10, 10), uniform(rng, 6, 1, 3, 3)]
    nodes += [helper.make_node('Conv', ['xr', 'wr'], ['cr'], group=6, pads=[1, 1, 1, 1],
                               strides=[2, 2]),
              helper.make_node('Relu', ['cr'], ['yr'])]
    outputs.append(('yr', F32, [1, 6, 5, 5]))
    return make_model(nodes, inputs, outputs, inits), values


@pytest.mark.native_build
def test_depthwise_convolutions_equal_the_vm():
    model, values = _model(numpy.random.RandomState(5))
    check_native(model, values, atol=1e-5)


@pytest.mark.native_build
def test_random_depthwise_geometries_equal_the_vm():
    rng = numpy.random.RandomState(31)
    model, values = _model(rng, _random_cases(rng, 24))
    check_native(model, values, atol=1e-5)


def test_every_case_goes_to_the_depthwise_kernel(tmp_path):
    # Emitting only (no build): each Conv is one ccn_conv2d_depthwise call,
    # the Relu its epilogue, and no im2col convolution is left.
    model, _ = _model(numpy.random.RandomState(5))
    result = emit_c(build_program(model), str(tmp_path), 'model')
    with open(next(p for p in result.files if p.endswith('/model.c'))) as f:
        text = f.read()
    assert text.count('ccn_conv2d_depthwise(') == len(CASES) + 1
    assert 'ccn_conv2d(' not in text
    assert 'CCN_ACT_RELU' in text


def test_only_one_channel_per_group_is_depthwise():
    assert is_depthwise(8, 8, 8)
    assert not is_depthwise(8, 16, 8)  # a channel multiplier: im2col
    assert not is_depthwise(1, 1, 1)
    assert not is_depthwise(8, 8, 4)


#: The activations fused into the kernel (Swish as exporters write it,
#: x * Sigmoid(x)), each after a depthwise Conv: (node, its CCN_ACT_*).
ACTIVATIONS = [('Relu', 'CCN_ACT_RELU'), ('LeakyRelu', 'CCN_ACT_LEAKY_RELU'),
               ('Clip', 'CCN_ACT_CLIP'), ('HardSwish', 'CCN_ACT_HARD_SWISH'),
               ('Sigmoid', 'CCN_ACT_SIGMOID'), ('Tanh', 'CCN_ACT_TANH'),
               ('Swish', 'CCN_ACT_SWISH'), ('Gelu', 'CCN_ACT_GELU')]


def _activations_model(rng):
    """A 3x3 depthwise Conv (stride 2 every other one, odd widths) into
    each of ACTIVATIONS, on inputs wide enough to reach ReLU6's and
    HardSwish's bounds; before HardSwish (in registers), Swish and Gelu
    (ccn_activate), 5x5 over 18 channels of 7x7 (channels in the lanes)."""
    nodes, inputs, outputs, inits, values = [], [], [], {}, []
    inits.update(zero=numpy.zeros((), F32), six=numpy.full((), 6, F32))
    for i, (op, _) in enumerate(ACTIVATIONS):
        s, k = 1 + i % 2, 5 if op in ('HardSwish', 'Swish', 'Gelu') else 3
        shape = (1, 18, 7, 7) if k == 5 else (1, 3, 9, 19 + 2 * i)
        inputs.append(('x%d' % i, F32, list(shape)))
        values.append(4 * uniform(rng, *shape))
        inits['w%d' % i] = uniform(rng, shape[1], 1, k, k)
        inits['b%d' % i] = uniform(rng, shape[1])
        nodes.append(helper.make_node('Conv', ['x%d' % i, 'w%d' % i, 'b%d' % i], ['c%d' % i],
                                      group=shape[1], kernel_shape=[k, k],
                                      pads=[k // 2] * 4, strides=[s, s]))
        c, y = 'c%d' % i, 'y%d' % i
        if op == 'Swish':
            nodes += [helper.make_node('Sigmoid', [c], ['s%d' % i]),
                      helper.make_node('Mul', [c, 's%d' % i], [y])]
        elif op == 'Clip':
            nodes.append(helper.make_node('Clip', [c, 'zero', 'six'], [y]))
        else:
            nodes.append(helper.make_node(op, [c], [y], **(
                {'alpha': 0.1} if op == 'LeakyRelu' else {})))
        outputs.append((y, F32, [1, shape[1], _out(shape[2], k, s, k - 1, 1),
                                 _out(shape[3], k, s, k - 1, 1)]))
    return make_model(nodes, inputs, outputs, inits, opset=20), values


def test_every_activation_is_the_depthwise_kernels_epilogue(tmp_path):
    model, _ = _activations_model(numpy.random.RandomState(7))
    result = emit_c(build_program(model), str(tmp_path), 'model')
    with open(next(p for p in result.files if p.endswith('/model.c'))) as f:
        calls = f.read().split('ccn_conv2d_depthwise(')[1:]
    assert [act for _, act in ACTIVATIONS] == [c.split('\n')[1].split(',')[0].strip()
                                               for c in calls]


@pytest.mark.native_build
def test_depthwise_with_every_activation_equals_the_vm():
    model, values = _activations_model(numpy.random.RandomState(7))
    check_native(model, values, atol=2e-5)


KERNEL_CHECK = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ccn_depthwise.h"

/* Each activation in the depthwise kernel's epilogue against the kernel
 * without one and then ccn_activate (the products' epilogue): the same
 * floats, NaN, infinities, signed zeros and ReLU6's bounds included. */
static int check_epilogues(void)
{
    enum { C = 2, H = 5, W = 21 };
    static float x[C * H * W], y[C * H * W], z[C * H * W];
    const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 6.0f, 3.0f, -3.0f, 1e30f};
    const float w[C] = {1, -1};  /* 1x1: the outputs are the inputs (negated) */
    for (int i = 0; i < C * H * W; i++)
        x[i] = i % 3 ? special[i % 9] : (float)(i % 17) - 8.0f;
    const ccn_conv_geometry g = {1, C, H, W, C, H, W, 1, 1, C, 1, 1, 1, 1, 0, 0};
    int bad = 0;
    for (int act = CCN_ACT_NONE; act <= CCN_ACT_GELU; act++) {
        const float alpha = act == CCN_ACT_CLIP ? 6.0f : act == CCN_ACT_SWISH ? 1.0f : 0.1f;
        ccn_conv2d_depthwise(&g, 0, act, alpha, x, w, NULL, y);
        ccn_conv2d_depthwise(&g, 0, CCN_ACT_NONE, 0.0f, x, w, NULL, z);
        ccn_activate(C * H * W, z, act, alpha);
        for (int i = 0; i < C * H * W; i++)
            if (memcmp(&y[i], &z[i], sizeof y[i]) && !(isnan(y[i]) && isnan(z[i]))) {
                printf("act %d, output %d: %g, not %g\n", act, i, y[i], z[i]);
                bad = 1;
            }
    }
    return bad;
}

/* Geometry g, in bands of `band` output rows (band_rows's), against the
 * sum of each output's taps inside the input, written out plainly. */
static int check_geometry(const ccn_conv_geometry *g, long band)
{
    const long C = g->in_channels, H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    const long KH = g->kernel_h, KW = g->kernel_w;
    float *x = malloc(sizeof(float) * C * H * W), *w = malloc(sizeof(float) * C * KH * KW);
    float *b = malloc(sizeof(float) * C), *y = malloc(sizeof(float) * C * OH * OW);
    for (long i = 0; i < C * H * W; i++)
        x[i] = (float)((i * 37 + 11) % 23) / 11.0f - 1.0f;
    for (long i = 0; i < C * KH * KW; i++)
        w[i] = (float)((i * 13 + 5) % 17) / 8.0f - 1.0f;
    for (long c = 0; c < C; c++)
        b[c] = (float)c / 4.0f;
    ccn_conv2d_depthwise(g, band, CCN_ACT_NONE, 0.0f, x, w, b, y);
    int bad = 0;
    for (long c = 0; c < C; c++)
        for (long oh = 0; oh < OH; oh++)
            for (long ow = 0; ow < OW; ow++) {
                double s = b[c];
                for (long kh = 0; kh < KH; kh++)
                    for (long kw = 0; kw < KW; kw++) {
                        const long ih = oh * g->stride_h - g->pad_top + kh * g->dil_h;
                        const long iw = ow * g->stride_w - g->pad_left + kw * g->dil_w;
                        if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                            s += (double)w[(c * KH + kh) * KW + kw] * x[(c * H + ih) * W + iw];
                    }
                const float got = y[(c * OH + oh) * OW + ow];
                if (!(fabs(got - s) <= 1e-5 * (1 + fabs(s)))) {
                    printf("%ldx%ld over %ldx%ld, output (%ld, %ld, %ld): %g, not %g\n", KH, KW,
                           H, W, c, oh, ow, got, s);
                    bad = 1;
                }
            }
    free(x), free(w), free(b), free(y);
    return bad;
}

static const struct {
    ccn_conv_geometry g;
    long band;
} cases[] = {CASES};

int main(void)
{
    int bad = check_epilogues();
    for (unsigned i = 0; i < sizeof cases / sizeof *cases; i++)
        bad |= check_geometry(&cases[i].g, cases[i].band);
    return bad;
}
"""


@pytest.mark.native_build
def test_kernel_builds_sum_the_taps_and_apply_ccn_activate(tmp_path):
    # Each build of the kernel (the portable one: 4 lanes without masked
    # loads, the edges by shuffles; this CPU's: masked loads, flat planes)
    # sums every geometry's taps as written out plainly, and applies the
    # simple activations to its vectors before storing them exactly as
    # ccn_activate, the one table, computes them.
    kernels = os.path.join(os.path.dirname(emit_c.__code__.co_filename), 'kernels')
    geometries, bands = [], []
    for kernel, strides, pads, dilations, _, shape in CASES + _random_cases(
            numpy.random.RandomState(3), 24):
        out = [_out(shape[2 + d], kernel[d], strides[d], pads[d] + pads[d + 2], dilations[d])
               for d in (0, 1)]
        band = band_rows(out, kernel, strides, dilations)
        bands.append(band)
        geometries.append('{{1, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d}, %d}'
                          % (shape[1], shape[2], shape[3], shape[1], out[0], out[1], kernel[0],
                             kernel[1], shape[1], strides[0], strides[1], dilations[0],
                             dilations[1], pads[0], pads[1], band))
    assert any(bands) and not all(bands)  # both paths of the kernel
    source = tmp_path / 'check.c'
    source.write_text(KERNEL_CHECK.replace('CASES', ',\n'.join(geometries)))
    program = str(tmp_path / 'check')
    compile_c = ['cc', '-std=c99', '-pthread', '-fno-math-errno', '-I', kernels]
    # ccn_activate (the reference) and the pool are not under test: built
    # once, unoptimised (compiling ccn_gemm.c optimised took 7 s of the 15).
    support = []
    for f in ('gemm', 'threads'):
        support.append(str(tmp_path / ('%s.o' % f)))
        subprocess.run(compile_c + ['-O0', '-c', os.path.join(kernels, 'ccn_%s.c' % f),
                                    '-o', support[-1]], check=True)
    for flags in (['-O2'], ['-O3', '-march=native']):
        subprocess.run(compile_c + flags + [str(source), os.path.join(kernels, 'ccn_depthwise.c')]
                       + support + ['-o', program, '-lm'], check=True)
        run = subprocess.run([program], capture_output=True, text=True)
        assert run.returncode == 0, (flags, run.stdout[-3000:])
