"""The fast paths of the recurrent cells and of one-row products (issue
31): the cells' sigmoid and tanh are the vectorised polynomials of
ccn_common.h (no libm call per element), built for x86-64-v3 and -v4 in
the emitted Makefile's default build, a one-row product is a GEMV, and
the weights block starts 64-byte aligned so that vector loads of a weight
do not straddle cache lines."""
import ctypes
import os
import subprocess

import numpy
import pytest
from onnx import helper

from chainer_compiler.runtime.native import library, weights
from chainer_compiler.runtime.native.library import find_compiler
from tests.runtime.native.helpers import check_native, make_model
from tests.runtime.native.test_lower_recurrent import ALL, _recurrent_model

KERNELS = os.path.join(os.path.dirname(library.__file__), 'kernels')
F32 = numpy.float32


def test_weights_block_starts_64_byte_aligned():
    """A block of a few hundred KB (a large NumPy array starts 16 bytes
    past a 64-byte boundary) keeps every array's offset aligned in memory."""
    arrays = {'a': numpy.ones(3, F32), 'b': numpy.arange(75000, dtype=F32)}
    for _ in range(3):
        layout = weights.layout(arrays)
        data = weights.block(layout)
        assert data.ctypes.data % 64 == 0
        assert data.nbytes == layout.nbytes
        b = data[layout.offsets['b']:layout.offsets['b'] + arrays['b'].nbytes].view(F32)
        numpy.testing.assert_array_equal(b, arrays['b'])


@pytest.mark.native_build
def test_cells_call_no_libm_exp_or_tanh(tmp_path):
    """ccn_rnn.c, built as the emitted Makefile's baseline build, calls no
    libm expf, tanhf or expm1f: its gates are inlined polynomials."""
    obj = tmp_path / 'ccn_rnn.o'
    subprocess.run(find_compiler() + ['-O3', '-std=c99', '-fno-math-errno', '-c', '-I', KERNELS,
                                      os.path.join(KERNELS, 'ccn_rnn.c'), '-o', str(obj)],
                   check=True, capture_output=True)
    undefined = subprocess.run(['nm', '-u', str(obj)], check=True, capture_output=True,
                               text=True).stdout.split()
    assert not {'expf', 'tanhf', 'expm1f', 'exp', 'tanh'} & set(undefined), undefined


_PROBE = r'''
#include "ccn_common.h"
void probe(int which, long n, const float *x, float *y)
{
    for (long i = 0; i < n; i++)
        y[i] = which == 0 ? ccn_exp_poly(x[i])
               : which == 1 ? ccn_sigmoid_poly(x[i]) : ccn_tanh_poly(x[i]);
}
'''


@pytest.mark.native_build
def test_polynomials_within_a_few_ulp(tmp_path):
    """ccn_exp_poly, ccn_sigmoid_poly and ccn_tanh_poly against float64
    over every range their branches cover, and their special values."""
    (tmp_path / 'probe.c').write_text(_PROBE)
    lib = tmp_path / 'probe.so'
    subprocess.run(find_compiler() + ['-O3', '-std=c99', '-fno-math-errno', '-fPIC', '-shared',
                                      '-I', KERNELS, str(tmp_path / 'probe.c'), '-o', str(lib)],
                   check=True, capture_output=True)
    probe = ctypes.CDLL(str(lib)).probe
    probe.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    x = numpy.concatenate([numpy.linspace(-90, 90, 200001), numpy.linspace(-1, 1, 200001),
                           numpy.geomspace(1e-30, 10, 1000),
                           -numpy.geomspace(1e-30, 10, 1000)]).astype(F32)
    x64 = x.astype(numpy.float64)
    with numpy.errstate(over='ignore'):
        wants = [numpy.exp(x64), 1 / (1 + numpy.exp(-x64)), numpy.tanh(x64)]
    for which, want in enumerate(wants):
        y = numpy.empty_like(x)
        probe(which, x.size, x.ctypes.data, y.ctypes.data)
        # (exp_poly is infinite from Cephes' MAXLOGF, a little before float32's limit)
        want[(which == 0) & (x > 88.3762626647949)] = numpy.inf
        want32 = want.astype(F32)
        finite = numpy.isfinite(want32) & (numpy.abs(want32) >= numpy.finfo(F32).tiny)
        ulps = numpy.abs(y[finite] - want[finite]) / numpy.spacing(want32[finite])
        assert ulps.max() <= (5 if which == 2 else 3), (which, x[finite][ulps.argmax()],
                                                        ulps.max())
        special = numpy.array([0.0, -0.0, numpy.inf, -numpy.inf, numpy.nan], F32)
        got = numpy.empty_like(special)
        probe(which, special.size, special.ctypes.data, got.ctypes.data)
        with numpy.errstate(over='ignore'):
            expected = [numpy.exp, lambda v: 1 / (1 + numpy.exp(-v)), numpy.tanh][which](special)
        numpy.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize('op', ['RNN', 'GRU', 'LSTM'])
@pytest.mark.native_build
def test_cells_at_batch_1_and_4_with_vector_tails(op):
    """A hidden size of 37 (whole vectors and a tail in the cells' loops,
    a part last strip of R^T), batch 1 (one-row steps over R^T's strips in
    one pass) and 4 (blocked products),
    every direction and optional input; GRU both ways of the reset."""
    variants = [('forward', ALL, ('Y', 'Y_h', 'Y_c'), {}),
                ('bidirectional', ALL, ('Y', 'Y_h', 'Y_c'), dict(clip=2.0)),
                ('reverse', ('B',), ('Y', 'Y_h', 'Y_c'), {})]
    if op == 'GRU':
        variants.append(('forward', ALL, ('Y', 'Y_h'), dict(linear_before_reset=1)))
    variants = [(d, used, outs if op == 'LSTM' else tuple(o for o in outs if o != 'Y_c'), a)
                for d, used, outs, a in variants]
    for batch in (1, 4):
        check_native(*_recurrent_model(op, variants, T=5, B=batch, n_in=20, H=37))


@pytest.mark.native_build
def test_one_row_products():
    """One-row MatMul and Gemm with B given at run time (the GEMV): two
    depth slices, column blocks, single vectors and a tail, C added to a
    bias, alpha, an epilogue, and fewer columns than a vector."""
    rng = numpy.random.RandomState(1)
    node = helper.make_node
    nodes = [node('MatMul', ['a', 'B'], ['y1']),
             node('Gemm', ['a', 'B', 'c'], ['h'], alpha=0.5, beta=2.0),
             node('Relu', ['h'], ['y2']),
             node('MatMul', ['a', 'B10'], ['y3'])]
    inputs = [('a', F32, [1, 300]), ('B', F32, [300, 301]), ('c', F32, [301]),
              ('B10', F32, [300, 10])]
    outputs = [('y1', F32, [1, 301]), ('y2', F32, [1, 301]), ('y3', F32, [1, 10])]
    model = make_model(nodes, inputs, outputs)
    check_native(model, [rng.uniform(-1, 1, s).astype(F32) for _, _, s in inputs],
                 rtol=1e-4, atol=1e-4)


