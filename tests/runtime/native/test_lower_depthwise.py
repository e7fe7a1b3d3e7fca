"""Depthwise convolutions (group == channels) on the native backend: the
direct kernel of ccn_depthwise.c against the NumPy VM and onnxruntime, for
the unrolled sizes (3x3 and 5x5, strides 1 and 2, dilated or not), other
kernels tap by tap and the general code (mixed strides), asymmetric and no
padding, with and without bias, run-time weights and a fused activation."""
import os
import subprocess

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native.emit_c import emit_c
from chainer_compiler.runtime.native.lowerings.depthwise import depthwise_scratch, is_depthwise

from .helpers import check_native, make_model

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
    ((7, 7), (2, 2), (3, 3, 3, 3), (1, 2), True, (1, 3, 12, 15)),    # tap by tap, phases
]


def _rand(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(F32)


def _out(size, k, s, pad, d):
    return (size + pad - (k - 1) * d - 1) // s + 1


def _model(rng):
    """One model holding every case (one build), plus run-time weights
    and a Relu the fusion makes the kernel's epilogue."""
    nodes, inputs, outputs, inits, values = [], [], [], {}, []
    for i, (kernel, strides, pads, dilations, bias, shape) in enumerate(CASES):
        n, c, h, w = shape
        inputs.append(('x%d' % i, F32, list(shape)))
        values.append(_rand(rng, *shape))
        inits['w%d' % i] = _rand(rng, c, 1, *kernel)
        names = ['x%d' % i, 'w%d' % i]
        if bias:
            inits['b%d' % i] = _rand(rng, c)
            names.append('b%d' % i)
        nodes.append(helper.make_node('Conv', names, ['y%d' % i], group=c, kernel_shape=kernel,
                                      strides=strides, pads=pads, dilations=dilations))
        outputs.append(('y%d' % i, F32, [n, c, _out(h, kernel[0], strides[0],
                                                    pads[0] + pads[2], dilations[0]),
                                         _out(w, kernel[1], strides[1], pads[1] + pads[3],
                                              dilations[1])]))
    inputs.append(('xr', F32, [1, 6, 10, 10]))
    inputs.append(('wr', F32, [6, 1, 3, 3]))
    values += [_rand(rng, 1, 6, 10, 10), _rand(rng, 6, 1, 3, 3)]
    nodes += [helper.make_node('Conv', ['xr', 'wr'], ['cr'], group=6, pads=[1, 1, 1, 1],
                               strides=[2, 2]),
              helper.make_node('Relu', ['cr'], ['yr'])]
    outputs.append(('yr', F32, [1, 6, 5, 5]))
    return make_model(nodes, inputs, outputs, inits), values


@pytest.mark.native_build
def test_depthwise_convolutions_equal_the_vm():
    model, values = _model(numpy.random.RandomState(5))
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


def test_scratch_covers_the_padded_planes_and_rows():
    # 3x3, stride 1, pads 1: per plane a 10 x 12 copy and 8 rows of 12.
    assert depthwise_scratch((2, 3, 8, 10), (8, 10), (3, 3), (1, 1), (1, 1), (1, 1)) \
        == 2 * 3 * (10 * 12 + 8 * 12)
    # No padding and taps inside: no copy, only the rows for stride 1.
    assert depthwise_scratch((1, 4, 6, 6), (4, 4), (3, 3), (1, 1), (1, 1), (0, 0)) == 4 * 4 * 6
    # Stride 2: four 4 x 4 phases of the 7 x 7 plane and 3 rows of 4.
    assert depthwise_scratch((1, 4, 7, 7), (3, 3), (3, 3), (2, 2), (1, 1), (0, 0)) \
        == 4 * (4 * 4 * 4 + 3 * 4)
    # Stride 2 dilated by 2 the same way: four 9 x 9 phases of the 17 x 17
    # plane (the last output's taps reach 2 * 6 + 2 * 2 + 1), 7 rows of 9.
    assert depthwise_scratch((1, 4, 13, 13), (7, 7), (3, 3), (2, 2), (2, 2), (2, 2)) \
        == 4 * (4 * 9 * 9 + 7 * 9)


@pytest.mark.native_build
def test_the_scratch_is_what_the_kernel_computes(tmp_path):
    # The emitter sizes the scratch, the kernel carves it up: both
    # formulas must agree, for every case of the model above.
    kernels = os.path.join(os.path.dirname(emit_c.__code__.co_filename), 'kernels')
    lines = []
    for kernel, strides, pads, dilations, _, shape in CASES:
        out = [_out(shape[2 + d], kernel[d], strides[d], pads[d] + pads[d + 2], dilations[d])
               for d in (0, 1)]
        lines.append('{%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d},' % (
            shape[0], shape[1], shape[2], shape[3], shape[1], out[0], out[1], kernel[0],
            kernel[1], shape[1], strides[0], strides[1], dilations[0], dilations[1], pads[0],
            pads[1]))
    source = tmp_path / 'scratch.c'
    source.write_text('#include <stdio.h>\n#include "ccn_depthwise.h"\n'
                      'static const ccn_conv_geometry cases[] = {%s};\n'
                      'int main(void) { for (unsigned i = 0; i < sizeof cases / sizeof *cases; '
                      'i++) printf("%%ld\\n", ccn_depthwise_scratch(&cases[i])); return 0; }\n'
                      % '\n'.join(lines))
    program = str(tmp_path / 'scratch')
    subprocess.run(['cc', '-std=c99', '-pthread', '-I', kernels, str(source)]
                   + [os.path.join(kernels, 'ccn_%s.c' % f)
                      for f in ('depthwise', 'gemm', 'threads')]
                   + ['-o', program, '-lm'], check=True)
    got = [int(v) for v in subprocess.run([program], check=True, capture_output=True,
                                          text=True).stdout.split()]
    want = []
    for kernel, strides, pads, dilations, _, shape in CASES:
        out = [_out(shape[2 + d], kernel[d], strides[d], pads[d] + pads[d + 2], dilations[d])
               for d in (0, 1)]
        want.append(depthwise_scratch(shape, out, kernel, strides, dilations, pads[:2]))
    assert got == want
