"""ONNX test directories (model.onnx + test_data_set_*/input_<N>.pb and
output_<N>.pb, N the graph input or output index) and output comparison."""
import glob
import os
import re

import numpy
import onnx
from google.protobuf.message import Message
from onnx import external_data_helper, numpy_helper

from .errors import InvalidTestDataError
from .onnx_graph import value_kind
from .runtime.backend import to_numpy

#: ONNX's own backend-test defaults.
DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-7


#: The name of a data file: the number is the graph input or output index.
_DATA_FILE = re.compile(r'(input|output)_(0|[1-9][0-9]*)\.pb')

_PROTO_OF_KIND = {'sequence': onnx.SequenceProto, 'optional': onnx.OptionalProto}
_CONVERTER_OF_KIND = {'sequence': numpy_helper.to_list, 'optional': numpy_helper.to_optional}


def read_value(path, type_proto):
    """Read one .pb file holding a tensor, sequence or optional value.

    External data of its tensors is read from the file's own folder and
    nowhere else.  Raises InvalidTestDataError naming the file.
    """
    kind = value_kind(type_proto)
    proto = _PROTO_OF_KIND.get(kind, onnx.TensorProto)()
    try:
        with open(path, 'rb') as f:
            proto.ParseFromString(f.read())
        for tensor in _tensors(proto):
            _inline_external_data(tensor, path)
        return _CONVERTER_OF_KIND.get(kind, numpy_helper.to_array)(proto)
    except InvalidTestDataError:
        raise
    except Exception as e:  # protobuf and onnx raise many types for malformed data
        raise InvalidTestDataError('%s: %s: %s' % (path, type(e).__name__, e)) from e


def _tensors(message):
    """Every TensorProto in ``message``, itself included, at any depth (the
    elements of sequences and optionals, the parts of sparse tensors)."""
    if isinstance(message, onnx.TensorProto):
        yield message
        return
    for field, value in message.ListFields():
        if field.type == field.TYPE_MESSAGE:
            for item in [value] if isinstance(value, Message) else value:  # else repeated
                yield from _tensors(item)


def _inline_external_data(tensor, path):
    """Move the external data of ``tensor`` into it, reading only inside the
    folder of ``path`` (the .pb file that holds the tensor)."""
    if not external_data_helper.uses_external_data(tensor):
        return
    folder = os.path.dirname(os.path.abspath(path))
    location = external_data_helper.ExternalDataInfo(tensor).location
    if os.path.isabs(location) or not _inside(folder, os.path.join(folder, location)):
        raise InvalidTestDataError("%s: external data location '%s' is not inside the data "
                                   "set folder %s" % (path, location, folder))
    external_data_helper.load_external_data_for_tensor(tensor, folder)
    tensor.data_location = onnx.TensorProto.DEFAULT
    del tensor.external_data[:]


def _inside(folder, path):
    """Whether ``path``, all symbolic links resolved, lies inside ``folder``."""
    folder, path = os.path.realpath(folder), os.path.realpath(path)
    return os.path.commonpath([folder, path]) == folder


def load_test_cases(test_dir):
    """(model path, [(case dir, {input name: value}, [(output name, value)])]).

    In each test_data_set_* folder, input_<N>.pb holds graph input N
    (initializers excluded) and output_<N>.pb graph output N.  Every input
    and output needs its file; a missing, extra or misnamed .pb file is an
    InvalidTestDataError naming it.
    """
    model_path = os.path.join(test_dir, 'model.onnx')
    if not os.path.isfile(model_path):
        raise InvalidTestDataError('%s has no model.onnx' % test_dir)
    try:
        model = onnx.load(model_path, load_external_data=False)
    except Exception as e:  # protobuf raises its own DecodeError, among others
        raise InvalidTestDataError('%s is not a readable ONNX model: %s: %s'
                                   % (model_path, type(e).__name__, e)) from e
    if not model.graph.output:
        raise InvalidTestDataError('%s has no graph outputs: nothing to compare' % model_path)
    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = [v for v in model.graph.input if v.name not in initializers]
    cases = []
    for case_dir in sorted(glob.glob(os.path.join(test_dir, 'test_data_set_*'))):
        files = _data_files(case_dir)
        inputs = _read_values(case_dir, 'input', graph_inputs, files['input'])
        outputs = _read_values(case_dir, 'output', model.graph.output, files['output'])
        cases.append((case_dir, dict(inputs), outputs))
    if not cases:
        raise InvalidTestDataError('%s has no test_data_set_* folder' % test_dir)
    return model_path, cases


def _data_files(case_dir):
    """{'input': {N: path}, 'output': {N: path}} of the .pb files in
    ``case_dir``; other files (external data) are not data files."""
    if not os.path.isdir(case_dir):
        raise InvalidTestDataError('%s is not a folder' % case_dir)
    files = {'input': {}, 'output': {}}
    for name in sorted(os.listdir(case_dir)):
        if not name.endswith('.pb'):
            continue
        match = _DATA_FILE.fullmatch(name)
        if not match:
            raise InvalidTestDataError('%s: a data file must be named input_<N>.pb or '
                                       'output_<N>.pb' % os.path.join(case_dir, name))
        files[match.group(1)][int(match.group(2))] = os.path.join(case_dir, name)
    return files


def _read_values(case_dir, role, values, paths):
    """[(name, value)] of the graph ``values`` (its inputs or outputs, as
    ``role`` says), value N read from ``paths[N]``."""
    for index, path in sorted(paths.items()):
        if index >= len(values):
            raise InvalidTestDataError('%s: the model has no %s %d (it has %d, numbered from 0)'
                                       % (path, role, index, len(values)))
    for index in range(len(values)):
        if index not in paths:
            missing = os.path.join(case_dir, '%s_%d.pb' % (role, index))
            raise InvalidTestDataError('%s is missing: the model has %d %s(s), each needs a file'
                                       % (missing, len(values), role))
    return [(v.name, read_value(paths[i], v.type)) for i, v in enumerate(values)]


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
