"""The contract between the lowerings (Python) and the kernels (C): the
structs the kernels take their geometry in list the same fields on both
sides, and the constants Python mirrors equal the C ones.  No compiler
runs here: the headers are read as text."""
import os
import re

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import emit_c, fusion, gemm_layout, lowering
from chainer_compiler.runtime.native.cformat import CStruct
from chainer_compiler.runtime.native.lower import MAX_RANK
from chainer_compiler.runtime.native.lowerings import array as native_array
from chainer_compiler.runtime.native.lowerings import connection, conv_direct, pooling, winograd
from chainer_compiler.runtime.native.lowerings import math as native_math
from chainer_compiler.runtime.native.render import KERNEL_DIR

from .helpers import make_model


def _source(name):
    with open(os.path.join(KERNEL_DIR, name), encoding='utf-8') as f:
        return re.sub(r'/\*.*?\*/', '', f.read(), flags=re.S)  # comments out


def _struct_fields(header, ctype):
    """The field names of ``typedef struct {...} ctype;`` in ``header``, in order."""
    body = re.search(r'typedef struct \{([^{}]*)\} %s;' % ctype, _source(header))
    assert body, '%s not in %s' % (ctype, header)
    names = []
    for declaration in body.group(1).split(';'):
        words = declaration.strip()
        if words:
            # 'long a, b' or 'const float *x, *y': the type is the first words.
            first, *rest = words.split(',')
            names += [first.split()[-1]] + [r.strip() for r in rest]
    return tuple(re.sub(r'\[.*\]', '', n.lstrip('*')) for n in names)  # 'dims[8]' is dims


def _define(name, *files):
    for f in files:
        found = re.search(r'#define %s (\d+)\b' % name, _source(f))
        if found:
            return int(found.group(1))
    raise AssertionError('%s not defined in %s' % (name, files))


@pytest.mark.parametrize('struct, header', [
    (lowering.CONV_GEOMETRY, 'ccn_connection.h'),
    (connection.CONV_PLAN, 'ccn_connection.h'),
    (conv_direct.DIRECT_PLAN, 'ccn_conv_direct.h'),
    (winograd.WINOGRAD_PLAN, 'ccn_winograd.h'),
    (pooling.POOL_GEOMETRY, 'ccn_pooling.h'),
    (pooling.POOL3D_GEOMETRY, 'ccn_pooling.h'),
    (connection.CONV3D_GEOMETRY, 'ccn_connection.h'),
    (connection.GEMM_GEOMETRY, 'ccn_gemm.h'),
    (connection.MATMUL_BATCH, 'ccn_gemm.h'),
    (native_array.RESIZE_2D_GEOMETRY, 'ccn_array.h'),
], ids=lambda v: getattr(v, 'ctype', v))
def test_structs_list_the_fields_of_their_header(struct, header):
    assert struct.fields == _struct_fields(header, struct.ctype)


#: Kernels with more than MAX_POSITIONAL_SIZES sizes that only other
#: kernels call (C's own loops); generated code never does.
_C_INTERNAL = {'ccn_gemm', 'ccn_gemm_one_thread', 'ccn_gemm_panels', 'ccn_gemm_panels_start',
               'ccn_gemm_panels_images', 'ccn_copy_image_rows', 'ccn_transpose_batch'}
MAX_POSITIONAL_SIZES = 4


def test_kernels_called_from_python_take_many_sizes_in_structs():
    # Sizes given by position can trade places and still compile: the
    # GEMM's entry points took up to seven longs from a format string.
    lowerings = ''
    for name in os.listdir(os.path.dirname(connection.__file__)):
        if name.endswith('.py'):
            with open(os.path.join(os.path.dirname(connection.__file__), name)) as f:
                lowerings += f.read()
    prototype = re.compile(r'\b(ccn_\w+)\s*\(([^()]*)\)\s*;')
    for header in sorted(n for n in os.listdir(KERNEL_DIR) if n.endswith('.h')):
        for name, params in prototype.findall(_source(header)):
            sizes = [p for p in params.split(',') if re.match(r'\s*(const\s+)?long\s+\w', p)]
            if name in _C_INTERNAL:
                assert name + '(' not in lowerings, '%s is called from a lowering' % name
            else:
                assert len(sizes) <= MAX_POSITIONAL_SIZES, '%s (%s) takes %s by position' % (
                    name, header, ', '.join(s.split()[-1] for s in sizes))


def test_mirrored_constants_equal_the_c_ones():
    assert gemm_layout.PANEL_ROWS == _define('CCN_PANEL_ROWS', 'ccn_gemm.h')
    assert gemm_layout.STRIP_COLS == _define('CCN_STRIP_COLS', 'ccn_gemm.h')
    assert gemm_layout.PANEL_DEPTH == _define('CCN_KC', 'ccn_gemm.c')
    assert gemm_layout.PANEL_MIN_ROWS == _define('CCN_SMALL_M', 'ccn_gemm.c')
    assert winograd.SKEW == _define('CCN_WINOGRAD_SKEW', 'ccn_winograd.h')
    assert connection.GRAD_BLOCK_FLOATS == _define('CCN_GRAD_BLOCK_FLOATS', 'ccn_connection.h')
    assert conv_direct.DIRECT_ROWS == _define('CCN_DIRECT_ROWS', 'ccn_conv_direct.h')
    assert conv_direct.DIRECT_MAX_TAPS == _define('CCN_DIRECT_MAX_TAPS', 'ccn_conv_direct.h')
    assert conv_direct.DIRECT_TILE == _define('CCN_DIRECT_TILE', 'ccn_conv_direct.h')
    assert conv_direct.DIRECT_STEM_TAIL == _define('CCN_DIRECT_STEM_TAIL', 'ccn_conv_direct.h')
    assert conv_direct.DIRECT_STEM_FLOATS == _define('CCN_DIRECT_STEM_FLOATS',
                                                     'ccn_conv_direct.h')
    assert MAX_RANK == native_math.MAX_RANK == _define('CCN_MAX_RANK', 'ccn_common.h')
    assert fusion.ATTENTION_MAX_KEYS == _define('CCN_ATTENTION_KEYS', 'ccn_attention.h')


def test_a_struct_literal_names_every_field_and_nothing_else():
    plan = CStruct('ccn_plan', ('tiles', 'act', 'alpha'))
    assert plan.literal(alpha=0.5, tiles=8, act='CCN_ACT_RELU') == \
        '&(const ccn_plan){.tiles = 8, .act = CCN_ACT_RELU, .alpha = 0.5f}'
    with pytest.raises(ValueError, match='needs fields'):
        plan.literal(tiles=8, act='CCN_ACT_NONE')  # a field left to a silent zero
    with pytest.raises(ValueError, match='needs fields'):
        plan.literal(tiles=8, act='CCN_ACT_NONE', alpha=0.0, tile=8)
    with pytest.raises(ValueError, match='not a C name'):
        plan.literal(tiles=8, act='x); system("', alpha=0.0)
    batch = CStruct('ccn_batch', ('rank', 'dims'))
    assert batch.literal(rank=2, dims=(3, 4)) == '&(const ccn_batch){.rank = 2, .dims = {3, 4}}'


@pytest.mark.parametrize('stride, direct', [(1, 1), (2, 0)])
def test_the_direct_path_is_decided_once_and_passed_in(tmp_path, stride, direct):
    # The emitter sizes the scratch for its own decision and tells the
    # kernel, which no longer decides again (no scratch: col is NULL).
    out = 6 // stride
    model = make_model([helper.make_node('Conv', ['x', 'w'], ['y'], strides=[stride] * 2)],
                       [('x', numpy.float32, [1, 4, 6, 6]), ('w', numpy.float32, [8, 4, 1, 1])],
                       [('y', numpy.float32, [1, 8, out, out])])
    result = emit_c(build_program(model), tmp_path, 'model')
    with open(next(p for p in result.files if p.endswith('/model.c'))) as f:
        call = re.search(r'ccn_conv2d\(.*?\);', f.read(), re.S).group()
    assert '.in_h = 6, .in_w = 6, .out_channels = 8, .out_h = %d' % out in call
    assert '.stride_h = %d, .stride_w = %d' % (stride, stride) in call
    assert '.direct = %d' % direct in call
    assert call.endswith('NULL);') == bool(direct)
