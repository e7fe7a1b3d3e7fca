"""emit-c --max asks each operator's record how it treats the samples of a
batch (OpRecord.samples and shape_input, runtime/ops/registry.py) instead
of keeping lists of its own built from the lowerings' private tables."""
import types

import pytest

from chainer_compiler.runtime.native import batched
from chainer_compiler.runtime.native.lowering import native_operators
from chainer_compiler.runtime.native.lowerings.activation import _UNARY
from chainer_compiler.runtime.native.lowerings.math import _ARITHMETIC, _BOOLEAN, _VARIADIC
from chainer_compiler.runtime.native.lowerings.reduction import _REDUCTIONS
from chainer_compiler.runtime.native.lowerings.rnn import _CELLS
from chainer_compiler.runtime.ops.registry import kernel, operator_record
from chainer_compiler.runtime.program import Instruction

#: What batched.py listed itself before the records said it, ported: its
#: element-wise and per-sample operators, the Reduce* it took from
#: lowerings/reduction.py, the operators _mixing checked by their axis, and
#: the inputs a value computed from the batch size could feed.
_ELEMENTWISE = set(_UNARY) | set(_ARITHMETIC) | set(_BOOLEAN) | set(_VARIADIC) | {
    'Pow', 'PRelu', 'Where', 'Not', 'Cast', 'CastLike', 'IsNaN', 'IsInf', 'Identity',
    'Dropout', 'Swish'}
_PER_SAMPLE = set(_CELLS) | {
    'Conv', 'ConvTranspose', 'MaxPool', 'AveragePool', 'GlobalAveragePool', 'GlobalMaxPool',
    'LRN', 'InstanceNormalization', 'Reshape', 'Flatten', 'Squeeze', 'Unsqueeze', 'Expand',
    'Tile', 'SoftmaxCrossEntropyLoss',
    # Made since by the native fusion of MatMul, Softmax and MatMul, which
    # batched.py took (the batch on axis 0: a sample's heads are its own).
    'org.chainer_compiler::FusedAttention'}
_ALONG_AXIS = {'Softmax', 'LogSoftmax', 'ArgMax', 'ArgMin', 'Concat', 'Split',
               'LayerNormalization'}
_SHAPE_INPUTS = {'Reshape': 1, 'Expand': 1, 'Tile': 1}
#: The operators batched.py still decides by name, from their attributes.
_BY_NAME = {'BatchNormalization', 'Gemm', 'org.chainer_compiler::FusedGemm', 'MatMul',
            'Transpose', 'Gather', 'Slice', 'Pad'}


def _expected():
    return {**{op: 'elementwise' for op in _ELEMENTWISE},
            **{op: 'per_sample' for op in _PER_SAMPLE},
            **{op: 'reduction' for op in _REDUCTIONS},
            **{op: 'along_axis' for op in _ALONG_AXIS}}


def _record(name):
    domain, _, op = name.rpartition('::')
    return operator_record(op, domain)


def test_the_lowered_operators_declare_what_batched_allowed():
    # Every operator the old lists accepted is lowered and says so on its
    # record, and no lowered operator says more than they allowed.
    native = set(native_operators())
    assert set(_expected()) <= native
    declared = {name: _record(name).samples for name in native if _record(name).samples}
    assert declared == _expected()
    shape_inputs = {name: _record(name).shape_input for name in native
                    if _record(name).shape_input is not None}
    assert shape_inputs == _SHAPE_INPUTS


def _refusal(op, domain='', attrs=None):
    """_mixing's answer for ``op`` reading one run-time input of shape (2, 3),
    the batch on axis 0 of it and of its output."""
    inst = Instruction(op, (0,), (1,), attrs or {}, domain=domain, version=17)
    low = types.SimpleNamespace(shapes={0: (2, 3), 1: (2, 3)}, consts={})
    return batched._mixing(inst, batched._record(inst), {0: (0, 1)}, {0: (0, 1)}, low)


@pytest.mark.parametrize('name', sorted(set(native_operators()) - set(_expected()) - _BY_NAME))
def test_a_lowered_operator_declaring_nothing_is_refused(name):
    domain, _, op = name.rpartition('::')
    assert 'is not known to keep the samples of a batch apart' in _refusal(op, domain)


def test_batched_reads_the_record_not_the_name(monkeypatch):
    assert _refusal('Relu') is None
    monkeypatch.setattr(operator_record('Relu'), 'samples', None)
    assert 'is not known to keep' in _refusal('Relu')
    assert _refusal('Softmax', attrs={'axis': 1}) is None
    assert 'works along the batch axis' in _refusal('Softmax', attrs={'axis': 0})


def test_a_misspelt_samples_fact_is_refused_at_registration():
    with pytest.raises(ValueError, match="samples='per-sample', expected one of elementwise"):
        kernel('NoSuchOperatorForThisTest', samples='per-sample')
