import importlib
import os
import subprocess
import sys

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import chainer_compiler
from chainer_compiler import pipeline
from chainer_compiler.codegen import emit_program
from chainer_compiler.errors import UnsupportedOperatorsError
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.training import OptimizerUpdate, compile_step_program, compile_training

#: These tests check the bridge, not the backend: the NumPy VM, where the
#: default ('auto') would build C for each model.
ON_THE_VM = {'backend': 'numpy'}

DOC = os.path.join(os.path.dirname(__file__), '..', '..', 'docs', 'pipeline.md')


def test_pipeline_page_is_up_to_date():
    assert open(DOC).read() == pipeline.markdown(), (
        'regenerate: python -m chainer_compiler.pipeline > docs/pipeline.md')


@pytest.mark.parametrize('kind', sorted(set(pipeline.PIPELINES) - set(pipeline.PROGRAM_KINDS)))
def test_every_kind_checks_kernels_then_emits_last(kind):
    stages = pipeline.PIPELINES[kind]
    assert stages[-len(pipeline.VM_BACKEND):] == pipeline.VM_BACKEND
    assert stages[-1] == ('emit', (pipeline.emit, pipeline.fuse, pipeline.validate))
    front = [p for _, passes in stages[:-len(pipeline.VM_BACKEND)] for p in passes]
    assert front[-1] is pipeline.check_kernels  # after the last pass that adds nodes


def test_the_native_kind_is_what_emit_c_runs(tmp_path, monkeypatch):
    # PIPELINES['native'] is the tuple emit_c walks: each of its passes runs,
    # in order, and its stages are emit-c's phases.
    # (the package's emit_c is the function; the module is imported by name)
    native = importlib.import_module('chainer_compiler.runtime.native.emit_c')
    stages = pipeline.PIPELINES['native']
    assert stages is native.NATIVE_BACKEND
    ran = []

    def spy(run_pass):
        def spied(c):
            ran.append(run_pass.__name__)
            run_pass(c)
        return spied

    monkeypatch.setattr(native, 'NATIVE_BACKEND', tuple(
        (stage, tuple(spy(p) for p in passes)) for stage, passes in native.NATIVE_BACKEND))
    graph = helper.make_graph(
        [helper.make_node('Gemm', ['x', 'W'], ['h']), helper.make_node('Relu', ['h'], ['y'])],
        'g', [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(numpy.ones((3, 4), numpy.float32), 'W')])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])
    result = native.emit_c(pipeline.build_program(model), tmp_path / 'c', 'm')
    assert ran == [p.__name__ for _, passes in stages for p in passes]
    assert [name for name, _ in result.phases] == [name for name, _ in stages]
    with pytest.raises(ValueError, match="kind 'native' compiles a Program"):
        pipeline.run('native', model)


def test_importing_the_compiler_loads_no_native_emitter():
    # PIPELINES imports the native backend's stages when they are asked for
    # (a fresh process: this one has loaded the emitter already).
    code = ('import sys; import chainer_compiler.pipeline as p; '
            'loaded = lambda: sorted(m for m in sys.modules if ".runtime.native" in m); '
            'print(loaded()); p.PIPELINES["native"]; print(loaded())')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == '[]'
    assert 'chainer_compiler.runtime.native.emit_c' in out[1]
    assert 'chainer_compiler.runtime.native.lowerings' in out[1]


def test_the_vm_and_native_fusions_read_one_epilogue_rule_set():
    # The VM fuses into FusedGemm exactly the epilogues its kernel applies;
    # native fusion and lowerings take every epilogue the records declare.
    from chainer_compiler.runtime.native.lowerings import connection
    from chainer_compiler.runtime.ops import fusion_rules
    from chainer_compiler.runtime.ops.registry import CUSTOM_DOMAIN, lookup
    assert connection.product_epilogues is fusion_rules.product_epilogues
    assert all(fusion_rules.epilogue_fuses('native', product, op)
               for product in ('Conv', 'Gemm', 'MatMul')
               for op in fusion_rules.product_epilogues())
    fused_gemm = lookup('FusedGemm', CUSTOM_DOMAIN).fn
    a = numpy.ones((2, 2), numpy.float32)
    for op in fusion_rules.epilogue_ops():
        try:
            fused_gemm(numpy, a, a, activation=op)
            applies = True
        except ValueError:
            applies = False
        assert fusion_rules.epilogue_fuses('vm', 'Gemm', op) == applies, op
        assert not fusion_rules.epilogue_fuses('vm', 'Conv', op)


def _model_with_a_kernelless_op():
    """A scalar loss of x and the parameter W, and beside it an ImageDecoder
    (the VM has no kernel for it) that no gradient goes through."""
    graph = helper.make_graph(
        [helper.make_node('Mul', ['x', 'W'], ['xw']),
         helper.make_node('ReduceSum', ['xw'], ['loss'], keepdims=0),
         helper.make_node('ImageDecoder', ['image'], ['decoded'], name='decoder')],
        'm',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info('image', TensorProto.UINT8, [16])],
        [helper.make_tensor_value_info('loss', TensorProto.FLOAT, []),
         helper.make_tensor_value_info('decoded', TensorProto.UINT8, ['h', 'w', 'c'])],
        [numpy_helper.from_array(numpy.ones((2, 3), numpy.float32), 'W')])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 20)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize('compile_it', [
    lambda m: compile_training(m, params=['W'], state_outputs=['decoded']),
    lambda m: compile_step_program(m, loss='loss', params=['W'], wrt=['W'],
                                   update=OptimizerUpdate('SGDUpdate', (), ('lr',))),
], ids=['training', 'training_step'])
def test_a_training_program_without_a_kernel_fails_when_compiled(compile_it):
    with pytest.raises(UnsupportedOperatorsError, match=r'ImageDecoder .* node\(s\) decoder'):
        compile_it(_model_with_a_kernelless_op())


def test_gradient_nodes_are_checked_for_kernels_too(monkeypatch):
    model = _model_with_a_kernelless_op()
    del model.graph.node[2], model.graph.output[1]
    programs = compile_training(model, params=['W'])
    forward_ops = {i.op for i in programs.forward.instructions}
    gradient_op = sorted({i.op for i in programs.backward.instructions} - forward_ops)[0]
    has_kernel = pipeline.has_kernel
    monkeypatch.setattr(pipeline, 'has_kernel',
                        lambda op, *args: op != gradient_op and has_kernel(op, *args))
    with pytest.raises(UnsupportedOperatorsError, match=gradient_op):
        compile_training(model, params=['W'])


def test_emit_program_leaves_its_graph_as_it_is():
    graph = helper.make_graph(
        [helper.make_node('Gemm', ['x', 'W'], ['h']),
         helper.make_node('Relu', ['h'], ['r']),
         helper.make_node('Identity', ['r'], ['y'])],
        'g', [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(numpy.ones((3, 4), numpy.float32), 'W')])
    before = graph.SerializeToString()
    program = emit_program(graph, {'': 20})
    assert graph.SerializeToString() == before
    assert [i.op for i in program.instructions] == ['Gemm', 'Relu', 'Identity']  # no fusion


class _Scaled(chainer.Chain):
    """A Linear layer scaled by exp(0.5): an Exp of a constant to fold."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l = L.Linear(6, 3)

    def forward(self, x):
        return self.l(x) * F.exp(self.xp.full((1, 3), 0.5, numpy.float32))


X = numpy.random.RandomState(0).uniform(-1, 1, (4, 6)).astype(numpy.float32)


def test_compiler_kwargs_reach_the_pipeline(tmp_path):
    model = _Scaled()
    path = chainer_compiler.export(model, [X], str(tmp_path / 'scaled.onnx'))
    results = []
    for kwargs in ({}, {'fold_constants': False}):
        compiled = chainer_compiler.compile_onnx(model, path, compiler_kwargs=kwargs,
                                                 dump_onnx=True, runtime_kwargs=ON_THE_VM)
        results.append(compiled(X).array)
        forward = onnx.load(str(tmp_path / 'scaled.forward.onnx'))
        assert ('Exp' in {n.op_type for n in forward.graph.node}) == bool(kwargs)
        with chainer.using_config('train', False):
            results.append(compiled(X).array)
    for result in results[1:]:
        numpy.testing.assert_allclose(result, results[0], rtol=1e-6)


def test_an_unknown_compiler_option_is_named(tmp_path):
    model = _Scaled()
    path = chainer_compiler.export(model, [X], str(tmp_path / 'scaled.onnx'))
    with pytest.raises(TypeError, match="unknown compiler option.*'fold_constant'"):
        chainer_compiler.compile_onnx(model, path, compiler_kwargs={'fold_constant': False},
                                      runtime_kwargs=ON_THE_VM)
    with pytest.raises(TypeError, match="'computation_order' given twice"):
        chainer_compiler.compile_onnx(model, path, computation_order='chen',
                                      compiler_kwargs={'computation_order': 'chen'},
                                      runtime_kwargs=ON_THE_VM)


def test_emitted_programs_are_validated(monkeypatch):
    sources = []
    monkeypatch.setattr(pipeline, 'validate_program',
                        lambda program, source: sources.append(source))
    model = _model_with_a_kernelless_op()
    del model.graph.node[2], model.graph.output[1]
    compile_training(model, params=['W'])
    assert sources == ['<model>, forward program', '<model>, backward program']


def test_folding_and_dead_code_reach_into_loop_bodies():
    """A Loop body's constant arithmetic (reading an outer constant too) is
    folded and its unused node dropped, as in the main graph."""
    f32 = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node('Constant', [], ['two'], value=numpy_helper.from_array(
            numpy.array(2, numpy.float32))),
         helper.make_node('Mul', ['two', 'k'], ['step']),
         helper.make_node('Exp', ['v'], ['unused']),
         helper.make_node('Add', ['v', 'step'], ['v_out']),
         helper.make_node('Identity', ['cond'], ['cond_out'])],
        'body', [helper.make_tensor_value_info('i', TensorProto.INT64, []),
                 helper.make_tensor_value_info('cond', TensorProto.BOOL, []),
                 helper.make_tensor_value_info('v', f32, [3])],
        [helper.make_tensor_value_info('cond_out', TensorProto.BOOL, []),
         helper.make_tensor_value_info('v_out', f32, [3])])
    graph = helper.make_graph(
        [helper.make_node('Loop', ['trips', '', 'x'], ['y'], body=body)], 'g',
        [helper.make_tensor_value_info('x', f32, [3])],
        [helper.make_tensor_value_info('y', f32, [3])],
        [numpy_helper.from_array(numpy.array(3, numpy.int64), 'trips'),
         numpy_helper.from_array(numpy.array(1.5, numpy.float32), 'k')])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    program = pipeline.build_program(model)
    loop = program.instructions[0]
    assert [inst.op for inst in loop.attrs['body'].instructions] == ['Add', 'Identity']
    assert loop.captures == ()  # k is read by the folded Mul only
    x = numpy.arange(3, dtype=numpy.float32)
    y = Executor(program, backend='numpy').run({'x': x})['y']
    numpy.testing.assert_allclose(y, x + 3 * 2 * 1.5)
