"""Loading ONNX test folders: file N holds graph input or output N, every
one needs its file, a malformed file is an error naming it, and external
data is read from the data set's own folder and nowhere else."""
import os

import numpy
import onnx
import pytest
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from chainer_compiler.conformance import node_tests_dir
from chainer_compiler.errors import InvalidTestDataError
from chainer_compiler.onnx_test_data import load_test_cases, read_value
from tests.conftest import make_model

X = numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
TENSOR_TYPE = helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3])


def two_in_two_out():
    """x, y -> s = x + y, d = x - y (all float32[2, 3])."""
    shape = [2, 3]
    return make_model([helper.make_node('Add', ['x', 'y'], ['s']),
                       helper.make_node('Sub', ['x', 'y'], ['d'])],
                      [('x', TensorProto.FLOAT, shape), ('y', TensorProto.FLOAT, shape)],
                      [('s', TensorProto.FLOAT, shape), ('d', TensorProto.FLOAT, shape)])


def complete_files():
    """The data files of a good data set for two_in_two_out."""
    return {'input_0.pb': X, 'input_1.pb': 2 * X, 'output_0.pb': 3 * X, 'output_1.pb': -X}


def write_test_dir(root, files, model=None):
    """A test folder under ``root``: ``model`` (default two_in_two_out) and
    test_data_set_0 holding ``files`` ({name: array, proto or bytes})."""
    root.mkdir(exist_ok=True)
    onnx.save(model or two_in_two_out(), str(root / 'model.onnx'))
    case = root / 'test_data_set_0'
    case.mkdir()
    for name, content in files.items():
        if isinstance(content, numpy.ndarray):
            content = numpy_helper.from_array(content)
        if not isinstance(content, bytes):
            content = content.SerializeToString()
        (case / name).write_bytes(content)
    return root


def external_tensor(array, location):
    """A TensorProto of ``array`` whose data is in the file ``location``."""
    tensor = numpy_helper.from_array(array, 'x')
    external_data_helper.set_external_data(tensor, location)
    tensor.ClearField('raw_data')
    return tensor


def test_files_are_matched_to_inputs_and_outputs_by_their_number(tmp_path):
    _, [(_, inputs, outputs)] = load_test_cases(str(write_test_dir(tmp_path, complete_files())))
    assert sorted(inputs) == ['x', 'y']
    numpy.testing.assert_array_equal(inputs['y'], 2 * X)
    assert [name for name, _ in outputs] == ['s', 'd']
    numpy.testing.assert_array_equal(outputs[1][1], -X)


def test_initializers_are_not_counted_as_graph_inputs(tmp_path):
    model = make_model([helper.make_node('Add', ['x', 'b'], ['y'])],
                       [('x', TensorProto.FLOAT, [2, 3])], [('y', TensorProto.FLOAT, [2, 3])],
                       [('b', X)])
    model.graph.input.insert(0, helper.make_tensor_value_info('b', TensorProto.FLOAT, [2, 3]))
    root = write_test_dir(tmp_path, {'input_0.pb': X, 'output_0.pb': 2 * X}, model)
    _, [(_, inputs, _)] = load_test_cases(str(root))
    assert list(inputs) == ['x']


@pytest.mark.parametrize('drop, add, named', [
    ('input_1.pb', 'input_10.pb', 'input_10.pb'),     # would have been fed as input 1
    ('output_1.pb', 'output_5.pb', 'output_5.pb'),    # would have been compared with output 1
    ('output_1.pb', None, 'output_1.pb is missing'),  # output 1 never checked
    ('input_1.pb', None, 'input_1.pb is missing'),
    ('input_1.pb', 'input_01.pb', 'input_01.pb'),     # names are canonical
    ('input_1.pb', 'input-1.pb', 'input-1.pb'),
    ('input_1.pb', 'Input_1.pb', 'Input_1.pb'),
])
def test_a_missing_extra_or_misnamed_file_is_an_error_naming_it(tmp_path, drop, add, named):
    files = complete_files()
    content = files.pop(drop)
    if add:
        files[add] = content
    with pytest.raises(InvalidTestDataError, match=named):
        load_test_cases(str(write_test_dir(tmp_path, files)))


def test_a_data_set_without_output_files_is_an_error(tmp_path):
    files = {'input_0.pb': X, 'input_1.pb': X}
    with pytest.raises(InvalidTestDataError, match='output_0.pb is missing'):
        load_test_cases(str(write_test_dir(tmp_path, files)))


def test_a_model_without_outputs_is_an_error(tmp_path):
    model = two_in_two_out()
    del model.graph.output[:]
    with pytest.raises(InvalidTestDataError, match='no graph outputs'):
        load_test_cases(str(write_test_dir(tmp_path, {'input_0.pb': X, 'input_1.pb': X}, model)))


def test_other_files_in_a_data_set_are_not_data_files(tmp_path):
    files = dict(complete_files(), **{'weights.bin': b'\0' * 8})
    _, [(_, inputs, _)] = load_test_cases(str(write_test_dir(tmp_path, files)))
    assert sorted(inputs) == ['x', 'y']


@pytest.mark.parametrize('content', [
    b'\xff' * 16,                                            # garbage
    b'',                                                     # an empty tensor file
    TensorProto(data_type=TensorProto.FLOAT, dims=[2, 3], raw_data=b'\0' * 4),
    TensorProto(data_type=TensorProto.FLOAT, dims=[2, 3], float_data=[1.0, 2.0]),
], ids=['garbage', 'empty', 'short-raw-data', 'short-float-data'])
def test_a_malformed_tensor_file_is_an_error_naming_it(tmp_path, content):
    files = dict(complete_files(), **{'output_1.pb': content})
    with pytest.raises(InvalidTestDataError, match='output_1.pb'):
        load_test_cases(str(write_test_dir(tmp_path, files)))


def test_an_empty_sequence_file_is_an_error(tmp_path):
    path = tmp_path / 'input_0.pb'
    path.write_bytes(b'')
    sequence_type = helper.make_sequence_type_proto(TENSOR_TYPE)
    with pytest.raises(InvalidTestDataError, match='input_0.pb'):
        read_value(str(path), sequence_type)


def test_external_data_is_read_from_the_data_set_folder(tmp_path, monkeypatch):
    root = write_test_dir(tmp_path / 'test', dict(complete_files(),
                                                  **{'input_0.pb': external_tensor(X, 'x.bin')}))
    (root / 'test_data_set_0' / 'x.bin').write_bytes(X.tobytes())
    cwd = tmp_path / 'cwd'
    cwd.mkdir()
    (cwd / 'x.bin').write_bytes((7 * X).tobytes())  # a decoy in the working directory
    monkeypatch.chdir(cwd)
    _, [(_, inputs, _)] = load_test_cases(str(root))
    numpy.testing.assert_array_equal(inputs['x'], X)


@pytest.mark.parametrize('location', ['secret.txt', '../secret.txt', '../../secret.txt',
                                      'ABSOLUTE', 'link.bin'])
def test_external_data_outside_the_data_set_folder_is_refused(tmp_path, monkeypatch, location):
    secret = tmp_path / 'secret.txt'
    secret.write_bytes(X.tobytes())
    monkeypatch.chdir(tmp_path)  # where the old code looked
    if location == 'ABSOLUTE':
        location = str(secret)
    root = write_test_dir(tmp_path / 'test', dict(complete_files(),
                                                  **{'input_0.pb': external_tensor(X, location)}))
    os.symlink(str(secret), str(root / 'test_data_set_0' / 'link.bin'))
    with pytest.raises(InvalidTestDataError, match=r'input_0\.pb.*%s' % location):
        load_test_cases(str(root))


def test_external_data_of_sequence_elements_is_confined_too(tmp_path, monkeypatch):
    (tmp_path / 'secret.txt').write_bytes(X.tobytes())
    monkeypatch.chdir(tmp_path)
    path = tmp_path / 'test_data_set_0' / 'input_0.pb'
    path.parent.mkdir()
    (path.parent / 'x.bin').write_bytes(X.tobytes())
    sequence_type = helper.make_sequence_type_proto(TENSOR_TYPE)
    sequence = onnx.SequenceProto(elem_type=onnx.SequenceProto.TENSOR)
    sequence.tensor_values.extend([external_tensor(X, 'x.bin')])
    path.write_bytes(sequence.SerializeToString())
    [value] = read_value(str(path), sequence_type)
    numpy.testing.assert_array_equal(value, X)

    sequence.tensor_values.extend([external_tensor(X, '../secret.txt')])
    path.write_bytes(sequence.SerializeToString())
    with pytest.raises(InvalidTestDataError, match='not inside the data set folder'):
        read_value(str(path), sequence_type)


def test_every_onnx_conformance_data_set_loads():
    """ONNX's own test data follows these rules: one file per graph input
    and output, nothing omitted."""
    root = node_tests_dir()
    for name in os.listdir(root):
        load_test_cases(os.path.join(root, name))
