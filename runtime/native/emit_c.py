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
functions of their inputs and the writing of their result: lower(program,
name) -> Lowered (folding and the lowerings: a Step and static types per
value), plan(lowered) -> ArenaPlan (where each value lives) and
render(lowered, plan, weights_mode) -> Rendered (the files' text); none
changes its inputs.
"""
import glob
import hashlib
import json
import logging
import math
import os
import re
import textwrap
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy

from ..errors import RuntimeVMError
from ..files import atomic_write
from ..profiling import trace_event_fields
from ..program import NO_REGISTER, Instruction, Program, RegisterType, ValueInfo
from . import lowerings  # noqa: F401  (registers every lowering)
from .arena import Buffer, aligned, plan_arena
from .batched import MAX_BATCH_LIMIT, MaxBatch, NotSeparableError, check_separable
from .cformat import C_TYPES, NPY_DESCR, Shape, clist, cliteral, cstring, shape_text
from .folding import fold
from .fusion import fuse, written_inputs
from .lowering import FLOAT32, Refuse, Step, Unknown, at, lowering_for, with_defaults
from .weights import WeightsLayout, layout
from .weights import block as weights_block
from .weights import write_file as write_weights_file

#: Progress and phase timings go here (INFO), under the project's logger.
logger = logging.getLogger('chainer_compiler.emit_c')

KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'kernels')
#: Highest rank of a value (CCN_MAX_RANK in C).
MAX_RANK = 8
#: The run functions' status when the first instruction that can refuse its
#: inputs at run time (Step.error) does; 0 is success, 1 a NULL pointer.
FIRST_FAILURE = 2


class NativeEmitError(RuntimeVMError):
    """The Program cannot become C: a value without a static shape or of a
    dtype the C backend does not handle, or a bad model name."""


class UnsupportedNativeOpsError(NativeEmitError):
    """Instructions the C kernels cannot run; ``problems`` lists
    (instruction index, description, reason) for every one of them."""

    def __init__(self, problems: list[tuple[int, str, str]]):
        self.problems = problems
        super().__init__("backend 'native' cannot emit C for %d instruction(s):\n%s" % (
            len(problems), '\n'.join('  %s: %s' % (d, r) for _, d, r in problems)))


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
           weights: str = 'auto', keep=(), max_batch: MaxBatch | None = None) -> EmitResult:
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
    NativeEmitError names the instruction that mixes them."""
    if weights not in WEIGHTS_MODES:
        raise NativeEmitError('weights=%r: expected one of %s'
                              % (weights, ', '.join(WEIGHTS_MODES)))
    check_model_name(name)
    if max_batch is not None:
        _check_max_batch(program, max_batch, name)
    c = NativeCompilation(program, name, weights, os.fspath(directory), keep, max_batch)
    for stage, passes in NATIVE_BACKEND:
        start = time.perf_counter()
        for run_pass in passes:
            run_pass(c)
        c.phases.append((stage, time.perf_counter() - start))
    assert c.result is not None
    return c.result


def _check_max_batch(program: Program, max_batch: MaxBatch, name: str) -> None:
    """Refuse ``max_batch`` (emit_c) unless its maximum is in range, the
    model at its probe sizes keeps its samples apart
    (batched.check_separable) and ``program`` is that model for one sample."""
    what = 'emit-c --max %s=%d' % (max_batch.symbol, max_batch.maximum)
    if not 1 <= max_batch.maximum <= MAX_BATCH_LIMIT:
        raise NativeEmitError('%s: the maximum must be 1 to %d' % (what, MAX_BATCH_LIMIT))
    probes = [(size, lower(fuse(with_defaults(p)), name)) for size, p in max_batch.probes]
    try:
        check_separable(probes, max_batch.symbol)
    except NotSeparableError as e:
        raise NativeEmitError('%s: the samples of a batch are not independent: %s; emit it '
                              'for one size instead (--symbolic-dims)' % (what, e)) from None
    structure = [(i.op, i.inputs, i.outputs) for i in program.instructions]
    if any(not v.shape or v.shape[0] != 1 for v in program.inputs) or any(
            structure != [(i.op, i.inputs, i.outputs) for i in p.instructions]
            for _, p in max_batch.probes):
        raise NativeEmitError('%s: the program to emit is not the model for one sample'
                              % what)


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
    gradient (runtime/native/fusion.py)."""
    c.program = fuse(c.program)


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
    c.arena = plan(c.lowered)


def render_files(c: NativeCompilation) -> None:
    """Render NAME.h, NAME.c, NAME_weights.c, main.c, the Makefile and the
    kernels' sources, every kernel symbol prefixed with NAME_."""
    assert c.lowered is not None and c.arena is not None
    c.rendered = render(c.lowered, c.arena, c.weights, c.max_batch)


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


#: The x86-64 levels the default build of an emitted Makefile also compiles
#: the products for (ccn_gemm_v<level>.c, -march=x86-64-v<level>); the
#: baseline build runs the best one the CPU has.
GEMM_LEVELS = (3, 4)
#: An exported function definition of a kernel file (at the start of a line).
_C_DEFINITION = re.compile(r'^(?:[A-Za-z_]\w*[ *]+)+?(\w*ccn_\w+)\(', re.M)


def gemm_variant(text: str, level: int) -> str:
    """The text of ccn_gemm.c (``text``, symbols prefixed) as the build for
    x86-64 level ``level``: every function it exports renamed with the
    suffix _v<level>, so that the builds link into one program."""
    names = {m.group(1) for m in _C_DEFINITION.finditer(text)
             if not m.group(0).startswith('static')}
    pattern = re.compile(r'\b(%s)\b' % '|'.join(sorted(names)))
    return ('/* ccn_gemm.c for x86-64-v%d (emit_c.gemm_variant): its functions end in _v%d. */\n'
            % (level, level) + pattern.sub(r'\1_v%d' % level, text))


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


#: Longest file name the executable writes for an output (most file systems
#: allow 255 bytes), its suffix included.
MAX_OUTPUT_FILE = 200


def output_file_names(names: list[str]) -> list[str]:
    """The file the executable writes each output to, for the output names
    ``names`` in order: the name with every character outside
    [A-Za-z0-9_.-] replaced by '_', cut to leave room for a suffix within
    MAX_OUTPUT_FILE characters, and '.npy'; a file name an earlier output
    took, ignoring case (as some file systems do), gets the first free
    suffix -1, -2... before '.npy'."""
    taken: set[str] = set()
    files = []
    for name in names:
        stem = re.sub(r'[^A-Za-z0-9_.-]', '_', name)[:MAX_OUTPUT_FILE - 16]
        file, k = stem + '.npy', 0
        while file.lower() in taken:
            k += 1
            file = '%s-%d.npy' % (stem, k)
        taken.add(file.lower())
        files.append(file)
    return files


def lowering_key(inst: Instruction) -> str:
    """How ``inst``'s operator is named among native_operators()."""
    return inst.op if inst.domain in ('', 'ai.onnx') else inst.qualified_op


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


def _agrees(declared: RegisterType, shape: Shape, dtype: str) -> bool:
    """Whether a tensor of ``shape`` and ``dtype`` has the ``declared`` type:
    what it leaves unknown (dtype, rank, symbolic dimensions) agrees."""
    if declared.kind != 'tensor' or declared.dtype not in (None, dtype):
        return False
    return declared.shape is None or len(declared.shape) == len(shape) and all(
        not isinstance(d, int) or d == n for d, n in zip(declared.shape, shape))


def _type_text(t: RegisterType) -> str:
    """``float32[N, 3]``, or ``a sequence of float32`` without a shape."""
    if t.shape is None or t.kind != 'tensor':
        return 'a %s of %s' % (t.kind, t.dtype or 'unknown dtype')
    return '%s[%s]' % (t.dtype or '?', ', '.join('?' if d is None else str(d) for d in t.shape))


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


#: A kernel symbol, outside the strings, characters and comments of C text.
_C_SKIP_OR_KERNEL = re.compile(r'("(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|/\*.*?\*/|//[^\n]*)'
                               r'|\bccn_', re.S)


def prefix_kernel_symbols(text: str, name: str) -> str:
    """C ``text`` with every identifier ``ccn_*`` of the kernels renamed
    ``NAME_ccn_*`` (strings and comments left alone): each model's kernels
    are its own, so two models link into one program.  Done on the text,
    not with macros, because some kernel names are pasted (ccn_cast_##...)."""
    return _C_SKIP_OR_KERNEL.sub(lambda m: m.group(1) or name + '_ccn_', text)


@dataclass
class Lowered:
    """What lower() makes of a Program: the Program after fusion (with the
    inputs the lowerings added after its own: ``uniform_inputs``), one Step
    per instruction (None: evaluated at emit time), the static shape and
    dtype of every value, the constants (the Program's and the folded
    ones) and the arrays the lowerings made at emit time by C name
    (``weights``: NAME_<suffix>, e.g. a transposed weight)."""
    program: Program
    name: str
    steps: list[Step | None]
    shapes: dict[int, Shape]
    dtypes: dict[int, str]
    consts: dict[int, numpy.ndarray]
    weights: dict[str, numpy.ndarray]
    input_of: dict[int, int]
    uniform_inputs: list[Shape]

    def nbytes(self, r: int) -> int:
        """Size of register ``r``'s data in bytes."""
        return _nbytes(self.shapes[r], self.dtypes[r])


def _nbytes(shape: Shape, dtype: str) -> int:
    return math.prod(shape) * numpy.dtype(dtype).itemsize


def _has(inst: Instruction, k: int) -> bool:
    return k < len(inst.inputs) and inst.inputs[k] != NO_REGISTER


def lower(program: Program, name: str) -> Lowered:
    """Evaluate what is known at emit time (folding.py) and lower every
    other instruction (lowerings/) of ``program`` (filled and fused:
    NATIVE_BACKEND's passes before) for the model ``name``.  Raises
    UnsupportedNativeOpsError listing every instruction the kernels cannot
    run, NativeEmitError for an input or output the C cannot take."""
    em = _Lowerer(program, name)
    return Lowered(em.p, name, em.steps, em.shapes, em.dtypes, em.consts, em.weights,
                   em.input_of, em.uniform_inputs)


class _Lowerer:
    """Lowers every instruction; the lowerings see it through ``shape``,
    ``dtype``, ``has``, ``const``, ``nbytes``, ``is_output``,
    ``only_first_output``, ``weight``, ``constant_array`` and
    ``uniform_input``."""

    def __init__(self, program: Program, name: str):
        self.p = program
        self.name = name
        self.shapes: dict[int, Shape] = {}
        self.dtypes: dict[int, str] = {}
        self.consts = {r: numpy.asarray(v) for r, v in program.constants.items()}
        #: C name -> array for NAME_weights.c
        self.weights: dict[str, numpy.ndarray] = {}
        self.input_of: dict[int, int] = {}
        self.uniform_inputs: list[Shape] = []
        self._readers = {r for inst in program.instructions for r in inst.inputs} | \
            {v.register for v in program.outputs}
        for k, v in enumerate(program.inputs):
            self._check_input(v)
            self.input_of.setdefault(v.register, k)
            self.shapes[v.register] = tuple(d for d in v.shape or () if isinstance(d, int))
            self.dtypes[v.register] = str(v.dtype)  # checked: one of C_TYPES
        for r, a in self.consts.items():
            self.shapes[r] = tuple(a.shape)
            self.dtypes[r] = a.dtype.name
        self.steps: list[Step | None] = []
        problems = []
        for i, inst in enumerate(program.instructions):
            values = fold(inst, self.consts, self.shapes, self.dtypes)
            if values is not None:
                self._record_constants(inst, values)
                self.steps.append(None)
                continue
            try:
                step = self._lower(inst)
            except Refuse as e:
                problems.append((i, program.describe_instruction(i), str(e)))
                self._assume_declared(inst)
                step = None
            except Unknown:
                step = None
            self.steps.append(step)
            if step is not None:
                self._record(i, inst, step, problems)
                for r in written_inputs(inst):
                    if r in self.consts:
                        problems.append((i, program.describe_instruction(i),
                                         'it updates the constant %s in place; the C backend '
                                         'keeps constants read-only' % self._describe(r)))
        if problems:
            raise UnsupportedNativeOpsError(problems)
        self._check_outputs()

    def _lower(self, inst: Instruction) -> Step:
        lowering = lowering_for(inst.op, inst.domain)
        if lowering is None:
            raise Refuse('no C kernel for operator %s' % inst.qualified_op)
        if any(isinstance(v, Program) for v in inst.attrs.values()):
            raise Refuse('sub-programs are not supported')
        return lowering(self, inst)

    def _record_constants(self, inst: Instruction, values: list):
        """``inst`` was evaluated at emit time: its outputs are constants."""
        for r, a in zip(inst.outputs, values):
            if r != NO_REGISTER and a is not None:
                if a.dtype.name not in C_TYPES:
                    continue  # (unused, or refused by its reader)
                self.consts[r] = a
                self.shapes[r] = tuple(a.shape)
                self.dtypes[r] = a.dtype.name

    def _assume_declared(self, inst: Instruction):
        """The outputs of refused ``inst`` take their static types from the
        Program, so that the instructions after it are lowered too and the
        refusal lists every instruction the kernels cannot run, not only
        the first of a chain."""
        for r in inst.outputs:
            t = self.p.types.get(r)
            if t is None or t.kind != 'tensor' or t.dtype not in C_TYPES or t.shape is None:
                continue
            dims = tuple(d for d in t.shape if isinstance(d, int))
            if len(dims) == len(t.shape):
                self.shapes[r] = dims
                self.dtypes[r] = t.dtype

    def _record(self, i: int, inst: Instruction, step: Step, problems: list):
        """Note the shapes and dtypes of ``step``'s outputs."""
        default = self.dtypes.get(inst.inputs[0], 'float32') if inst.inputs else 'float32'
        dtypes = step.dtypes or [default] * len(step.shapes)
        for r, s, d in zip(inst.outputs, step.shapes, dtypes):
            if s is None or r == NO_REGISTER:
                continue
            if len(s) > MAX_RANK:
                problems.append((i, self.p.describe_instruction(i),
                                 'its result has rank %d; at most %d is supported'
                                 % (len(s), MAX_RANK)))
            self.shapes[r] = tuple(s)
            self.dtypes[r] = d or default
            declared = self.p.types.get(r)
            if declared is not None and not _agrees(declared, self.shapes[r], self.dtypes[r]):
                problems.append((i, self.p.describe_instruction(i), (
                    'its lowering computes output %s as %s, but the Program declares it %s'
                    % (self._describe(r), shape_text(self.dtypes[r], self.shapes[r]),
                       _type_text(declared)))))

    def _describe(self, r: int) -> str:
        name = self.p.register_names.get(r)
        for v in self.p.inputs + self.p.outputs:
            if v.register == r:
                name = v.name
        return '%%%d %s' % (r, name) if name else '%%%d' % r

    def _check_input(self, v):
        if v.kind != 'tensor' or v.dtype not in C_TYPES:
            raise NativeEmitError("input '%s' is a %s; the C backend handles tensors of %s"
                                  % (v.name, v.dtype or v.kind, ', '.join(C_TYPES)))
        if v.shape is None or not all(isinstance(d, int) and d >= 0 for d in v.shape):
            raise NativeEmitError("input '%s' has shape %s, not a static one; the C backend "
                                  'needs every shape fixed (export with concrete input shapes, '
                                  'or size them: emit-c --symbolic-dims NAME=SIZE)'
                                  % (v.name, None if v.shape is None else list(v.shape)))
        if len(v.shape) > MAX_RANK:
            raise NativeEmitError("input '%s' has rank %d; at most %d is supported"
                                  % (v.name, len(v.shape), MAX_RANK))

    def _check_outputs(self):
        for v in self.p.outputs:
            r = v.register
            if self.dtypes.get(r) not in C_TYPES:
                raise NativeEmitError("output '%s' is %s; the C backend handles %s"
                                      % (v.name, self.dtypes.get(r), ', '.join(C_TYPES)))
            shape = self.shapes.get(r)
            if shape is None:
                raise NativeEmitError("output '%s' has no static shape" % v.name)
            if len(shape) > MAX_RANK:
                raise NativeEmitError("output '%s' has rank %d; at most %d is supported"
                                      % (v.name, len(shape), MAX_RANK))
            declared = v.shape
            if declared is not None and all(isinstance(d, int) for d in declared) \
                    and tuple(declared) != shape:
                raise NativeEmitError("output '%s' is declared %s but computes to %s"
                                      % (v.name, list(declared), list(shape)))

    def shape(self, inst: Instruction, k: int, dtypes=FLOAT32) -> Shape:
        """Static shape of input ``k`` of ``inst``, refused unless present
        and of one of ``dtypes``."""
        if not self.has(inst, k):
            raise Refuse('input %d is missing' % k)
        r = inst.inputs[k]
        if r not in self.shapes:
            raise Unknown()
        if self.dtypes[r] not in dtypes:
            raise Refuse('input %d (%s) is %s; this kernel takes %s'
                         % (k, self.p.register_name(r), self.dtypes[r], ' or '.join(dtypes)))
        return self.shapes[r]

    def dtype(self, inst: Instruction, k: int) -> str:
        """Dtype name of input ``k`` of ``inst`` (present and known)."""
        self.shape(inst, k, tuple(C_TYPES))
        return self.dtypes[inst.inputs[k]]

    def uniform_input(self, inst: Instruction, shape: Shape) -> int:
        """A new program input, after the Program's own, of float64 uniform
        numbers in [0, 1) of ``shape`` that the caller draws for ``inst``
        at every call (EmitResult.uniform_inputs); returns its register.
        Random numbers come from the caller, not from C, so the native
        program draws exactly what the NumPy VM draws."""
        r = self.p.num_registers
        name = '%s_uniforms' % (inst.name or self.p.register_name(inst.outputs[0]))
        info = ValueInfo(name, r, dtype='float64', shape=tuple(shape))
        # A copy: the caller's Program keeps its inputs.
        self.p = replace(self.p, inputs=self.p.inputs + [info], num_registers=r + 1)
        self.input_of[r] = len(self.p.inputs) - 1
        self.uniform_inputs.append(tuple(shape))
        self.shapes[r] = tuple(shape)
        self.dtypes[r] = 'float64'
        return r

    def has(self, inst: Instruction, k: int) -> bool:
        """Whether ``inst`` has an input ``k``."""
        return _has(inst, k)

    def const(self, r: int):
        """The value of register ``r`` when it is a constant, else None."""
        return self.consts.get(r)

    def nbytes(self, r: int) -> int:
        """Size of register ``r``'s data in bytes."""
        return _nbytes(self.shapes[r], self.dtypes[r])

    def is_output(self, r: int) -> bool:
        """Whether register ``r`` is a program output."""
        return any(v.register == r for v in self.p.outputs)

    def only_first_output(self, inst: Instruction, what: str):
        """Refuse ``inst`` when an output after the first is read."""
        for r in inst.outputs[1:]:
            if r != NO_REGISTER and r in self._readers:
                raise Refuse('its %s output is used; only the first output is supported'
                             % what)

    def weight(self, r: int, transposed: bool = False) -> str:
        """The C name of constant ``r`` (transposed: its 2-D transpose,
        made at emit time so Gemm reads B row by row)."""
        a = self.consts[r]
        return self.constant_array('w%d%s' % (r, '_T' if transposed else ''),
                                   a.T if transposed else a)

    def constant_array(self, suffix: str, array) -> str:
        """The C name of an array made at emit time (``NAME_<suffix>`` in
        NAME_weights.c), e.g. a weight laid out for a kernel."""
        return _array_name(self.weights, self.name, suffix, array)


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


def _array_name(weights: dict, name: str, suffix: str, array) -> str:
    """The C name ``NAME_<suffix>`` of an array of NAME_weights.c, added to
    ``weights`` the first time it is asked for."""
    key = '%s_%s' % (name, suffix)
    if key not in weights:
        weights[key] = numpy.ascontiguousarray(array)
    return key


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
    (EmitResult.in_place_outputs)."""
    output_of: dict[int, int]
    final_copies: list[tuple[int, int]]
    alias_of: dict[int, int]
    updated_inputs: list[int]
    in_place_outputs: dict[int, int]
    buffers: list[Buffer]
    offsets: dict
    arena_bytes: int
    placed: dict[int, tuple[int, int]] = field(default_factory=dict)


def plan(lowered: Lowered) -> ArenaPlan:
    """Decide where every value of ``lowered`` lives: the caller's input or
    output buffer, a weight, an alias of another value, or an arena
    offset (arena.py).  Raises NativeEmitError for a Program that writes a
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
    _share_in_place(lowered, alias_of, output_of, produced, last_use)
    placed, first_use = _place_parts(lowered, alias_of, output_of, produced, last_use)
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
    return ArenaPlan(output_of, final_copies, alias_of, updated_inputs, in_place_outputs,
                     buffers, offsets, arena_bytes, placed)


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


def _share_in_place(lowered: Lowered, alias_of: dict, output_of: dict, produced: dict,
                    last_use: dict):
    """Let output 0 of an instruction take the memory of an input it
    reads for the last time (Step.in_place), as a view takes its
    input's: the arena then holds one buffer where it held two."""
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
            if _has(inst, k) and root in produced and root not in output_of and \
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


@dataclass
class Rendered:
    """What render() makes: the text of every file by name, the layout of
    the weights block (weights='file', else None), every array the C names
    (the lowerings' and the constants rendering asked for) and the kernel
    families it calls."""
    texts: dict[str, str]
    layout: WeightsLayout | None
    weights: dict[str, numpy.ndarray]
    families: list[str]


def render(lowered: Lowered, arena: ArenaPlan, weights_mode: str,
           max_batch: MaxBatch | None = None) -> Rendered:
    """The files of ``lowered`` with the memory of ``arena``, the constants
    embedded as literals (``weights_mode`` 'embed') or in a weights file
    ('file'): NAME.h, NAME.c, NAME_weights.c, main.c, the Makefile and the
    kernels' sources, every ``ccn_*`` symbol renamed ``NAME_ccn_*``; with
    ``max_batch``, NAME_run_n too (emit_c)."""
    return _Renderer(lowered, arena, weights_mode, max_batch).render()


class _Renderer:
    """Renders one model's files (render)."""

    def __init__(self, lowered: Lowered, arena: ArenaPlan, weights_mode: str,
                 max_batch: MaxBatch | None = None):
        # The rendering methods read the lowering's and the plan's results
        # under these names; rendering adds the constants it names to a
        # copy of the lowering's arrays.
        self.p, self.name, self.steps = lowered.program, lowered.name, lowered.steps
        self.shapes, self.dtypes, self.consts = lowered.shapes, lowered.dtypes, lowered.consts
        self.input_of, self.lowered = lowered.input_of, lowered
        self.weights = dict(lowered.weights)
        self.weights_mode = weights_mode
        self.output_of, self.final_copies = arena.output_of, arena.final_copies
        self.alias_of, self.updated_inputs = arena.alias_of, arena.updated_inputs
        self.in_place_outputs, self.buffers = arena.in_place_outputs, arena.buffers
        self.offsets, self.arena_bytes = arena.offsets, arena.arena_bytes
        self.placed = arena.placed
        self.layout: WeightsLayout | None = None
        self.max_batch = max_batch

    def nbytes(self, r: int) -> int:
        return self.lowered.nbytes(r)

    def weight(self, r: int) -> str:
        """The C name of constant ``r``."""
        return _array_name(self.weights, self.name, 'w%d' % r, self.consts[r])

    def render(self) -> Rendered:
        """Every file of the model (render)."""
        families = self.families()
        headers = sorted(os.path.basename(h)
                         for h in glob.glob(os.path.join(KERNEL_DIR, 'ccn_*.h')))
        # NAME.c first: rendering it requests the weights by name (and, with
        # weights='file', lays out their block).
        model_c = prefix_kernel_symbols(self._model_c(), self.name)
        texts = {
            '%s.h' % self.name: self._header(),
            '%s.c' % self.name: model_c,
            # (literals only when embedded: nothing to rename there)
            '%s_weights.c' % self.name: self._weights_c() if self.layout is None
            else prefix_kernel_symbols(self._weights_c(), self.name),
            'main.c': self._main_c(),
            'Makefile': self._makefile(families, headers),
        }
        for filename in headers + ['ccn_%s.c' % f for f in families]:
            with open(os.path.join(KERNEL_DIR, filename), encoding='utf-8') as f:
                texts[filename] = prefix_kernel_symbols(f.read(), self.name)
        if 'gemm' in families:
            for level in GEMM_LEVELS:
                texts['ccn_gemm_v%d.c' % level] = gemm_variant(texts['ccn_gemm.c'], level)
        return Rendered(texts, self.layout, self.weights, families)

    def families(self) -> list[str]:
        """The kernel families (ccn_<family>.c) the model calls."""
        return sorted({f for s in self.steps if s is not None for f in (s.family,) + s.also}
                      | {'threads'}  # NAME_set_threads, and every family's parallel loops
                      | ({'array'} if self.final_copies else set())
                      | ({'weights'} if self.weights_mode == 'file' else set()))

    def ref(self, r: int) -> str:
        """The C expression of register ``r``'s data."""
        r = self.alias_of.get(r, r)
        if r in self.placed:  # a block of a Concat's output (plan)
            container, offset = self.placed[r]
            return at(self.ref(container), offset)
        if r in self.input_of:
            return 'in_%d' % self.input_of[r]
        if r in self.consts:
            return self.weight(r)
        if r in self.output_of:
            return 'out_%d' % self.output_of[r]
        return 't%d' % r

    def _ctype(self, r: int) -> str:
        return C_TYPES[self.dtypes[r]]

    def _params(self) -> str:
        ins = ['%s%s *in_%d' % ('' if k in self.updated_inputs else 'const ',
                                self._ctype(v.register), k)
               for k, v in enumerate(self.p.inputs)]
        outs = ['%s *out_%d' % (self._ctype(v.register), k)
                for k, v in enumerate(self.p.outputs)]
        return ', '.join(ins + outs) or 'void'

    def _args(self) -> str:
        return ', '.join(['in_%d' % k for k in range(len(self.p.inputs))]
                         + ['out_%d' % k for k in range(len(self.p.outputs))])

    def _tensor_macros(self, kind: str, values) -> list[str]:
        lines: list[str] = []
        up = self.name.upper()
        for k, v in enumerate(values):
            shape = self.shapes[v.register]
            prefix = '%s_%s_%d' % (up, kind, k)
            lines += ['#define %s_NAME %s' % (prefix, cstring(v.name)),
                      '#define %s_DTYPE %s' % (prefix, cstring(self.dtypes[v.register])),
                      '#define %s_RANK %d' % (prefix, len(shape)),
                      '#define %s_SHAPE %s' % (prefix, clist(shape)),
                      '#define %s_SIZE %d' % (prefix, math.prod(shape)),
                      '']
        return lines

    def _header(self) -> str:
        n, up = self.name, self.name.upper()
        ins, outs = self.p.inputs, self.p.outputs
        doc = ['/* %s.h: the C API of model %s, generated by chainer-compiler emit-c.' % (n, n),
               ' *',
               ' * Inputs and outputs are arrays in C (row-major) order with the dtypes',
               ' * (float32: float, float64: double, int64: int64_t, int32: int32_t,',
               ' * bool: uint8_t) and static shapes below; they must not overlap.',
               ' *'] + self._in_place_doc() + self._api_doc() + self._batch_doc() + \
            self._status_doc() + [' */']
        lines = doc + ['#ifndef %s_H' % up, '#define %s_H' % up, '',
                       '#include <stddef.h>', '#include <stdint.h>', '',
                       '#ifdef __cplusplus', 'extern "C" {', '#endif', '',
                       '/* What the shared library exports (the Makefile builds with',
                       ' * -fvisibility=hidden): only the functions and tables below. */',
                       '#if defined(__GNUC__) || defined(__clang__)',
                       '#define %s_API __attribute__((visibility("default")))' % up,
                       '#else', '#define %s_API' % up, '#endif', '',
                       '#define %s_NUM_INPUTS %d' % (up, len(ins)),
                       '#define %s_NUM_OUTPUTS %d' % (up, len(outs)),
                       '/* Peak size of the intermediate values (planned at emit time). */',
                       '#define %s_ARENA_BYTES %dUL' % (up, self.arena_bytes),
                       '/* Highest rank of an input or output. */',
                       '#define %s_MAX_RANK %d' % (up, self._max_rank()), '']
        if self.max_batch is not None:
            lines += ['/* %s_run_n takes 1 to %s_MAX_BATCH samples of the batch named'
                      % (self.name, up),
                      ' * %s_BATCH_SYMBOL; other counts return %s_STATUS_BATCH. */' % (up, up),
                      '#define %s_MAX_BATCH %d' % (up, self.max_batch.maximum),
                      '#define %s_BATCH_SYMBOL %s' % (up, cstring(self.max_batch.symbol)),
                      '#define %s_STATUS_BATCH %d' % (up, self._batch_status()), '']
        lines += self._tensor_macros('INPUT', ins) + self._tensor_macros('OUTPUT', outs)
        lines += ['typedef struct {',
                  '    const char *name;   /* the value\'s name in the graph */',
                  '    const char *dtype;  /* "float32", "float64", "int64", "int32", "bool" */',
                  '    const char *descr;  /* its .npy descr, e.g. "<f4" */',
                  '    int itemsize;       /* bytes per element */',
                  '    int rank;',
                  '    long shape[%s_MAX_RANK];' % up,
                  '    long size;          /* number of elements */',
                  '} %s_tensor_info;' % n, '',
                  '/* One entry per input and output, in graph order. */',
                  '%s_API extern const %s_tensor_info %s_inputs[];' % (up, n, n),
                  '%s_API extern const %s_tensor_info %s_outputs[];' % (up, n, n), '']
        lines += [line if not line or line.startswith(('#', '/', 'typedef')) else
                  '%s_API %s' % (up, line) for line in self._api_declarations()]
        lines += ['%s_API const char *%s_status_message(int status);' % (up, n), '',
                  '/* How many threads the runs\' loops use, the caller included (1 to',
                  ' * 256; by default one per CPU this process may use).  One count for',
                  ' * the whole library, from the next run on.  Returns 0, or -1 for a',
                  ' * count out of range (the count is then unchanged). */',
                  '%s_API int %s_set_threads(int threads);' % (up, n), '',
                  '/* A build with -DCCN_PROFILE (make PROFILE=1) times the %s_PROFILED' % up,
                  ' * instructions of every run: after %s_profile(marks), each run writes'
                  % n,
                  ' * to marks[0] the time before the first and to marks[k] the time after',
                  ' * the k-th, in nanoseconds of CLOCK_MONOTONIC (NULL: no more).  One',
                  ' * buffer per process, for one run at a time.  Returns 0, or 1 when',
                  ' * the build does not profile.  %s_profile_events[k - 1] is the name'
                  % n,
                  ' * and args of the k-th instruction\'s Chrome-trace event, as JSON. */',
                  '#define %s_PROFILED %d' % (up, sum(s is not None for s in self.steps)),
                  '%s_API int %s_profile(int64_t *marks);' % (up, n),
                  '%s_API extern const char *const %s_profile_events[];' % (up, n)]
        lines += ['', '#ifdef __cplusplus', '}', '#endif', '#endif /* %s_H */' % up, '']
        return '\n'.join(lines)

    def _in_place_doc(self) -> list[str]:
        """What the header says about inputs updated in place and outputs
        that are inputs, if any."""
        text = []
        if self.updated_inputs:
            text.append('The model updates inputs %s in place (they are not const): pass the '
                        'arrays to update, e.g. the parameters and optimizer states of a '
                        'training step.' % ', '.join(str(k) for k in self.updated_inputs))
        if self.in_place_outputs:
            text.append("Some outputs are inputs (after their update, for an updated one): "
                        "passing the input's own pointer for such an output copies nothing "
                        '(%s).' % ', '.join('out_%d = in_%d' % kv
                                            for kv in sorted(self.in_place_outputs.items())))
        lines = [' * ' + line for paragraph in text for line in textwrap.wrap(paragraph, 76)]
        return lines + [' *'] if lines else []

    def _batch_status(self) -> int:
        """NAME_run_n's status for a count of samples out of range."""
        return FIRST_FAILURE + len(self._failures())

    def _batch_doc(self) -> list[str]:
        """What the header says about NAME_run_n (emit-c --max)."""
        if self.max_batch is None:
            return []
        n, up, m = self.name, self.name.upper(), self.max_batch
        model = '' if self.layout is None else 'model, '
        # The symbol is the model's text: only in the string literal
        # NAME_BATCH_SYMBOL, never in this comment.
        text = ('Batches (emit-c --max, up to %d samples of the batch %s_BATCH_SYMBOL): the '
                'shapes below are those of one sample, the '
                'first axis of every input and output being 1. %s_run_n(%sn, ...) and '
                '%s_run_n_v(%sn, in, out) take n samples, 1 to %s_MAX_BATCH (%d), of every '
                'input and output, one after the other in C order (sample k of input i starts '
                'k * %s_INPUT_i_SIZE elements in), and run the one-sample program on each in '
                'turn: the results equal the batched model\'s because emit-c checked that '
                'no instruction mixes samples (no batch statistics, no reduction, '
                'concatenation or transposition across the first axis). Another n returns '
                '%s_STATUS_BATCH (%d) before anything is read. %s_ARENA_BYTES is one '
                "sample's arena: the samples reuse it."
                % (m.maximum, up, n, model, n, model, up, m.maximum, up, up,
                   self._batch_status(), up))
        return [' * ' + line for line in textwrap.wrap(text, 76)] + [' *']

    def _status_doc(self) -> list[str]:
        """What the header says about the run functions' other statuses."""
        lines = [' * %s_status_message(status) describes a status in one line.' % self.name]
        if self._failures():
            lines += [' * A status of %d or more: an instruction refused its inputs (an index'
                      % FIRST_FAILURE,
                      ' * out of range...); the outputs are then unfinished.']
        return lines

    def _api_doc(self) -> list[str]:
        n, up = self.name, self.name.upper()
        if self.layout is None:
            return [' *   %s_run(...)        runs on a static arena (not thread-safe);' % n,
                    ' *   %s_run_arena(...)  runs on an arena of %s_ARENA_BYTES bytes that the'
                    % (n, up),
                    ' *                      caller owns (8-byte aligned; one per thread);',
                    ' *   %s_run_v(in, out)  takes arrays of input and output pointers.' % n,
                    ' * Each returns 0 on success and 1 when a pointer is NULL.']
        return [' * The weights are in %s (%s_WEIGHTS_FILE):' % (_weights_file(self.name), up),
                ' *   %s_create(path, error, size)  loads them and allocates an arena;' % n,
                ' *       NULL on failure, with a one-line message in error;',
                ' *   %s_run(model, ...)            runs (one thread per model at a time);' % n,
                ' *   %s_run_v(model, in, out)      takes arrays of input and output' % n,
                ' *                                 pointers;',
                ' *   %s_destroy(model)             frees both;' % n,
                ' *   %s_run_arena(arena, weights, ...)  runs on memory the caller owns:' % n,
                ' *       an arena of %s_ARENA_BYTES and the weights block of' % up,
                ' *       %s_WEIGHTS_BYTES (the file after its 32-byte header).' % up,
                ' * The run functions return 0 on success and 1 when a pointer is NULL.']

    def _api_declarations(self) -> list[str]:
        n, up = self.name, self.name.upper()
        params = [p for p in self._params().split(', ') if p != 'void']
        if self.layout is None:
            return ['int %s_run(%s);' % (n, self._params()),
                    'int %s_run_arena(%s);' % (n, ', '.join(['void *arena'] + params)),
                    'int %s_run_v(const void *const *inputs, void *const *outputs);' % n
                    ] + self._batch_declarations()
        return ['/* The default name of the weights file, and its block size in bytes. */',
                '#define %s_WEIGHTS_FILE "%s"' % (up, _weights_file(self.name)),
                '#define %s_WEIGHTS_BYTES %dUL' % (up, self.layout.nbytes), '',
                'typedef struct %s_model %s_model;' % (n, n),
                '%s_model *%s_create(const char *weights_path, char *error, size_t error_size);'
                % (n, n),
                'int %s_run(%s);' % (n, ', '.join(['%s_model *model' % n] + params)),
                'int %s_run_v(%s_model *model, const void *const *inputs, '
                'void *const *outputs);' % (n, n),
                'void %s_destroy(%s_model *model);' % (n, n),
                'int %s_run_arena(%s);' % (n, ', '.join(['void *arena', 'const void *weights']
                                                         + params))] + self._batch_declarations()

    def _batch_declarations(self) -> list[str]:
        """NAME_run_n and NAME_run_n_v (emit-c --max), after NAME_run's
        arguments: the model (weights in a file) and the count of samples."""
        if self.max_batch is None:
            return []
        n = self.name
        model = [] if self.layout is None else ['%s_model *model' % n]
        params = [p for p in self._params().split(', ') if p != 'void']
        return ['int %s_run_n(%s);' % (n, ', '.join(model + ['long n'] + params)),
                'int %s_run_n_v(%s);' % (n, ', '.join(model + [
                    'long n', 'const void *const *inputs', 'void *const *outputs']))]

    def _batch_c(self) -> list[str]:
        """The definitions of _batch_declarations: NAME_run on each sample."""
        if self.max_batch is None:
            return []
        n, up = self.name, self.name.upper()
        model = [] if self.layout is None else ['model']
        rows = ['in_%d + k * %s_INPUT_%d_SIZE' % (i, up, i) for i in range(len(self.p.inputs))]
        rows += ['out_%d + k * %s_OUTPUT_%d_SIZE' % (i, up, i)
                 for i in range(len(self.p.outputs))]
        null_checks = ['!%s' % a for a in self._args().split(', ') if a]
        run_n, run_n_v = self._batch_declarations()
        return [run_n[:-1], '{',
                '    /* The count first: a refused call reads nothing. */',
                '    if (n < 1 || n > %s_MAX_BATCH)' % up,
                '        return %s_STATUS_BATCH;' % up] + (
            ['    if (%s)' % ' || '.join(null_checks), '        return 1;'] if null_checks
            else []) + [
                '    for (long k = 0; k < n; k++) {',
                '        const int status = %s_run(%s);' % (n, ', '.join(model + rows)),
                '        if (status != 0)',
                '            return status;',
                '    }',
                '    return 0;', '}', '',
                run_n_v[:-1], '{',
                '    (void)inputs;', '    (void)outputs;',
                '    return %s_run_n(%s);' % (
                    n, ', '.join(a for a in model + ['n', self._vector_call()] if a)),
                '}', '']

    def _max_rank(self) -> int:
        return max([1] + [len(self.shapes[v.register]) for v in self.p.inputs + self.p.outputs])

    def _info_table(self, values) -> list[str]:
        rows = ['    {%s, %s, %s, %d, %d, %s, %d},' % (
            cstring(v.name), cstring(self.dtypes[v.register]),
            cstring(NPY_DESCR[self.dtypes[v.register]]),
            numpy.dtype(self.dtypes[v.register]).itemsize, len(self.shapes[v.register]),
            clist(self.shapes[v.register]), math.prod(self.shapes[v.register]))
            for v in values]
        return rows or ['    {"", "float32", "<f4", 4, 0, {0}, 0},']

    def _model_c(self) -> str:
        n, up, p = self.name, self.name.upper(), self.p
        body: list[str] = []
        failures = {i: status for status, (i, _) in enumerate(self._failures(), FIRST_FAILURE)}
        # Rendering requests weights (and transposed weights) by name.
        profiled = 0
        for i, (inst, step) in enumerate(zip(p.instructions, self.steps)):
            body += ['', '    ' + self._instruction_comment(i, inst, step)]
            if step is not None:
                scratch = 's%d' % i if step.scratch else 'NULL'
                lines = ['    ' + line for line in step.render(self.ref, scratch)]
                if step.error:  # the status its failure returns (NAME_status_message)
                    lines = ['#define CCN_FAILED %d' % failures[i], *lines, '#undef CCN_FAILED']
                profiled += 1
                body += lines + ['    PROFILE_MARK(%d);' % profiled]
        for k, r in self.final_copies:
            copy = 'ccn_copy(%d, %s, out_%d);  /* output %d */' % (
                self.nbytes(r), self.ref(r), k, k)
            if k in self.in_place_outputs:  # the caller may pass the input itself
                body += ['    if ((const void *)out_%d != (const void *)in_%d)'
                         % (k, self.in_place_outputs[k]), '        ' + copy]
            else:
                body.append('    ' + copy)
        decls = []
        for b in sorted(self.buffers, key=lambda b: self.offsets[b.key]):
            off = self.offsets[b.key]
            if isinstance(b.key, tuple):
                decls.append('    float *const s%d = (float *)(arena + %d);  /* scratch of '
                             'instruction %d, bytes [%d, %d) */' % (b.key[1], off, b.key[1], off,
                                                                     off + b.nbytes))
            else:
                reg = b.key
                assert isinstance(reg, int)
                ctype = self._ctype(reg)
                decls.append('    %s *const t%d = (%s *)(arena + %d);  /* %%%d %s, bytes [%d, %d), '
                             'live %d..%d */' % (ctype, reg, ctype, off, reg,
                                                 shape_text(self.dtypes[reg], self.shapes[reg]),
                                                 off, off + b.nbytes, b.start, b.end))
        null_checks = ['!%s' % a for a in self._args().split(', ') if a]
        lines = ['/* %s.c: model %s as straight-line C, generated by chainer-compiler emit-c.'
                 % (n, n),
                 ' * One block per Program instruction; intermediate values live at fixed',
                 ' * offsets of one arena (%d bytes) planned from their lifetimes. */'
                 % self.arena_bytes,
                 '#ifdef CCN_PROFILE  /* clock_gettime */',
                 '#define _POSIX_C_SOURCE 199309L', '#include <time.h>', '#endif',
                 '#include <math.h>', '#include <stddef.h>', '#include <stdint.h>', '']
        lines += ['#include "ccn_%s.h"' % f for f in self.families()]
        lines += ['#include "%s.h"' % n, ''] + self._profile_c()
        if self.weights_mode == 'embed':
            lines += ['extern const %s %s[%d];  /* %s */' % (
                C_TYPES[a.dtype.name], w, max(1, a.size),
                ' x '.join(str(d) for d in a.shape) or 'scalar')
                for w, a in sorted(self.weights.items())]
        lines += ['', 'const %s_tensor_info %s_inputs[] = {' % (n, n)]
        lines += self._info_table(p.inputs) + ['};', '']
        lines += ['const %s_tensor_info %s_outputs[] = {' % (n, n)]
        lines += self._info_table(p.outputs) + ['};', '']
        params = ['void *arena_memory'] + [q for q in self._params().split(', ') if q != 'void']
        checks = ['(!arena && %s_ARENA_BYTES)' % up] + null_checks
        if self.weights_mode == 'file':
            params.insert(1, 'const void *weights_memory')
            checks.insert(1, '(!weights_memory && %s_WEIGHTS_BYTES)' % up)
            self.layout = layout(self.weights)
            text = '\n'.join(body)
            decls = ['    const unsigned char *const weights = '
                     '(const unsigned char *)weights_memory;'] + [
                '    const %s *const %s = (const %s *)(weights + %d);' % (
                    C_TYPES[a.dtype.name], w, C_TYPES[a.dtype.name], self.layout.offsets[w])
                for w, a in sorted(self.weights.items()) if w in text] + decls
        lines += ['int %s_run_arena(%s)' % (n, ', '.join(params)), '{',
                  '    unsigned char *const arena = (unsigned char *)arena_memory;',
                  '    if (%s)' % ' || '.join(checks),
                  '        return 1;',
                  '    (void)arena;']
        lines += decls + ['    PROFILE_MARK(0);'] + body + ['    return 0;', '}', '']
        if self.weights_mode == 'embed':
            lines += ['int %s_run(%s)' % (n, self._params()), '{',
                      '    /* Static storage: no allocation per run, but not reentrant. */',
                      '    static double storage[%d];' % max(1, -(-self.arena_bytes // 8)),
                      '    return %s_run_arena(storage%s);' % (
                          n, ''.join(', ' + a for a in self._args().split(', ') if a)),
                      '}', '']
            lines += ['int %s_run_v(const void *const *inputs, void *const *outputs)' % n, '{',
                      '    (void)inputs;', '    (void)outputs;',
                      '    return %s_run(%s);' % (n, self._vector_call()), '}', '']
        lines += self._batch_c()
        lines += ['int %s_set_threads(int threads)' % n, '{',
                  '    return ccn_set_threads(threads);', '}', '']
        return '\n'.join(lines + self._status_message_c() + self._profile_events_c())

    def _profile_c(self) -> list[str]:
        """NAME_profile and what a profiling build (-DCCN_PROFILE) needs:
        PROFILE_MARK(k) records the time before the first instruction that
        runs (k = 0) and after the k-th."""
        n = self.name
        return ['#ifdef CCN_PROFILE',
                '/* Where the runs record their times (NAME_profile): CLOCK_MONOTONIC ns. */',
                'static int64_t *profile_marks;',
                'static void profile_mark(int k)', '{',
                '    struct timespec t;',
                '    if (profile_marks && clock_gettime(CLOCK_MONOTONIC, &t) == 0)',
                '        profile_marks[k] = (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;',
                '}',
                '#define PROFILE_MARK(k) profile_mark(k)', '#else',
                '#define PROFILE_MARK(k) ((void)0)', '#endif', '',
                'int %s_profile(int64_t *marks)' % n, '{', '#ifdef CCN_PROFILE',
                '    profile_marks = marks;', '    return 0;', '#else',
                '    (void)marks;', '    return 1;', '#endif', '}', '']

    def _profile_events_c(self) -> list[str]:
        """NAME_profile_events, at the end of NAME.c: the JSON of each timed
        instruction's Chrome-trace event's name and args (json.dumps:
        ASCII, escaped for JSON, then for C)."""
        events = ['    %s,' % cstring(json.dumps(trace_event_fields(self.p, i, ins, outs))[1:-1])
                  for i, _, ins, outs in _profiled(self.lowered)]
        return ['const char *const %s_profile_events[%s_PROFILED + 1] = {'
                % (self.name, self.name.upper())] + events + ['    NULL', '};', '']

    def _failures(self) -> list[tuple[int, str]]:
        """(index, message) of each instruction whose kernel may refuse its
        inputs at run time, in order: the k-th fails with status
        FIRST_FAILURE + k.  The message is the NumPy VM's KernelError text
        (the input values' shapes are static), less what only the run knows."""
        failures = []
        for i, (inst, step) in enumerate(zip(self.p.instructions, self.steps)):
            if step is not None and step.error:
                values = ', '.join('none' if r == NO_REGISTER
                                   else shape_text(self.dtypes[r], self.shapes[r])
                                   for r in inst.inputs)
                failures.append((i, '%s failed on inputs (%s): %s' % (
                    self.p.describe_instruction(i), values, step.error)))
        return failures

    def _status_message_c(self) -> list[str]:
        """NAME_status_message: the text of each status the run functions
        return, names from the Program only as string literals."""
        cases = [line for status, (_, message) in enumerate(self._failures(), FIRST_FAILURE)
                 for line in ('    case %d:' % status, '        return %s;' % cstring(message))]
        return ['const char *%s_status_message(int status)' % self.name, '{',
                '    switch (status) {', '    case 0:', '        return "success";',
                '    case 1:', '        return "a NULL pointer for an input, an output, the '
                'arena or the weights";'] + cases + ([
                '    case %s_STATUS_BATCH:' % self.name.upper(),
                '        return "a count of samples out of range: 1 to %d";'
                % self.max_batch.maximum] if self.max_batch is not None else []) + [
                '    default:', '        return "not a status of this model";', '    }', '}', '']

    def _instruction_comment(self, i: int, inst: Instruction, step: Step | None) -> str:
        """The comment above instruction ``i``'s C: its index, operator and
        registers by number.  No name or attribute of the Program: a name can
        end a comment (the names are in the tables NAME_inputs and
        NAME_outputs, as string literals).  The operator is one of
        native_operators(), the project's own text, since its lowering ran."""
        if step is None:
            return '/* %d: evaluated at emit time: a constant */' % i
        registers = [', '.join('_' if r == NO_REGISTER else '%%%d' % r for r in regs)
                     for regs in (inst.outputs, inst.inputs)]
        return '/* %d: %s = %s(%s) */' % (i, registers[0], lowering_key(inst), registers[1])

    def _vector_call(self) -> str:
        """The arguments of NAME_run from the arrays of NAME_run_v."""
        # An input updated in place is the caller's writable array, though
        # NAME_run_v's vector of inputs is const for the common case.
        return ', '.join(['(%s%s *)inputs[%d]' % ('' if k in self.updated_inputs else 'const ',
                                                  self._ctype(v.register), k)
                          for k, v in enumerate(self.p.inputs)]
                         + ['(%s *)outputs[%d]' % (self._ctype(v.register), k)
                            for k, v in enumerate(self.p.outputs)])

    def _weights_c(self) -> str:
        if self.layout is not None:
            return self._model_state_c()
        lines = ['/* %s_weights.c: the constants of model %s (exact literals),'
                 % (self.name, self.name),
                 ' * generated by chainer-compiler emit-c.  Names end in _T for a',
                 ' * transpose made at emit time. */',
                 '#include <math.h>', '#include <stdint.h>', '']
        for w, a in sorted(self.weights.items()):
            flat = a.reshape(-1)
            ctype = C_TYPES[a.dtype.name]
            values = [cliteral(v, a.dtype.name) for v in flat.tolist()] or ['0']
            lines.append('extern const %s %s[%d];' % (ctype, w, max(1, flat.size)))
            lines.append('const %s %s[%d] = {  /* shape (%s) */' % (
                ctype, w, max(1, flat.size), ', '.join(str(d) for d in a.shape)))
            for start in range(0, len(values), 8):
                lines.append('    ' + ', '.join(values[start:start + 8]) + ',')
            lines += ['};', '']
        if not self.weights:
            lines.append('typedef int %s_no_weights;  /* C forbids an empty file */' % self.name)
        return '\n'.join(lines) + '\n'

    def _model_state_c(self) -> str:
        """NAME_weights.c when the weights are in a file: the model object
        that owns them and an arena."""
        n, up = self.name, self.name.upper()
        assert self.layout is not None
        params = [q for q in self._params().split(', ') if q != 'void']
        args = ''.join(', ' + a for a in self._args().split(', ') if a)
        return '\n'.join([
            '/* %s_weights.c: model %s with its weights loaded from %s,' % (
                n, n, _weights_file(self.name)),
            ' * generated by chainer-compiler emit-c. */',
            '#include <stdio.h>', '#include <stdlib.h>', '',
            '#include "ccn_weights.h"', '#include "%s.h"' % n, '',
            '/* FNV-1a of the weights\' names, dtypes, shapes and offsets: a file',
            ' * written for another model is refused. */',
            '#define %s_WEIGHTS_FINGERPRINT UINT64_C(0x%016x)' % (up, self.layout.fingerprint),
            '',
            'struct %s_model {' % n,
            '    void *weights;',
            '    void *arena;',
            '};', '',
            '%s_model *%s_create(const char *weights_path, char *error, size_t error_size)'
            % (n, n), '{',
            '    %s_model *model = calloc(1, sizeof *model);' % n,
            '    if (!model || !(model->arena = malloc(%s_ARENA_BYTES ? %s_ARENA_BYTES : 1))) {'
            % (up, up),
            '        snprintf(error, error_size, "out of memory: model %s needs an arena of %%lu '
            'bytes", (unsigned long)%s_ARENA_BYTES);' % (n, up),
            '        free(model);',
            '        return NULL;',
            '    }',
            '    model->weights = ccn_load_weights(weights_path, %s_WEIGHTS_FINGERPRINT,' % up,
            '                                      %s_WEIGHTS_BYTES, error, error_size);' % up,
            '    if (!model->weights) {',
            '        %s_destroy(model);' % n,
            '        return NULL;',
            '    }',
            '    return model;',
            '}', '',
            'int %s_run(%s)' % (n, ', '.join(['%s_model *model' % n] + params)), '{',
            '    if (!model)',
            '        return 1;',
            '    return %s_run_arena(model->arena, model->weights%s);' % (n, args),
            '}', '',
            'int %s_run_v(%s_model *model, const void *const *inputs, void *const *outputs)'
            % (n, n), '{',
            '    (void)inputs;', '    (void)outputs;',
            '    return %s_run(%s);' % (n, ', '.join(a for a in ('model', self._vector_call())
                                                   if a)),
            '}', '',
            'void %s_destroy(%s_model *model)' % (n, n), '{',
            '    if (!model)',
            '        return;',
            '    free(model->weights);',
            '    free(model->arena);',
            '    free(model);',
            '}', ''])

    def _main_c(self) -> str:
        with open(os.path.join(KERNEL_DIR, 'main.c.in')) as f:
            text = f.read()
        files = ''.join('    %s,\n' % cstring(f)
                        for f in output_file_names([v.name for v in self.p.outputs]))
        return text.replace('@UNAME@', self.name.upper()).replace('@NAME@', self.name) \
            .replace('@OUTPUT_FILES@\n', files + '    NULL\n')

    def _makefile(self, families: list[str], headers: list[str]) -> str:
        n = self.name
        objs = ' '.join(['%s.o' % n, '%s_weights.o' % n] + ['ccn_%s.o' % f for f in families])
        return '\n'.join([
            '# Builds %s (command line), lib%s.so and lib%s.a; generated by '
            'chainer-compiler emit-c.' % (n, n, n),
            '# Every external symbol starts with %s_ and the shared library exports' % n,
            '# only the API of %s.h, so several models link into one program.' % n,
            '# `make PROFILE=1` times each instruction (%s_profile; the program\'s' % n,
            '# --profile FILE.json writes a Chrome trace).',
            '# Plain C99 with libc and libm.  Large loops run on a pool of POSIX threads',
            '# (ccn_threads.c; one per CPU, or --threads, $CHAINER_COMPILER_THREADS,',
            '# %s_set_threads) when the compiler accepts -pthread (`make THREADS=0`:' % n,
            '# one thread).  `make BLAS=cblas` sends large matrix products to',
            '# cblas_sgemm, linked with $(CBLAS_LIBS) (e.g. CBLAS_LIBS=-lopenblas).',
            '# `make ARCH=-march=native` uses every vector unit of this machine\'s CPU',
            '# (the programs then run only on CPUs that have them).',
            'CC ?= cc',
            'CFLAGS ?= -O3 -std=c99 -fno-math-errno -Wall -Wextra',
            'THREADS ?= 1',
            'ifeq ($(THREADS),1)',
            "THREADFLAGS := $(shell printf 'int main(void){return 0;}\\n' | "
            '$(CC) -pthread -x c - -o /dev/null 2>/dev/null && echo -pthread)',
            'endif',
            'ifeq ($(THREADFLAGS),)',
            'THREADFLAGS := -DCCN_THREADS=0',
            'endif',
            'BLAS ?=',
            'CBLAS_LIBS ?= -lopenblas',
            'ifeq ($(BLAS),cblas)',
            'BLASFLAGS := -DCCN_CBLAS',
            'BLASLIBS := $(CBLAS_LIBS)',
            'endif',
            'ARCH ?=',
            # Without ARCH, on x86-64: the products for x86-64-v3 and -v4 too.
            'ifeq ($(ARCH),)',
            "GEMM_VARIANTS := $(shell $(CC) -dumpmachine 2>/dev/null | grep -q '^x86_64' && "
            "printf 'int main(void){return 0;}\\n' | $(CC) -march=x86-64-v4 -x c - "
            '-o /dev/null 2>/dev/null && echo yes)',
            'endif',
            'PROFILE ?= 0',
            'ifeq ($(PROFILE),1)',
            'PROFILEFLAGS := -DCCN_PROFILE',
            'endif',
            "VISFLAGS := $(shell printf 'int main(void){return 0;}\\n' | "
            '$(CC) -fvisibility=hidden -x c - -o /dev/null 2>/dev/null && '
            'echo -fvisibility=hidden)',
            'ALL_CFLAGS = $(CFLAGS) $(ARCH) -fPIC $(VISFLAGS) $(THREADFLAGS) $(BLASFLAGS) '
            '$(PROFILEFLAGS)',
            'LDLIBS = $(BLASLIBS) -lm',
            'OBJS = %s' % objs,
            ] + ([
                'ifeq ($(GEMM_VARIANTS),yes)',
                'OBJS += %s' % ' '.join('ccn_gemm_v%d.o' % v for v in GEMM_LEVELS),
                'ALL_CFLAGS += -DCCN_GEMM_VARIANTS',
                'endif'] if 'gemm' in families else []) + [
            '',
            'all: %s lib%s.so lib%s.a' % (n, n, n),
            '',
            '%s: main.o $(OBJS)' % n,
            '\t$(CC) $(ALL_CFLAGS) -o $@ main.o $(OBJS) $(LDLIBS)',
            '',
            'lib%s.so: $(OBJS)' % n,
            '\t$(CC) $(ALL_CFLAGS) -shared -o $@ $(OBJS) $(LDLIBS)',
            '',
            'lib%s.a: $(OBJS)' % n,
            '\trm -f $@',
            '\t$(AR) rcs $@ $(OBJS)',
            '',
            '%.o: %.c ' + ' '.join(headers + ['%s.h' % n]),
            '\t$(CC) $(ALL_CFLAGS) -c -o $@ $<',
            '',
            ] + [line for v in GEMM_LEVELS if 'gemm' in families for line in (
                'ccn_gemm_v%d.o: ccn_gemm_v%d.c %s' % (v, v, ' '.join(headers)),
                '\t$(CC) $(ALL_CFLAGS) -UCCN_GEMM_VARIANTS -march=x86-64-v%d -c -o $@ $<' % v,
                '')] + [
            'clean:',
            '\trm -f *.o %s lib%s.so lib%s.a' % (n, n, n),
            '',
            '.PHONY: all clean',
            ''])


def _weights_file(name: str) -> str:
    return '%s_weights.bin' % name


def _profiled(lowered: Lowered) -> list[tuple[int, Instruction, list[str], list[str]]]:
    """EmitResult.profiled: (index, instruction, inputs, outputs) of each
    instruction that runs, its values described as the Tracer describes them."""
    def described(regs) -> list[str]:
        return ['%s%s' % (lowered.dtypes[r], list(lowered.shapes[r])) if r in lowered.shapes
                else 'none' for r in regs]
    return [(i, inst, described(inst.inputs), described(inst.outputs))
            for i, (inst, step) in enumerate(zip(lowered.program.instructions, lowered.steps))
            if step is not None]


def _write(lowered: Lowered, arena: ArenaPlan, rendered: Rendered, directory: str, keep,
           phases: list) -> EmitResult:
    """Write ``rendered``'s files (and the weights file) into ``directory``
    with the manifest, and remove the stale files of an earlier run."""
    start = time.perf_counter()
    name, texts, layout_ = lowered.name, rendered.texts, rendered.layout
    mode = 'embed' if layout_ is None else 'file'
    files = [os.path.join(directory, filename) for filename in texts]
    if layout_ is not None:
        files.append(os.path.join(directory, _weights_file(name)))
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
        digests[_weights_file(name)] = _digest_file(files[-1]) or ''
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
                      mode, phases, removed, _profiled(lowered))


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
