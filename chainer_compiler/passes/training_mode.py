"""Rewrite an inference-mode export into its training-mode form.

Users export once with default arguments (inference forms: BatchNormalization
with running averages, Dropout as identity) and compile that file for
training too.  Under ``chainer.config.train`` the compiled model must behave
like Chainer's: batch statistics with running averages updated as Chainer
updates them, and random Dropout.  BatchNormalization takes its standard
ONNX training form, written by the GraphBuilder method a training-mode
export uses too, with Chainer's update of the running variance; Dropout
becomes this project's DropoutTraining, independent of the model's opset,
in sub-graphs (Loop bodies, If branches) too.
"""
import onnx
from onnx import helper

from ..onnx_builder import GraphBuilder
from ..onnx_graph import (
    all_nodes,
    numpy_dtype,
    opset_versions,
    optional_input,
    schema_version,
    walk_graphs,
)
from ..runtime.ops.noise import DROPOUT_RATIO
from ..runtime.ops.opset_rules import batch_norm_trains
from ..runtime.ops.registry import CUSTOM_DOMAIN, fill_defaults


def to_training_mode(model, decays=None):
    """Rewrite ``model`` (shape-inferred, with static shapes) in place.
    ``decays`` maps a running-mean initializer name to its link's decay
    (default 0.9).  Returns [(updated value name, running-average
    initializer name)]; the updated values are new graph outputs."""
    decays = decays or {}
    types = {v.name: v for v in list(model.graph.value_info) + list(model.graph.input)}
    opset = opset_versions(model).get('', 1)
    builder = GraphBuilder(opset)
    for name in {v for n in model.graph.node for v in list(n.input) + list(n.output)} | \
            set(types) | {t.name for t in model.graph.initializer}:
        builder.reserve(name)
    latest = {}  # running-average initializer -> the name of its latest update
    nodes = []
    for node in model.graph.node:
        if _is_inference_batch_norm(node, opset):
            # A link called twice: its second node reads the first's update.
            mean, var = node.input[3:5]
            inputs = list(node.input[:3]) + [latest.get(mean, mean), latest.get(var, var)]
            for stat in (mean, var):
                updated = stat + '/updated'
                latest[stat] = builder.fresh(updated) if stat in latest else \
                    builder.reserve(updated)
            # spatial (opsets < 9) as written: the training form keeps it.
            spatial = {a.name: a.i for a in node.attribute if a.name == 'spatial'}
            first = len(builder.nodes)
            builder.batch_normalization_training(
                inputs, [node.output[0], latest[mean], latest[var]],
                epsilon=_attributes(node, opset)['epsilon'], momentum=decays.get(mean, 0.9),
                unbiased_count=_count_per_channel(node, types, model),
                stat_dtype=numpy_dtype(_tensor_type(var, types, model).elem_type), **spatial)
            for i, added in enumerate(builder.nodes[first:]):
                added.name = node.name if i == 0 else '%s/%s' % (node.name, added.name)
            nodes.extend(builder.nodes[first:])
        elif _is_dropout(node):
            nodes.append(_dropout_training(node, model, model.graph, types))
        else:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    _train_sub_graphs(model)
    model.graph.initializer.extend(builder.initializers)
    state_updates = [(updated, stat) for stat, updated in latest.items()]
    for updated, stat in state_updates:
        model.graph.output.append(_same_type(updated, types.get(stat), model, stat))
    if any(n.domain == CUSTOM_DOMAIN for n in all_nodes(model.graph)) and \
            CUSTOM_DOMAIN not in opset_versions(model):
        model.opset_import.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
    return state_updates


def _is_dropout(node):
    return node.op_type == 'Dropout' and node.domain in ('', 'ai.onnx')


def _dropout_training(node, model, graph, types):
    """The DropoutTraining node replacing Dropout ``node`` of ``graph``
    (whose value types ``types`` holds); its mask's type is declared in
    ``graph`` when its input's is known."""
    mask_name = node.output[0] + '/mask'
    info = types.get(node.input[0])
    if info is not None or graph is model.graph:
        mask = _same_type(mask_name, info, model, node.input[0])
        mask.type.tensor_type.elem_type = onnx.TensorProto.BOOL
        graph.value_info.append(mask)
    return helper.make_node('DropoutTraining', [node.input[0]], [node.output[0], mask_name],
                            name=node.name, domain=CUSTOM_DOMAIN,
                            ratio=_dropout_ratio(node, model))


def _train_sub_graphs(model):
    """Make the Dropouts of the model's sub-graphs (Loop bodies, If
    branches, nested ones included) random, as Chainer's are in training.
    A ratio of 0 draws nothing and stays an identity: a Loop's gradient
    recomputes its body and refuses random operators there.
    BatchNormalization in a sub-graph stays as it is (its running averages
    could not become outputs of the model)."""
    for graph, enclosing in walk_graphs(model.graph):
        if not enclosing:
            continue  # the main graph: to_training_mode rewrote it
        types = {v.name: v for v in list(graph.value_info) + list(graph.input)}
        nodes = [_dropout_training(node, model, graph, types)
                 if _is_dropout(node) and _dropout_ratio(node, model) != 0 else node
                 for node in graph.node]
        del graph.node[:]
        graph.node.extend(nodes)


def _is_inference_batch_norm(node, opset):
    """A standard BatchNormalization with the given statistics (a file's
    training-mode BatchNormalization stays as it is)."""
    if node.op_type != 'BatchNormalization' or node.domain not in ('', 'ai.onnx'):
        return False
    attrs = _attributes(node, opset)
    return not batch_norm_trains(opset, len(node.output), **{
        name: attrs[name] for name in ('training_mode', 'is_test') if name in attrs})


def _attributes(node, opset):
    """``node``'s attributes with the defaults of its kernel at its schema
    version filled in (registry.fill_defaults): no default restated here."""
    return fill_defaults(node.op_type, node.domain, schema_version(node, {'': opset}),
                         {a.name: helper.get_attribute_value(a) for a in node.attribute})


def _count_per_channel(node, types, model):
    """How many values of X each statistic averages (X's size over the
    scale's): Chainer's unbiased variance needs it."""
    sizes = []
    for name in node.input[:2]:
        dims = _tensor_type(name, types, model).shape.dim
        if not all(d.HasField('dim_value') for d in dims):
            raise ValueError('BatchNormalization %s: training needs the static shape of %s '
                             '(Chainer\'s running variance depends on the batch size)'
                             % (node.name or '(unnamed)', name))
        size = 1
        for d in dims:
            size *= d.dim_value
        sizes.append(size)
    return sizes[0] // sizes[1]


def _tensor_type(name, types, model):
    """The TensorTypeProto of value ``name`` (typed in ``types``, or an
    initializer)."""
    return _same_type(name, types.get(name), model, name).type.tensor_type


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
    attrs = _attributes(node, opset_versions(model).get('', 1))
    if 'ratio' in attrs:  # an attribute before opset 12
        return float(attrs['ratio'])
    if optional_input(node, 1):
        init = next((t for t in model.graph.initializer if t.name == node.input[1]), None)
        if init is None:
            raise ValueError('Dropout %s: the ratio must be a constant to compile for training'
                             % node.name)
        return float(onnx.numpy_helper.to_array(init))
    return DROPOUT_RATIO
