"""Gradient rules of the array family, checked against central differences."""
import ast
import pathlib

import numpy
import pytest
from onnx import TensorProto, helper

from chainer_compiler.autodiff import differentiable_ops
from chainer_compiler.runtime.ops import array as array_kernels
from chainer_compiler.runtime.ops.registry import registered_kernels

from .gradcheck import check_gradients, single_node_model

RNG = numpy.random.RandomState(0)


def rand(*shape):
    return RNG.standard_normal(shape)


def ints(*values):
    return numpy.asarray(values, dtype=numpy.int64)


def check(op, inputs, opset=17, constants=None, n_outputs=1, tolerances=None, **attrs):
    model = single_node_model(op, inputs, n_outputs=n_outputs, opset=opset,
                              constants=constants, **attrs)
    programs = check_gradients(model, inputs, **(tolerances or {}))
    assert programs.grads_for == list(inputs)
    return programs


# Through float32 the forward is still linear, but rounds: wide differences.
FLOAT32 = {'eps': 0.5, 'rtol': 1e-4, 'atol': 1e-5}


def custom_ops(programs):
    return {n.op_type for n in programs.backward_onnx.graph.node
            if n.domain == 'org.chainer_compiler'}


# -- reshapes ----------------------------------------------------------------
@pytest.mark.parametrize('opset', [11, 17])
def test_reshape(opset):
    check('Reshape', {'x': rand(2, 3, 4)}, opset, constants={'s': ints(4, -1)})


@pytest.mark.parametrize('axis', [0, 1, 2, -1])
def test_flatten(axis):
    check('Flatten', {'x': rand(2, 3, 4)}, axis=axis)


@pytest.mark.parametrize('perm', [None, [1, 0, 2], [2, 0, 1]])
def test_transpose(perm):
    attrs = {} if perm is None else {'perm': perm}
    check('Transpose', {'x': rand(2, 3, 4)}, **attrs)


@pytest.mark.parametrize('axes', [None, [1], [-1, 1]])
def test_squeeze(axes):
    x = {'x': rand(2, 1, 3, 1)}
    check('Squeeze', x, 11, **({} if axes is None else {'axes': axes}))
    check('Squeeze', x, 13, constants=None if axes is None else {'axes': ints(*axes)})


@pytest.mark.parametrize('axes', [[0], [-1, 1]])
def test_unsqueeze(axes):
    x = {'x': rand(2, 3)}
    check('Unsqueeze', x, 11, axes=axes)
    check('Unsqueeze', x, 13, constants={'axes': ints(*axes)})


# -- joining and splitting -------------------------------------------------
@pytest.mark.parametrize('axis', [0, 1, -1])
def test_concat(axis):
    shapes = {0: [(1, 3), (2, 3), (3, 3)], 1: [(2, 1), (2, 2), (2, 3)]}
    shapes[-1] = shapes[1]
    inputs = {'x%d' % i: rand(*s) for i, s in enumerate(shapes[axis])}
    check('Concat', inputs, axis=axis)


def test_concat_single():
    check('Concat', {'x': rand(2, 3)}, axis=0)


def test_split_attr_forms():
    x = {'x': rand(2, 5)}
    check('Split', x, 11, n_outputs=2, axis=1, split=[2, 3])
    check('Split', x, 11, n_outputs=3, axis=-1, split=[1, 1, 3])
    check('Split', {'x': rand(4, 2)}, 11, n_outputs=2)  # equal parts, axis 0


def test_split_input_forms():
    x = {'x': rand(2, 5)}
    check('Split', x, 13, n_outputs=2, axis=1, constants={'s': ints(2, 3)})
    check('Split', {'x': rand(2, 6)}, 13, n_outputs=3, axis=-1)
    check('Split', {'x': rand(2, 5)}, 18, n_outputs=3, axis=1, num_outputs=3)


def test_split_unused_output():
    """An output no gradient reaches contributes zeros to its piece."""
    x = rand(2, 5)
    node = helper.make_node('Split', ['x', 's'], ['a', 'b', 'c'], axis=1)
    graph = helper.make_graph(
        [node], 'split', [helper.make_tensor_value_info('x', TensorProto.DOUBLE, [2, 5])],
        [helper.make_tensor_value_info('b', TensorProto.DOUBLE, None)],
        [helper.make_tensor('s', TensorProto.INT64, [3], [1, 2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    model.ir_version = 8
    assert check_gradients(model, {'x': x}).grads_for == ['x']


# -- slicing and indexing --------------------------------------------------
@pytest.mark.parametrize('starts,ends,axes,steps', [
    ([1], [3], [1], None),
    ([0, 1], [2, -1], [0, 2], None),
    ([-1], [-10**9], [-1], [-1]),           # reverse the last axis
    ([3, 0], [0, 10**9], [1, 2], [-2, 2]),   # negative and positive steps
    ([0], [5], None, [2]),                   # axes omitted
    ([10], [20], [1], None),                 # empty slice
])
def test_slice(starts, ends, axes, steps):
    constants = {'starts': ints(*starts), 'ends': ints(*ends)}
    node_inputs = ['x', 'starts', 'ends']
    if axes is not None or steps is not None:
        constants['axes'] = ints(*(axes if axes is not None else range(len(starts))))
        node_inputs.append('axes')
    if steps is not None:
        constants['steps'] = ints(*steps)
        node_inputs.append('steps')
    x = {'x': rand(3, 4, 5)}
    programs = check('Slice', x, 13, constants=constants, node_inputs=node_inputs)
    assert custom_ops(programs) == {'SliceGrad'}


def test_slice_attr_form():
    check('Slice', {'x': rand(3, 4)}, 9, starts=[1, -3], ends=[3, 10**9], axes=[0, 1])
    check('Slice', {'x': rand(3, 4)}, 9, starts=[0, 1], ends=[2, 3])


@pytest.mark.parametrize('axis,indices', [
    (0, [[0, 2], [2, 2]]),   # repeated indices accumulate
    (1, [3, -1, 0]),         # negative index
    (-1, [[1], [1]]),
    (1, 2),                  # scalar index drops the axis
])
def test_gather(axis, indices):
    programs = check('Gather', {'x': rand(3, 4)}, constants={'i': ints(*numpy.ravel(indices))
                                                             .reshape(numpy.shape(indices))},
                     axis=axis)
    assert custom_ops(programs) == {'GatherGrad'}


@pytest.mark.parametrize('axis', [0, 1])
def test_gather_scatter_add_path(monkeypatch, axis):
    """Long axes take the scatter-add path instead of the one-hot product."""
    monkeypatch.setattr(array_kernels, '_DENSE_GATHER_GRAD_LIMIT', 0)
    check('Gather', {'x': rand(3, 4)}, constants={'i': ints(2, 0, 2, -1)}, axis=axis)


def test_gather_3d():
    check('Gather', {'x': rand(2, 3, 4)}, constants={'i': ints(0, 2, 0, 1).reshape(2, 2)},
          axis=1)


@pytest.mark.parametrize('axis', [0, 1, -1])
def test_gather_elements(axis):
    indices = ints(0, 1, 1, 2, 0, 0, -1, 2).reshape(2, 4) if axis == 0 else \
        ints(0, 2, 2, 1, 0, -1).reshape(3, 2)
    x = rand(3, 4) if axis == 0 else rand(3, 3)
    check('GatherElements', {'x': x}, constants={'i': indices}, axis=axis)


@pytest.mark.parametrize('batch_dims', [0, 1])
def test_gather_nd(batch_dims):
    if batch_dims == 0:
        indices = ints(0, 1, 2, 0, 0, 1).reshape(3, 2)  # (0,1) repeated
    else:
        indices = ints(1, 0, -1, 1, 0, 0).reshape(3, 2, 1)
    check('GatherND', {'x': rand(3, 2, 2)}, constants={'i': indices}, batch_dims=batch_dims)


@pytest.mark.parametrize('axis', [None, 0, 1, -1])
def test_compress(axis):
    condition = numpy.asarray([True, False, True])
    attrs = {} if axis is None else {'axis': axis}
    check('Compress', {'x': rand(3, 3)}, constants={'c': condition}, **attrs)


@pytest.mark.parametrize('reduction', ['none', 'add'])
def test_scatter_elements(reduction):
    inputs = {'data': rand(3, 3), 'updates': rand(2, 3)}
    check('ScatterElements', inputs, 18, constants={'i': ints(1, 0, 2, 0, 2, 1).reshape(2, 3)},
          node_inputs=['data', 'i', 'updates'], axis=0, reduction=reduction)
    check('ScatterElements', {'data': rand(3, 3), 'updates': rand(3, 2)}, 18,
          constants={'i': ints(1, 0, 2, 0, 2, 1).reshape(3, 2)},
          node_inputs=['data', 'i', 'updates'], axis=-1, reduction=reduction)


def test_scatter_nd():
    inputs = {'data': rand(3, 2), 'updates': rand(2, 2)}
    check('ScatterND', inputs, 13, constants={'i': ints(2, 0).reshape(2, 1)},
          node_inputs=['data', 'i', 'updates'])
    check('ScatterND', inputs, 18, constants={'i': ints(2, 2).reshape(2, 1)},
          node_inputs=['data', 'i', 'updates'], reduction='add')


@pytest.mark.parametrize('axis,largest', [(-1, 1), (0, 0), (1, 1)])
def test_top_k(axis, largest):
    x = RNG.permutation(12).reshape(3, 4).astype(numpy.float64)  # distinct values
    programs = check('TopK', {'x': x}, n_outputs=2, constants={'k': ints(2)},
                     axis=axis, largest=largest)
    assert custom_ops(programs) == {'GatherElementsGrad'}


# -- broadcasting, tiling, padding -----------------------------------------
@pytest.mark.parametrize('x_shape,shape', [
    ((3, 1), (2, 3, 4)), ((1,), (3, 2)), ((2, 3), (2, 3)), ((2, 1), (1, 3)),
])
def test_expand(x_shape, shape):
    check('Expand', {'x': rand(*x_shape)}, constants={'s': ints(*shape)})


@pytest.mark.parametrize('repeats', [(1, 1), (2, 1), (2, 3), (1, 3)])
def test_tile(repeats):
    check('Tile', {'x': rand(2, 3)}, constants={'r': ints(*repeats)})


@pytest.mark.parametrize('mode', ['constant', 'edge', 'reflect', 'wrap'])
@pytest.mark.parametrize('pads', [(1, 0, 2, 1), (0, 2, 1, 2), (-1, 1, 1, -2)])
def test_pad(mode, pads):
    if mode != 'constant' and min(pads) < 0:
        pads = tuple(max(p, 0) for p in pads)
    check('Pad', {'x': rand(3, 4)}, 19, constants={'p': ints(*pads)}, mode=mode)


def test_pad_forms():
    x = {'x': rand(3, 4)}
    check('Pad', x, 11, constants={'p': ints(1, 0, 0, 2), 'v': numpy.float64(1.5)})
    check('Pad', x, 10, pads=[1, 0, -1, 2])
    check('Pad', x, 10, pads=[2, 1, 1, 2], mode='reflect')
    check('Pad', x, 18, constants={'p': ints(1, 2), 'v': numpy.float64(0), 'a': ints(-1)})
    check('Pad', x, 18, constants={'p': ints(2, 1), 'v': numpy.float64(0), 'a': ints(0)},
          mode='edge')
    check('Pad', {'x': rand(2, 3)}, 19, constants={'p': ints(3, 4, 5, 4)}, mode='wrap')


@pytest.mark.parametrize('shape', [(2, 6), (5, 2), (4, 3)])
def test_center_crop_pad(shape):
    check('CenterCropPad', {'x': rand(3, 5)}, 18, constants={'s': ints(*shape)})


# -- selections ------------------------------------------------------------
def test_where():
    condition = numpy.asarray([[True, False, True]])
    check('Where', {'x': rand(2, 3), 'y': rand(2, 3)}, constants={'c': condition},
          node_inputs=['c', 'x', 'y'])
    check('Where', {'x': rand(2, 1), 'y': rand(3)}, constants={'c': condition},
          node_inputs=['c', 'x', 'y'])


@pytest.mark.parametrize('upper,k', [(1, None), (0, 1), (1, -1)])
def test_trilu(upper, k):
    constants = None if k is None else {'k': ints(k).reshape(())}
    check('Trilu', {'x': rand(3, 4)}, 14, constants=constants, upper=upper)


@pytest.mark.parametrize('batch_axis,time_axis', [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    x = rand(4, 3) if batch_axis == 1 else rand(3, 4)
    check('ReverseSequence', {'x': x}, constants={'l': ints(4, 1, 2)},
          batch_axis=batch_axis, time_axis=time_axis)


# -- casts -----------------------------------------------------------------
def test_cast():
    check('Cast', {'x': rand(2, 3)}, to=TensorProto.FLOAT, tolerances=FLOAT32)
    check('Cast', {'x': rand(2, 3)}, to=TensorProto.DOUBLE)
    # (Cast-1, whose 'to' is a string, gets no type from ONNX shape inference.)


def test_cast_to_int_has_no_gradient():
    model = single_node_model('Cast', {'x': rand(2, 3)}, to=TensorProto.INT64)
    from chainer_compiler.training import compile_training
    assert compile_training(model, check=False).grads_for == []


def test_cast_like():
    check('CastLike', {'x': rand(2, 3)}, 15, constants={'t': numpy.zeros(1, numpy.float32)},
          tolerances=FLOAT32)


# -- block rearrangements --------------------------------------------------
@pytest.mark.parametrize('mode', ['DCR', 'CRD'])
def test_depth_to_space(mode):
    check('DepthToSpace', {'x': rand(1, 8, 2, 3)}, blocksize=2, mode=mode)


def test_space_to_depth():
    check('SpaceToDepth', {'x': rand(1, 2, 4, 6)}, blocksize=2)


# -- Resize ----------------------------------------------------------------
@pytest.mark.parametrize('transform', ['half_pixel', 'align_corners', 'asymmetric',
                                       'pytorch_half_pixel'])
@pytest.mark.parametrize('mode', ['nearest', 'linear', 'cubic'])
def test_resize_sizes(mode, transform):
    x = {'x': rand(1, 2, 3, 4)}
    sizes = ints(1, 2, 5, 3)
    programs = check('Resize', x, 13, constants={'sizes': sizes},
                     node_inputs=['x', '', '', 'sizes'], mode=mode,
                     coordinate_transformation_mode=transform)
    assert custom_ops(programs) == {'ResizeGrad'}


def test_resize_translator_forms():
    """What ResizeImages emits: linear with sizes, empty roi/scales at opset 11."""
    x = {'x': rand(1, 1, 3, 4)}
    empty = numpy.zeros(0, numpy.float32)
    for transform in ('align_corners', 'half_pixel'):
        check('Resize', x, 11, constants={'roi': empty, 'scales': empty,
                                          'sizes': ints(1, 1, 5, 7)},
              mode='linear', coordinate_transformation_mode=transform)
        check('Resize', x, 13, constants={'sizes': ints(1, 1, 2, 3)},
              node_inputs=['x', '', '', 'sizes'], mode='linear',
              coordinate_transformation_mode=transform)


def test_resize_nearest_scatter_add_path(monkeypatch):
    monkeypatch.setattr(array_kernels, '_DENSE_RESIZE_GRAD_LIMIT', 0)
    check('Resize', {'x': rand(1, 1, 3, 4)}, 13, constants={'sizes': ints(1, 1, 5, 3)},
          node_inputs=['x', '', '', 'sizes'], mode='nearest')


@pytest.mark.parametrize('mode,scales', [('nearest', (1, 1, 2, 3)), ('nearest', (1, 1, 0.5, 2)),
                                         ('linear', (1, 1, 2, 0.5)), ('cubic', (1, 1, 1.5, 2))])
def test_resize_scales(mode, scales):
    x = {'x': rand(1, 1, 4, 4)}
    check('Resize', x, 13, constants={'scales': numpy.asarray(scales, numpy.float32)},
          node_inputs=['x', '', 'scales'], mode=mode)


def test_resize_axes_and_antialias():
    x = {'x': rand(1, 2, 4, 6)}
    check('Resize', x, 18, constants={'sizes': ints(3, 2)}, node_inputs=['x', '', '', 'sizes'],
          mode='linear', axes=[-2, -1], antialias=1)
    check('Resize', x, 18, constants={'sizes': ints(3, 3)}, node_inputs=['x', '', '', 'sizes'],
          mode='nearest', axes=[2, 3], keep_aspect_ratio_policy='not_larger',
          nearest_mode='floor')


def test_resize_tf_crop_and_resize():
    x = {'x': rand(1, 1, 4, 4)}
    roi = numpy.asarray([0, 0, -0.2, 0.1, 1, 1, 0.8, 1.3], numpy.float32)
    check('Resize', x, 13, constants={'roi': roi, 'sizes': ints(1, 1, 3, 5)},
          node_inputs=['x', 'roi', '', 'sizes'], mode='linear',
          coordinate_transformation_mode='tf_crop_and_resize', extrapolation_value=2.0)


@pytest.mark.parametrize('mode', ['nearest', 'linear'])
def test_resize_legacy_forms(mode):
    x = {'x': rand(1, 1, 3, 4)}
    scales = numpy.asarray([1, 1, 2, 1.5], numpy.float32)
    check('Resize', x, 10, constants={'s': scales}, mode=mode)
    check('Upsample', x, 9, constants={'s': scales}, mode=mode)
    check('Upsample', x, 7, scales=[1.0, 1.0, 2.0, 1.5], mode=mode)


# -- coverage --------------------------------------------------------------
NO_GRADIENT = ['Shape', 'Size', 'ConstantOfShape', 'Range', 'NonZero', 'OneHot', 'EyeLike',
               'Constant', 'Unique', 'BitCast']


def test_no_gradient_declarations():
    assert set(NO_GRADIENT) <= set(differentiable_ops()['none'])


_HELPER_OPS = {'squeeze': 'Squeeze', 'unsqueeze': 'Unsqueeze', 'reduce': None,
               'split': 'Split', 'reshape': 'Reshape', 'slice': 'Slice', 'clip': 'Clip',
               'dropout': 'Dropout'}


def _translator_ops():
    """Operators the tracing translator emits (ctx.node('Op', ...) and the
    opset-aware helpers)."""
    root = pathlib.Path(__file__).resolve().parents[3] / 'translators' / 'onnx_chainer'
    ops = set()
    for path in root.glob('*.py'):
        for call in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                continue
            name = call.func.attr
            if name == 'node' and call.args and isinstance(call.args[0], ast.Constant) \
                    and isinstance(call.args[0].value, str):
                ops.add(call.args[0].value)
            elif name == 'reduce' and call.args and isinstance(call.args[0], ast.Constant):
                ops.add(call.args[0].value)
            elif _HELPER_OPS.get(name):
                ops.add(_HELPER_OPS[name])
    return ops


def test_translator_array_ops_have_gradients():
    declared = differentiable_ops()
    covered = set(declared['rules']) | set(declared['none'])
    families = {(s.domain, s.op): s.family for s in registered_kernels()}
    array_ops = {op for op in _translator_ops() if families.get(('', op)) == 'array'}
    assert {'Concat', 'Gather', 'Reshape', 'Resize'} <= array_ops
    missing = sorted(array_ops - covered - {'Identity'})  # Identity: math rules
    assert not missing, missing
