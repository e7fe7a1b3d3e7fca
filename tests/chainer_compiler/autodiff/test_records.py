"""The gradient rules agree with the kernels' records: an operator has a rule
only when its record says its outputs carry a gradient (the default), and
every such operator the translators emit has one.  Any other differentiable
operator without a rule is an error naming it once a gradient must pass
through it."""
import pytest
from onnx import helper

from chainer_compiler.autodiff import FAMILY_NAMES, GradientError, differentiable_ops
from chainer_compiler.autodiff.registry import rule_for
from chainer_compiler.runtime.ops import registered_kernels

from .test_connection import translator_ops

RECORDS = {s.op: s.record for s in registered_kernels()}


def test_every_operator_with_a_rule_has_a_kernel_declared_differentiable():
    rules = differentiable_ops()['rules']
    assert [op for op in rules if op not in RECORDS] == []
    assert [op for op in rules if not RECORDS[op].differentiable] == []


def test_an_operator_declared_without_gradient_has_none():
    none = differentiable_ops()['none']
    assert {'Shape', 'Equal', 'ArgMax', 'RandomNormal', 'SGDUpdate', 'AdamUpdate'} <= set(none)
    for op in none:
        assert rule_for(helper.make_node(op, [], [], domain=RECORDS[op].domain)) is None


@pytest.mark.parametrize('family', FAMILY_NAMES)
def test_every_differentiable_operator_the_translators_emit_has_a_rule(family):
    for op in translator_ops(family):
        if RECORDS[op].differentiable:
            rule_for(helper.make_node(op, [], []))  # GradientError when it has none


def test_a_differentiable_operator_without_a_rule_is_named():
    assert RECORDS['STFT'].differentiable
    with pytest.raises(GradientError, match=r'no gradient rule for operator STFT \(node stft\); '
                                            r'.* or gradient=False on its kernel'):
        rule_for(helper.make_node('STFT', [], [], name='stft'))
