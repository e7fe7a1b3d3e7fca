"""The memory model: the peak bytes a training step's programs hold, predicted
from static shapes, as the VM counts them.

The VM (runtime/executor.py, ``track_memory``) counts the bytes of the
arrays its live registers hold, a view as the array it views: the
constants and inputs from the start, each instruction's outputs once it
runs, less what the instruction frees.  Code generation
(codegen.insert_frees) frees a register after its last read, and a value
nobody reads right after it is made; constants and program outputs are
never freed.  ``peak`` replays exactly that rule, with each value's size
from its static dtype and shape: for compiled Programs over registers, with
the types the compiler gave them (Program.types) and their records' view_of
(program_schedule), so a prediction and a measurement count the same bytes.
A training step runs two programs: the forward one holds the values it
retains for backward as outputs until it ends, the backward one takes them
as inputs and frees each after its last read; the step's peak is the
larger of the two programs' peaks.

Values whose size the shapes do not tell (sequences, unknown dimensions)
count as nothing.
"""
from dataclasses import dataclass

import numpy
from onnx import helper

from .onnx_graph import SequenceType, kernel_attributes, reads, value_types
from .runtime.ops.registry import LATEST, fill_defaults, operator_record
from .shapes import infer_shapes


def value_bytes(entry):
    """The bytes of a value of type ``entry`` (a value_types entry), or None
    when its dtype or shape is not static (sequences included)."""
    if entry is None or isinstance(entry, SequenceType) or entry[0] is None or entry[1] is None:
        return None
    if any(not isinstance(d, int) for d in entry[1]):
        return None
    return int(numpy.prod(entry[1], dtype=numpy.int64)) * numpy.dtype(entry[0]).itemsize


def sizes(types):
    """{name: bytes} of the values in ``types`` whose size is static."""
    known = {}
    for name, entry in types.items():
        size = value_bytes(entry)
        if size is not None:
            known[name] = size
    return known


def inferred_types(model):
    """{name: value_types entry} of every value of ``model`` (a ModelProto)
    that shape inference types."""
    return value_types(infer_shapes(model, '<memory model>').graph)


@dataclass
class Schedule:
    """One program as the memory model sees it: the values live when it
    starts (``inputs``; ``constants`` among them are never freed), its
    steps in order as (values read, values written), and its ``outputs``
    (never freed).  Values are value names (graph_schedule) or registers
    (program_schedule); a missing optional value is not listed."""
    inputs: list
    constants: set
    steps: list
    outputs: set
    #: The bytes each step's kernel holds while it runs beyond what it reads
    #: and writes (OpRecord.scratch), one per step; None: none counted.
    scratch: list | None = None

    def peak(self, size):
        """The most bytes live at once, ``size(name)`` giving each value's
        bytes: as the VM counts them under codegen's frees."""
        return self.live_at_peak(size)[0]

    def live_at_peak(self, size):
        """(the peak, the names of the values live at its first moment)."""
        keep = self.constants | self.outputs
        last = {}
        for index, (read, written) in enumerate(self.steps):
            for name in list(read) + list(written):
                last[name] = index
        frees = {}
        for name, index in last.items():
            if name not in keep:
                frees.setdefault(index, set()).add(name)
        names = set(self.inputs)
        live = sum(size(name) for name in names)
        peak, at_peak = live, set(names)
        for index, (_, written) in enumerate(self.steps):
            names.update(written)
            live += sum(size(name) for name in written)
            running = live + (self.scratch[index] if self.scratch else 0)
            if running > peak:
                peak, at_peak = running, set(names)
            freed = frees.get(index, ())
            names.difference_update(freed)
            live -= sum(size(name) for name in freed)
        return peak, at_peak


def graph_schedule(nodes, inputs, constants, outputs, scratch=None):
    """The Schedule of a program emitted from ``nodes`` (ONNX nodes in order;
    their sub-graphs' outer reads count as reads), whose ``inputs`` and
    ``constants`` (names) are live from the start, and whose ``outputs``
    (names) stay.  An Identity makes no value of its own: the pipeline
    renames its output to its input before code is emitted, so reads of
    the output count as reads of the input.  ``scratch(node)``: the bytes
    its kernel holds besides (node_scratch); None: none counted."""
    alias = _identity_sources(nodes)
    steps, held = [], []
    for node in nodes:
        if _is_identity(node):
            continue
        steps.append(([alias.get(name, name) for name in reads(node)],
                      [o for o in node.output if o]))
        held.append(scratch(node) if scratch else 0)
    return Schedule(list(inputs) + list(constants), set(constants), steps,
                    {alias.get(name, name) for name in outputs}, held if scratch else None)


def _is_identity(node):
    return node.op_type == 'Identity' and node.domain == '' and bool(node.input[0])


def _identity_sources(nodes):
    """{an Identity's output: the value it copies} over ``nodes``, in order."""
    source = {}
    for node in nodes:
        if _is_identity(node):
            source[node.output[0]] = source.get(node.input[0], node.input[0])
    return source


def node_scratch(node, types, opsets=None):
    """The bytes the NumPy kernel of ONNX ``node`` holds while it runs
    beyond its inputs and outputs: the OpRecord.scratch rule
    instruction_scratch applies to a Program's instructions, with the
    types of ``types`` ({name: value_types entry}) and the node's
    attributes, defaults filled for its opset in ``opsets`` ({domain:
    version}); 0 when undeclared."""
    record = operator_record(node.op_type, node.domain)
    if record is None or record.scratch is None:
        return 0

    def typed(names):
        entries = []
        for name in names:
            t = types.get(name) if name else None
            entries.append(None if t is None or isinstance(t, SequenceType) or t[0] is None
                           else (numpy.dtype(t[0]), t[1]))
        return entries
    version = (opsets or {}).get(node.domain, LATEST)
    attributes = fill_defaults(node.op_type, node.domain, version, kernel_attributes(node))
    return record.scratch_bytes(typed(node.input), typed(node.output), attributes)


def views(program):
    """{register: the register whose array it views} of ``program`` (a
    runtime Program), each to the register that made the array: output 0
    of an instruction whose OpRecord says it may be a view of an input
    (view_of), when the registers' types say it is one (the same dtype: a
    Cast to another copies) and the op draws nothing (training-mode Dropout
    makes a new array); and output 0 of an in-place update (in_place),
    which returns the array it overwrites first (runtime/ops/training.py:
    the training step's parameters, which it outputs)."""
    base = {}
    for inst in program.instructions:
        record = operator_record(inst.op, inst.domain)
        if record is None or record.random or not inst.outputs:
            continue
        k = record.in_place[0] if record.in_place else record.view_of
        if k is None or k >= len(inst.inputs):
            continue
        source, view = inst.inputs[k], inst.outputs[0]
        given, made = program.types.get(source), program.types.get(view)
        if source >= 0 and view >= 0 and given is not None and made is not None \
                and given.dtype is not None and given.dtype == made.dtype:
            base[view] = base.get(source, source)
    return base


def program_schedule(program, shared=None, held=(), scratch=False):
    """The Schedule of a runtime Program over its registers.  A view makes
    no bytes of its own: its reads count as reads of the register it views
    (views), whose array lives until both are freed.  ``shared``: {input
    register: input register} for inputs the caller passes as views of
    other inputs (the retained values of a training step's backward).
    ``held``: input registers whose arrays the caller keeps (never freed);
    ``scratch``: count each kernel's temporaries (instruction_scratch)."""
    base = dict(shared or {})
    base.update(views(program))

    def storage(registers):
        return [base.get(r, r) for r in registers if r >= 0]

    steps = [(storage(inst.inputs + inst.captures),
              [r for r in inst.outputs if r >= 0 and r not in base])
             for inst in program.instructions]
    constants = set(program.constants)
    inputs = [v.register for v in program.inputs if v.register not in base]
    return Schedule(inputs + sorted(constants), constants | set(storage(held)), steps,
                    set(storage(v.register for v in program.outputs)),
                    [instruction_scratch(program, inst) for inst in program.instructions]
                    if scratch else None)


def instruction_scratch(program, inst):
    """The bytes the NumPy kernel of ``inst`` holds while it runs beyond its
    inputs and outputs (OpRecord.scratch, from the registers' types): im2col
    columns, batch normalization's temporaries; 0 when undeclared."""
    record = operator_record(inst.op, inst.domain)
    if record is None:
        return 0

    def typed(registers):
        entries = []
        for r in registers:
            t = program.types.get(r) if r >= 0 else None
            entries.append(None if t is None or t.kind != 'tensor' or t.dtype is None
                           else (numpy.dtype(t.dtype), t.shape))
        return entries
    return record.scratch_bytes(typed(inst.inputs), typed(inst.outputs), inst.attrs)


def training_schedules(forward_graph, backward, scratch=None):
    """(forward, backward) Schedules of the programs a training compilation
    emits from ``forward_graph`` and the autodiff.BackwardGraph ``backward``
    (before the VM's rewrites): forward outputs are the graph's outputs and
    the retained values; backward inputs the output gradients and the
    retained values.  ``scratch``: as graph_schedule's."""
    forward = graph_schedule(
        forward_graph.node, [v.name for v in forward_graph.input],
        [t.name for t in forward_graph.initializer],
        [v.name for v in forward_graph.output] + list(backward.retained), scratch)
    back = graph_schedule(
        backward.nodes, [g for g, _ in backward.grad_inputs] + list(backward.retained),
        [t.name for t in backward.initializers],
        [g for g in backward.grad_outputs.values() if g is not None], scratch)
    return forward, back


def joined_schedule(forward_graph, backward, scratch=None):
    """The Schedule of one program running ``forward_graph`` then the
    autodiff.BackwardGraph ``backward`` (the training step, before its
    optimizer updates): forward values die at their last read, in either
    half; each gradient once its parameter's update has run, as
    pipeline.add_optimizer_update places it: after the last node that
    reads the parameter or makes or reads the gradient, not before the
    forward's end.  ``scratch``: as graph_schedule's."""
    nodes = list(forward_graph.node) + list(backward.nodes)
    schedule = graph_schedule(
        nodes, [v.name for v in forward_graph.input],
        [t.name for t in list(forward_graph.initializer) + list(backward.initializers)],
        [v.name for v in forward_graph.output], scratch)
    source = _identity_sources(nodes)
    last = {}
    for index, (read, written) in enumerate(schedule.steps):
        for name in (*read, *written):
            last[name] = index
    forward_end = sum(not _is_identity(node) for node in forward_graph.node) - 1
    for param, grad in backward.grad_outputs.items():
        if grad is not None:
            grad = source.get(grad, grad)
            # The update reads the gradient there: it is freed after.
            schedule.steps[max(forward_end, last.get(param, -1), last.get(grad, -1))][0] \
                .append(grad)
    return schedule


def constant_sizes(tensors):
    """{name: bytes} of the TensorProtos ``tensors`` (initializers)."""
    return {t.name: int(numpy.prod(t.dims, dtype=numpy.int64))
            * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize for t in tensors}


def program_sizes(program):
    """{register: bytes} of the registers of ``program`` (a runtime
    Program) whose size is static: constants by their arrays, other values
    by the type the compiler gave their register (Program.types)."""
    known = {}
    for register, t in program.types.items():
        if t.kind == 'tensor' and t.dtype is not None:
            size = value_bytes((numpy.dtype(t.dtype), t.shape))
            if size is not None:
                known[register] = size
    for register, value in program.constants.items():
        known[register] = getattr(value, 'nbytes', 0)
    return known


def program_peak(program, shared=None, held=(), scratch=False):
    """The predicted peak of ``program`` alone, as the VM counts it:
    (bytes, the registers live at its first moment).  ``held`` and
    ``scratch`` as program_schedule's: what the process holds besides."""
    known = program_sizes(program)
    return program_schedule(program, shared, held, scratch).live_at_peak(
        lambda r: known.get(r, 0))


def compiled_training_peak(programs):
    """The predicted peak of compiled training.TrainingPrograms: its
    forward and backward Programs as emitted, with the sizes their
    registers' types give (program_sizes)."""
    return compiled_peak_parts(programs)['total']


def compiled_process_peak(programs):
    """The predicted peak of what a process running compiled
    training.TrainingPrograms on NumPy holds, the optimizer's state aside:
    the VM's count (program_peak), except that the forward program's
    inputs (parameters, data) stay for the whole step, since the model and
    the caller keep the arrays the VM lets go after their last read, and
    that each instruction adds its kernel's temporaries (OpRecord.scratch)."""
    forward, backward = programs.forward, programs.backward
    caller = {v.name: v.register for v in forward.inputs}
    known = program_sizes(forward)
    peak = program_peak(forward, held=caller.values(), scratch=True)[0]
    given = {v.name: v.register for v in backward.inputs}
    held = [given[name] for name in caller if name in given]
    # What backward does not take, the caller holds beside it.
    beside = sum(known.get(r, 0) for name, r in caller.items() if name not in given)
    return max(peak, beside + program_peak(backward, _retained_views(forward, backward), held,
                                           scratch=True)[0])


def compiled_planned_peak(programs):
    """The peak the recompute policies plan on and ``memory_budget`` bounds
    (recompute.Problem.peak) for compiled training.TrainingPrograms: the
    VM's count (compiled_training_peak) with each kernel's temporaries
    while it runs (OpRecord.scratch)."""
    forward, backward = programs.forward, programs.backward
    return max(program_peak(forward, scratch=True)[0],
               program_peak(backward, _retained_views(forward, backward), scratch=True)[0])


def compiled_peak_parts(programs):
    """What the predicted peak of compiled training.TrainingPrograms is
    made of, in bytes, at its first moment: {'total', 'program' (which one
    peaks: 'forward' or 'backward'), 'parameters' (the forward program's
    ``params``: weights and running statistics), 'gradients' (the backward
    program's outputs), 'retained' (other values forward retains for
    backward), 'other' (values made and freed inside the program)}."""
    forward, backward = programs.forward, programs.backward
    runs = {'forward': program_peak(forward),
            'backward': program_peak(backward, _retained_views(forward, backward))}
    which = max(runs, key=lambda name: runs[name][0])
    total, live = runs[which]
    program = forward if which == 'forward' else backward
    # The parts by the names the two programs declare for their inputs and
    # outputs (the retained values are outputs of one, inputs of the other).
    declared = {v.name: v.register for v in program.inputs + program.outputs}
    kinds = {'parameters': set(programs.params),
             'gradients': {v.name for v in backward.outputs},
             'retained': set(programs.retained) - set(programs.params)}
    known = program_sizes(program)
    parts = {'total': total, 'program': which}
    for kind, names in kinds.items():
        registers = {declared[n] for n in names if n in declared}
        parts[kind] = sum(known.get(r, 0) for r in live & registers)
    parts['other'] = total - sum(parts[k] for k in kinds)
    return parts


def _retained_views(forward, backward):
    """{backward input register: backward input register} for the retained
    values forward outputs as views of other retained values (views)."""
    base = views(forward)
    made = {v.register: v.name for v in forward.outputs}
    by_name = {v.name: v.register for v in backward.inputs}
    shared = {}
    for v in forward.outputs:
        source = made.get(base.get(v.register))
        if source in by_name and v.name in by_name:
            shared[by_name[v.name]] = by_name[source]
    return shared


def native_call_peak(program, run, beside=0, held=()):
    """The bytes a process holds while the native library ``run`` (a
    runtime.native.library.NativeRun of ``program``) runs one call, the
    arena aside: every input's array for the whole call (the C reads them
    until it returns, and writes in place, not frees, a donated one), the
    arrays the call allocates first (NativeRun.call_bytes), a copy of each
    donated input whose name is in ``held`` (the caller keeps that array,
    so the call cannot overwrite it) and ``beside``, what the caller holds
    that is no input."""
    known = program_sizes(program)
    copies = sum(known.get(program.inputs[k].register, 0) for k in run.donated
                 if program.inputs[k].name in held)
    return (beside + copies + run.call_bytes()
            + sum(known.get(v.register, 0) for v in program.inputs))


def native_process_peak(calls, runs):
    """The predicted peak of what a process running native calls one after
    another holds: the largest of ``calls`` (native_call_peak's arguments,
    as tuples), with what the model's NativeRuns ``runs`` hold for their
    life (NativeRun.resident_bytes) and the one arena buffer the calls
    share (runtime/native/arena_pool.py: as large as the largest arena
    among the calls' runs; a model that also evaluates holds its inference
    program's from the first evaluation on: count that call too)."""
    return (max(native_call_peak(*call) for call in calls)
            + sum(run.resident_bytes() for run in runs)
            + max(call[1].arena_bytes for call in calls))


def compiled_native_peak(programs, forward, backward, runs):
    """The predicted peak of what a process running compiled
    training.TrainingPrograms with compile_onnx's bridge on the native
    backend holds, the optimizer's state aside: ``forward`` and ``backward``
    are the NativeRuns of its two programs, ``runs`` every NativeRun of the
    model (its inference program's weights block too; the arena is the
    training calls': native_process_peak).  The caller
    holds the forward's inputs (parameters, data) through both calls and
    the model's outputs through backward (Chainer's graph keeps them)."""
    first, second = programs.forward, programs.backward
    known = program_sizes(first)
    caller = list(first.inputs) + [v for v in first.outputs if v.name in programs.outputs]
    given = {v.name for v in second.inputs}
    beside = sum(known.get(v.register, 0) for v in caller if v.name not in given)
    return native_process_peak([(first, forward), (second, backward, beside,
                                                   {v.name for v in caller})], runs)
