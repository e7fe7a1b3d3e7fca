"""Gradient rules and the training-mode pass read an attribute the node
leaves out from its kernel's record (registry.fill_defaults), never from a
default of their own: one place states each ONNX default."""
import ast
import glob
import os

import numpy
import pytest
from onnx import helper

import chainer_compiler.autodiff
import chainer_compiler.passes.training_mode
from chainer_compiler.frontend import load_onnx
from chainer_compiler.passes.training_mode import to_training_mode
from chainer_compiler.runtime.ops import registry

from .gradcheck import check_gradients, single_node_model

_STAGES = sorted(glob.glob(os.path.join(os.path.dirname(chainer_compiler.autodiff.__file__),
                                        '*.py'))) + [chainer_compiler.passes.training_mode.__file__]


def _defaulted_attributes():
    """Every attribute name some kernel declares a default for."""
    return {name for spec in registry.registered_kernels() for name in spec.attribute_defaults}


@pytest.mark.parametrize('path', _STAGES, ids=os.path.basename)
def test_no_stage_restates_an_attribute_default(path):
    # b.attr(node, 'alpha', 0.01) or attrs.get('epsilon', 1e-5): a second
    # statement of a default, free to disagree with the kernel's.
    names = _defaulted_attributes()
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read())
    restated = []
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
            continue
        args = call.args
        if call.func.attr == 'attr' and len(args) + len(call.keywords) > 2:
            restated.append(ast.unparse(call))
        elif call.func.attr in ('get', 'pop') and len(args) == 2 and \
                isinstance(args[0], ast.Constant) and args[0].value in names:
            restated.append(ast.unparse(call))
    assert restated == []


def _patched_default(monkeypatch, op, name, value, version=registry.LATEST):
    spec = registry.lookup(op, version=version)
    monkeypatch.setitem(spec.attribute_defaults, name, value)


def test_a_gradient_rule_reads_the_default_of_the_kernel(monkeypatch):
    # The forward runs with the kernel's default; a rule with a default of
    # its own would differentiate another function.
    _patched_default(monkeypatch, 'LeakyRelu', 'alpha', 0.3)
    x = numpy.random.RandomState(0).uniform(-2, 2, (3, 4))
    programs = check_gradients(single_node_model('LeakyRelu', {'x': x}), {'x': x})
    assert programs.forward.instructions[0].attrs['alpha'] == 0.3


@pytest.mark.parametrize('opset', [9, 17])
def test_the_training_form_takes_the_default_epsilon_of_the_kernel(monkeypatch, opset):
    version = 9 if opset == 9 else 15
    _patched_default(monkeypatch, 'BatchNormalization', 'epsilon', 0.25, version)
    c = numpy.ones(3, numpy.float32)
    model = load_onnx(single_node_model(
        'BatchNormalization', {'x': numpy.ones((2, 3), numpy.float32), 'scale': c, 'b': c},
        opset=opset, constants={'mean': c, 'var': c}), check=False)
    to_training_mode(model)
    norm = next(n for n in model.graph.node if n.op_type == 'BatchNormalization')
    assert {a.name: helper.get_attribute_value(a) for a in norm.attribute}['epsilon'] == 0.25
