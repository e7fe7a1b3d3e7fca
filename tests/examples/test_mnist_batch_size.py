"""examples/mnist/train_mnist.py --compile with another --batchsize than the
export's: one line saying which batch size to use, before any work."""
import importlib.util
import os

import pytest

SCRIPT = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..', 'examples',
                                       'mnist', 'train_mnist.py'))


def test_a_batch_size_other_than_the_exports_is_one_line_with_the_remedy(tmp_path):
    spec = importlib.util.spec_from_file_location('mnist_batch_size_example', SCRIPT)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    path = str(tmp_path / 'mnist.onnx')
    example.main(['--export', path, '--batchsize', '10', '--unit', '8'])
    with pytest.raises(SystemExit) as raised:  # was a 57-line InputValidationError traceback
        example.main(['--compile', path, '--batchsize', '20', '--unit', '8', '--iterations', '1',
                      '--out', str(tmp_path / 'result'), '--noplot'])
    message = str(raised.value.code)
    assert message == ('%s was exported with batch size 10, not --batchsize 20: train with '
                       '--batchsize 10, or export again with --batchsize 20' % path)
    assert 'FixedBatchDataset' not in message  # the old, wrong advice
