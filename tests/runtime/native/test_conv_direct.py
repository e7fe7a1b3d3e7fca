"""Direct convolutions (ccn_conv_direct.c) on the native backend against
the NumPy VM and onnxruntime: ResNet's 7x7 stride-2 first layer in small,
3x3 stride-2 layers and 5x5 at stride 1 with padding on some sides only,
odd sizes (a last block of output channels part empty, a last tile part
outside), bias, fused activation and residual, the Makefile's default
build (the tiles for x86-64-v3 and -v4 chosen at run time); and which
convolutions the rule sends there."""
import re

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native.emit_c import emit_c
from chainer_compiler.runtime.native.lowerings.conv_direct import (
    DIRECT_ROWS,
    direct_blocks,
    takes_direct,
)

from .helpers import check_native, make_model, uniform

F32 = numpy.float32


def test_rule_sends_many_tap_convolutions_only():
    assert takes_direct(True, 1, 64, (7, 7), (2, 2), (1, 1), 112)     # ResNet's conv1
    assert takes_direct(True, 1, 64, (3, 3), (2, 2), (1, 1), 14)      # its downsampling 3x3
    assert not takes_direct(True, 1, 64, (3, 3), (2, 2), (1, 1), 7)   # 7x7 outputs: wide tiles
    assert not takes_direct(False, 1, 64, (3, 3), (2, 2), (1, 1), 28)  # run-time weights
    assert not takes_direct(True, 1, 64, (1, 1), (2, 2), (1, 1), 28)  # 1x1: one phase of four
    assert takes_direct(True, 1, 9, (5, 5), (1, 1), (1, 1), 28)       # 5x5 at stride 1
    assert not takes_direct(True, 1, 64, (3, 3), (3, 3), (1, 1), 28)  # stride 3
    assert takes_direct(True, 13, 8, (3, 3), (1, 1), (1, 1), 56)      # RegNet's groups of 8
    assert takes_direct(True, 2, 16, (3, 3), (2, 2), (1, 1), 28)      # two blocks a group
    assert not takes_direct(True, 2, 12, (3, 3), (2, 2), (1, 1), 28)  # groups across blocks
    assert takes_direct(True, 55, 8, (3, 3), (1, 1), (1, 1), 7)       # narrow, but in groups
    assert not takes_direct(True, 1, 64, (3, 3), (2, 2), (2, 2), 28)  # dilated
    assert not takes_direct(True, 1, 64, (9, 9), (2, 2), (1, 1), 28)  # over 64 taps


def test_weight_blocks_layout():
    w = numpy.arange(11 * 2 * 3 * 3, dtype=F32).reshape(11, 2, 3, 3)
    blocks = direct_blocks(w).reshape(2, 2 * 3 * 3, DIRECT_ROWS)
    assert blocks[0, 4, 5] == w[5, 0, 1, 1]
    assert blocks[1, 9, 2] == w[10, 1, 0, 0]
    assert not blocks[1, :, 3:].any()  # channels 11 to 15 are padding


@pytest.mark.parametrize('channels, width, stem', [(3, 224, 1), (4, 224, 1), (5, 224, 0),
                                                    (3, 1780, 1), (3, 1800, 0)])
def test_a_stem_is_decided_at_emit_time_within_its_stack_lines(tmp_path, channels, width, stem):
    # 1 to 4 input channels read a row at a time, without scratch (NULL),
    # where the lines of one band's 3 input rows (each two phases of
    # width / 2 + 1 + DIRECT_STEM_TAIL floats) fit the kernel's stack array
    # of DIRECT_STEM_FLOATS: an image 1800 wide takes the planes instead.
    out = (width - 1) // 2 + 1
    model = make_model([helper.make_node('Conv', ['x', 'w'], ['y'], strides=[2, 2],
                                         pads=[1, 1, 1, 1])],
                       [('x', F32, [1, channels, 8, width])], [('y', F32, [1, 16, 4, out])],
                       {'w': numpy.ones((16, channels, 3, 3), F32)})
    result = emit_c(build_program(model), tmp_path, 'model')
    with open(next(p for p in result.files if p.endswith('/model.c'))) as f:
        call = re.search(r'ccn_conv2d_direct\(.*?\);', f.read(), re.S).group()
    assert ('.stem = %d,' % stem) in call
    assert call.endswith('NULL);') == bool(stem)


@pytest.mark.native_build
def test_direct_convolutions_match_the_vm(tmp_path):
    # y1: conv1 of ResNet in small (3 -> 11 channels, 7x7, stride 2, pads
    # 3), with bias and a fused ReLU, over two images of an odd size.  y2:
    # 3x3 stride 2 padded at the bottom and right only, no bias, 20 output
    # channels (a part block).  y3: 3x3 stride 2 from 512 channels (bands of
    # 3 output rows), bias plus residual (the Add fused) and ReLU.  y4: 5x5
    # at stride 1 (padded planes, no phases), 3x5 padding.  y5 to y8: a
    # mobile model's 3x3 stride-2 stem with each other epilogue, inlined
    # (ReLU6, HardSwish, LeakyReLU after a residual) or a pass after the
    # tile (Swish).  y1, y2, y4 to y10 read their 3 channels a row at a
    # time (the stem path); y9 and y10 have rows of 56 outputs (a last tile
    # of two vectors moved back to end at the row; y10's residual is a
    # dying value whose memory y10 takes, so its last tile stores a part
    # vector instead of reading the residual back after storing).
    rng = numpy.random.RandomState(0)
    node = helper.make_node
    stem = {'strides': [2, 2], 'pads': [1, 1, 1, 1]}
    nodes = [node('Conv', ['x', 'w1', 'b1'], ['c1'], strides=[2, 2], pads=[3, 3, 3, 3]),
             node('Relu', ['c1'], ['y1']),
             node('Conv', ['x', 'w2'], ['y2'], strides=[2, 2], pads=[0, 0, 1, 1]),
             node('Conv', ['z', 'w3', 'b3'], ['c3'], strides=[2, 2], pads=[1, 1, 1, 1]),
             node('Add', ['c3', 'r'], ['s3']),
             node('Relu', ['s3'], ['y3']),
             node('Conv', ['x', 'w4', 'b4'], ['y4'], pads=[1, 2, 3, 2]),
             node('Conv', ['x', 'w5', 'b5'], ['c5'], **stem),
             node('Clip', ['c5', 'zero', 'six'], ['y5']),
             node('Conv', ['x', 'w5'], ['c6'], **stem),
             node('HardSwish', ['c6'], ['y6']),
             node('Conv', ['x', 'w5', 'b5'], ['c7'], **stem),
             node('Sigmoid', ['c7'], ['g7']),
             node('Mul', ['c7', 'g7'], ['y7']),
             node('Conv', ['x', 'w5', 'b5'], ['c8'], **stem),
             node('Add', ['c8', 'r8'], ['s8']),
             node('LeakyRelu', ['s8'], ['y8'], alpha=0.1),
             node('Conv', ['v', 'w5', 'b5'], ['c9'], **stem),
             node('Relu', ['c9'], ['y9']),
             node('Relu', ['u'], ['r10']),
             node('Conv', ['v', 'w5', 'b5'], ['c10'], **stem),
             node('Add', ['c10', 'r10'], ['s10']),
             node('Clip', ['s10', 'zero', 'six'], ['k10']),
             node('Neg', ['k10'], ['y10'])]
    inits = {'w1': uniform(rng, 11, 3, 7, 7), 'b1': uniform(rng, 11),
             'w2': uniform(rng, 20, 3, 3, 3),
             'w3': uniform(rng, 16, 512, 3, 3), 'b3': uniform(rng, 16),
             'w4': uniform(rng, 9, 3, 5, 5), 'b4': uniform(rng, 9),
             'w5': uniform(rng, 13, 3, 3, 3) * 4, 'b5': uniform(rng, 13) * 4,
             'zero': numpy.array(0, F32), 'six': numpy.array(6, F32)}
    inputs = [('x', F32, [2, 3, 25, 27]), ('z', F32, [1, 512, 24, 26]),
              ('r', F32, [1, 16, 12, 13]), ('r8', F32, [2, 13, 13, 14]),
              ('v', F32, [2, 3, 9, 111]), ('u', F32, [2, 13, 5, 56])]
    outputs = [('y1', F32, [2, 11, 13, 14]), ('y2', F32, [2, 20, 12, 13]),
               ('y3', F32, [1, 16, 12, 13]), ('y4', F32, [2, 9, 25, 27])] + [
                   ('y%d' % k, F32, [2, 13, 13, 14]) for k in (5, 6, 7, 8)] + [
                   ('y%d' % k, F32, [2, 13, 5, 56]) for k in (9, 10)]
    model = make_model(nodes, inputs, outputs, inits, opset=20)
    result = emit_c(build_program(model), tmp_path, 'model')
    with open(next(p for p in result.files if p.endswith('/model.c'))) as f:
        code = f.read()
    # (the residuals fused: no add after)
    assert code.count('ccn_conv2d_direct(') == 10 and 'ccn_add_activate' not in code
    assert code.count('.stem = 1,') == 9
    for act in ('CLIP', 'HARD_SWISH', 'SWISH', 'LEAKY_RELU'):
        assert '.act = CCN_ACT_%s,' % act in code
    check_native(model, [uniform(rng, *s) for _, _, s in inputs], rtol=1e-4, atol=1e-4)




@pytest.mark.native_build
def test_grouped_direct_convolutions_match_the_vm(tmp_path):
    # A block of 8 output channels reads its own group's planes and weights.
    # y1: RegNet's 3x3 in groups of 8 (4 of them), bias and ReLU, two
    # images.  y2: 3 groups of 16 outputs (two blocks each) from 8 inputs
    # each, stride 2, a residual added.  y3: 4 input channels in 2 groups,
    # few enough for the stem path, which reads every channel: planes
    # instead.  y4: groups of 4 outputs (blocks across groups) stay on
    # im2col.  y5: rows of 5 outputs, too narrow for one group, direct in
    # groups.
    rng = numpy.random.RandomState(3)
    node = helper.make_node
    nodes = [node('Conv', ['x', 'w1', 'b1'], ['c1'], group=4, pads=[1, 1, 1, 1]),
             node('Relu', ['c1'], ['y1']),
             node('Conv', ['z', 'w2', 'b2'], ['c2'], group=3, strides=[2, 2],
                  pads=[1, 1, 1, 1]),
             node('Add', ['c2', 'r'], ['y2']),
             node('Conv', ['v', 'w3'], ['y3'], group=2, pads=[1, 1, 1, 1]),
             node('Conv', ['x', 'w4'], ['y4'], group=8, pads=[1, 1, 1, 1]),
             node('Conv', ['n', 'w1', 'b1'], ['y5'], group=4, pads=[1, 1, 1, 1])]
    inits = {'w1': uniform(rng, 32, 8, 3, 3), 'b1': uniform(rng, 32),
             'w2': uniform(rng, 48, 8, 3, 3), 'b2': uniform(rng, 48),
             'w3': uniform(rng, 16, 2, 3, 3), 'w4': uniform(rng, 32, 4, 3, 3)}
    inputs = [('x', F32, [2, 32, 15, 21]), ('z', F32, [1, 24, 27, 29]),
              ('r', F32, [1, 48, 14, 15]), ('v', F32, [1, 4, 13, 17]),
              ('n', F32, [1, 32, 6, 5])]
    outputs = [('y1', F32, [2, 32, 15, 21]), ('y2', F32, [1, 48, 14, 15]),
               ('y3', F32, [1, 16, 13, 17]), ('y4', F32, [2, 32, 15, 21]),
               ('y5', F32, [1, 32, 6, 5])]
    model = make_model(nodes, inputs, outputs, inits, opset=20)
    result = emit_c(build_program(model), tmp_path, 'model')
    with open(next(p for p in result.files if p.endswith('/model.c'))) as f:
        code = f.read()
    assert code.count('ccn_conv2d_direct(') == 4 and '.stem = 1,' not in code
    check_native(model, [uniform(rng, *s) for _, _, s in inputs], rtol=1e-4, atol=1e-4)
