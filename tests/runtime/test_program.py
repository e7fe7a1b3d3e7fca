import numpy

from chainer_compiler import build_program
from chainer_compiler.runtime import NO_REGISTER, Executor


def test_dump_lists_inputs_constants_instructions_frees_and_outputs(mlp_model):
    text = build_program(mlp_model).dump()
    assert 'input  %0 = x float32[2, 3]' in text
    assert 'const' in text and 'float32[3, 4]' in text
    assert 'MatMul(' in text and 'Relu(' in text
    assert 'free' in text
    assert 'output y' in text
    assert '# relu' in text


def test_each_register_is_freed_after_its_last_use(mlp_model):
    program = build_program(mlp_model)
    last_use = {}
    for i, inst in enumerate(program.instructions):
        for r in inst.inputs:
            last_use[r] = i
    keep = set(program.constants) | {v.register for v in program.outputs}
    for i, inst in enumerate(program.instructions):
        for r in inst.frees:
            assert last_use.get(r, i) == i
            assert r not in keep
    freed = {r for inst in program.instructions for r in inst.frees}
    assert set(last_use) - keep <= freed


def test_outputs_survive_and_run_matches_numpy(mlp_model):
    program = build_program(mlp_model)
    x = numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
    W = next(v for v in program.constants.values() if v.shape == (3, 4))
    b = next(v for v in program.constants.values() if v.shape == (4,))
    y = Executor(program).run({'x': x})['y']
    numpy.testing.assert_allclose(y, numpy.maximum(x @ W + b, 0), rtol=1e-6)
    assert NO_REGISTER not in [v.register for v in program.outputs]
