"""Code emission: an ONNX graph becomes a Program.

Every ONNX value gets a register; initializers become constants; each node
becomes one instruction; sub-graphs (Loop/If/Scan bodies) become nested
Programs whose extra inputs are the outer values they capture.  Each
register gets the type the graph states for its value (inputs, outputs,
``value_info``, initializers: shapes.infer_graph_types fills them); a
captured value keeps its outer type.  A liveness scan then frees each
register right after its last use.
"""
from onnx import numpy_helper

from .onnx_graph import (
    free_names,
    kernel_attributes,
    schema_version,
    subgraphs,
    tensor_signature,
    value_kind,
)
from .runtime.ops.registry import fill_defaults, normalize_domain
from .runtime.program import NO_REGISTER, Instruction, Program, RegisterType, ValueInfo
from .runtime.validation import is_symbol


def emit_program(graph, opsets, name='main', captured=()):
    """Compile ``graph`` into a Program.

    ``opsets`` maps domains to the model's opset versions.  ``captured``
    names outer-scope values the graph reads; they become extra inputs after
    the graph's own.  Emission is pure: ``graph`` is only read (rewrites
    for the VM are passes of the pipeline, pipeline.py).
    """
    return _Emitter(opsets).emit(graph, name, captured, {})


def register_type(type_proto):
    """The RegisterType of an ONNX TypeProto, or None when it says nothing.
    Symbolic dimensions that are not identifiers (validation.is_symbol) are
    unknown."""
    kind = value_kind(type_proto)
    if kind == 'unknown':
        return None
    inner = {'tensor': type_proto, 'sequence': type_proto.sequence_type.elem_type,
             'optional': type_proto.optional_type.elem_type}[kind]
    dtype, shape = tensor_signature(inner)
    if shape is not None:
        shape = tuple(d if d is None or isinstance(d, int) or is_symbol(d) else None
                      for d in shape)
    return RegisterType(kind, dtype, shape)


def _graph_types(graph, outer):
    """{value name: RegisterType} of what ``graph`` states, over ``outer``'s."""
    types = dict(outer)
    for v in list(graph.input) + list(graph.value_info) + list(graph.output):
        t = register_type(v.type)
        if t is not None:
            types[v.name] = t
    return types


class _Emitter:
    def __init__(self, opsets):
        self.opsets = opsets

    def emit(self, graph, name, captured, outer_types):
        registers = {}
        types = _graph_types(graph, outer_types)

        def reg(value_name):
            if value_name not in registers:
                registers[value_name] = len(registers)
            return registers[value_name]

        # Initializers listed as graph inputs too (old exporters do that) are
        # treated as constants, not as inputs the caller must pass.
        initializer_names = {t.name for t in graph.initializer}
        inputs = []
        for v in graph.input:
            if v.name in initializer_names:
                continue
            dtype, shape = tensor_signature(v.type)
            inputs.append(ValueInfo(v.name, reg(v.name), value_kind(v.type), dtype, shape))
        for cap in captured:
            inputs.append(ValueInfo(cap, reg(cap), 'unknown'))
        constants = {reg(t.name): numpy_helper.to_array(t) for t in graph.initializer}
        types.update((n, RegisterType('tensor', constants[r].dtype.name, constants[r].shape))
                     for n, r in registers.items() if r in constants)

        instructions = []
        for index, node in enumerate(graph.node):
            node_name = node.name or '%s_%d' % (node.op_type, index)
            # Every body of the node receives the union of the outer values
            # its bodies read, in one order, after its own inputs.
            sub_captures = []
            for g in subgraphs(node):
                sub_captures.extend(n for n in free_names(g) if n not in sub_captures)
            attrs = kernel_attributes(node, lambda g, _owner=node_name, _caps=sub_captures:
                                      self.emit(g, '%s/%s' % (_owner, g.name or 'body'), _caps,
                                                types))
            ins = [reg(n) if n else NO_REGISTER for n in node.input]
            while ins and ins[-1] == NO_REGISTER:
                ins.pop()
            outs = [reg(n) if n else NO_REGISTER for n in node.output]
            instructions.append(Instruction(
                op=node.op_type, domain=normalize_domain(node.domain),
                version=schema_version(node, self.opsets), name=node_name,
                inputs=tuple(ins), outputs=tuple(outs),
                captures=tuple(reg(n) for n in sub_captures),
                # Defaults filled once, here: no later stage restates one.
                attrs=fill_defaults(node.op_type, node.domain, schema_version(node, self.opsets),
                                    attrs)))

        outputs = []
        for v in graph.output:
            dtype, shape = tensor_signature(v.type)
            outputs.append(ValueInfo(v.name, reg(v.name), value_kind(v.type), dtype, shape))
        program = Program(instructions=instructions, inputs=inputs, outputs=outputs,
                          constants=constants, num_registers=len(registers),
                          register_names={r: n for n, r in registers.items()}, name=name,
                          types={r: types[n] for n, r in registers.items() if n in types})
        insert_frees(program)
        return program


def insert_frees(program):
    """Set each instruction's ``frees`` to the registers whose last use it
    is.  Constants and program outputs are never freed; a value nobody reads
    is freed right after the instruction that made it."""
    keep = set(program.constants) | {v.register for v in program.outputs}
    last_use = {}
    for index, inst in enumerate(program.instructions):
        for r in inst.inputs + inst.captures + inst.outputs:
            if r != NO_REGISTER:
                last_use[r] = index
    frees = {}
    for r, index in last_use.items():
        if r not in keep:
            frees.setdefault(index, []).append(r)
    for index, inst in enumerate(program.instructions):
        inst.frees = tuple(sorted(frees.get(index, ())))
