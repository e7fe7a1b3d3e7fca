"""The activation family's C kernels against the NumPy VM where they take
their own way: Softmax and LogSoftmax (the exponential by a vectorised
polynomial, the sum in running partial sums, rows split between threads),
over the last axis and an inner one."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import emit_c

from .helpers import check_native, make_model

F32 = numpy.float32


@pytest.mark.native_build
def test_softmax_and_log_softmax_equal_the_vm():
    rng = numpy.random.RandomState(9)
    node = helper.make_node
    # An attention's scores (3 heads of 197 x 197, split between threads),
    # and rows over an inner axis.
    nodes = [node('Softmax', ['s'], ['p']), node('LogSoftmax', ['s'], ['lp']),
             node('Softmax', ['x'], ['q'], axis=1), node('LogSoftmax', ['x'], ['lq'], axis=1)]
    scores = (rng.standard_normal((1, 3, 197, 197)) * 8).astype(F32)
    scores[0, 0, 0, :] = 80.0             # equal large values: the maximum subtracted
    scores[0, 0, 1, :5] = [-1e30, 88, -88, 0, 1e-30]
    # Rows that come out NaN as in NumPy: a NaN past the vector loop's
    # first block, +inf (inf - inf), all -inf.
    scores[0, 1, 2, 37] = numpy.nan
    scores[0, 1, 3, 196] = numpy.inf
    scores[0, 1, 4, :] = -numpy.inf
    # Masked scores (float32's lowest added, as the exporters write the
    # mask) and terms whose e^(x - max) is subnormal in NumPy: 0 natively.
    scores[0, 2, :, 150:] = numpy.finfo(F32).min
    scores[0, 2, 5, :100] = -numpy.linspace(80, 100, 100)
    scores[0, 2, 5, 100] = 0.0
    x = (rng.standard_normal((4, 21, 3)) * 30).astype(F32)
    model = make_model(nodes, [('s', F32, list(scores.shape)), ('x', F32, list(x.shape))],
                       [('p', F32, list(scores.shape)), ('lp', F32, list(scores.shape)),
                        ('q', F32, list(x.shape)), ('lq', F32, list(x.shape))])
    # A log-probability near 0 is -log(1 + tiny): one rounding of the sum, in
    # another order than NumPy's, moves it by about 1e-7.
    p, _, q, _ = check_native(model, [scores, x], rtol=1e-5, atol=1e-6)
    # No subnormal probabilities: each product reading one (the scores
    # times V) takes a microcode assist per vector, 20x slower.
    for probabilities in (p, q):
        tiny = (probabilities != 0) & (abs(probabilities) < numpy.finfo(F32).tiny)
        assert not tiny.any(), probabilities[tiny]
    assert (p[0, 2, :, 150:] == 0).all()


@pytest.mark.native_build
def test_softmax_of_a_dying_input_runs_in_place(tmp_path):
    """A Softmax whose input dies there writes over it (over the last axis
    and an inner one); a LogSoftmax, which reads its input again after
    writing, never does."""
    node = helper.make_node
    # Between two Negs: neither the input nor the result is the program's.
    nodes = [node('Neg', ['x'], ['n1']), node('Softmax', ['n1'], ['s1']),
             node('Neg', ['x'], ['n2']), node('Softmax', ['n2'], ['s2'], axis=1),
             node('Neg', ['x'], ['n3']), node('LogSoftmax', ['n3'], ['s3']),
             node('Neg', ['s1'], ['p']), node('Neg', ['s2'], ['q']), node('Neg', ['s3'], ['r'])]
    shape = [3, 40, 37]
    model = make_model(nodes, [('x', F32, shape)],
                       [('p', F32, shape), ('q', F32, shape), ('r', F32, shape)])
    result = emit_c(build_program(model), tmp_path, 'model')
    source = open(next(p for p in result.files if p.endswith('/model.c'))).read()
    calls = [line.strip().rstrip(');').split(', ')[-2:] for line in source.splitlines()
             if 'ccn_softmax(' in line]
    assert [x == y for x, y in calls] == [True, True, False], calls
    x = (numpy.random.RandomState(3).standard_normal(shape) * 8).astype(F32)
    check_native(model, [x], rtol=1e-5, atol=1e-6)
