"""A residual Add (and the activation after it) fused into the Conv before
it (runtime/native/fusion.py's _fuse_residual): which Adds it takes, that
each convolution path (im2col one image or several at a time, the direct
1x1 product, strided; Winograd, depthwise and the dilated one tap by tap
with a pass after) computes what the NumPy VM does,
and that the profile names the fused instruction."""
import dataclasses

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import UnsupportedNativeOpsError
from chainer_compiler.runtime.native.emit_c import emit_c
from chainer_compiler.runtime.native.fusion import fuse
from chainer_compiler.runtime.program import NO_REGISTER

from .helpers import check_native, make_model, without_nchwc_chains

F32 = numpy.float32


def _rand(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(F32)


def _block(k, x, w, residual, relu, first=True, **attrs):
    """Conv(x, w, b<k>) then Add with ``residual`` (the Conv's output as
    the Add's ``first`` input or its second), then Relu when ``relu``:
    output y<k>."""
    node = helper.make_node
    add_out = 's%d' % k if relu else 'y%d' % k
    conv = 'c%d' % k
    nodes = [node('Conv', [x, w, 'b%d' % k], [conv], **attrs),
             node('Add', [conv, residual] if first else [residual, conv], [add_out])]
    if relu:
        nodes.append(node('Relu', [add_out], ['y%d' % k]))
    return nodes


@pytest.mark.native_build
def test_residual_fused_on_every_convolution_path(tmp_path, monkeypatch):
    # The NCHW kernels' paths, so the NCHWc pass is off: the 64-channel
    # Winograd Conv would run on blocks (test_nchwc.py tests that path).
    without_nchwc_chains(monkeypatch)
    rng = numpy.random.RandomState(0)
    node = helper.make_node
    nodes = (
        # 1x1, two images per product (image by image residual), Relu.
        _block(1, 'x1', 'w1', 'r1', True)
        # 3x3 padded, one image: by blocks of output rows; Add(r, c).
        + _block(2, 'x2', 'w2', 'r2', False, first=False, pads=[1, 1, 1, 1])
        # 3x3 stride 2, two images per product.
        + _block(3, 'x1', 'w2', 'r3', True, strides=[2, 2], pads=[1, 1, 1, 1])
        # Winograd (64 channels, 3x3 stride 1, 64 tiles: more than
        # DIRECT_MAX_TILES): the Add and Relu after.
        + _block(4, 'x4', 'w4', 'r4', True, pads=[1, 1, 1, 1])
        # Depthwise: the Add and Relu in one pass after the kernel.
        + _block(5, 'x2', 'w5', 'r2', True, group=8, pads=[1, 1, 1, 1])
        # 1x1 over 256 pixels, one image: the input is the columns.
        + _block(6, 'x6', 'w1', 'r6', True)
        # A downsampling block's two branches: the later Conv takes the
        # earlier one's output as its residual.
        + [node('Conv', ['x1', 'w1', 'b1'], ['d7']),
           node('Conv', ['x1', 'w1', 'b6'], ['e7']),
           node('Add', ['d7', 'e7'], ['s7']), node('Relu', ['s7'], ['y7'])]
        # Dilated, taps mostly in the padding: tap by tap, then the pass.
        + _block(8, 'x2', 'w2', 'r2', False, dilations=[4, 4], pads=[4, 4, 4, 4])
        # A residual read for the last time: the output (read by a Neg,
        # not a program output) takes its memory.
        + [node('Neg', ['r1'], ['t9'])] + _block(9, 'x1', 'w1', 't9', True)
        + [node('Neg', ['y9'], ['z9'])])
    inits = {'w1': _rand(rng, 8, 8, 1, 1), 'w2': _rand(rng, 8, 8, 3, 3),
             'w4': _rand(rng, 64, 64, 3, 3), 'w5': _rand(rng, 8, 1, 3, 3),
             **{'b%d' % k: _rand(rng, 64 if k == 4 else 8) for k in range(1, 10)}}
    inputs = [('x1', F32, [2, 8, 7, 7]), ('r1', F32, [2, 8, 7, 7]),
              ('x2', F32, [1, 8, 6, 6]), ('r2', F32, [1, 8, 6, 6]),
              ('r3', F32, [2, 8, 4, 4]),
              ('x4', F32, [1, 64, 16, 16]), ('r4', F32, [1, 64, 16, 16]),
              ('x6', F32, [1, 8, 16, 16]), ('r6', F32, [1, 8, 16, 16])]
    shapes = {1: [2, 8, 7, 7], 2: [1, 8, 6, 6], 3: [2, 8, 4, 4], 4: [1, 64, 16, 16],
              5: [1, 8, 6, 6], 6: [1, 8, 16, 16], 7: [2, 8, 7, 7], 8: [1, 8, 6, 6],
              9: [2, 8, 7, 7]}
    model = make_model(nodes, inputs, [('y%d' % k if k < 9 else 'z9', F32, s)
                                       for k, s in shapes.items()], inits)
    program = build_program(model, fuse=False)
    fused = fuse(program)
    convs = [inst for inst in fused.instructions if inst.op == 'Conv']
    assert [inst.op for inst in fused.instructions] == ['Conv'] * 9 + ['Neg', 'Conv', 'Neg']
    assert [len(inst.inputs) for inst in convs] == [4] * 6 + [3, 4, 4, 4]
    assert [inst.attrs.get('activation') for inst in convs] == \
        ['Relu', None, 'Relu', 'Relu', 'Relu', 'Relu', None, 'Relu', None, 'Relu']
    result = emit_c(program, tmp_path, 'model')
    source = open(next(p for p in result.files if p.endswith('/model.c'))).read()
    assert source.count('ccn_conv2d_winograd(') == 1
    # ccn_conv2d's arguments: x, w, bias, residual, y, scratch.
    calls = [line.strip().rstrip(');').split(', ') for line in source.splitlines()
             if line.startswith('           ') and line.count(', ') == 5]
    assert sum(args[3] == args[4] for args in calls) == 1, calls
    assert source.count('ccn_conv2d_taps(') == 1
    # One pass after each of depthwise, taps and Winograd.
    assert source.count('ccn_add_activate(') == 3
    # The profile names each fused instruction after its nodes.
    names = [inst.name for _, inst, _, _ in result.profiled]
    assert any('Conv' in n and '+Add' in n and n.endswith('+Relu_2') for n in names), names
    check_native(model, [_rand(rng, *s) for _, _, s in inputs], atol=1e-4)


def test_residual_left_alone():
    """No fusion when the Conv's output has another reader, when the Add
    broadcasts, or when the other operand is made after the Conv: fuse
    returns the Program itself."""
    rng = numpy.random.RandomState(1)
    node = helper.make_node
    nodes = [node('Conv', ['x', 'w'], ['c1']), node('Add', ['c1', 'r'], ['y1']),
             node('Relu', ['c1'], ['y2']),                          # c1 read twice
             node('Conv', ['x', 'w'], ['c3']), node('Add', ['c3', 'rb'], ['y3']),  # broadcast
             node('Conv', ['x', 'w'], ['c4']), node('Neg', ['r'], ['n4']),   # made after c4
             node('Add', ['c4', 'n4'], ['y4'])]
    inputs = [('x', F32, [1, 3, 4, 4]), ('r', F32, [1, 2, 4, 4]), ('rb', F32, [1, 2, 1, 4])]
    outputs = [('y%d' % k, F32, [1, 2, 4, 4]) for k in range(1, 5)]
    model = make_model(nodes, inputs, outputs, {'w': _rand(rng, 2, 3, 1, 1)})
    program = build_program(model, fuse=False)
    assert fuse(program) is program


def test_a_residual_not_of_the_outputs_shape_is_refused(tmp_path):
    """A Conv whose fourth input (a Program file may carry one) is not
    shaped as its output is refused by name, not read out of bounds."""
    rng = numpy.random.RandomState(2)
    model = make_model([helper.make_node('Conv', ['x', 'w'], ['y'])],
                       [('x', F32, [1, 3, 4, 4]), ('r', F32, [1, 2, 2, 2])],
                       [('y', F32, [1, 2, 4, 4])], {'w': _rand(rng, 2, 3, 1, 1)})
    program = build_program(model, fuse=False)
    conv = program.instructions[0]
    r = program.inputs[1].register
    program = dataclasses.replace(program, instructions=[
        dataclasses.replace(conv, inputs=conv.inputs[:2] + (NO_REGISTER, r))])
    with pytest.raises(UnsupportedNativeOpsError, match=r'residual of shape \[1, 2, 2, 2\]'):
        emit_c(program, tmp_path / 'c')


def test_residual_updated_in_place_before_the_add_is_left_alone():
    """A residual that is a view of a parameter which an SGDUpdate between
    the Conv and the Add updates in place holds other values at the Conv:
    not fused."""
    rng = numpy.random.RandomState(3)
    node = helper.make_node
    nodes = [node('Reshape', ['p', 'shape'], ['r']), node('Conv', ['x', 'w'], ['c']),
             node('SGDUpdate', ['p', 'g', 'lr'], ['new_p'], domain='org.chainer_compiler'),
             node('Add', ['c', 'r'], ['y'])]
    inputs = [('x', F32, [1, 3, 4, 4]), ('p', F32, [2, 16]), ('g', F32, [2, 16]),
              ('lr', F32, [])]
    model = make_model(nodes, inputs, [('y', F32, [1, 2, 4, 4]), ('new_p', F32, [2, 16])],
                       {'w': _rand(rng, 2, 3, 1, 1),
                        'shape': numpy.array([1, 2, 4, 4], numpy.int64)}, custom=True)
    program = build_program(model, fuse=False)
    assert [inst.op for inst in program.instructions] == ['Reshape', 'Conv', 'SGDUpdate', 'Add']
    assert fuse(program) is program
