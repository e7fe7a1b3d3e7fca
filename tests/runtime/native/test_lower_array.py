"""The array family of the native backend (lowerings/array.py, ccn_array.c):
data movement on every dtype, checked against the NumPy VM and
onnxruntime."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import UnsupportedNativeOpsError, emit_c

from .helpers import check_native, make_model

DTYPES = ('float32', 'float64', 'int64', 'int32', 'bool')
I64_MAX, I64_MIN = 2**63 - 1, -2**63


def sample(dtype, shape, seed=0):
    """Distinct-looking values of ``dtype`` (negatives included)."""
    values = numpy.random.RandomState(seed).uniform(-9, 9, shape)
    return (values > 0) if dtype == 'bool' else values.astype(dtype)


def per_dtype(op, shape, out_shape, opset=13, inits=None, extra=(), **attrs):
    """A model applying ``op`` (with constant ``extra`` inputs from
    ``inits``) to one input of each dtype, and those inputs."""
    nodes = [helper.make_node(op, ['x_' + d] + list(extra), ['y_' + d], **attrs)
             for d in DTYPES]
    model = make_model(nodes, [('x_' + d, d, shape) for d in DTYPES],
                       [('y_' + d, d, out_shape) for d in DTYPES], inits or {}, opset)
    return model, [sample(d, shape, k) for k, d in enumerate(DTYPES)]


def refusal(model) -> str:
    """The reason emit_c gives for refusing ``model``'s one instruction."""
    with pytest.raises(UnsupportedNativeOpsError) as info:
        emit_c(build_program(model), '/nonexistent/not-written')
    assert len(info.value.problems) == 1
    return info.value.problems[0][2]


# -- strided copies --------------------------------------------------------
@pytest.mark.native_build
def test_transpose_every_dtype():
    check_native(*per_dtype('Transpose', (2, 3, 4), (3, 4, 2), perm=[1, 2, 0]))


@pytest.mark.native_build
def test_transpose_default_perm_and_size_one_axes():
    nodes = [helper.make_node('Transpose', ['x'], ['y']),
             helper.make_node('Transpose', ['x'], ['z'], perm=[0, 3, 1, 2])]
    model = make_model(nodes, [('x', 'float32', (2, 1, 3, 5))],
                       [('y', 'float32', (5, 3, 1, 2)), ('z', 'float32', (2, 5, 1, 3))])
    check_native(model, [sample('float32', (2, 1, 3, 5))])


@pytest.mark.native_build
def test_concat_negative_axis_empty_part_and_every_dtype():
    nodes = [helper.make_node('Concat', ['a_' + d, 'b_' + d, 'c_' + d], ['y_' + d], axis=-2)
             for d in DTYPES]
    inputs = [(n + '_' + d, d, s) for d in DTYPES
              for n, s in (('a', (2, 3, 4)), ('b', (2, 0, 4)), ('c', (2, 1, 4)))]
    model = make_model(nodes, inputs, [('y_' + d, d, (2, 4, 4)) for d in DTYPES])
    check_native(model, [sample(d, s, k) for k, (_, d, s) in enumerate(inputs)])


@pytest.mark.native_build
def test_concat_axis_zero_one_input_per_row():
    model = make_model([helper.make_node('Concat', ['a', 'b'], ['y'], axis=0)],
                       [('a', 'int32', (1, 3)), ('b', 'int32', (2, 3))],
                       [('y', 'int32', (3, 3))], opset=4)
    check_native(model, [sample('int32', (1, 3)), sample('int32', (2, 3), 1)])


@pytest.mark.parametrize('opset, inputs, attrs, sizes', [
    (11, [], {'split': [1, 3, 2]}, [1, 3, 2]),                  # attribute
    (13, ['sizes'], {}, [1, 3, 2]),                             # input
    (13, [], {}, [2, 2, 2]),                                    # equal parts
    (18, [], {'num_outputs': 3}, [2, 2, 2]),
])
@pytest.mark.native_build
def test_split_sizes_by_opset(opset, inputs, attrs, sizes):
    outputs = ['y%d' % k for k in range(3)]
    node = helper.make_node('Split', ['x'] + inputs, outputs, axis=-1, **attrs)
    model = make_model([node], [('x', 'float64', (2, 6))],
                       [(o, 'float64', (2, s)) for o, s in zip(outputs, sizes)],
                       {'sizes': numpy.array(sizes, numpy.int64)}, opset)
    check_native(model, [sample('float64', (2, 6))])


@pytest.mark.native_build
def test_split_num_outputs_uneven_and_every_dtype():
    nodes = [helper.make_node('Split', ['x_' + d], ['p_' + d, 'q_' + d, 'r_' + d],
                              axis=1, num_outputs=3) for d in DTYPES]
    outputs = [(o + '_' + d, d, (2, s, 3)) for d in DTYPES
               for o, s in (('p', 3), ('q', 3), ('r', 1))]
    model = make_model(nodes, [('x_' + d, d, (2, 7, 3)) for d in DTYPES], outputs, opset=18)
    check_native(model, [sample(d, (2, 7, 3), k) for k, d in enumerate(DTYPES)])


@pytest.mark.native_build
def test_slice_attributes_opset_9():
    node = helper.make_node('Slice', ['x'], ['y'], starts=[1, -3], ends=[100, -1], axes=[0, 2])
    model = make_model([node], [('x', 'int64', (3, 2, 5))], [('y', 'int64', (2, 2, 2))],
                       opset=9)
    check_native(model, [sample('int64', (3, 2, 5))])


@pytest.mark.parametrize('starts, ends, axes, steps, out', [
    ([0, 1], [2, 4], None, None, (2, 3, 6)),                     # default axes and steps
    ([-1, 10], [I64_MIN, -8], [-1, 1], [-2, -1], (3, 4, 3)),     # reversed, clamped
    ([1, 0], [I64_MAX, 3], [2, 0], [2, 1], (3, 4, 3)),           # clamped end, stride 2
    ([3], [1], [1], [1], (3, 0, 6)),                             # empty
    ([5], [0], [2], [-3], (3, 4, 2)),                            # reversed, stride 3
])
@pytest.mark.native_build
def test_slice_inputs(starts, ends, axes, steps, out):
    names = ['starts', 'ends'] + (['axes'] if axes else []) + (['steps'] if steps else [])
    inits = {n: numpy.array(v, numpy.int64) for n, v in
             zip(['starts', 'ends', 'axes', 'steps'], [starts, ends, axes, steps]) if v}
    model = make_model([helper.make_node('Slice', ['x'] + names, ['y'])],
                       [('x', 'float32', (3, 4, 6))], [('y', 'float32', out)], inits)
    check_native(model, [sample('float32', (3, 4, 6))])


@pytest.mark.native_build
def test_slice_every_dtype():
    inits = {'s': numpy.array([2, -1]), 'e': numpy.array([0, -5]),
             'a': numpy.array([0, 1]), 'k': numpy.array([-1, -2])}
    check_native(*per_dtype('Slice', (3, 5), (2, 2), inits=inits, extra=['s', 'e', 'a', 'k']))


@pytest.mark.native_build
def test_expand_broadcasts_both_ways_on_every_dtype():
    inits = {'shape': numpy.array([2, 1, 4], numpy.int64)}
    check_native(*per_dtype('Expand', (3, 1), (2, 3, 4), inits=inits, extra=['shape']))


# -- index tables: Tile and Pad --------------------------------------------
@pytest.mark.native_build
def test_tile_every_dtype():
    inits = {'repeats': numpy.array([2, 1, 3], numpy.int64)}
    check_native(*per_dtype('Tile', (2, 3, 2), (4, 3, 6), inits=inits, extra=['repeats']))


@pytest.mark.native_build
def test_tile_zero_repeats_gives_an_empty_result():
    model = make_model([helper.make_node('Tile', ['x', 'r'], ['y'])],
                       [('x', 'float32', (2, 3))], [('y', 'float32', (0, 6))],
                       {'r': numpy.array([0, 2], numpy.int64)})
    check_native(model, [sample('float32', (2, 3))])


@pytest.mark.native_build
def test_tile_opset_1_tiles_and_axis_inputs():
    model = make_model([helper.make_node('Tile', ['x', 'tiles', 'axis'], ['y'])],
                       [('x', 'float32', (2, 3))], [('y', 'float32', (2, 9))],
                       {'tiles': numpy.array(3, numpy.int64), 'axis': numpy.array(-1, numpy.int64)},
                       opset=5)
    # onnxruntime implements no Tile before opset 6.
    check_native(model, [sample('float32', (2, 3))], onnxruntime_check=False)


@pytest.mark.parametrize('mode, pads', [
    ('constant', [1, 0, 2, 2, 1, 0]),
    ('constant', [0, -1, 2, 1, 1, -2]),   # negative pads crop
    ('reflect', [1, 2, 0, 0, 1, 3]),
    ('edge', [2, 0, 4, 1, 3, 0]),
])
@pytest.mark.native_build
def test_pad_modes(mode, pads):
    x = sample('float32', (2, 3, 4))
    out = tuple(d + b + e for d, b, e in zip(x.shape, pads, pads[3:]))
    model = make_model([helper.make_node('Pad', ['x', 'pads', 'value'], ['y'], mode=mode)],
                       [('x', 'float32', x.shape)], [('y', 'float32', out)],
                       {'pads': numpy.array(pads, numpy.int64),
                        'value': numpy.array(-7.5, numpy.float32)})
    check_native(model, [x])


@pytest.mark.native_build
def test_pad_value_input_from_the_graph_and_every_dtype():
    nodes = [helper.make_node('Pad', ['x_' + d, 'pads', 'v_' + d], ['y_' + d]) for d in DTYPES]
    inputs = [('x_' + d, d, (2, 3)) for d in DTYPES] + [('v_' + d, d, ()) for d in DTYPES]
    model = make_model(nodes, inputs, [('y_' + d, d, (3, 6)) for d in DTYPES],
                       {'pads': numpy.array([0, 1, 1, 2], numpy.int64)})
    values = [sample(d, (2, 3), k) for k, d in enumerate(DTYPES)]
    check_native(model, values + [numpy.ones((), d) for d in DTYPES])


@pytest.mark.native_build
def test_pad_attributes_opset_2_and_zero_default_value():
    nodes = [helper.make_node('Pad', ['x'], ['y'], pads=[1, 0, 0, 2], value=3.0),
             helper.make_node('Pad', ['i'], ['j'], pads=[0, 1, 1, 0])]
    model = make_model(nodes, [('x', 'float32', (2, 2)), ('i', 'float64', (1, 2))],
                       [('y', 'float32', (3, 4)), ('j', 'float64', (2, 3))], opset=2)
    check_native(model, [sample('float32', (2, 2)), sample('float64', (1, 2))])


@pytest.mark.native_build
def test_pad_axes_opset_18_and_wrap_opset_19():
    nodes = [helper.make_node('Pad', ['x', 'pads', '', 'axes'], ['y'], mode='edge'),
             helper.make_node('Pad', ['x', 'wpads'], ['z'], mode='wrap')]
    model = make_model(nodes, [('x', 'float32', (2, 3, 4))],
                       [('y', 'float32', (2, 5, 5)), ('z', 'float32', (3, 5, 4))],
                       {'pads': numpy.array([1, 0, 0, 2], numpy.int64),
                        'axes': numpy.array([-1, 1], numpy.int64),
                        'wpads': numpy.array([1, 2, 0, 0, 0, 0], numpy.int64)}, opset=19)
    check_native(model, [sample('float32', (2, 3, 4))])


# -- Gather ----------------------------------------------------------------
@pytest.mark.native_build
def test_gather_every_dtype_constant_negative_indices():
    inits = {'idx': numpy.array([[2, -1], [0, -4]], numpy.int64)}
    check_native(*per_dtype('Gather', (3, 4), (3, 2, 2), inits=inits, extra=['idx'], axis=-1))


@pytest.mark.native_build
def test_gather_indices_from_the_graph_scalar_and_int64():
    nodes = [helper.make_node('Gather', ['x', 'i32'], ['y'], axis=1),
             helper.make_node('Gather', ['x', 'i64'], ['z']),
             helper.make_node('Gather', ['x', 'k'], ['w'], axis=2)]
    model = make_model(nodes, [('x', 'float64', (3, 4, 2)), ('i32', 'int32', (5,)),
                               ('i64', 'int64', (2, 1))],
                       [('y', 'float64', (3, 5, 2)), ('z', 'float64', (2, 1, 4, 2)),
                        ('w', 'float64', (3, 4))], {'k': numpy.array(-1, numpy.int64)})
    check_native(model, [sample('float64', (3, 4, 2)), numpy.array([3, -4, 0, -1, 1], 'int32'),
                         numpy.array([[-3], [2]], 'int64')])


@pytest.mark.native_build
def test_gather_token_ids_from_an_embedding():
    """The BiLSTM classifier's pattern: int32 token ids [batch, length]
    look up rows of a float32 embedding constant."""
    embedding = sample('float32', (11, 6))
    model = make_model([helper.make_node('Gather', ['embed', 'tokens'], ['y'])],
                       [('tokens', 'int32', (2, 5))], [('y', 'float32', (2, 5, 6))],
                       {'embed': embedding})
    tokens = numpy.array([[1, 10, 0, 3, 3], [7, 2, 9, 0, 0]], 'int32')
    y, = check_native(model, [tokens])
    numpy.testing.assert_array_equal(y, embedding[tokens])


# -- GatherND --------------------------------------------------------------
@pytest.mark.native_build
def test_gather_nd_batch_dims_negative_and_both_index_dtypes():
    """What the dynamo exports' padding masks do, and the spec's forms:
    whole elements and slices, batch_dims 0, 1 and 2, int64 and int32
    indices, negative ones; an index out of range is the VM's IndexError."""
    from chainer_compiler.runtime.errors import KernelError
    from chainer_compiler.runtime.executor import Executor
    nodes = [helper.make_node('GatherND', ['x', 'full'], ['y0']),
             helper.make_node('GatherND', ['x', 'part'], ['y1']),
             helper.make_node('GatherND', ['x', 'batched'], ['y2'], batch_dims=1),
             helper.make_node('GatherND', ['x', 'twice'], ['y3'], batch_dims=2),
             helper.make_node('GatherND', ['b', 'part'], ['y4'])]
    inputs = [('x', 'float32', (2, 3, 4)), ('b', 'bool', (2, 3, 4)),
              ('full', 'int64', (5, 3)), ('part', 'int32', (2, 2, 1)),
              ('batched', 'int64', (2, 1, 2)), ('twice', 'int32', (2, 3, 1))]
    outputs = [('y0', 'float32', (5,)), ('y1', 'float32', (2, 2, 3, 4)),
               ('y2', 'float32', (2, 1)), ('y3', 'float32', (2, 3)),
               ('y4', 'bool', (2, 2, 3, 4))]
    model = make_model(nodes, inputs, outputs, opset=13)
    feed = [sample('float32', (2, 3, 4)), sample('bool', (2, 3, 4), 1),
            numpy.array([[0, 0, 0], [1, 2, 3], [-1, -3, -4], [-2, 1, -1], [1, 0, 2]], 'int64'),
            numpy.array([[[1]], [[-2]]], 'int32').repeat(2, axis=1),
            numpy.array([[[2, -1]], [[-3, 0]]], 'int64'),
            numpy.array([[[0], [3], [-1]], [[-4], [1], [2]]], 'int32')]
    # onnxruntime takes only the spec's int64 indices.
    check_native(model, feed, onnxruntime_check=False)
    bad = list(feed)
    bad[2] = feed[2].copy()
    bad[2][3, 1] = 3  # axis 1 has 3 elements
    program = build_program(model)
    with pytest.raises(KernelError, match="GatherND.*IndexError: an index is out of bounds"):
        Executor(program, backend='native').run_positional(bad)
    with pytest.raises(KernelError, match='GatherND.*IndexError'):
        Executor(program, backend='numpy').run_positional(bad)


def test_gather_nd_refuses_indices_that_do_not_fit():
    model = make_model([helper.make_node('GatherND', ['x', 'i'], ['y'], batch_dims=1)],
                       [('x', 'float32', (2, 3)), ('i', 'int64', (3, 1))],
                       [('y', 'float32', (3,))])
    assert 'do not index data of shape [2, 3] with batch_dims 1' in refusal(model)


# -- views -----------------------------------------------------------------
@pytest.mark.parametrize('opset', [11, 13])
@pytest.mark.native_build
def test_squeeze_unsqueeze_axes_attribute_or_input_share_memory(opset, tmp_path):
    """Axes are an attribute before opset 13, a constant input from it;
    the intermediate results share their input's memory."""
    inits = {}

    def node(op, x, y, axes=None):
        if axes is None:
            return helper.make_node(op, [x], [y])
        if opset < 13:
            return helper.make_node(op, [x], [y], axes=axes)
        inits[y + '_axes'] = numpy.array(axes, numpy.int64)
        return helper.make_node(op, [x, y + '_axes'], [y])
    nodes = [node('Squeeze', 'x', 's', [-1, 1]), node('Unsqueeze', 's', 'u', [0, -1]),
             node('Squeeze', 'x', 'all'), node('Unsqueeze', 'all', 't', [0, -1]),
             helper.make_node('Cast', ['t'], ['same'], to=6)]  # int32 to int32
    model = make_model(nodes, [('x', 'int32', (3, 1, 2, 1))],
                       [('u', 'int32', (1, 3, 2, 1)), ('all', 'int32', (3, 2)),
                        ('same', 'int32', (1, 3, 2, 1))], inits, opset)
    check_native(model, [sample('int32', (3, 1, 2, 1))])
    emit_c(build_program(model), tmp_path)
    assert (tmp_path / 'model.c').read_text().count('no copy') == 2  # s and t


# -- Where and Cast --------------------------------------------------------
@pytest.mark.parametrize('dtypes', [DTYPES[:-1], DTYPES[-1:]])
@pytest.mark.native_build
def test_where_broadcasts_all_three_on_every_dtype(dtypes):
    # Rows of each kind the kernel runs apart: a scalar x (c), all three
    # contiguous (v) and a scalar y (u; a NaN guard's and a mask's).
    node = helper.make_node
    nodes = [n for d in dtypes for n in (
        node('Where', ['c', 'x_' + d, 'y_' + d], ['z_' + d]),
        node('Where', ['f', 'w_' + d, 'y_' + d], ['v_' + d]),
        node('Where', ['f', 'w_' + d, 's_' + d], ['u_' + d]))]
    inputs = [('c', 'bool', (2, 1, 4)), ('f', 'bool', (2, 3, 4))] + [
        (k + d, d, shape) for k, shape in (('x_', (3, 1)), ('y_', (1, 3, 4)),
                                          ('w_', (2, 3, 4)), ('s_', ())) for d in dtypes]
    model = make_model(nodes, inputs, [(k + d, d, (2, 3, 4)) for d in dtypes
                                       for k in ('z_', 'v_', 'u_')], opset=16)
    # onnxruntime has no Where on bool values.
    check_native(model, [sample(d, s, k) for k, (_, d, s) in enumerate(inputs)],
                 onnxruntime_check='bool' not in dtypes)


@pytest.mark.native_build
def test_cast_between_every_pair_of_dtypes():
    nodes = [helper.make_node('Cast', ['x_' + a], ['%s_%s' % (a, b)],
                              to=helper.np_dtype_to_tensor_dtype(numpy.dtype(b)))
             for a in DTYPES for b in DTYPES if a != b]
    outputs = [('%s_%s' % (a, b), b, (7,)) for a in DTYPES for b in DTYPES if a != b]
    model = make_model(nodes, [('x_' + d, d, (7,)) for d in DTYPES], outputs)
    floats = [-2.7, -0.5, -0.0, 0.0, 0.4, 1.0, 3.9]  # truncation toward zero; -0.0 is false
    inputs = [numpy.array(floats, 'float32'), numpy.array(floats, 'float64'),
              numpy.array([-3, -1, 0, 0, 2, 1, 2**40], 'int64'),
              numpy.array([-3, -1, 0, 0, 2, 1, 7], 'int32'),
              numpy.array([1, 0, 0, 1, 1, 0, 1], 'bool')]
    got = check_native(model, inputs)
    result = dict(zip([name for name, _, _ in outputs], got))
    assert result['float32_int32'].tolist() == [-2, 0, 0, 0, 0, 1, 3]
    assert result['float64_bool'].tolist() == [True, True, False, False, True, True, True]


@pytest.mark.native_build
def test_cast_like_and_cast_opset_1_to_names():
    nodes = [helper.make_node('CastLike', ['x', 'like'], ['y']),
             helper.make_node('Cast', ['x'], ['z'], to=7)]
    model = make_model(nodes, [('x', 'float32', (2, 3)), ('like', 'int32', (1,))],
                       [('y', 'int32', (2, 3)), ('z', 'int64', (2, 3))], opset=15)
    check_native(model, [sample('float32', (2, 3)), numpy.zeros(1, 'int32')])
    model = make_model([helper.make_node('Cast', ['x'], ['y'], to='DOUBLE')],
                       [('x', 'int32', (2,))], [('y', 'float64', (2,))], opset=1)
    # onnxruntime implements no Cast before opset 6.
    check_native(model, [numpy.array([-4, 9], 'int32')], onnxruntime_check=False)


# -- refusals --------------------------------------------------------------
@pytest.mark.parametrize('node, inits, out, reason', [
    (helper.make_node('Slice', ['x', 'x64', 'x64'], ['y']), {}, None,
     'starts must be a constant'),
    (helper.make_node('Gather', ['x', 'idx'], ['y']), {'idx': numpy.array([3])}, (1, 3),
     'out of range'),
    (helper.make_node('Cast', ['x'], ['y'], to=10), {}, (3, 3), 'float16'),
    (helper.make_node('Pad', ['x', 'x64'], ['y']), {}, None, 'pads must be a constant'),
    (helper.make_node('Pad', ['x', 'p'], ['y'], mode='reflect'),
     {'p': numpy.array([0, 3, 0, 0])}, (3, 6), 'reflect padding'),
    (helper.make_node('Tile', ['x', 'x64'], ['y']), {}, None, 'repeats must be a constant'),
    (helper.make_node('Squeeze', ['x', 'a'], ['y']), {'a': numpy.array([0])}, (3,), 'size 1'),
])
def test_refusals_say_why(node, inits, out, reason):
    dtype = 'float16' if 'float16' in reason else 'float32'
    model = make_model([node], [('x', 'float32', (3, 3)), ('x64', 'int64', (2,))],
                       [('y', dtype, out or ('a', 'b'))], inits)
    assert reason in refusal(model)
