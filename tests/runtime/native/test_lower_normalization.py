"""Native lowerings of LRN, LayerNormalization (and its gradient),
InstanceNormalization and inference BatchNormalization, checked against the
NumPy VM and onnxruntime."""
from dataclasses import replace

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import UnsupportedNativeOpsError
from chainer_compiler.runtime.program import NO_REGISTER

from .helpers import ATOL, RTOL, check_native, make_model

F = numpy.float32


def _rand(*shape, seed=0):
    return numpy.random.RandomState(seed).randn(*shape).astype(F)


@pytest.mark.native_build
def test_lrn_sizes():
    # A window wider than the channels, non-default attributes.
    nodes = [helper.make_node('LRN', ['x'], ['y1'], size=3),
             helper.make_node('LRN', ['x'], ['y2'], size=9, alpha=1e-3, beta=0.5, bias=2.0)]
    model = make_model(nodes, [('x', F, (2, 5, 3, 4))],
                       [('y1', F, (2, 5, 3, 4)), ('y2', F, (2, 5, 3, 4))])
    check_native(model, [_rand(2, 5, 3, 4) * 3])


@pytest.mark.native_build
def test_lrn_even_size_and_other_ranks():
    # ONNX allows an even size (the window reaches one channel further up
    # than down) and any (N, C, ...) rank; onnxruntime takes only odd sizes
    # and 4-D inputs, so only the NumPy VM is compared.
    nodes = [helper.make_node('LRN', ['x'], ['y1'], size=4, alpha=0.01, beta=0.5, bias=2.0),
             helper.make_node('LRN', ['z'], ['y2'], size=5, alpha=0.1, beta=0.9)]
    model = make_model(nodes, [('x', F, (2, 5, 3)), ('z', F, (3, 6))],
                       [('y1', F, (2, 5, 3)), ('y2', F, (3, 6))])
    check_native(model, [_rand(2, 5, 3) * 3, _rand(3, 6, seed=1)], onnxruntime_check=False)


@pytest.mark.native_build
def test_lrn_as_googlenet():
    # GoogLeNet: LRN(size=5, alpha=1e-4, beta=0.75) between Conv and MaxPool.
    node = helper.make_node('LRN', ['x'], ['y'], size=5, alpha=1e-4, beta=0.75, bias=1.0)
    model = make_model([node], [('x', F, (1, 64, 14, 14))], [('y', F, (1, 64, 14, 14))])
    check_native(model, [_rand(1, 64, 14, 14) * 10])


@pytest.mark.native_build
def test_layer_norm_axes_and_outputs():
    # Default axis -1, a negative and a positive axis, Mean and InvStdDev
    # outputs, no B, epsilon.
    nodes = [helper.make_node('LayerNormalization', ['x', 's1', 'b1'], ['y1']),
             helper.make_node('LayerNormalization', ['x', 's2', 'b2'], ['y2', 'm2', 'v2'],
                              axis=-2, epsilon=1e-3),
             helper.make_node('LayerNormalization', ['x', 's3'], ['y3', '', 'v3'], axis=1)]
    x = _rand(2, 3, 4, 5) * 4 + 7  # a large mean tests the centred variance
    inits = {'s1': _rand(5, seed=1), 'b1': _rand(5, seed=2), 's2': _rand(4, 5, seed=3),
             'b2': _rand(4, 5, seed=4), 's3': _rand(3, 4, 5, seed=5)}
    model = make_model(nodes, [('x', F, x.shape)],
                       [('y1', F, x.shape), ('y2', F, x.shape), ('m2', F, (2, 3, 1, 1)),
                        ('v2', F, (2, 3, 1, 1)), ('y3', F, x.shape), ('v3', F, (2, 1, 1, 1))],
                       inits, opset=17)
    check_native(model, [x])


@pytest.mark.native_build
def test_layer_norm_broadcast_parameters():
    # Scale and B broadcast over the normalized axes: constant ones are
    # expanded at emit time, graph inputs at run time; a B varying along
    # a leading axis (unidirectional broadcast to X) switches to full layout.
    nodes = [helper.make_node('LayerNormalization', ['x', 'sc', 'bc'], ['y1'], axis=1),
             helper.make_node('LayerNormalization', ['x', 's', 'b'], ['y2'], axis=-2),
             helper.make_node('LayerNormalization', ['x', 's', 'bl'], ['y3'], axis=2)]
    x = _rand(2, 3, 4, 5)
    inits = {'sc': _rand(1, 4, 1, seed=1), 'bc': _rand(5, seed=2)}
    model = make_model(nodes, [('x', F, x.shape), ('s', F, (1, 1, 1, 5)), ('b', F, (4, 1)),
                               ('bl', F, (2, 1, 1, 5))],
                       [('y1', F, x.shape), ('y2', F, x.shape), ('y3', F, x.shape)],
                       inits, opset=17)
    check_native(model, [x, _rand(1, 1, 1, 5, seed=3), _rand(4, 1, seed=4),
                         _rand(2, 1, 1, 5, seed=5)])


@pytest.mark.native_build
def test_layer_norm_transformer_block():
    # As the Transformer encoder uses it: (batch, length, d_model), axis -1,
    # after a residual Add.
    nodes = [helper.make_node('Add', ['x', 'h'], ['r']),
             helper.make_node('LayerNormalization', ['r', 'g', 'beta'], ['y'], epsilon=1e-5)]
    model = make_model(nodes, [('x', F, (2, 7, 16)), ('h', F, (2, 7, 16))],
                       [('y', F, (2, 7, 16))], {'g': _rand(16, seed=2), 'beta': _rand(16, seed=3)},
                       opset=17)
    check_native(model, [_rand(2, 7, 16), _rand(2, 7, 16, seed=1)])


def test_layer_norm_refusals(tmp_path):
    nodes = [helper.make_node('LayerNormalization', ['x', 's'], ['y1'], stash_type=11),
             helper.make_node('LayerNormalization', ['x', 'w'], ['y2'])]
    model = make_model(nodes, [('x', F, (2, 3)), ('s', F, (3,)), ('w', F, (2, 2))],
                       [('y1', F, (2, 3)), ('y2', F, (2, 3))], opset=17)
    with pytest.raises(UnsupportedNativeOpsError) as e:
        check_native(model, [_rand(2, 3), _rand(3), _rand(2, 2)])
    assert 'stash_type 11' in str(e.value) and 'does not broadcast' in str(e.value)


def _grad_node(inputs, outputs, **attrs):
    return helper.make_node('LayerNormalizationGrad', inputs, outputs,
                            domain='org.chainer_compiler', **attrs)


@pytest.mark.native_build
def test_layer_norm_grad():
    # The Transformer's case (axis -1, the forward's saved statistics); any
    # axis with the statistics recomputed; a Scale broadcast along normalized
    # axes (constant, and a graph input), or varying along a leading axis
    # (full layout); gscale unread; an empty batch (gscale zeros); rows
    # enough for the thread pool (CCN_PARALLEL_WORK), on 1 and 3 threads.
    x = _rand(2, 3, 4, 5) * 4 + 7  # a large mean tests the centred statistics
    nodes = [helper.make_node('LayerNormalization', ['x', 's1'], ['y1', 'm1', 'v1']),
             _grad_node(['x', 's1', 'gy', 'm1', 'v1'], ['gx1', 'gs1']),
             _grad_node(['x', 's2', 'gy'], ['gx2', 'gs2'], axis=1, epsilon=1e-3),
             _grad_node(['x', 'sc', 'gy'], ['gx3', 'gs3'], axis=-2),
             _grad_node(['x', 's', 'gy'], ['gx4', 'gs4'], axis=-3),
             _grad_node(['x', 'sl', 'gy'], ['gx5', 'gs5'], axis=2),
             _grad_node(['x', 's1', 'gy'], ['gx6', 'unread'], axis=-1),
             _grad_node(['e', 's4', 'ge'], ['gx7', 'gs7'], axis=1),
             _grad_node(['big', 's5', 'gbig'], ['gx8', 'gs8'])]
    inits = {'s1': _rand(5, seed=1), 's2': _rand(3, 4, 5, seed=2), 'sc': _rand(4, 1, seed=3),
             's4': _rand(4, seed=4), 's5': _rand(200, seed=5)}
    inputs = {'x': x, 's': _rand(1, 4, 1, seed=6), 'sl': _rand(3, 1, 5, seed=7),
              'gy': _rand(*x.shape, seed=8), 'e': _rand(0, 4), 'ge': _rand(0, 4),
              'big': _rand(1400, 200, seed=9), 'gbig': _rand(1400, 200, seed=10)}
    outputs = [('gx%d' % k, F, x.shape) for k in range(1, 7)] + [
        ('gs1', F, (5,)), ('gs2', F, (3, 4, 5)), ('gs3', F, (4, 1)), ('gs4', F, (1, 4, 1)),
        ('gs5', F, (3, 1, 5)), ('gx7', F, (0, 4)), ('gs7', F, (4,)), ('gx8', F, (1400, 200)),
        ('gs8', F, (200,))]
    model = make_model(nodes, [(n, F, a.shape) for n, a in inputs.items()], outputs, inits,
                       opset=17, custom=True)
    program = build_program(model)
    # ONNX requires both outputs; a Program may omit gscale (not computed).
    program.instructions = [
        replace(i, outputs=(i.outputs[0], NO_REGISTER),
                frees=tuple(r for r in i.frees if r != i.outputs[1]))
        if program.register_name(i.outputs[-1]) == 'unread' else i
        for i in program.instructions]
    want = Executor(program, backend='numpy').run_positional(list(inputs.values()))
    for threads in (1, 3):
        got = Executor(program, backend='native', threads=threads).run_positional(
            list(inputs.values()))
        for v, g, w in zip(program.outputs, got, want):
            assert g.shape == w.shape, v.name
            numpy.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=v.name)
        assert not got[[v.name for v in program.outputs].index('gs7')].any()


def test_layer_norm_grad_refusals():
    nodes = [_grad_node(['x', 's', 'gy', 'm'], ['gx1', 'gs1']),
             _grad_node(['x', 's', 'gz'], ['gx2', 'gs2'])]
    model = make_model(nodes, [('x', F, (2, 3)), ('s', F, (3,)), ('gy', F, (2, 3)),
                               ('m', F, (2, 1)), ('gz', F, (3, 2))],
                       [('gx1', F, (2, 3)), ('gs1', F, (3,)), ('gx2', F, (2, 3)),
                        ('gs2', F, (3,))], opset=17, custom=True)
    with pytest.raises(UnsupportedNativeOpsError) as e:
        check_native(model, [_rand(2, 3), _rand(3), _rand(2, 3), _rand(2, 1), _rand(3, 2)],
                     onnxruntime_check=False)
    assert 'mean and inv_std must be given together' in str(e.value)
    assert 'gradient of shape [3, 2], not [2, 3]' in str(e.value)


@pytest.mark.native_build
def test_instance_norm_and_batch_norm():
    nodes = [helper.make_node('InstanceNormalization', ['x', 's', 'b'], ['y1']),
             helper.make_node('InstanceNormalization', ['z', 's', 'b'], ['y2'], epsilon=1e-2),
             helper.make_node('BatchNormalization', ['x', 's', 'b', 'm', 'v'], ['y3'])]
    inits = {'s': _rand(3, seed=1), 'b': _rand(3, seed=2), 'm': _rand(3, seed=3),
             'v': numpy.abs(_rand(3, seed=4)) + 0.5}
    model = make_model(nodes, [('x', F, (2, 3, 4, 5)), ('z', F, (2, 3, 6))],
                       [('y1', F, (2, 3, 4, 5)), ('y2', F, (2, 3, 6)), ('y3', F, (2, 3, 4, 5))],
                       inits)
    check_native(model, [_rand(2, 3, 4, 5) * 2 + 1, _rand(2, 3, 6, seed=5)])


@pytest.mark.native_build
def test_size_one_and_empty_dims():
    # A normalized size of 1 gives B; an empty batch gives an empty result.
    nodes = [helper.make_node('LayerNormalization', ['x', 's', 'b'], ['y1'], axis=-1),
             helper.make_node('LayerNormalization', ['e', 's4', 'b4'], ['y2'], axis=1),
             helper.make_node('InstanceNormalization', ['i', 's', 'b'], ['y3']),
             helper.make_node('LRN', ['l'], ['y4'], size=3)]
    inits = {'s': _rand(1, seed=1), 'b': _rand(1, seed=2), 's4': _rand(4, seed=3),
             'b4': _rand(4, seed=4)}
    model = make_model(nodes, [('x', F, (3, 1)), ('e', F, (0, 4)), ('i', F, (2, 1, 1, 1)),
                               ('l', F, (1, 1, 1, 1))],
                       [('y1', F, (3, 1)), ('y2', F, (0, 4)), ('y3', F, (2, 1, 1, 1)),
                        ('y4', F, (1, 1, 1, 1))], inits, opset=17)
    check_native(model, [_rand(3, 1), _rand(0, 4), _rand(2, 1, 1, 1), _rand(1, 1, 1, 1)])
