"""The native backend's third stage: the text of every file of a model.

render(lowered, plan, weights_mode) -> Rendered: NAME.h (the C API),
NAME.c (the program as straight-line kernel calls over the planned arena),
NAME_weights.c, main.c, the Makefile and the kernels' sources, every
kernel symbol renamed NAME_ccn_*.  It reads its inputs and changes none.
"""
import glob
import hashlib
import json
import math
import os
import re
import textwrap
from dataclasses import dataclass
from functools import partial

import numpy

from ..profiling import trace_event_fields
from ..program import NO_REGISTER, Instruction
from .arena import aligned
from .batched import MaxBatch
from .cformat import C_TYPES, NPY_DESCR, clist, cliteral, cstring, shape_text
from .lower import Lowered, array_name
from .lowering import Step, at
from .plan import ArenaPlan
from .weights import WeightsLayout, layout

#: The kernels' sources (ccn_<family>.c and .h), copied into each folder.
KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'kernels')
#: The run functions' status when the first instruction that can refuse its
#: inputs at run time (Step.error) does; 0 is success, 1 a NULL pointer.
FIRST_FAILURE = 2


#: The x86-64 levels the default build of an emitted Makefile also compiles
#: the products for (ccn_gemm_v<level>.c, -march=x86-64-v<level>); the
#: baseline build runs the best one the CPU has.
GEMM_LEVELS = (3, 4)
#: The families whose file is built so too: the depthwise convolutions, as
#: their vectors' width is chosen at compile time, and Winograd's, whose
#: transforms are stages of the thread pool that the compiler vectorises
#: (the other families' hot loops are built for each level in the baseline
#: file itself: CCN_LEVELS in ccn_common.h).
LEVEL_FAMILIES = ('gemm', 'depthwise', 'winograd', 'nchwc')
#: An exported function definition of a kernel file (at the start of a line).
_C_DEFINITION = re.compile(r'^(?:[A-Za-z_]\w*[ *]+)+?(\w*ccn_\w+)\(', re.M)


def _at_a_line(array: str) -> str:
    """C text of the first 64-byte line inside a static arena's storage:
    C99 cannot align a static array, and the kernels' 64-byte vectors at the
    arena's aligned offsets should not straddle two lines."""
    return '(unsigned char *)%s + (64 - (uintptr_t)%s %% 64) %% 64' % (array, array)


def _line_padded_doubles(nbytes: int) -> int:
    """Doubles of a static arena of ``nbytes`` with room to start it at a line."""
    return max(1, -(-nbytes // 8)) + 8


def gemm_variant(text: str, level: int) -> str:
    """The text of a file of LEVEL_FAMILIES (``text``, symbols prefixed) as
    the build for x86-64 level ``level``: every function it exports renamed
    with the suffix _v<level>, so that the builds link into one program."""
    names = {m.group(1) for m in _C_DEFINITION.finditer(text)
             if not m.group(0).startswith('static')}
    pattern = re.compile(r'\b(%s)\b' % '|'.join(sorted(names)))
    return ('/* The build for x86-64-v%d (render.gemm_variant): its functions end in _v%d. */\n'
            % (level, level) + pattern.sub(r'\1_v%d' % level, text))



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
           max_batch: MaxBatch | None = None, buckets=()) -> Rendered:
    """The files of ``lowered`` with the memory of ``arena``, the constants
    embedded as literals (``weights_mode`` 'embed') or in a weights file
    ('file'): NAME.h, NAME.c, NAME_weights.c, main.c, the Makefile and the
    kernels' sources, every ``ccn_*`` symbol renamed ``NAME_ccn_*``; with
    ``max_batch``, NAME_run_n too, running chunks of samples on the
    ``buckets``, (size, Lowered, ArenaPlan) of the model at other batch
    sizes, which share the weights (emit_c)."""
    return _Renderer(lowered, arena, weights_mode, max_batch, buckets).render()


class _Renderer:
    """Renders one model's files (render)."""

    def __init__(self, lowered: Lowered, arena: ArenaPlan, weights_mode: str,
                 max_batch: MaxBatch | None = None, buckets=()):
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
        self.placed, self.donated = arena.placed, arena.donated
        #: the inputs C writes (not const): updated ones and donated ones
        self.writable = set(arena.updated_inputs) | set(arena.donated_inputs)
        self.layout: WeightsLayout | None = None
        self.max_batch = max_batch
        self.buckets = buckets
        #: NAME_run_n's arena: the largest of the one-sample and buckets' ones
        self.batch_arena_bytes = max([self.arena_bytes] + [a.arena_bytes for _, _, a in buckets])

    def nbytes(self, r: int) -> int:
        return self.lowered.nbytes(r)

    def weight(self, r: int) -> str:
        """The C name of constant ``r``."""
        return array_name(self.weights, self.name, 'w%d' % r, self.consts[r])

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
        for family, level in _level_builds(families):
            texts['ccn_%s_v%d.c' % (family, level)] = gemm_variant(texts['ccn_%s.c' % family],
                                                                   level)
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
        ins = ['%s%s *in_%d' % ('' if k in self.writable else 'const ',
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
                      '#define %s_STATUS_BATCH %d' % (up, self._batch_status()),
                      '/* Out of memory for the copies of one sample (_run_n). */',
                      '#define %s_STATUS_MEMORY %d' % (up, self._batch_status() + 1),
                      '/* The axis of the batch in each input and output. */',
                      '#define %s_INPUT_BATCH_AXES %s' % (up, clist(self.max_batch.input_axes)),
                      '#define %s_OUTPUT_BATCH_AXES %s' % (up, clist(self.max_batch.output_axes)),
                      '/* The sizes of the chunks %s_run_n runs (a program each), and the' % n,
                      ' * arena they share. */',
                      '#define %s_BATCH_SIZES %s' % (up, clist(
                          [1] + [size for size, _, _ in self.buckets])),
                      '#define %s_BATCH_ARENA_BYTES %dUL' % (up, self.batch_arena_bytes),
                      '']
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
                  ' * 256).  One count for the whole library, from the next run on.',
                  ' * %s_set_threads fixes it; with %s_set_most_threads, each run' % (n, n),
                  ' * function runs on threads, threads / 2, ... or 1, whichever its runs',
                  ' * have been fastest on lately (fewer can be faster beside a busy',
                  ' * process).  The default is the latter, with one thread per CPU this',
                  ' * process may use.  Each returns 0, or -1 for a count out of range',
                  ' * (the count is then unchanged). */',
                  '%s_API int %s_set_threads(int threads);' % (up, n),
                  '%s_API int %s_set_most_threads(int threads);' % (up, n), '',
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
        if self.donated:
            text.append('The model overwrites inputs %s after their last read with values it '
                        'computes (they are donated, not const): pass arrays you give up.'
                        % ', '.join(str(k) for k in sorted(self.writable
                                                           - set(self.updated_inputs))))
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
                'shapes below are those of one sample, the batch axis of every input and '
                'output (%s_INPUT_BATCH_AXES, %s_OUTPUT_BATCH_AXES) being 1. %s_run_n(%sn, '
                '...) and %s_run_n_v(%sn, in, out) take n samples, 1 to %s_MAX_BATCH (%d), of '
                'every input and output in C order with n on that axis (an input of one-sample '
                'shape (T, 1, I) is (T, n, I)), and run them in chunks of %s_BATCH_SIZES '
                'samples, the largest that fits first (by 1, 2, 4 and 8: 13 samples as 8, 4 '
                'and 1), each size a program emitted for it: the results equal the batched '
                'model\'s because emit-c checked that no instruction mixes samples (no batch '
                'statistics, no reduction, '
                'concatenation or reshape across the batch axis). A chunk of an input or '
                'output with axes of more than one element before its batch axis is copied to '
                'or from contiguous memory, allocated by each call (%s_STATUS_MEMORY when '
                'that fails). Another n '
                'returns %s_STATUS_BATCH (%d) before anything is read. The chunks share one '
                'arena of %s_BATCH_ARENA_BYTES (%s); %s_ARENA_BYTES is the one-sample '
                "program's, for %s_run_arena."
                % (m.maximum, up, up, up, n, model, n, model, up, m.maximum, up, up, up,
                   self._batch_status(), up,
                   'static: not reentrant' if self.layout is None else "the model's", up, n))
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
                    ' *                      caller owns (8-byte aligned, 64 runs fastest;',
                    ' *                      one per thread);',
                    ' *   %s_run_v(in, out)  takes arrays of input and output pointers.' % n,
                    ' * Each returns 0 on success and 1 when a pointer is NULL.']
        return [' * The weights are in %s (%s_WEIGHTS_FILE):' % (weights_file(self.name), up),
                ' *   %s_create(path, error, size)  loads them and allocates an arena;' % n,
                ' *       NULL on failure, with a one-line message in error;',
                ' *   %s_run(model, ...)            runs (one thread per model at a time);' % n,
                ' *   %s_run_v(model, in, out)      takes arrays of input and output' % n,
                ' *                                 pointers;',
                ' *   %s_destroy(model)             frees both;' % n,
                ' *   %s_run_arena(arena, weights, ...)  runs on memory the caller owns:' % n,
                ' *       an arena of %s_ARENA_BYTES and the weights block of' % up,
                ' *       %s_WEIGHTS_BYTES (the file after its 32-byte header), both' % up,
                ' *       8-byte aligned (64, as %s_create\'s, runs fastest).' % n,
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
                '#define %s_WEIGHTS_FILE "%s"' % (up, weights_file(self.name)),
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
        """The definitions of _batch_declarations: the samples in chunks, the
        largest bucket that fits first, each run by its bucket's function
        (NAME_run_arena for one sample) on NAME_run_n's arena; a chunk of an
        input or output with axes of more than one element before its batch
        axis is copied to or from contiguous memory (staged)."""
        if self.max_batch is None:
            return []
        n, up = self.name, self.name.upper()
        sizes = sorted(size for size, _, _ in self.buckets)
        largest = max([1] + sizes)
        memory = ['arena'] + ([] if self.layout is None else ['weights'])
        values = [('in', k, v, axis) for k, (v, axis) in
                  enumerate(zip(self.p.inputs, self.max_batch.input_axes))]
        values += [('out', k, v, axis) for k, (v, axis) in
                   enumerate(zip(self.p.outputs, self.max_batch.output_axes))]
        rows: list[str] = []
        staging: list[str] = []
        gathers: list[str] = []
        scatters: list[str] = []
        offset = 0
        for kind, k, v, axis in values:
            shape = self.shapes[v.register]
            outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
            if outer == 1:  # each chunk one block: no copy
                rows.append('%s_%d + k * %d' % (kind, k, inner))
                continue
            ctype, name = self._ctype(v.register), '%s_%d' % (kind, k)
            rows.append(name + '_k')
            staging.append('    %s *const %s_k = (%s *)(staging + %d);'
                           % (ctype, name, ctype, offset))
            offset += aligned(self.nbytes(v.register) * largest)
            # Samples k to k + c - 1 of each of the `outer` blocks of n * inner
            # elements: one block of c * inner in the chunk.
            sample, batch = '%s_k + o * c * %d' % (name, inner), '%s + (o * n + k) * %d' % (
                name, inner)
            dst, src = (sample, batch) if kind == 'in' else (batch, sample)
            (gathers if kind == 'in' else scatters).extend([
                '        for (long o = 0; o < %d; o++)  /* %sput %d */' % (outer, kind, k),
                '            memcpy(%s, %s, (size_t)c * %d);' % (
                    dst, src, inner * numpy.dtype(self.dtypes[v.register]).itemsize)])
        null_checks = ['!%s' % a for a in self._args().split(', ') if a]
        run_n, run_n_v = self._batch_declarations()
        args = ', '.join(memory + rows)
        chunk = ''.join('n - k >= %d ? %d : ' % (size, size) for size in reversed(sizes)) + '1'
        runs = [line for size in reversed(sizes) for line in (
            '        case %d:' % size, '            status = %s_run_b%d(%s);' % (n, size, args),
            '            break;')]
        if self.layout is None:
            prologue = ['    void *const arena = %s;' % _at_a_line('batch_arena')]
            storage = ['/* %s_run_n\'s arena (static: not reentrant, like %s_run). */' % (n, n),
                       'static double batch_arena[%d];'
                       % _line_padded_doubles(self.batch_arena_bytes),
                       '']
        else:
            prologue = ['    void *arena;', '    const void *weights;',
                        '    %s_model_memory(model, &arena, &weights);' % n]
            storage = ['/* The arena and weights of a model (%s_weights.c). */' % n,
                       'void %s_model_memory(%s_model *model, void **arena, const void **weights);'
                       % (n, n), '']
        if staging:
            prologue += ['    unsigned char *const staging = malloc(%d);' % offset,
                         '    if (!staging)', '        return %s_STATUS_MEMORY;' % up, *staging]
        loop = prologue + [
            '    int status = 0;',
            '    for (long k = 0, c; k < n && status == 0; k += c) {',
            '        c = %s;  /* the largest bucket that fits */' % chunk, *gathers,
            '        switch (c) {', *runs,
            '        default:',
            '            status = %s_run_arena(%s);' % (n, args),
            '        }'] + (['        if (status == 0)'] + ['    ' + line for line in scatters]
                           if scatters else []) + [
            '    }'] + (['    free(staging);'] if staging else []) + ['    return status;']
        model = [] if self.layout is None else ['model']
        checks = ['!' + a for a in model] + null_checks
        return (['#include <stdlib.h>  /* malloc: the staged samples */',
                 '#include <string.h>', ''] if staging else []) + storage + [
                run_n[:-1], '{',
                '    /* The count first: a refused call reads nothing. */',
                '    if (n < 1 || n > %s_MAX_BATCH)' % up,
                '        return %s_STATUS_BATCH;' % up] + (
            ['    if (%s)' % ' || '.join(checks), '        return 1;'] if checks else []
        ) + loop + ['}', '',
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

    def _body(self) -> tuple[list[str], list[str]]:
        """(declarations of the arena's values, instructions) of
        NAME_run_arena's body; rendering them requests the weights."""
        p = self.p
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
        # A donated input's memory holds values after its last read (plan).
        places = sorted([('arena', self.offsets[b.key], b) for b in self.buffers]
                        + [('(unsigned char *)in_%d' % k, off, b) for b, k, off in self.donated],
                        key=lambda t: (t[0] != 'arena', t[0], t[1]))
        for base, off, b in places:
            if isinstance(b.key, tuple):
                decls.append('    float *const s%d = (float *)(%s + %d);  /* scratch of '
                             'instruction %d, bytes [%d, %d) */' % (b.key[1], base, off, b.key[1],
                                                                     off, off + b.nbytes))
            else:
                reg = b.key
                assert isinstance(reg, int)
                ctype = self._ctype(reg)
                decls.append('    %s *const t%d = (%s *)(%s + %d);  /* %%%d %s, bytes [%d, %d), '
                             'live %d..%d */' % (ctype, reg, ctype, base, off, reg,
                                                 shape_text(self.dtypes[reg], self.shapes[reg]),
                                                 off, off + b.nbytes, b.start, b.end))
        return decls, body

    def _bucket_bodies(self) -> list[tuple[int, list[str], list[str]]]:
        """(size, declarations, instructions) of each bucket's run function
        (_body of its model), its weights those of this model where equal
        (NAME_<suffix>_b<size> added where new)."""
        seen = {_content(a): w for w, a in self.weights.items()}
        bodies = []
        for size, lowered, arena in self.buckets:
            sub = _Renderer(lowered, arena, self.weights_mode)
            decls, body = sub._body()
            names = {}
            for w, a in sub.weights.items():
                key = _content(a)
                if key not in seen:
                    seen[key] = '%s_%s_b%d' % (self.name, w[len(sub.name) + 1:], size)
                    self.weights[seen[key]] = a
                names[w] = seen[key]
            if names:
                pattern = re.compile(r'\b(%s)\b' % '|'.join(map(re.escape, names)))
                body = [pattern.sub(partial(_renamed, names), line) for line in body]
            bodies.append((size, decls, body))
        return bodies

    def _arena_function(self, name: str, params: list[str], checks: list[str],
                        decls: list[str], body: list[str], static: bool = False) -> list[str]:
        """The C function ``name`` of ``params`` (NAME_run_arena's) that
        returns 1 when one of ``checks`` holds, else runs ``body`` on the
        values of ``decls`` (after the weights', in a weights file) on the
        thread count its runs have been fastest on (ccn_run_start)."""
        if self.layout is not None:
            text = '\n'.join(body)
            decls = ['    const unsigned char *const weights = '
                     '(const unsigned char *)weights_memory;'] + [
                '    const %s *const %s = (const %s *)(weights + %d);' % (
                    C_TYPES[a.dtype.name], w, C_TYPES[a.dtype.name], self.layout.offsets[w])
                for w, a in sorted(self.weights.items()) if w in text] + decls
        args = ', '.join(re.split(r'[ *]', q)[-1] for q in params)
        return ['static int %s_instructions(%s)' % (name, ', '.join(params)), '{',
                '    unsigned char *const arena = (unsigned char *)arena_memory;',
                '    (void)arena;'] + decls + ['    PROFILE_MARK(0);'] + body + [
                    '    return 0;', '}', '',
                '%sint %s(%s)' % ('static ' if static else '', name, ', '.join(params)), '{',
                '    static ccn_run_tuner tuner; /* its runs\' times on each thread count */'
                ] + (['    if (%s)' % ' || '.join(checks), '        return 1;'] if checks else []
                     ) + ['    const ccn_run run = ccn_run_start(&tuner);',
                          '    const int status = %s_instructions(%s);' % (name, args),
                          '    ccn_run_finish(run, status);', '    return status;', '}', '']

    def _model_c(self) -> str:
        n, up, p = self.name, self.name.upper(), self.p
        decls, body = self._body()
        buckets = self._bucket_bodies()
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
        checks = ['(!arena_memory && %s_ARENA_BYTES)' % up] + null_checks
        if self.weights_mode == 'file':
            params.insert(1, 'const void *weights_memory')
            checks.insert(1, '(!weights_memory && %s_WEIGHTS_BYTES)' % up)
            self.layout = layout(self.weights)
        lines += self._arena_function('%s_run_arena' % n, params, checks, decls, body)
        # The buckets: NAME_run_n checked the pointers.
        for size, bucket_decls, bucket_body in buckets:
            lines += self._arena_function('%s_run_b%d' % (n, size), params, [], bucket_decls,
                                          bucket_body, static=True)
        if self.weights_mode == 'embed':
            lines += ['int %s_run(%s)' % (n, self._params()), '{',
                      '    /* Static storage: no allocation per run, but not reentrant. */',
                      '    static double storage[%d];' % _line_padded_doubles(self.arena_bytes),
                      '    return %s_run_arena(%s%s);' % (
                          n, _at_a_line('storage'),
                          ''.join(', ' + a for a in self._args().split(', ') if a)),
                      '}', '']
            lines += ['int %s_run_v(const void *const *inputs, void *const *outputs)' % n, '{',
                      '    (void)inputs;', '    (void)outputs;',
                      '    return %s_run(%s);' % (n, self._vector_call()), '}', '']
        lines += self._batch_c()
        lines += ['int %s_set_threads(int threads)' % n, '{',
                  '    return ccn_set_threads(threads);', '}', '',
                  'int %s_set_most_threads(int threads)' % n, '{',
                  '    return ccn_set_most_threads(threads);', '}', '']
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
                  for i, _, ins, outs in profiled(self.lowered)]
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
                % self.max_batch.maximum,
                '    case %s_STATUS_MEMORY:' % self.name.upper(),
                '        return "out of memory for the copies of one sample";']
               if self.max_batch is not None else []) + [
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
        return ', '.join(['(%s%s *)inputs[%d]' % ('' if k in self.writable else 'const ',
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
        # NAME_run_n's buckets run on the model's arena, sized for the largest.
        arena = '%s_%sARENA_BYTES' % (up, '' if self.max_batch is None else 'BATCH_')
        memory = [] if self.max_batch is None else [
            'void %s_model_memory(%s_model *model, void **arena, const void **weights);'
            % (n, n),
            'void %s_model_memory(%s_model *model, void **arena, const void **weights)' % (n, n),
            '{', '    *arena = model->arena;', '    *weights = model->weights;', '}', '']
        return '\n'.join([
            '/* %s_weights.c: model %s with its weights loaded from %s,' % (
                n, n, weights_file(self.name)),
            ' * generated by chainer-compiler emit-c. */',
            '#include <stdio.h>', '#include <stdlib.h>', '',
            '#include "ccn_weights.h"', '#include "%s.h"' % n, '',
            '/* FNV-1a of the weights\' names, dtypes, shapes and offsets: a file',
            ' * written for another model is refused. */',
            '#define %s_WEIGHTS_FINGERPRINT UINT64_C(0x%016x)' % (up, self.layout.fingerprint),
            '',
            'struct %s_model {' % n,
            '    void *weights, *arena;  /* at 64-byte lines, inside: */',
            '    void *weights_block, *arena_block;  /* what free() takes */',
            '};', '',
            '%s_model *%s_create(const char *weights_path, char *error, size_t error_size)'
            % (n, n), '{',
            '    %s_model *model = calloc(1, sizeof *model);' % n,
            '    if (!model || !(model->arena = ccn_alloc_lines(%s, &model->arena_block))) {'
            % arena,
            '        snprintf(error, error_size, "out of memory: model %s needs an arena of %%lu '
            'bytes", (unsigned long)%s);' % (n, arena),
            '        free(model);',
            '        return NULL;',
            '    }',
            '    model->weights = ccn_load_weights(weights_path, %s_WEIGHTS_FINGERPRINT,' % up,
            '                                      %s_WEIGHTS_BYTES, &model->weights_block,' % up,
            '                                      error, error_size);',
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
            *memory,
            'void %s_destroy(%s_model *model)' % (n, n), '{',
            '    if (!model)',
            '        return;',
            '    free(model->weights_block);',
            '    free(model->arena_block);',
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
                'OBJS += %s' % ' '.join('ccn_%s_v%d.o' % b for b in _level_builds(families)),
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
            ] + [line for f, v in _level_builds(families) for line in (
                'ccn_%s_v%d.o: ccn_%s_v%d.c %s' % (f, v, f, v, ' '.join(headers)),
                '\t$(CC) $(ALL_CFLAGS) -UCCN_GEMM_VARIANTS -march=x86-64-v%d -c -o $@ $<' % v,
                '')] + [
            'clean:',
            '\trm -f *.o %s lib%s.so lib%s.a' % (n, n, n),
            '',
            '.PHONY: all clean',
            ''])


def _level_builds(families: list[str]) -> list[tuple[str, int]]:
    """(family, level) of each build of a LEVEL_FAMILIES file for one of
    GEMM_LEVELS among ``families`` (none without the products, whose file
    tells the level: ccn_gemm_level)."""
    return [(f, v) for f in LEVEL_FAMILIES if f in families and 'gemm' in families
            for v in GEMM_LEVELS]


def _renamed(names: dict[str, str], match: re.Match) -> str:
    """The new name of the identifier ``match`` found (_bucket_bodies)."""
    return names[match.group(1)]


def _content(array: numpy.ndarray) -> tuple:
    """A key equal for arrays of equal dtype, shape and elements."""
    return array.dtype.str, array.shape, hashlib.sha256(
        numpy.ascontiguousarray(array).tobytes()).hexdigest()


def weights_file(name: str) -> str:
    """The weights file of model ``name`` (weights='file')."""
    return '%s_weights.bin' % name


def profiled(lowered: Lowered) -> list[tuple[int, Instruction, list[str], list[str]]]:
    """EmitResult.profiled: (index, instruction, inputs, outputs) of each
    instruction that runs, its values described as the Tracer describes them."""
    def described(regs) -> list[str]:
        return ['%s%s' % (lowered.dtypes[r], list(lowered.shapes[r])) if r in lowered.shapes
                else 'none' for r in regs]
    return [(i, inst, described(inst.inputs), described(inst.outputs))
            for i, (inst, step) in enumerate(zip(lowered.program.instructions, lowered.steps))
            if step is not None]

