"""The facts the kernels' records declare for other stages: which operators
the recompute policies never replay and what replaying the others costs, and
which kernels overwrite their inputs (the records say what the kernels do,
and validate_program refuses a Program that reads such a register after the
update)."""
import inspect

import numpy
import pytest

from chainer_compiler.runtime import Executor, Instruction, Program, ProgramFormatError, ValueInfo
from chainer_compiler.runtime.backend import to_numpy
from chainer_compiler.runtime.ops import CUSTOM_DOMAIN, kernel, lookup, recomputable
from chainer_compiler.runtime.ops.registry import ELEMENTWISE, PRODUCT, registered_kernels

#: What the recompute policies never replay in the default domain: random
#: draws, running sub-programs, and products without a cost rule.
KEPT = {'Einsum', 'Attention', 'Dropout', 'RandomNormal', 'RandomUniform', 'RandomNormalLike',
        'RandomUniformLike', 'Bernoulli', 'Multinomial', 'Loop', 'Scan', 'If', 'SequenceMap'}

#: The operators that declare a cost: those whose work grows faster than their
#: output, and those whose time per element is not one NumPy pass's
#: (benchmarks/op_costs.py measured them).
COSTLY = {'Conv', 'ConvTranspose', 'MatMul', 'Gemm', 'LSTM', 'GRU', 'RNN',
          'BatchNormalization', 'Relu', 'Sigmoid', 'MaxPool', 'AveragePool',
          'GlobalAveragePool', 'Identity', 'Reshape', 'Flatten', 'Squeeze', 'Unsqueeze'}


def test_the_recompute_policy_keeps_what_the_records_declare():
    kept = {s.op for s in registered_kernels() if s.domain == '' and not recomputable(s.op)}
    assert KEPT <= kept
    assert recomputable('Relu') and recomputable('Add') and recomputable('NoSuchOperator')
    # Pure, so replayable: BatchNormalization's running averages are outputs.
    assert recomputable('BatchNormalization') and recomputable('Conv')
    # Outside the default domain everything is kept, with a kernel or not.
    assert not recomputable('ReluGrad', CUSTOM_DOMAIN)
    assert not recomputable('TreeEnsemble', 'ai.onnx.ml')
    assert not recomputable('Anything', 'com.example')


def test_a_fact_declared_twice_differently_is_an_error():
    # Refused before anything is registered or recorded.
    with pytest.raises(ValueError, match='kernel Dropout: recompute declared twice, as False '
                                         'and True'):
        kernel('Dropout', versions=(10**7, 10**7), recompute=True)
    with pytest.raises(TypeError, match="kernel Conv: unknown fact 'costly'"):
        kernel('Conv', versions=(10**7, 10**7), costly=True)
    assert not recomputable('Dropout')


def test_costly_operators_declare_their_work():
    costly = {s.op for s in registered_kernels() if s.domain == '' and s.record.costly}
    assert costly == COSTLY
    record = lookup('Conv').record
    # N=2, 8 output channels, 5x5 output, each from 3 channels x 3x3 taps.
    assert record.work([(2, 3, 7, 7), (8, 3, 3, 3)], [(2, 8, 5, 5)]) == 2 * 8 * 25 * 27
    # A BLAS product's multiply-add takes less time than a convolution's.
    assert lookup('Gemm').record.work([(4, 6), (6, 5)], [(4, 5)]) == 4 * 5 * 6 * PRODUCT
    assert lookup('MatMul').record.work([(2, 4, 6), (6, 5)], [(2, 4, 5)]) == 2 * 4 * 5 * 6 * PRODUCT
    lstm = lookup('LSTM').record.work([(7, 2, 3), (1, 16, 3), (1, 16, 4)], [(7, 1, 2, 4)])
    assert lstm == 7 * 2 * (16 * 3 + 16 * 4)
    # Undeclared: one NumPy pass per output element; unknown shapes: none.
    assert lookup('Add').record.work([(3, 4), (3, 4)], [(3, 4)]) == ELEMENTWISE * 12
    assert record.work([None, (8, 3, 3, 3)], [None]) == 0


def per_element(op, outputs=1):
    """The work ``op`` declares per element of a (2, 4, 6, 6) input and
    output (with ``outputs - 1`` more of 4 elements: running averages)."""
    x = (2, 4, 6, 6)
    work = lookup(op).record.work([x, (4,), (4,), (4,), (4,)], [x] + [(4,)] * (outputs - 1))
    return work / (2 * 4 * 6 * 6)


def test_declared_costs_rank_the_operators_as_the_vm_times_them():
    # benchmarks/op_costs.py: per element, a training BatchNormalization
    # (statistics and normalisation) outlasts an inference one, which
    # outlasts a Relu, which outlasts an Add; views cost nothing.
    training, inference = per_element('BatchNormalization', 3), per_element('BatchNormalization')
    assert training > inference > per_element('Relu') > per_element('Add') > 0
    assert per_element('BatchNormalization', 5) == training  # opsets before 14
    assert per_element('Reshape') == per_element('Flatten') == per_element('Identity') == 0
    # A 3x3 convolution of 32 channels (288 multiply-adds per output
    # element) still outlasts its BatchNormalization and Relu together.
    assert training + per_element('Relu') < 288

#: The update kernels: the positions of their state inputs besides the parameter.
UPDATES = {'SGDUpdate': (), 'MomentumSGDUpdate': (2,), 'AdamUpdate': (2, 3)}


def test_only_the_optimizer_updates_overwrite_their_inputs():
    """The optimizer updates, and the product-and-update the native
    backend's fusion writes (tests/runtime/native/test_fusion.py)."""
    declared = {s.op: s.record.updated_inputs for s in registered_kernels()
                if s.record.updated_inputs}
    assert declared == {'GemmSGDUpdate': (0,),
                        **{op: (0,) + state for op, state in UPDATES.items()}}


@pytest.mark.parametrize('op', sorted(UPDATES))
def test_an_update_kernel_overwrites_exactly_what_it_declares(op):
    spec = lookup(op, CUSTOM_DOMAIN)
    rng = numpy.random.RandomState(0)
    n_inputs = len(inspect.signature(spec.fn).parameters) - 1  # after xp
    tensors = 2 + len(UPDATES[op])  # the parameter, its gradient and its state
    inputs = [rng.uniform(0.5, 1, (3, 2)).astype(numpy.float32) for _ in range(tensors)]
    inputs += [numpy.float64(0.5)] * (n_inputs - tensors)  # hyperparameters
    before = [numpy.array(a, copy=True) for a in inputs]
    result = spec.fn(numpy, *inputs)
    assert result is inputs[0]  # the parameter's own array
    changed = tuple(i for i, (a, b) in enumerate(zip(inputs, before))
                    if not numpy.array_equal(a, b))
    assert changed == spec.record.updated_inputs


def _sgd_program(after, outputs=None, num_registers=5):
    """SGDUpdate of param (register 0) by grad (1) at lr (2) into register
    3, followed by the instructions ``after``."""
    return Program(
        instructions=[Instruction('SGDUpdate', (0, 1, 2), (3,), domain=CUSTOM_DOMAIN,
                                  name='sgd')] + list(after),
        inputs=[ValueInfo('param', 0), ValueInfo('grad', 1), ValueInfo('lr', 2)],
        outputs=outputs or [ValueInfo('updated', 3)], num_registers=num_registers)


def test_an_update_without_later_reads_runs():
    executor = Executor(_sgd_program([], num_registers=4))
    xp = executor.xp  # in place on the backend's own arrays (CuPy copies host inputs)
    param = xp.ones(3, numpy.float32)
    result = executor.run({'param': param, 'grad': xp.ones(3, numpy.float32),
                           'lr': numpy.float64(0.5)})
    numpy.testing.assert_array_equal(to_numpy(result['updated']), [0.5] * 3)
    numpy.testing.assert_array_equal(to_numpy(param), [0.5] * 3)  # updated in place


@pytest.mark.parametrize('program, message', [
    (_sgd_program([Instruction('Relu', (0,), (4,), name='relu')],
                  outputs=[ValueInfo('y', 4)]),
     r"instruction 1 \(Relu, node 'relu'\) reads register 0 after instruction 0 "
     r"\(org.chainer_compiler::SGDUpdate, node 'sgd'\) updated it in place"),
    (_sgd_program([], outputs=[ValueInfo('updated', 3), ValueInfo('param', 0)]),
     r"output 'param' reads register 0 after instruction 0 "
     r"\(org.chainer_compiler::SGDUpdate, node 'sgd'\) updated it in place"),
])
def test_a_read_after_an_in_place_update_is_refused(program, message):
    with pytest.raises(ProgramFormatError, match='^<program main>: ' + message):
        Executor(program)


def test_a_register_defined_again_may_be_read():
    # Register 0 holds a new value after the Relu writes it.
    program = _sgd_program([Instruction('Relu', (1,), (0,)), Instruction('Relu', (0,), (4,))],
                           outputs=[ValueInfo('y', 4)])
    assert Executor(program)
