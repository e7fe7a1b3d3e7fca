"""ONNX test directories (model.onnx + test_data_set_*/input_*.pb, output_*.pb)
and output comparison."""
import glob
import os
import re

import numpy
import onnx
from onnx import numpy_helper

from .onnx_graph import value_kind
from .runtime.backend import to_numpy

#: ONNX's own backend-test defaults.
DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-7


def _numbered(pattern):
    return sorted(glob.glob(pattern),
                  key=lambda p: int(re.search(r'_(\d+)\.pb$', p).group(1)))


def read_value(path, type_proto):
    """Read one .pb file holding a tensor, sequence or optional value."""
    kind = value_kind(type_proto)
    with open(path, 'rb') as f:
        data = f.read()
    if kind == 'sequence':
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if kind == 'optional':
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    proto = onnx.TensorProto()
    proto.ParseFromString(data)
    return numpy_helper.to_array(proto)


def load_test_cases(test_dir):
    """(model path, [(case dir, {input name: value}, [(output name, value)])])."""
    model_path = os.path.join(test_dir, 'model.onnx')
    if not os.path.exists(model_path):
        raise FileNotFoundError('%s has no model.onnx' % test_dir)
    model = onnx.load(model_path, load_external_data=False)
    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = [v for v in model.graph.input if v.name not in initializers]
    cases = []
    for case_dir in sorted(glob.glob(os.path.join(test_dir, 'test_data_set_*'))):
        inputs = {}
        for i, path in enumerate(_numbered(os.path.join(case_dir, 'input_*.pb'))):
            if i >= len(graph_inputs):
                raise ValueError('%s: more input files than the model has inputs (%d)'
                                 % (case_dir, len(graph_inputs)))
            inputs[graph_inputs[i].name] = read_value(path, graph_inputs[i].type)
        outputs = [(model.graph.output[i].name, read_value(path, model.graph.output[i].type))
                   for i, path in enumerate(_numbered(os.path.join(case_dir, 'output_*.pb')))]
        cases.append((case_dir, inputs, outputs))
    if not cases:
        raise FileNotFoundError('%s has no test_data_set_* directory' % test_dir)
    return model_path, cases


def mismatch(name, expected, actual, rtol=DEFAULT_RTOL, atol=DEFAULT_ATOL):
    """None when ``actual`` matches ``expected``; else a sentence naming the
    output and how it differs."""
    if expected is None or actual is None:
        if expected is None and actual is None:
            return None
        return "output '%s': expected %s, got %s" % (
            name, 'an empty optional' if expected is None else 'a value',
            'an empty optional' if actual is None else 'a value')
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return "output '%s': expected a sequence, got %s" % (name, type(actual).__name__)
        if len(expected) != len(actual):
            return "output '%s': expected a sequence of %d, got %d" % (
                name, len(expected), len(actual))
        for i, (e, a) in enumerate(zip(expected, actual)):
            problem = mismatch('%s[%d]' % (name, i), e, a, rtol, atol)
            if problem:
                return problem
        return None
    actual = numpy.asarray(to_numpy(actual))
    expected = numpy.asarray(expected)
    if expected.dtype != actual.dtype:
        return "output '%s': expected dtype %s, got %s" % (name, expected.dtype, actual.dtype)
    if expected.shape != actual.shape:
        return "output '%s': expected shape %s, got %s" % (name, expected.shape, actual.shape)
    if _compares_exactly(expected.dtype):
        bad = numpy.asarray(expected != actual, dtype=bool).reshape(expected.shape)
        if bad.any():
            i = int(bad.ravel().argmax())
            return ("output '%s': %d of %d elements differ (first at flat index %d: "
                    "expected %r, got %r)" % (name, bad.sum(), bad.size, i,
                                              expected.ravel()[i], actual.ravel()[i]))
        return None
    # Extension float types (bfloat16, float8 ...) compare as float32.
    e = expected.astype(numpy.complex128 if expected.dtype.kind == 'c' else numpy.float64)
    a = actual.astype(e.dtype)
    close = numpy.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    if not close.all():
        i = int(numpy.argmin(close.ravel()))
        return ("output '%s': %d of %d elements differ beyond rtol=%g atol=%g "
                "(first at flat index %d: expected %r, got %r; max abs diff %.3g)" % (
                    name, (~close).sum(), close.size, rtol, atol, i, e.ravel()[i], a.ravel()[i],
                    float(numpy.nanmax(numpy.abs(a - e)[~close]))))
    return None


def _compares_exactly(dtype):
    """Integers, booleans and strings compare exactly; floats (including the
    ml_dtypes extension floats such as bfloat16) within tolerances."""
    if dtype.kind in 'biuOSU':
        return True
    return dtype.kind == 'V' and dtype.name.startswith(('int', 'uint'))
