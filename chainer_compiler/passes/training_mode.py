"""Rewrite an inference-mode export into its training-mode form.

Users export once with default arguments (inference forms: BatchNormalization
with running averages, Dropout as identity) and compile that file for
training too.  Under ``chainer.config.train`` the compiled model must behave
like Chainer's: batch statistics with running averages updated as Chainer
updates them, and random Dropout.  Both become operators of this project's
domain, independent of the model's opset.
"""
import onnx
from onnx import helper

from ..runtime.ops.registry import CUSTOM_DOMAIN
from ..onnx_graph import opset_versions


def to_training_mode(model, decays=None):
    """Rewrite ``model`` (shape-inferred) in place.  ``decays`` maps a
    running-mean initializer name to its link's decay (default 0.9).
    Returns [(updated value name, running-average initializer name)]."""
    decays = decays or {}
    types = {v.name: v for v in list(model.graph.value_info) + list(model.graph.input)}
    state_updates = []
    nodes = []
    for node in model.graph.node:
        if node.op_type == 'BatchNormalization' and node.domain in ('', 'ai.onnx'):
            x, scale, bias, mean, var = node.input
            epsilon = next((a.f for a in node.attribute if a.name == 'epsilon'), 1e-5)
            new_mean, new_var = mean + '/updated', var + '/updated'
            saved_mean, saved_inv_std = node.output[0] + '/mean', node.output[0] + '/inv_std'
            nodes.append(helper.make_node(
                'BatchNormalizationTraining', [x, scale, bias, mean, var],
                [node.output[0], new_mean, new_var, saved_mean, saved_inv_std],
                name=node.name, domain=CUSTOM_DOMAIN, epsilon=epsilon,
                momentum=float(decays.get(mean, 0.9))))
            for name, like in ((new_mean, mean), (new_var, var), (saved_mean, mean),
                               (saved_inv_std, var)):
                model.graph.value_info.append(_same_type(name, types.get(like), model, like))
            state_updates += [(new_mean, mean), (new_var, var)]
        elif node.op_type == 'Dropout' and node.domain in ('', 'ai.onnx'):
            nodes.append(helper.make_node(
                'DropoutTraining', [node.input[0]], [node.output[0], node.output[0] + '/mask'],
                name=node.name, domain=CUSTOM_DOMAIN, ratio=_dropout_ratio(node, model)))
            mask = onnx.ValueInfoProto()
            mask.CopyFrom(_same_type(node.output[0] + '/mask', types.get(node.input[0]), model,
                                     node.input[0]))
            mask.type.tensor_type.elem_type = onnx.TensorProto.BOOL
            model.graph.value_info.append(mask)
        else:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    if CUSTOM_DOMAIN not in opset_versions(model):
        model.opset_import.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
    for updated, _ in state_updates:
        model.graph.output.append(next(v for v in model.graph.value_info if v.name == updated))
    return state_updates


def _same_type(name, info, model, like):
    """A ValueInfoProto named ``name`` typed like value ``like``."""
    if info is None:
        init = next((t for t in model.graph.initializer if t.name == like), None)
        if init is None:
            raise ValueError('no type known for %s' % like)
        return helper.make_tensor_value_info(name, init.data_type, list(init.dims))
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(info)
    copy.name = name
    return copy


def _dropout_ratio(node, model):
    for a in node.attribute:
        if a.name == 'ratio':
            return float(a.f)
    if len(node.input) > 1 and node.input[1]:
        init = next((t for t in model.graph.initializer if t.name == node.input[1]), None)
        if init is None:
            raise ValueError('Dropout %s: the ratio must be a constant to compile for training'
                             % node.name)
        return float(onnx.numpy_helper.to_array(init))
    return 0.5
