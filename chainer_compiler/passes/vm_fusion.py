"""Rewrites that give the VM fewer, bigger instructions.

Every VM instruction costs a dispatch and usually a fresh array, which on
small models is as much as the arithmetic.  Two rewrites, run on each graph
right before code emission (after autodiff, which knows only standard ops):

* Identity nodes disappear: their readers read the source instead, or, when
  the Identity names a graph output, the source's producer writes that output
  directly.  Gradient graphs end in one Identity per parameter gradient.
* Gemm followed by its only reader Relu becomes one FusedGemm (this
  project's domain), which applies the ReLU in place on the product (the
  epilogues the VM's kernel applies: runtime/ops/fusion_rules.py, the rule
  set the native backend's fusion reads too).

Both run in every graph, sub-graphs (Loop/If/Scan bodies) included.  A
sub-graph reads values of the graphs around it by name, without listing
them as inputs: a value some sub-graph reads keeps its name (its Identity
stays) and counts that sub-graph among its readers.
"""
from onnx import helper

from ..onnx_graph import implicit_inputs, reads, walk_graphs
from ..runtime.ops.fusion_rules import vm_gemm_epilogue
from ..runtime.ops.registry import CUSTOM_DOMAIN

_STANDARD = ('', 'ai.onnx')


def fuse_for_vm(graph):
    """Rewrite ``graph`` (a GraphProto) and its sub-graphs in place."""
    for g, _ in walk_graphs(graph):
        _remove_identities(g)
        _fuse_gemm_relu(g)


def _remove_identities(graph):
    outputs = {v.name for v in graph.output}
    external = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    produced = {o for node in graph.node for o in node.output}
    # Read by name inside a sub-graph: renaming would need the sub-graph renamed.
    captured = {name for node in graph.node for name in implicit_inputs(node)}
    alias = {}  # name -> the name that replaces it
    renamed_sources = set()
    dropped = set()  # node indices (protobuf hands out new wrappers: no ids)

    def resolve(name):
        while name in alias:
            name = alias[name]
        return name

    for index, node in enumerate(graph.node):
        if node.op_type != 'Identity' or node.domain not in _STANDARD:
            continue
        # An Identity of an Identity already dropped reads that one's source.
        src, dst = resolve(node.input[0]), node.output[0]
        if dst in captured:
            continue
        if dst not in outputs:
            alias[dst] = src  # readers of dst read src
            dropped.add(index)
        elif (src in produced and src not in outputs and src not in external
              and src not in renamed_sources and src not in captured):
            alias[src] = dst  # src's producer writes the output itself
            renamed_sources.add(src)
            dropped.add(index)
    if not dropped:
        return

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
        for name in reads(node):
            readers.setdefault(name, []).append(index)
    outputs = {v.name for v in graph.output}
    fused = set()  # indices of the Relu nodes absorbed
    for node in nodes:
        if node.op_type != 'Gemm' or node.domain not in _STANDARD:
            continue
        users = readers.get(node.output[0], [])
        if node.output[0] in outputs or len(users) != 1:
            continue
        act = nodes[users[0]]
        if vm_gemm_epilogue(act.op_type, act.domain):
            node.op_type, node.domain = 'FusedGemm', CUSTOM_DOMAIN
            node.output[0] = act.output[0]
            node.attribute.append(helper.make_attribute('activation', act.op_type))
            fused.add(users[0])
    nodes = [node for index, node in enumerate(nodes) if index not in fused]
    del graph.node[:]
    graph.node.extend(nodes)
