"""Native lowerings of LRN, LayerNormalization, InstanceNormalization and
inference BatchNormalization, checked against the NumPy VM and onnxruntime."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.runtime.native.emit_c import UnsupportedNativeOpsError

from .helpers import check_native, make_model

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
