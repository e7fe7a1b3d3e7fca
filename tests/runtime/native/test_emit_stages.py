"""emit_c runs NATIVE_BACKEND's stages: lower -> plan -> render -> write,
each a function of its inputs: rendering twice gives the same files and
leaves the lowering as it was, and the files are what emit_c writes."""
import os

import numpy
from onnx import TensorProto, helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native.emit_c import NATIVE_BACKEND, NativeCompilation, emit_c
from chainer_compiler.runtime.native.plan import plan
from chainer_compiler.runtime.native.render import render
from tests.conftest import make_model


def _model():
    # A constant Gemm B (rendering asks for its transpose) and a folded
    # Shape -> Reshape target (a constant the C never names).
    rng = numpy.random.RandomState(0)
    return make_model(
        [helper.make_node('Gemm', ['x', 'w', 'b'], ['h'], transB=1),
         helper.make_node('Relu', ['h'], ['r']),
         helper.make_node('Shape', ['r'], ['s']),
         helper.make_node('Reshape', ['r', 's'], ['y'])],
        [('x', TensorProto.FLOAT, [2, 3])], [('y', TensorProto.FLOAT, [2, 4])],
        [('w', rng.rand(4, 3).astype(numpy.float32)), ('b', rng.rand(4).astype(numpy.float32))])


def test_stages_are_functions_of_their_inputs_and_compose_to_emit_c(tmp_path):
    program = build_program(_model())
    c = NativeCompilation(program, 'm', 'embed', str(tmp_path / 'unused'))
    for stage, passes in NATIVE_BACKEND:
        if stage == 'plan':
            break
        for run_pass in passes:
            run_pass(c)
    lowered = c.lowered
    weights_before = dict(lowered.weights)
    arena = plan(lowered)
    first = render(lowered, arena, 'embed')
    again = render(lowered, plan(lowered), 'embed')
    assert first.texts == again.texts and first.families == again.families
    assert lowered.weights == weights_before  # rendering adds to its own copy
    assert set(first.weights) > set(weights_before)  # the constants the C names
    result = emit_c(program, tmp_path / 'c', 'm', weights='embed')
    assert result.arena_bytes == arena.arena_bytes
    for name, text in first.texts.items():
        with open(os.path.join(tmp_path / 'c', name), encoding='utf-8') as f:
            assert f.read() == text, name
