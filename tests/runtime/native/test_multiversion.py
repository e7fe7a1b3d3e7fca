"""The emitted Makefile's default build: the products (ccn_gemm.c) also
built for x86-64-v3 and -v4 (render.gemm_variant), the best one this CPU
runs chosen at run time, and the other families' hot loops at the same
level (CCN_LEVELS, ccn_common.h)."""
import os
import platform
import subprocess

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import emit_c
from chainer_compiler.runtime.native.render import (
    _C_DEFINITION,
    GEMM_LEVELS,
    KERNEL_DIR,
    gemm_variant,
    prefix_kernel_symbols,
)
from tests.runtime.native.helpers import Built, make_folder, make_model


def _exported(text):
    return sorted(m.group(1) for m in _C_DEFINITION.finditer(text)
                  if not m.group(0).startswith('static'))


def test_each_level_renames_every_function_the_file_exports():
    with open(os.path.join(KERNEL_DIR, 'ccn_gemm.c')) as f:
        text = prefix_kernel_symbols(f.read(), 'm')
    names = _exported(text)
    assert 'm_ccn_gemm_ex' in names and 'm_ccn_gemm_serial_core' in names
    for level in GEMM_LEVELS:
        variant = gemm_variant(text, level)
        assert _exported(variant) == sorted('%s_v%d' % (n, level) for n in names)
        # Calls of other families (the thread pool) keep their names.
        assert 'm_ccn_parallel_for(' in variant


def test_every_function_of_the_blocked_families_runs_the_level_build():
    """Each function the NCHWc, depthwise and Winograd files export starts by
    running its x86-64-v3/-v4 build: one left at the baseline ran 10x slower
    in the default build (NCHWc's pool, as four SSE vectors per block)."""
    for family in ('nchwc', 'depthwise', 'winograd'):
        with open(os.path.join(KERNEL_DIR, 'ccn_%s.c' % family)) as f:
            text = f.read()
        for m in _C_DEFINITION.finditer(text):
            if m.group(0).startswith('static'):
                continue
            body = text[m.end():text.index('\n}\n', m.end())]
            assert 'CCN_RUN_LEVEL_BUILD(%s,' % m.group(1) in body, m.group(1)


def _hot_families_model(rng):
    """BatchNormalization, Swish, MaxPool, a broadcast Add, a depthwise
    convolution and its Swish, GlobalAveragePool, a product and its Softmax,
    LayerNormalization, a dilated 3x3 convolution (Winograd's, per phase),
    a strided 3x3 one of few channels (the direct kernel's) and a
    bidirectional LSTM (ccn_rnn.c's cells): a kernel of each family built
    for every level (CCN_LEVELS, ccn_common.h; render.LEVEL_FAMILIES)."""
    F32 = numpy.float32
    nodes = [
        helper.make_node('BatchNormalization', ['x', 'bs', 'bb', 'bm', 'bv'], ['b']),
        helper.make_node('Sigmoid', ['b'], ['s']),
        helper.make_node('Mul', ['b', 's'], ['sw']),
        helper.make_node('MaxPool', ['sw'], ['p'], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node('Add', ['p', 'c'], ['a']),
        helper.make_node('Conv', ['a', 'wd'], ['d'], group=16, pads=[1, 1, 1, 1]),
        helper.make_node('Sigmoid', ['d'], ['ds']),
        helper.make_node('Mul', ['d', 'ds'], ['dw']),  # Swish: the epilogue's ccn_activate
        helper.make_node('GlobalAveragePool', ['dw'], ['g']),
        helper.make_node('Flatten', ['g'], ['f']),
        helper.make_node('Gemm', ['f', 'w'], ['h']),
        helper.make_node('Softmax', ['h'], ['y1']),
        helper.make_node('LayerNormalization', ['a', 'ls', 'lb'], ['y2'], axis=-1),
        helper.make_node('Conv', ['a', 'wc'], ['y3'], pads=[2, 2, 2, 2], dilations=[2, 2]),
        helper.make_node('Conv', ['z', 'wz', 'bz'], ['y4'], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node('LSTM', ['q', 'lw', 'lr', 'lbias'], ['y5'], hidden_size=20,
                         direction='bidirectional'),
    ]
    inits = {'bs': rng.uniform(0.5, 2, 16), 'bb': rng.uniform(-1, 1, 16),
             'bm': rng.uniform(-1, 1, 16), 'bv': rng.uniform(0.5, 2, 16),
             'c': rng.uniform(-1, 1, (16, 1, 1)), 'wd': rng.uniform(-1, 1, (16, 1, 3, 3)),
             'w': rng.uniform(-1, 1, (16, 40)),
             'ls': rng.uniform(-1, 1, 37), 'lb': rng.uniform(-1, 1, 37),
             # F(4x4, 3x3) is within about 4e-6 of its outputs' scale, here
             # about 1: the check's atol is 1e-5.
             'wc': rng.uniform(-1, 1, (16, 16, 3, 3)) / 16,
             'wz': rng.uniform(-1, 1, (12, 8, 3, 3)), 'bz': rng.uniform(-1, 1, 12),
             'lw': rng.uniform(-0.3, 0.3, (2, 80, 5)), 'lr': rng.uniform(-0.3, 0.3, (2, 80, 20)),
             'lbias': rng.uniform(-0.3, 0.3, (2, 160))}
    return make_model(nodes, [('x', F32, [2, 16, 29, 37]), ('z', F32, [1, 8, 30, 30]),
                              ('q', F32, [4, 2, 5])],
                      [('y1', F32, [2, 40]), ('y2', F32, [2, 16, 29, 37]),
                       ('y3', F32, [2, 16, 29, 37]), ('y4', F32, [1, 12, 15, 15]),
                       ('y5', F32, [4, 2, 2, 20])],
                      {k: v.astype(F32) for k, v in inits.items()}, opset=17)


@pytest.mark.native_build
@pytest.mark.slow
@pytest.mark.skipif(platform.machine() != 'x86_64', reason='the levels are x86-64 ones')
def test_every_hot_family_gives_the_executors_values_at_every_level(tmp_path):
    """The default build has the products for every level and runs the
    element-wise, pooling, normalization and Softmax loops at the products'
    level; as built (the CPU's best level) and forced down to levels 0 and 3
    the executable gives the Executor's values."""
    rng = numpy.random.RandomState(2)
    program = build_program(_hot_families_model(rng))
    folder = tmp_path / 'c'
    result = emit_c(program, folder, 'hot')
    with open(folder / 'hot.c') as f:
        code = f.read()
    for kernel in ('batchnorm', 'unary_float32', 'maxpool2d', 'binary_float32',
                   'conv2d_depthwise', 'global_avgpool', 'softmax', 'standardize',
                   'conv2d_winograd', 'conv2d_direct', 'rnn'):
        assert 'hot_ccn_%s(' % kernel in code, kernel
    output = make_folder(folder)
    assert 'warning' not in output, output
    probe = subprocess.run(['cc', '-march=x86-64-v4', '-x', 'c', '-', '-o', os.devnull],
                           input='int main(void){return 0;}\n', capture_output=True, text=True)
    inputs = [rng.uniform(-3, 3, shape).astype(numpy.float32)
              for shape in ((2, 16, 29, 37), (1, 8, 30, 30), (4, 2, 5))]
    # As built: every family at the CPU's best level (4, or 3 without AVX-512).
    Built(program, str(folder), 'hot', result, output).check_against_executor(inputs, tmp_path)
    if probe.returncode != 0:  # no levels: the baseline alone
        return
    symbols = set(subprocess.run(['nm', str(folder / 'libhot.a')], capture_output=True,
                                 text=True).stdout.split())
    for name in ('batchnorm_range', 'hot_ccn_unary_float32', 'pool2d_range',
                 'global_avgpool_range', 'row_float32', 'softmax_range', 'standardize_range'):
        assert {name + '_base', name + '_v3', name + '_v4'} <= symbols, name
    for name in ('hot_ccn_conv2d_depthwise', 'hot_ccn_conv2d_winograd', 'tile', 'direction'):
        assert {name + '_v3', name + '_v4'} <= symbols, name
    assert {'hot_ccn_gemm_serial_core_v%d' % v for v in GEMM_LEVELS} <= symbols
    gemm = folder / 'ccn_gemm.c'
    text = gemm.read_text()
    assert text.count('return best_level();') == 1
    for level in (0, 3):
        # The other families forced down to a level (the products keep theirs):
        # only ccn_gemm.c is rebuilt.
        gemm.write_text(text.replace('return best_level();',
                                     'return best_level() < %d ? best_level() : %d;'
                                     % (level, level)))
        make_folder(folder)
        Built(program, str(folder), 'hot', result, output).check_against_executor(
            inputs, tmp_path)
