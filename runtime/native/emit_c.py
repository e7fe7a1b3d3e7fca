"""Turn a Program into straight-line C (the native backend's emitter).

The Program's shapes must all be static: the inputs' from their ValueInfos,
the constants' from their arrays, every other one propagated here op by op.
First, BatchNormalizations and activations are fused into the products
before them (fusion.py); instructions whose results are known at emit time
become constants (folding.py).  Each other instruction becomes one call (or
a few) into the kernels under ``kernels/`` with its shapes as literal
constants; the per-family lowerings under ``lowerings/`` decide which
(lowering.py is their interface).  Every intermediate value and every
kernel's scratch space sits at an offset of one arena planned from liveness
(arena.py).  Reshape-like instructions share their input's memory, and an
element-wise result takes the memory of an input read for the last time.

Anything the kernels cannot do is refused before a file is written, with
one error listing every offending instruction; there is no fallback.

emit_c runs the passes of NATIVE_BACKEND, which chainer_compiler.pipeline
lists as PIPELINES['native'] (docs/pipeline.md).  Their work is three
functions of their inputs, one module each, and the writing of their
result (here, with the manifest): lower(program, name) -> Lowered
(lower.py: folding and the lowerings, a Step and static types per value),
plan(lowered) -> ArenaPlan (plan.py: where each value lives) and
render(lowered, plan, weights_mode) -> Rendered (render.py: the files'
text); none changes its inputs.
"""
import hashlib
import logging
import os
import re
import time
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any

import numpy

from ..files import atomic_write
from ..program import Instruction, Program
from .arena import aligned
from .batched import (
    BUCKET_ARENA_LIMIT,
    MAX_BATCH_LIMIT,
    MaxBatch,
    NotSeparableError,
    check_separable,
)
from .blocked import block_chains
from .cformat import Shape
from .channels_last import fold_permutes
from .errors import NativeEmitError
from .fusion import fuse
from .lower import Lowered, lower
from .lowering import with_defaults
from .plan import ArenaPlan, plan
from .render import Rendered, profiled, render, weights_file
from .weights import WeightsLayout
from .weights import block as weights_block
from .weights import write_file as write_weights_file

#: Progress and phase timings go here (INFO), under the project's logger.
logger = logging.getLogger('chainer_compiler.emit_c')


@dataclass
class EmitResult:
    """What emit_c wrote: the files (paths), the arena's size in bytes, the
    sum of the (aligned) sizes of the buffers it holds, each buffer's
    (register or ('scratch', instruction), offset, bytes, first, last
    instruction), and the static shape and dtype of each output."""
    directory: str
    files: list[str]
    arena_bytes: int
    intermediate_bytes: int
    buffers: list[tuple[Any, int, int, int, int]] = field(default_factory=list)
    output_shapes: list[Shape] = field(default_factory=list)
    output_dtypes: list[str] = field(default_factory=list)
    #: the layout of the weights block and its bytes (weights='file'), else None
    weights: WeightsLayout | None = None
    weights_block: numpy.ndarray | None = None
    #: positions of the inputs the program updates in place (writable in C)
    updated_inputs: list[int] = field(default_factory=list)
    #: output position -> position of the input it is (after its update,
    #: for an updated one), of the same shape and dtype: the caller may pass
    #: that input's own pointer for it, and nothing is copied
    in_place_outputs: dict[int, int] = field(default_factory=dict)
    #: the shapes of the inputs the emitter added after the Program's own,
    #: for the caller to fill with uniform random numbers in [0, 1) (float64,
    #: numpy.random.rand of that shape) at every call, in this order, the
    #: order the NumPy VM draws them: the masks of training-mode Dropout
    #: (lowerings/noise.py)
    uniform_inputs: list[Shape] = field(default_factory=list)
    #: where the constants went: 'embed' or 'file' (what 'auto' chose)
    weights_mode: str = 'embed'
    #: (phase, seconds) of the work, in order: lower, plan, render, write
    phases: list[tuple[str, float]] = field(default_factory=list)
    #: the files of the folder's earlier emit-c run that this one removed
    removed: list[str] = field(default_factory=list)
    #: per instruction a build with -DCCN_PROFILE (make PROFILE=1) times,
    #: in order: its index in the Program after native fusion, the
    #: instruction itself (fusion renumbers, so the caller's Program cannot
    #: name it) and the descriptions of its inputs and outputs
    #: ('float32[2, 3]', as the Tracer's); instructions evaluated at emit
    #: time take no time and are not listed
    profiled: list[tuple[int, Instruction, list[str], list[str]]] = field(default_factory=list)
    #: positions of the inputs whose memory holds values after their last
    #: read (emit_c's donate): the C overwrites them
    donated_inputs: list[int] = field(default_factory=list)

#: Where the constants go: 'embed' (C literals in NAME_weights.c), 'file'
#: (NAME_weights.bin, loaded by NAME_create; weights.py) or 'auto' (embed
#: up to EMBED_MAX_BYTES, else file).
WEIGHTS_MODES = ('auto', 'embed', 'file')
#: 'auto' embeds constants of at most this many bytes.  Literals cost
#: about 15 bytes of C per float32 and the compiler's time and memory grow
#: with them: 4 MiB of weights (1M floats) took 4.5 s to write and 15 s and
#: 280 MB to compile (gcc -O3, on the project's 2-core machine), ResNet-50's
#: 25M weights 112 s and 2 minutes and 4.1 GB; 1 MiB stays within a few seconds.
EMBED_MAX_BYTES = 1 << 20


def emit_c(program: Program, directory: str | os.PathLike, name: str = 'model',
           weights: str = 'auto', keep=(), max_batch: MaxBatch | None = None,
           donate: Collection[int] = ()) -> EmitResult:
    """Write the C sources, kernels and Makefile of ``program`` into
    ``directory`` (created if missing) under the model name ``name`` (see
    check_model_name), with the constants embedded as C literals
    (``weights='embed'``: one stateless ``NAME_run``) or in
    ``NAME_weights.bin`` (``'file'``: ``NAME_create``, ``NAME_run``,
    ``NAME_destroy``; much faster to compile for large models); ``'auto'``
    (the default) embeds them up to EMBED_MAX_BYTES.  Every external symbol
    starts with ``NAME_`` (the kernels' ``ccn_*`` become ``NAME_ccn_*``), so
    that several models link into one program; the shared library exports
    only the API of ``NAME.h``.  The folder's MANIFEST lists what was
    written; the files an earlier run listed there and this one does not
    write are removed if unchanged (EmitResult.removed).  Raises
    NativeEmitError before writing anything when the Program cannot be
    compiled to C, when a file to write is a symbolic link or a folder, or
    when it is one of the paths ``keep`` (e.g. the model file read), or when
    the folder's manifest is damaged.  Each file is written whole under a
    temporary name and renamed into place.  Logs each phase at INFO on the
    ``chainer_compiler.emit_c`` logger; EmitResult.phases has their times.

    With ``max_batch`` (emit-c --max), ``program`` is the model for one
    sample and the C also runs 1 to ``max_batch.maximum`` samples
    (NAME_run_n); the model lowered at the sizes of ``max_batch.probes``
    must keep its samples apart (batched.check_separable), else
    NativeEmitError names the instruction that mixes them.

    ``donate`` (library.py) are the positions of inputs the caller gives
    up: values may live in their memory after their last read (plan.py;
    EmitResult.donated_inputs), which the C then overwrites."""
    if weights not in WEIGHTS_MODES:
        raise NativeEmitError('weights=%r: expected one of %s'
                              % (weights, ', '.join(WEIGHTS_MODES)))
    check_model_name(name)
    if max_batch is not None:
        max_batch = _check_max_batch(program, max_batch, name)
    c = NativeCompilation(program, name, weights, os.fspath(directory), keep, max_batch,
                          donate=tuple(sorted(set(donate))))
    for stage, passes in NATIVE_BACKEND:
        start = time.perf_counter()
        for run_pass in passes:
            run_pass(c)
        c.phases.append((stage, time.perf_counter() - start))
    assert c.result is not None
    return c.result


def _check_max_batch(program: Program, max_batch: MaxBatch, name: str) -> MaxBatch:
    """Refuse ``max_batch`` (emit_c) unless its maximum is in range, the
    model at its probe sizes keeps its samples apart
    (batched.check_separable) and ``program`` is that model for one sample;
    return it with the batch axes of the inputs and outputs."""
    what = 'emit-c --max %s=%d' % (max_batch.symbol, max_batch.maximum)
    if not 1 <= max_batch.maximum <= MAX_BATCH_LIMIT:
        raise NativeEmitError('%s: the maximum must be 1 to %d' % (what, MAX_BATCH_LIMIT))
    probes = [(size, _lowered(p, name)) for size, p in max_batch.probes]
    try:
        input_axes, output_axes = check_separable(probes, max_batch.symbol)
    except NotSeparableError as e:
        raise NativeEmitError('%s: the samples of a batch are not independent: %s; emit it '
                              'for one size instead (--symbolic-dims)' % (what, e)) from None
    structure = [(i.op, i.inputs, i.outputs) for i in program.instructions]
    if any(not v.shape or v.shape[axis] != 1
           for v, axis in zip(program.inputs, input_axes)) or any(
            structure != [(i.op, i.inputs, i.outputs) for i in p.instructions]
            for _, p in max_batch.probes + max_batch.buckets):
        raise NativeEmitError('%s: the program to emit is not the model for one sample'
                              % what)
    return replace(max_batch, input_axes=input_axes, output_axes=output_axes)


@dataclass
class NativeCompilation:
    """One run of the native backend's stages (NATIVE_BACKEND, which
    chainer_compiler.pipeline lists as PIPELINES['native']): what emit_c
    asks for (the Program, the model name, the weights mode, the folder and
    the paths to keep) and what the passes make of it, in order."""
    program: Program
    name: str
    weights: str
    directory: str
    keep: Any = ()
    max_batch: MaxBatch | None = None
    lowered: 'Lowered | None' = None
    arena: 'ArenaPlan | None' = None
    rendered: 'Rendered | None' = None
    result: EmitResult | None = None
    #: (stage, seconds) of the stages run so far (EmitResult.phases)
    phases: list[tuple[str, float]] = field(default_factory=list)
    #: the inputs in whose memory values may live (emit_c's donate)
    donate: tuple[int, ...] = ()
    #: (size, Lowered, ArenaPlan) of each bucket of max_batch (_plan_buckets)
    buckets: list = field(default_factory=list)


# -- the passes of the native backend (each a function of the
# -- NativeCompilation; the first paragraph of its docstring describes it in
# -- docs/pipeline.md) -----------------------------------------------------------

def fill_defaults(c: NativeCompilation) -> None:
    """Fill every instruction's omitted attributes with its kernel's
    defaults, as the compiler does (codegen): a Program made by hand or
    saved before reaches fusion and the lowerings complete too."""
    c.program = with_defaults(c.program)


def fuse_epilogues(c: NativeCompilation) -> None:
    """Fold inference BatchNormalizations into the products before them, run
    epilogue activations in the products (runtime/ops/fusion_rules.py, the
    rule set the VM's `fuse` reads), fuse an SGDUpdate with its Gemm
    gradient (runtime/native/fusion.py); run chains of mobile convolutions
    in blocks of channels (blocked.py) and fold the Transposes around a
    channels-last section into the kernels on either side (channels_last.py;
    neither for emit-c --max, whose buckets are lowered as the program for
    one sample is)."""
    c.program = fuse(c.program)
    if c.max_batch is None:
        c.program = block_chains(fold_permutes(c.program))


def fold_and_lower(c: NativeCompilation) -> None:
    """Evaluate each instruction whose result is known at emit time with its
    NumPy kernel (runtime/native/folding.py: its outputs become constants)
    and lower every other one to kernel calls (runtime/native/lowerings/).

    One walk does both: an instruction's static shapes come from the
    lowerings of the instructions before it, and a folded value is a
    constant for the lowerings after it."""
    c.lowered = lower(c.program, c.name)


def choose_weights(c: NativeCompilation) -> None:
    """Embed the constants as C literals or put them in NAME_weights.bin
    (`weights`; 'auto' chooses by their size, EMBED_MAX_BYTES)."""
    assert c.lowered is not None
    c.weights = _choose_weights(c.lowered, c.weights)
    logger.info('emit-c %s: lowered %d instructions (%d evaluated at emit time)',
                c.name, len(c.lowered.steps), c.lowered.steps.count(None))


def plan_memory(c: NativeCompilation) -> None:
    """Give every intermediate value and kernel scratch an offset in one
    arena planned from liveness; views and in-place results share their
    input's memory (runtime/native/arena.py)."""
    assert c.lowered is not None
    c.arena = plan(c.lowered, c.donate)
    if c.max_batch is not None:
        c.buckets = _plan_buckets(c.lowered, c.max_batch)


def _lowered(program: Program, name: str) -> Lowered:
    """``program`` through the stages before planning (fill_defaults,
    fuse_epilogues, fold_and_lower), as the program emitted goes: a probe
    or bucket of emit-c --max."""
    return lower(fuse(with_defaults(program)), name)


def _plan_buckets(one: Lowered, max_batch: MaxBatch) -> list:
    """(size, Lowered, ArenaPlan) of each bucket of ``max_batch`` (the
    programs of max_batch.buckets, lowered and planned as NAME_b<size>),
    smallest first, up to the first whose arena exceeds BUCKET_ARENA_LIMIT.
    Raises NativeEmitError when one does not lower to the one-sample
    program ``one`` with ``size`` samples on each batch axis (NAME_run_n
    addresses the samples by the one-sample shapes)."""
    buckets = []
    for size, program in max_batch.buckets:
        low = _lowered(program, '%s_b%d' % (one.name, size))
        values = list(zip(low.program.inputs, one.program.inputs, max_batch.input_axes)) + \
            list(zip(low.program.outputs, one.program.outputs, max_batch.output_axes))
        if [(s is None, bool(s and s.error)) for s in low.steps] != \
                [(s is None, bool(s and s.error)) for s in one.steps] or any(
                tuple(low.shapes[v.register]) != tuple(size if d == axis else x for d, x in
                                                       enumerate(one.shapes[u.register]))
                for v, u, axis in values):
            raise NativeEmitError('emit-c --max %s=%d: the model for %d samples is not the one '
                                  'for one sample run on each' % (max_batch.symbol,
                                                                  max_batch.maximum, size))
        arena = plan(low)
        if arena.arena_bytes > BUCKET_ARENA_LIMIT:
            break
        buckets.append((size, low, arena))
    return buckets


def render_files(c: NativeCompilation) -> None:
    """Render NAME.h, NAME.c, NAME_weights.c, main.c, the Makefile and the
    kernels' sources, every kernel symbol prefixed with NAME_."""
    assert c.lowered is not None and c.arena is not None
    c.rendered = render(c.lowered, c.arena, c.weights, c.max_batch, c.buckets)


def write_files(c: NativeCompilation) -> None:
    """Write the files, the weights file and emit-c.manifest, and remove the
    earlier run's files this one does not write."""
    assert c.lowered is not None and c.arena is not None and c.rendered is not None
    c.result = _write(c.lowered, c.arena, c.rendered, c.directory, c.keep, c.phases)


#: The native backend: a Program to C, stage by stage (stage name, passes
#: in order); the stages' times are EmitResult.phases.
NATIVE_BACKEND = (('lower', (fill_defaults, fuse_epilogues, fold_and_lower, choose_weights)),
                  ('plan', (plan_memory,)), ('render', (render_files,)),
                  ('write', (write_files,)))


#: Longest model name: it is a prefix of file names and C identifiers.
MAX_NAME_LENGTH = 64
#: Names (any case) that are already files or make targets of the folder:
#: main.c, GNU make's makefile names, the Makefile's own targets.
_FOLDER_NAMES = ('main', 'makefile', 'gnumakefile', 'all', 'clean')
#: Names (any case) that, alone or followed by '_', would make NAME.c,
#: NAME_weights.c, NAME_create, NAME_H, ... one of the kernels' files,
#: functions or macros (ccn_*) or a system library's function
#: (pthread_create, timer_create, sem_destroy, thrd_create, omp_*, cblas_*).
_RESERVED_PREFIXES = ('ccn', 'pthread', 'posix', 'timer', 'sem', 'thrd', 'tss', 'cnd', 'mtx',
                      'omp', 'cblas')


def check_model_name(name: str) -> None:
    """Raise NativeEmitError unless ``name`` can name an emitted model: a C
    identifier of at most MAX_NAME_LENGTH characters, not starting with an
    underscore (reserved to C), that collides with none of the folder's own
    files, targets and symbols (_FOLDER_NAMES, _RESERVED_PREFIXES)."""
    if not isinstance(name, str) or not re.fullmatch(r'[A-Za-z][A-Za-z0-9_]{0,%d}'
                                                     % (MAX_NAME_LENGTH - 1), name):
        raise NativeEmitError('model name %r must be a C identifier of at most %d characters '
                              'starting with a letter' % (name, MAX_NAME_LENGTH))
    lower = name.lower()
    if lower in _FOLDER_NAMES + _RESERVED_PREFIXES or \
            lower.startswith(tuple(p + '_' for p in _RESERVED_PREFIXES)):
        raise NativeEmitError('model name %r would collide with the files or symbols of the '
                              'emitted folder or of the system libraries: in any case, it may '
                              'not be %s, nor be or start with %s followed by _'
                              % (name, ', '.join(_FOLDER_NAMES), ', '.join(_RESERVED_PREFIXES)))




def _check_targets(paths: list[str], keep) -> None:
    """Refuse, before anything is written, a file to write that is a
    symbolic link or a folder (the user's, not ours to replace) or one of
    the paths ``keep`` (the model being emitted), also through links."""
    for path in paths:
        if os.path.islink(path) or os.path.isdir(path):
            raise NativeEmitError('%s is a %s; emit-c writes only regular files and '
                                  'refuses to replace it' % (
                                      path, 'symbolic link' if os.path.islink(path)
                                      else 'folder'))
        for kept in keep:
            if os.path.exists(path) and os.path.exists(kept) and os.path.samefile(path, kept):
                raise NativeEmitError('%s would overwrite %s, the model being emitted; '
                                      'choose another output folder or name' % (path, kept))


#: The file of an emitted folder that lists what emit-c wrote there.
MANIFEST = 'emit-c.manifest'
_MANIFEST_HEADER = '# chainer-compiler emit-c manifest 1: SHA-256 and name of each file it wrote'
#: Largest manifest read (a folder's files number a few dozen).
MAX_MANIFEST_BYTES = 64 * 1024


def _digest_file(path: str) -> str | None:
    """The SHA-256 of the regular file ``path`` (not followed through a
    link), or None when it is anything else or missing."""
    try:
        if not os.path.isfile(path) or os.path.islink(path):
            return None
        h = hashlib.sha256()
        with open(path, 'rb') as f:
            for chunk in iter(lambda: f.read(1 << 20), b''):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def _read_manifest(directory: str) -> dict[str, str]:
    """File name -> SHA-256 of what the folder's last emit-c run wrote
    (empty without a manifest).  A manifest is untrusted: it is refused
    unless every entry is a plain file name of the folder, so that nothing
    outside it can be named."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.lexists(path):
        return {}
    if os.path.islink(path) or not os.path.isfile(path):
        raise NativeEmitError('%s is not a regular file; emit-c refuses to replace it' % path)
    if os.path.getsize(path) > MAX_MANIFEST_BYTES:
        raise NativeEmitError('%s is damaged: larger than %d bytes; delete it to emit into %s'
                              % (path, MAX_MANIFEST_BYTES, directory))
    with open(path, 'rb') as f:
        lines = f.read().decode('utf-8', 'replace').splitlines()
    entries = {}
    for k, line in enumerate(lines, 1):
        if k == 1 and line == _MANIFEST_HEADER:
            continue
        m = re.fullmatch(r'([0-9a-f]{64})  ([A-Za-z0-9_][A-Za-z0-9_.-]*)', line)
        if k == 1 or not m or m.group(2) == MANIFEST:
            raise NativeEmitError('%s is damaged (line %d); delete it to emit into %s'
                                  % (path, k, directory))
        entries[m.group(2)] = m.group(1)
    return entries


def _choose_weights(lowered: Lowered, mode: str) -> str:
    """'embed' or 'file' for ``mode`` ('auto': by the constants' size,
    known before rendering asks for them; transposed copies made at
    emit time are not counted)."""
    total = sum(a.nbytes for a in lowered.consts.values())
    if mode == 'auto':
        mode = 'embed' if total <= EMBED_MAX_BYTES else 'file'
        logger.info('emit-c %s: constants of %d bytes, %s EMBED_MAX_BYTES (%d): weights=%s',
                    lowered.name, total, 'within' if mode == 'embed' else 'above',
                    EMBED_MAX_BYTES, mode)
    return mode

def _write(lowered: Lowered, arena: ArenaPlan, rendered: Rendered, directory: str, keep,
           phases: list) -> EmitResult:
    """Write ``rendered``'s files (and the weights file) into ``directory``
    with the manifest, and remove the stale files of an earlier run."""
    start = time.perf_counter()
    name, texts, layout_ = lowered.name, rendered.texts, rendered.layout
    mode = 'embed' if layout_ is None else 'file'
    files = [os.path.join(directory, filename) for filename in texts]
    if layout_ is not None:
        files.append(os.path.join(directory, weights_file(name)))
    manifest = os.path.join(directory, MANIFEST)
    _check_targets(files + [manifest], keep)
    earlier = _read_manifest(directory) if os.path.isdir(directory) else {}
    os.makedirs(directory, exist_ok=True)
    # Each file is new and renamed into place: never written through a
    # link, and a file left by an earlier run is replaced whole.
    digests = {}
    for path, text in zip(files, texts.values()):
        data_text = text.encode('utf-8')
        digests[os.path.basename(path)] = hashlib.sha256(data_text).hexdigest()
        with atomic_write(path, 'wb', sync=False) as f:
            f.write(data_text)
    data = None
    if layout_ is not None:
        data = weights_block(layout_)
        with atomic_write(files[-1], 'wb', sync=False) as f:
            write_weights_file(f, layout_, data)
        digests[weights_file(name)] = _digest_file(files[-1]) or ''
    with atomic_write(manifest, 'w', sync=False) as f:
        f.write('\n'.join([_MANIFEST_HEADER] + ['%s  %s' % (digests[n], n)
                                                for n in sorted(digests)]) + '\n')
    removed = _remove_stale(name, directory, earlier, set(digests))
    timed = phases + [('write', time.perf_counter() - start)]
    logger.info('emit-c %s: wrote %d files to %s (weights %s%s); %s', name,
                len(files) + 1, directory, mode,
                '' if layout_ is None else ', %d bytes' % layout_.nbytes,
                ', '.join('%s %.2f s' % p for p in timed))
    return EmitResult(directory, files, arena.arena_bytes,
                      sum(aligned(b.nbytes) for b in arena.buffers),
                      [(b.key, arena.offsets[b.key], b.nbytes, b.start, b.end)
                       for b in arena.buffers],
                      [lowered.shapes[v.register] for v in lowered.program.outputs],
                      [lowered.dtypes[v.register] for v in lowered.program.outputs], layout_, data,
                      arena.updated_inputs, arena.in_place_outputs, lowered.uniform_inputs,
                      mode, phases, removed, profiled(lowered), arena.donated_inputs)


def _remove_stale(name: str, directory: str, earlier: dict[str, str], written: set[str]):
    """Remove the files the folder's earlier run wrote (``earlier``,
    from its manifest) that this one did not, each only if it is still
    the regular file that run wrote (a file the user changed or put
    there stays, with a warning); the names removed."""
    removed = []
    for file, digest in sorted(earlier.items()):
        if file in written:
            continue
        path = os.path.join(directory, file)
        if _digest_file(path) == digest:
            os.remove(path)
            removed.append(file)
        elif os.path.lexists(path):
            logger.warning('emit-c %s: kept %s, which an earlier emit-c wrote but has '
                           'changed since', name, path)
    if removed:
        logger.info('emit-c %s: removed %d files of the earlier emit-c in %s: %s',
                    name, len(removed), directory, ', '.join(removed))
    return removed
