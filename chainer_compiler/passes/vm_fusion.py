"""Rewrites that give the VM fewer, bigger instructions.

Every VM instruction costs a dispatch and usually a fresh array, which on
small models is as much as the arithmetic.  Two rewrites, run on each graph
right before code emission (after autodiff, which knows only standard ops):

* Identity nodes disappear: their readers read the source instead, or, when
  the Identity names a graph output, the source's producer writes that output
  directly.  Gradient graphs end in one Identity per parameter gradient.
* Gemm followed by its only reader Relu becomes one FusedGemm (this
  project's domain), which applies the ReLU in place on the product.

Graphs with sub-graphs (Loop/If/Scan bodies that may read outer values by
name) are left alone.
"""
from onnx import helper

from ..onnx_graph import subgraphs
from ..runtime.ops.registry import CUSTOM_DOMAIN

_STANDARD = ('', 'ai.onnx')


def fuse_for_vm(graph):
    """Rewrite ``graph`` (a GraphProto) in place."""
    if any(list(subgraphs(node)) for node in graph.node):
        return
    _remove_identities(graph)
    _fuse_gemm_relu(graph)


def _remove_identities(graph):
    outputs = {v.name for v in graph.output}
    external = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    produced = {o for node in graph.node for o in node.output}
    alias = {}  # name -> the name that replaces it
    renamed_sources = set()
    dropped = set()  # node indices (protobuf hands out new wrappers: no ids)
    for index, node in enumerate(graph.node):
        if node.op_type != 'Identity' or node.domain not in _STANDARD:
            continue
        src, dst = node.input[0], node.output[0]
        if dst not in outputs:
            alias[dst] = src  # readers of dst read src
            dropped.add(index)
        elif (src in produced and src not in outputs and src not in external
              and src not in renamed_sources):
            alias[src] = dst  # src's producer writes the output itself
            renamed_sources.add(src)
            dropped.add(index)
    if not dropped:
        return

    def resolve(name):
        while name in alias:
            name = alias[name]
        return name

    kept = [node for index, node in enumerate(graph.node) if index not in dropped]
    for node in kept:
        node.input[:] = [resolve(n) if n else n for n in node.input]
        node.output[:] = [resolve(n) if n else n for n in node.output]
    del graph.node[:]
    graph.node.extend(kept)
    stale = [v for v in graph.value_info if v.name in alias]
    for v in stale:
        graph.value_info.remove(v)


def _fuse_gemm_relu(graph):
    nodes = list(graph.node)
    readers = {}
    for index, node in enumerate(nodes):
        for name in node.input:
            readers.setdefault(name, []).append(index)
    outputs = {v.name for v in graph.output}
    fused = set()  # indices of the Relu nodes absorbed
    for node in nodes:
        if node.op_type != 'Gemm' or node.domain not in _STANDARD:
            continue
        users = readers.get(node.output[0], [])
        if node.output[0] in outputs or len(users) != 1:
            continue
        relu = nodes[users[0]]
        if relu.op_type == 'Relu' and relu.domain in _STANDARD:
            node.op_type, node.domain = 'FusedGemm', CUSTOM_DOMAIN
            node.output[0] = relu.output[0]
            node.attribute.append(helper.make_attribute('activation', 'Relu'))
            fused.add(users[0])
    nodes = [node for index, node in enumerate(nodes) if index not in fused]
    del graph.node[:]
    graph.node.extend(nodes)
