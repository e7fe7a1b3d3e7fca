"""benchmarks/compile_onnx_floor.py: the floor under compile_onnx's speed
(Chainer's own share of a step) is measured on the model it claims."""
import os
import sys

import numpy
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'benchmarks'))
import compile_onnx_floor  # noqa: E402
import models  # noqa: E402


def test_floor_links_keep_the_models_parameters_or_pack_them():
    model = models.MLP([6, 5, 3])
    model(numpy.zeros((2, 6), numpy.float32))
    logits = numpy.ones((2, 3), numpy.float32)
    same = compile_onnx_floor._Floor(model, logits, packed=False)
    assert sorted(p.shape for p in same.params()) == sorted(p.shape for p in model.params())
    packed = compile_onnx_floor._Floor(model, logits, packed=True)
    (flat,) = packed.params()
    assert flat.shape == (6 * 5 + 5 + 5 * 3 + 3,)
    y = packed(numpy.zeros((2, 6), numpy.float32))
    y.grad = numpy.ones_like(y.array)
    y.backward()
    numpy.testing.assert_array_equal(y.array, logits)
    numpy.testing.assert_array_equal(flat.grad, 0)


@pytest.mark.native_build
def test_reports_chainer_compile_onnx_packed_or_not_and_both_floors(capsys):
    compile_onnx_floor.main(['--budget', '0.05'])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith('MLP 784-100-100-10, batch 8, adam, accuracy on')
    assert [line.split('  ')[1].strip() for line in lines[1:]] == [
        'Chainer', 'compile_onnx, native', 'compile_onnx, native, packed',
        'floor: no compiled work',
        'floor, parameters packed into one']
