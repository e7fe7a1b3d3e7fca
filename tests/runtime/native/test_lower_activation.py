"""The activation family's C kernels against the NumPy VM where they take
their own way: Softmax and LogSoftmax (the exponential by a vectorised
polynomial, the sum in running partial sums, rows split between threads),
over the last axis and an inner one."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import emit_c

from .helpers import check_native, make_model, uniform
from .test_nchwc import chain_model

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


def _relu_paths_model(rng):
    """A Relu after each native way of computing its input, on 8 channels
    of 10 x 20: alone (the elementwise kernel), fused after a
    BatchNormalization, a 3x3 (Winograd), a 5x5 (direct) and a depthwise
    Conv, a 1x1 Conv (a product's epilogue in registers), a one-row Gemm
    (strips of B), and a stem's Conv (3 channels of 12 x 32 at stride 2,
    its ReLU in registers)."""
    node = helper.make_node
    init = {'w3': uniform(rng, 24, 8, 3, 3), 'w5': uniform(rng, 8, 8, 5, 5),
            'wd': uniform(rng, 8, 1, 3, 3), 'w1': uniform(rng, 16, 8, 1, 1),
            'wg': uniform(rng, 8 * 10 * 20, 20), 'ws': uniform(rng, 8, 3, 3, 3),
            'scale': uniform(rng, 8) + 1.5, 'bias': uniform(rng, 8), 'mean': uniform(rng, 8),
            'var': uniform(rng, 8) + 1.5}
    nodes = [node('Relu', ['x'], ['r0']),
             node('BatchNormalization', ['x', 'scale', 'bias', 'mean', 'var'], ['bn']),
             node('Relu', ['bn'], ['r1']),
             node('Conv', ['x', 'w3'], ['c3'], kernel_shape=[3, 3], pads=[1] * 4),
             node('Relu', ['c3'], ['r2']),
             node('Conv', ['x', 'w5'], ['c5'], kernel_shape=[5, 5], pads=[2] * 4),
             node('Relu', ['c5'], ['r6']),
             node('Conv', ['x', 'wd'], ['cd'], kernel_shape=[3, 3], pads=[1] * 4, group=8),
             node('Relu', ['cd'], ['r3']),
             node('Conv', ['x', 'w1'], ['c1'], kernel_shape=[1, 1]),
             node('Relu', ['c1'], ['r4']),
             node('Flatten', ['x'], ['flat']), node('Gemm', ['flat', 'wg'], ['g']),
             node('Relu', ['g'], ['r5']),
             node('Conv', ['s', 'ws'], ['cs'], kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2]),
             node('Relu', ['cs'], ['r7'])]
    shapes = {'r0': (1, 8, 10, 20), 'r1': (1, 8, 10, 20), 'r2': (1, 24, 10, 20),
              'r3': (1, 8, 10, 20), 'r4': (1, 16, 10, 20), 'r5': (1, 20), 'r6': (1, 8, 10, 20),
              'r7': (1, 8, 6, 16)}
    return make_model(nodes, [('x', F32, (1, 8, 10, 20)), ('s', F32, (1, 3, 12, 32))],
                      [(name, F32, shape) for name, shape in shapes.items()], init)


@pytest.mark.native_build
@pytest.mark.parametrize('model', ['every NCHW path', 'a blocked chain'])
def test_relu_keeps_nan_as_the_vm_does(model):
    """NaN into a ReLU stays NaN (NumPy's maximum, onnxruntime's Relu) in
    each kernel that applies it: an input that is NaN somewhere must not
    come out as a plausible zero.  The blocked chain applies it in the
    stem, a 1x1 product and a dense 3x3."""
    rng = numpy.random.default_rng(3)
    if model == 'a blocked chain':
        onnx_model, inputs = chain_model(rng), [uniform(rng, 2, 3, 18, 30)]
        inputs[0][0, 1, 7, 11] = numpy.nan
    else:
        onnx_model = _relu_paths_model(rng)
        inputs = [uniform(rng, 1, 8, 10, 20), uniform(rng, 1, 3, 12, 32)]
        inputs[0][0, 2, 4, 6] = inputs[1][0, 1, 5, 9] = numpy.nan
    got = check_native(onnx_model, inputs, onnxruntime_check=False)
    # NaN reached every output, so each Relu met it.
    assert all(numpy.isnan(y).any() for y in got)
