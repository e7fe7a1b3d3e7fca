"""The native backend's second stage: where every value of a Lowered lives.

plan(lowered) -> ArenaPlan: a program output's buffer, an alias of another
value (a view, or a result written over an input read for the last time),
a block of a Concat's output, or an offset of one arena planned from
liveness (arena.py), or an offset of a donated input's buffer after that
input's last read.
"""
from collections.abc import Collection
from dataclasses import dataclass, field

from ..program import NO_REGISTER
from .arena import Buffer, aligned, plan_arena
from .errors import NativeEmitError
from .fusion import written_inputs
from .lower import Lowered, has_input


@dataclass
class ArenaPlan:
    """Where plan() puts every value: a program output's buffer
    (``output_of``: register -> output position), the same memory as
    another value (``alias_of``: a view, or a result written over an input
    read for the last time), a block of another value (``placed``: register
    -> (container, element offset), a Concat's input written where the
    Concat would copy it), or an arena offset (``offsets`` of each of
    ``buffers``, in ``arena_bytes``); the outputs copied at the end
    (``final_copies``: output position, register), the inputs updated in
    place (writable in C) and the outputs that are inputs
    (EmitResult.in_place_outputs); with donation, the buffers placed in
    donated inputs (``donated``: (buffer, input position, byte offset))."""
    output_of: dict[int, int]
    final_copies: list[tuple[int, int]]
    alias_of: dict[int, int]
    updated_inputs: list[int]
    in_place_outputs: dict[int, int]
    buffers: list[Buffer]
    offsets: dict
    arena_bytes: int
    placed: dict[int, tuple[int, int]] = field(default_factory=dict)
    donated: list[tuple[Buffer, int, int]] = field(default_factory=list)

    @property
    def donated_inputs(self) -> list[int]:
        """The positions of the inputs whose memory holds values after
        their last read: the caller must give them up (library.py)."""
        return sorted({k for _, k, _ in self.donated})


def plan(lowered: Lowered, donate: Collection[int] = ()) -> ArenaPlan:
    """Decide where every value of ``lowered`` lives: the caller's input or
    output buffer, a weight, an alias of another value, or an arena
    offset (arena.py).  ``donate`` are the positions of the inputs the
    caller gives up (a training backward's retained values): a value may
    live in such an input's buffer after its last read, when the arena
    shrinks by it (_donate).  Raises NativeEmitError for a Program that writes a
    register twice or writes an input (_check_single_writes)."""
    p = lowered.program
    _check_single_writes(lowered)
    output_of: dict[int, int] = {}
    final_copies: list[tuple[int, int]] = []  # (output index, register)
    alias_of: dict[int, int] = {}
    produced = {}
    for i, (inst, step) in enumerate(zip(p.instructions, lowered.steps)):
        if step is None:  # evaluated at emit time
            continue
        if step.alias:
            src = inst.inputs[0]
            alias_of[inst.outputs[0]] = alias_of.get(src, src)
        else:
            for r, s in zip(inst.outputs, step.shapes):
                if s is not None and r != NO_REGISTER:
                    produced[r] = i
    for k, v in enumerate(p.outputs):
        if v.register in produced and v.register not in output_of:
            output_of[v.register] = k
        else:
            final_copies.append((k, v.register))
    last_use: dict[int, int] = {}
    for i, (inst, step) in enumerate(zip(p.instructions, lowered.steps)):
        for r in inst.inputs if step is not None else ():
            if r != NO_REGISTER:
                root = alias_of.get(r, r)
                last_use[root] = i
    prefixes = _prefix_concats(lowered, alias_of)
    _share_in_place(lowered, alias_of, output_of, produced, last_use, prefixes)
    placed, first_use = _place_parts(lowered, alias_of, output_of, produced, last_use)
    _place_prefixes(lowered, prefixes, alias_of, placed, produced, last_use)
    # Inputs written in place are the caller's own arrays, writable in C.
    updated_inputs = sorted({
        lowered.input_of[root] for inst, step in zip(p.instructions, lowered.steps)
        if step is not None for root in (alias_of.get(r, r) for r in written_inputs(inst))
        if root in lowered.input_of})
    # An output that is an input (a parameter after its update, a value
    # retained for the backward program) need not be copied.
    in_place_outputs = {
        k: lowered.input_of[root] for k, root in
        ((k, alias_of.get(r, r)) for k, r in final_copies)
        if root in lowered.input_of
        and lowered.shapes[root] == lowered.shapes[p.outputs[k].register]
        and lowered.dtypes[root] == lowered.dtypes[p.outputs[k].register]}
    buffers = []
    for r, i in produced.items():
        if r not in output_of and r not in placed:
            buffers.append(Buffer(r, lowered.nbytes(r), first_use[r],
                                  max(i, last_use.get(r, i))))
    for i, step in enumerate(lowered.steps):
        if step is not None and step.scratch:
            buffers.append(Buffer(('scratch', i), 4 * step.scratch, i, i))
    offsets, arena_bytes = plan_arena(buffers)
    donated: list[tuple[Buffer, int, int]] = []
    if donate:
        # Never an input the program updates, returns or copies to an
        # output at the end, nor a 0-d one (the runner keeps those).
        kept = set(updated_inputs) | {lowered.input_of.get(alias_of.get(r, r))
                                      for _, r in final_copies}
        regions = [(k, lowered.nbytes(r), last_use.get(r, -1))
                   for r, k in lowered.input_of.items()
                   if k in donate and k < len(p.inputs) and k not in kept
                   and len(lowered.shapes[r]) > 0]
        donated = _donate(regions, buffers)
        moved = {buf.key for buf, _, _ in donated}
        rest = [b for b in buffers if b.key not in moved]
        rest_offsets, rest_bytes = plan_arena(rest)
        if rest_bytes < arena_bytes:
            buffers, offsets, arena_bytes = rest, rest_offsets, rest_bytes
        else:
            donated = []
    return ArenaPlan(output_of, final_copies, alias_of, updated_inputs, in_place_outputs,
                     buffers, offsets, arena_bytes, placed, donated)


def _donate(regions: list[tuple[int, int, int]], buffers: list[Buffer]
            ) -> list[tuple[Buffer, int, int]]:
    """Place buffers in the donated inputs' memory: ``regions`` are
    (input position, bytes, last instruction that reads it); a buffer
    first written after that instruction goes, largest first, at the
    lowest aligned offset of the smallest region where it collides with no
    buffer placed there live at the same time (best fit).  Returns
    (buffer, input position, byte offset) of each buffer placed."""
    placed: dict[int, list[tuple[int, int, Buffer]]] = {k: [] for k, _, _ in regions}
    result = []
    for buf in sorted(buffers, key=lambda b: (-b.nbytes, b.start, b.end)):
        need = aligned(buf.nbytes)
        for k, size, last_read in sorted(regions, key=lambda r: (r[1], r[0])):
            if last_read >= buf.start or buf.nbytes > size:
                continue
            offset = 0
            for lo, hi, other in sorted(placed[k], key=lambda t: t[0]):
                if other.start <= buf.end and buf.start <= other.end:
                    if offset + need <= lo:
                        break
                    offset = max(offset, hi)
            if offset + buf.nbytes <= size:  # the input's bytes, not aligned
                placed[k].append((offset, offset + need, buf))
                result.append((buf, k, offset))
                break
    return result


def _check_single_writes(lowered: Lowered) -> None:
    """Refuse a Program (made by hand, or a damaged file: validation allows
    it) whose instructions write a register twice or write a program input:
    each value gets one buffer sized for one shape, so a second write of
    another size would run past it, and an input is the caller's array."""
    p = lowered.program
    written: dict[int, int] = {}  # register -> the instruction that wrote it
    for i, inst in enumerate(p.instructions):
        for r in inst.outputs:
            if r in lowered.input_of or r in written:
                raise NativeEmitError(
                    '%s writes register %%%d, which %s; the C backend needs every value '
                    'written once (a compiled Program does so)' % (
                        p.describe_instruction(i), r, 'is a program input'
                        if r in lowered.input_of else 'instruction %d wrote' % written[r]))
            if r != NO_REGISTER:
                written[r] = i


def _place_parts(lowered: Lowered, alias_of: dict, output_of: dict, produced: dict,
                 last_use: dict) -> tuple[dict[int, tuple[int, int]], dict[int, int]]:
    """Let the producers of an instruction's parts (Step.parts: the inputs
    of a Concat that are contiguous blocks of its output) write them
    straight into its output, which then copies nothing: ({root: (container,
    element offset)}, {register: first instruction its memory is live}).

    A part qualifies when it is an intermediate value (not an input, a
    constant or a program output) read for the last time by that
    instruction (a value it reads twice lies in its last block and is
    copied to the others): it then holds its block from its producer to
    the Concat and the Concat's value holds it after, so the block is never
    written for anything else.  The container's buffer is live from its
    first part's producer on; a container may be a part of a later Concat
    (DenseNet's chains)."""
    placed: dict[int, tuple[int, int]] = {}
    first_use = dict(produced)
    for i, (inst, step) in enumerate(zip(lowered.program.instructions, lowered.steps)):
        if step is None or not step.parts or inst.outputs[0] not in produced:
            continue
        out = inst.outputs[0]
        roots = [alias_of.get(r, r) for r in inst.inputs]
        for k, offset in step.parts:
            root = roots[k]
            if root in produced and root not in output_of and last_use.get(root) == i and \
                    lowered.dtypes[root] == lowered.dtypes[out] and \
                    lowered.nbytes(root) == lowered.nbytes(inst.inputs[k]):
                placed[root] = (out, offset)
                first_use[out] = min(first_use[out], first_use[root])
    return placed, first_use


def _prefix_concats(lowered: Lowered, alias_of: dict) -> set[int]:
    """The outputs of the steps with parts (Concats at batch 1) whose
    inputs begin a later one's, neither program outputs nor updated in
    place: DenseNet's layers each concatenate every feature before them,
    so each layer's Concat is the start of its block's last, and may be
    that block of its output (_place_prefixes)."""
    p = lowered.program
    kept = {alias_of.get(r, r) for inst in p.instructions for r in written_inputs(inst)} | {
        v.register for v in p.outputs}
    later: set[tuple[int, ...]] = set()  # every prefix of the inputs of a later one
    prefixes = set()
    for inst, step in reversed(list(zip(p.instructions, lowered.steps))):
        if step is None or not step.parts:
            continue
        inputs = tuple(inst.inputs)
        if inputs in later and inst.outputs[0] not in kept:
            prefixes.add(inst.outputs[0])
        later.update(inputs[:n] for n in range(1, len(inputs)))
    return prefixes


def _place_prefixes(lowered: Lowered, prefixes: set[int], alias_of: dict, placed: dict,
                    produced: dict, last_use: dict):
    """Make each of ``prefixes`` whose parts all lie in one container
    (_place_parts) at its own offsets, and which is read for the last time
    before that container's Concat, the block at the container's start: it
    then copies nothing.  Its parts were written by their producers and
    nothing writes that block again while it is read (no output takes its
    memory in place: _share_in_place kept ``prefixes`` apart)."""
    for i, (inst, step) in enumerate(zip(lowered.program.instructions, lowered.steps)):
        out = inst.outputs[0] if inst.outputs else NO_REGISTER
        if step is None or out not in prefixes or out in placed or out not in produced:
            continue
        spots = [placed.get(alias_of.get(inst.inputs[k], inst.inputs[k])) for k, _ in step.parts]
        container = spots[0][0] if spots[0] is not None else None
        if container is not None and spots == [(container, o) for _, o in step.parts] \
                and last_use.get(out, i) < produced.get(container, -1):
            placed[out] = (container, 0)


def _share_in_place(lowered: Lowered, alias_of: dict, output_of: dict, produced: dict,
                    last_use: dict, kept: set[int]):
    """Let output 0 of an instruction take the memory of an input it
    reads for the last time (Step.in_place), as a view takes its
    input's: the arena then holds one buffer where it held two.  Not the
    memory of ``kept`` (_prefix_concats: it may be a block of a later
    Concat's output)."""
    for i, (inst, step) in enumerate(zip(lowered.program.instructions, lowered.steps)):
        out = inst.outputs[0] if inst.outputs else NO_REGISTER
        if step is None or not step.in_place or out not in produced \
                or out in output_of:
            continue
        roots = [alias_of.get(r, r) for r in inst.inputs]
        for k in step.in_place:
            root = roots[k]
            # No other input may read the same memory through another
            # view: its elements could be overwritten before they are read.
            if has_input(inst, k) and root in produced and root not in output_of and \
                    root not in kept and \
                    last_use.get(root) == i and lowered.dtypes[root] == lowered.dtypes[out] and \
                    lowered.nbytes(root) == lowered.nbytes(out) and \
                    all(r == inst.inputs[k] for r, q in zip(inst.inputs, roots) if q == root):
                break
        else:
            continue
        for view, target in list(alias_of.items()):
            if target == out:
                alias_of[view] = root
        alias_of[out] = root
        del produced[out]
        last_use[root] = max(i, last_use.pop(out, i))

