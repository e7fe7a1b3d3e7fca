"""Rewrites that give the VM fewer, bigger instructions.

Every VM instruction costs a dispatch and usually a fresh array, which on
small models is as much as the arithmetic.  Two passes:

* ``remove_identities``, on each graph right before code emission (after
  autodiff, which knows only standard ops): Identity nodes disappear,
  their readers read the source instead, or, when the Identity names a
  graph output, the source's producer writes that output directly.
  Gradient graphs end in one Identity per parameter gradient.  It runs in
  every graph, sub-graphs (Loop/If/Scan bodies) included.  A sub-graph
  reads values of the graphs around it by name, without listing them as
  inputs: a value some sub-graph reads keeps its name (its Identity stays)
  and counts that sub-graph among its readers.
* ``fuse_program``, on each emitted Program: the fusion rules the native
  backend runs too (runtime/native/fusion.py), those the VM's kernels run
  the fused form of (runtime/ops/fusion_rules.RULES): BatchNormalization
  folded into a constant Conv or Gemm, Gemm + Relu as FusedGemm, a
  MatMul's constant bias, x * Sigmoid(x) as Swish, a written-out GELU as
  Gelu.  On Programs, not
  graphs, so that each rule is written once, and the memory model reads
  the Program the VM runs.
"""
from ..onnx_graph import implicit_inputs, walk_graphs

_STANDARD = ('', 'ai.onnx')


def remove_identities(graph):
    """Drop the Identity nodes of ``graph`` (a GraphProto) and its
    sub-graphs, in place."""
    for g, _ in walk_graphs(graph):
        _remove_identities(g)


def fuse_program(program):
    """``program`` (a runtime Program) and its sub-programs fused by the
    rules the VM applies; the same object when nothing fuses."""
    # Imported when first used: importing the compiler loads no emitter.
    from ..runtime.native.fusion import fuse
    return fuse(program, 'vm')


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

