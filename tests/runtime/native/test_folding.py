"""Emit-time evaluation (runtime/native/folding.py) and the compiler's
constant folding share one size rule (runtime/limits.py), applied to the
results' shapes before anything is evaluated."""
import tracemalloc

import numpy
import pytest
from onnx import TensorProto, helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.limits import MAX_FOLDED_ELEMENTS, may_fold
from chainer_compiler.runtime.native import UnsupportedNativeOpsError, emit_c
from chainer_compiler.runtime.native.folding import fold
from chainer_compiler.runtime.program import Instruction
from tests.conftest import make_model


def _constant_of_shape(dims):
    return make_model([helper.make_node('ConstantOfShape', ['s'], ['y'])], [],
                      [('y', TensorProto.FLOAT, ['a', 'b'])],
                      [('s', numpy.array(dims, numpy.int64))])


def test_the_rule():
    assert may_fold([(1024, 1024), ()]) and may_fold([])
    assert not may_fold([(1024, 1025)])
    assert not may_fold([None]) and not may_fold([('n', 2)]) and not may_fold([(-1, 2)])


@pytest.mark.parametrize('dims', [(1024, 1024), (1024, 1025)])
def test_compiler_and_emitter_fold_the_same_sizes(dims):
    folded = dims[0] * dims[1] <= MAX_FOLDED_ELEMENTS
    assert (not build_program(_constant_of_shape(dims)).instructions) == folded
    program = build_program(_constant_of_shape(dims), fold=False)
    values = fold(program.instructions[0], program.constants, {}, {})
    assert (values is not None) == folded


def test_emit_c_sizes_a_result_before_computing_it(tmp_path):
    # A 100-byte file asks for 64 MiB; the old emitter built it, then
    # found it too large (and 1.6 GB for [20000, 20000]).
    program = build_program(_constant_of_shape([4096, 4096]))
    tracemalloc.start()
    try:
        with pytest.raises(UnsupportedNativeOpsError, match='ConstantOfShape'):
            emit_c(program, tmp_path / 'c')
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


@pytest.mark.parametrize('op, inputs, size', [
    ('Expand', [numpy.ones(1, numpy.float32), numpy.array([1 << 30])], None),
    ('Expand', [numpy.ones((3, 1), numpy.float32), numpy.array([2, 1, 4])], 24),
    ('Range', [numpy.array(0), numpy.array(1 << 40), numpy.array(1)], None),
    ('Range', [numpy.array(0), numpy.array(10), numpy.array(0)], None),
    ('Range', [numpy.array(0.), numpy.array(numpy.inf), numpy.array(1.)], None),
    ('Range', [numpy.array(1), numpy.array(10), numpy.array(3)], 3),
    ('ConstantOfShape', [numpy.array([-1, 4])], None),
    ('Gather', [numpy.array([5, 6, 7]), numpy.array([[2, 0]])], 2),
    ('Concat', [numpy.array([1, 2]), numpy.array([3])], 3),
    ('MatMul', [numpy.ones((256, 1)), numpy.ones((1, 256))], None),  # not sized: not folded
])
def test_results_are_sized_before_they_are_computed(op, inputs, size):
    consts = dict(enumerate(inputs))
    inst = Instruction(op, tuple(consts), (len(inputs),), attrs={'axis': 0} if op in (
        'Gather', 'Concat') else {}, version=17 if op != 'Expand' else 13)
    values = fold(inst, consts, {}, {})
    assert (None if values is None else values[0].size) == size


def test_shape_of_a_huge_input_takes_no_memory():
    inst = Instruction('Shape', (0,), (1,), version=15)
    values = fold(inst, {}, {0: (1 << 20, 1 << 20, 1 << 20)}, {0: 'float32'})
    assert values[0].tolist() == [1 << 20] * 3


def test_both_folders_evaluate_through_the_kernel_specs_one_evaluator(monkeypatch):
    # One evaluator (KernelSpec.evaluate): the same kernel call, n_outputs
    # and error handling for the compiler's folding and the emitter's.
    from chainer_compiler.runtime.ops.registry import KernelSpec
    calls = []
    original = KernelSpec.evaluate

    def spy(self, args, attributes, n_outputs):
        calls.append((self.op, n_outputs))
        return original(self, args, attributes, n_outputs)

    monkeypatch.setattr(KernelSpec, 'evaluate', spy)
    assert not build_program(_constant_of_shape((2, 3))).instructions
    assert calls == [('ConstantOfShape', 1)]
    program = build_program(_constant_of_shape((2, 3)), fold=False)
    values = fold(program.instructions[0], program.constants, {}, {})
    assert calls[1:] == [('ConstantOfShape', 1)] and values[0].shape == (2, 3)
