"""Turn a Program into straight-line C (the native backend's emitter).

The Program's shapes must all be static: the inputs' from their ValueInfos,
the constants' from their arrays, every other one propagated here op by op.
Each instruction becomes one call (or a few) into the kernels under
``kernels/`` with its shapes as literal constants; every intermediate value
and every kernel's scratch space sits at an offset of one arena planned from
liveness (arena.py).  Reshape-like instructions share their input's memory
instead of copying it.

Anything the kernels cannot do is refused before a file is written, with
one error listing every offending instruction; there is no fallback.
"""
import math
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy

from ..errors import RuntimeVMError
from ..ops.connection import window_geometry
from ..ops.opset_rules import batch_norm_trains, softmax_axes
from ..ops.registry import CUSTOM_DOMAIN
from ..program import NO_REGISTER, Instruction, Program
from .arena import Buffer, aligned, plan_arena

KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'kernels')
#: Kernel header every generated file includes.
KERNEL_HEADER = 'ccn_kernels.h'
#: Highest rank the broadcasting kernel handles (CCN_MAX_RANK in C).
MAX_RANK = 8

Shape = tuple[int, ...]
#: (C expression of a register's pointer, C expression of the scratch) -> lines
Render = Callable[[Callable[[int], str], str], list[str]]


class NativeEmitError(RuntimeVMError):
    """The Program cannot become C: a value without a static shape or of a
    dtype other than float32, or a bad model name."""


class UnsupportedNativeOpsError(NativeEmitError):
    """Instructions the C kernels cannot run; ``problems`` lists
    (instruction index, description, reason) for every one of them."""

    def __init__(self, problems: list[tuple[int, str, str]]):
        self.problems = problems
        super().__init__('cannot emit C for %d instruction(s):\n%s' % (
            len(problems), '\n'.join('  %s: %s' % (d, r) for _, d, r in problems)))


class _Refuse(Exception):
    """One instruction the kernels cannot run; the message says why."""


class _Unknown(Exception):
    """An input's shape is unknown because an earlier instruction was
    refused: not a problem of this instruction, which is left out."""


@dataclass
class _Step:
    """How one instruction becomes C.  ``shapes`` has one entry per output
    (None for an optional output left uncomputed); ``alias`` means output 0
    shares input 0's memory; ``scratch`` is in floats."""
    family: str
    shapes: list[Shape | None]
    render: Render
    scratch: int = 0
    alias: bool = False
    #: other kernel families the rendering calls into
    also: tuple[str, ...] = ()


@dataclass
class EmitResult:
    """What emit_c wrote: the files (paths), the arena's size in bytes, the
    sum of the (aligned) sizes of the buffers it holds, each buffer's
    (register or ('scratch', instruction), offset, bytes, first, last
    instruction), and the static shape of each output."""
    directory: str
    files: list[str]
    arena_bytes: int
    intermediate_bytes: int
    buffers: list[tuple[Any, int, int, int, int]] = field(default_factory=list)
    output_shapes: list[Shape] = field(default_factory=list)


def emit_c(program: Program, directory: str | os.PathLike, name: str = 'model') -> EmitResult:
    """Write the C sources, kernels and Makefile of ``program`` into
    ``directory`` (created if missing) under the model name ``name`` (a C
    identifier).  Raises NativeEmitError before writing anything when the
    Program cannot be compiled to C."""
    if not re.fullmatch(r'[A-Za-z_][A-Za-z0-9_]*', name) or name == 'main' \
            or name.startswith('ccn_'):
        raise NativeEmitError("model name %r must be a C identifier other than 'main' "
                              "not starting with 'ccn_'" % name)
    return _Emitter(program, name).write(os.fspath(directory))


# -- formatting ------------------------------------------------------------------

def _cfloat(value: float) -> str:
    """An exact float32 C literal."""
    v = float(numpy.float32(value))
    if math.isnan(v):
        return 'NAN'
    if math.isinf(v):
        return 'INFINITY' if v > 0 else '-INFINITY'
    text = '%.9g' % v
    if '.' not in text and 'e' not in text:
        text += '.0'
    return text + 'f'


def _cstring(text: str) -> str:
    """``text`` as a C string literal (UTF-8, anything unusual escaped)."""
    out = []
    for byte in text.encode('utf-8'):
        ch = chr(byte)
        if ch in '"\\?':  # '?' avoids trigraphs
            out.append('\\' + ch)
        elif 32 <= byte < 127:
            out.append(ch)
        else:
            out.append('\\%03o' % byte)
    return '"%s"' % ''.join(out)


def _comment(text: str) -> str:
    """``text`` made safe inside a C block comment on one line."""
    return re.sub(r'[^\x20-\x7e]', '?', text).replace('*/', '* /').replace('/*', '/ *')


def _shape_text(shape: Shape) -> str:
    return 'float32[%s]' % ', '.join(str(d) for d in shape)


def _clist(values) -> str:
    """A C initializer list; C has no empty arrays, so () gives {0}."""
    return '{%s}' % (', '.join(str(int(v)) for v in values) or '0')


# -- the emitter -----------------------------------------------------------------

class _Emitter:
    def __init__(self, program: Program, name: str):
        self.p = program
        self.name = name
        self.shapes: dict[int, Shape] = {}
        self.consts = {r: numpy.asarray(v) for r, v in program.constants.items()}
        #: C name -> float32 array for NAME_weights.c
        self.weights: dict[str, numpy.ndarray] = {}
        self.input_of: dict[int, int] = {}
        for k, v in enumerate(program.inputs):
            self._check_input(v)
            self.input_of.setdefault(v.register, k)
            self.shapes[v.register] = tuple(d for d in v.shape or () if isinstance(d, int))
        for r, a in self.consts.items():
            self.shapes[r] = tuple(a.shape)
        self.steps: list[_Step | None] = []
        problems = []
        for i, inst in enumerate(program.instructions):
            try:
                step = self._lower(inst)
            except _Refuse as e:
                problems.append((i, program.describe_instruction(i), str(e)))
                step = None
            except _Unknown:
                step = None
            self.steps.append(step)
            if step is not None:
                for r, s in zip(inst.outputs, step.shapes):
                    if s is not None and r != NO_REGISTER:
                        self.shapes[r] = s
        if problems:
            raise UnsupportedNativeOpsError(problems)
        self._check_outputs()

    # -- checks ----------------------------------------------------------------
    def _check_input(self, v):
        if v.kind != 'tensor' or v.dtype != 'float32':
            raise NativeEmitError("input '%s' is a %s, not a float32 tensor; the C backend "
                                  'handles float32 only' % (v.name, v.dtype or v.kind))
        if v.shape is None or not all(isinstance(d, int) and d >= 0 for d in v.shape):
            raise NativeEmitError("input '%s' has shape %s, not a static one; the C backend "
                                  'needs every shape fixed (export with concrete input shapes)'
                                  % (v.name, None if v.shape is None else list(v.shape)))
        if len(v.shape) > MAX_RANK:
            raise NativeEmitError("input '%s' has rank %d; at most %d is supported"
                                  % (v.name, len(v.shape), MAX_RANK))

    def _check_outputs(self):
        for v in self.p.outputs:
            r = v.register
            if r in self.consts and self.consts[r].dtype != numpy.float32:
                raise NativeEmitError("output '%s' is %s, not float32" % (v.name,
                                                                          self.consts[r].dtype))
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

    def _shape(self, inst: Instruction, k: int) -> Shape:
        """Shape of float32 input ``k`` of ``inst``."""
        if k >= len(inst.inputs) or inst.inputs[k] == NO_REGISTER:
            raise _Refuse('input %d is missing' % k)
        r = inst.inputs[k]
        if r in self.consts and self.consts[r].dtype != numpy.float32:
            raise _Refuse('input %d (%s) is %s; only float32 is supported'
                          % (k, self.p.register_name(r), self.consts[r].dtype))
        if r not in self.shapes:
            raise _Unknown()
        return self.shapes[r]

    def _has(self, inst: Instruction, k: int) -> bool:
        return k < len(inst.inputs) and inst.inputs[k] != NO_REGISTER

    def _used(self, r: int) -> bool:
        """Whether register ``r`` is read by an instruction or is an output."""
        if r == NO_REGISTER:
            return False
        return any(r in inst.inputs for inst in self.p.instructions) or \
            any(v.register == r for v in self.p.outputs)

    def _only_first_output(self, inst: Instruction, what: str):
        for r in inst.outputs[1:]:
            if self._used(r):
                raise _Refuse('its %s output is used; only the first output is supported'
                              % what)

    def weight(self, r: int, transposed: bool = False) -> str:
        """The C name of constant ``r`` (transposed: its 2-D transpose,
        made at emit time so Gemm reads B row by row)."""
        key = '%s_w%d%s' % (self.name, r, '_T' if transposed else '')
        if key not in self.weights:
            a = self.consts[r].astype(numpy.float32)
            self.weights[key] = numpy.ascontiguousarray(a.T if transposed else a)
        return key

    # -- lowering ------------------------------------------------------------
    def _lower(self, inst: Instruction) -> _Step:
        if inst.domain == CUSTOM_DOMAIN and inst.op == 'FusedGemm':
            return self._gemm(inst, fused=True)
        if inst.domain not in ('', 'ai.onnx'):
            raise _Refuse('no C kernel for operator %s' % inst.qualified_op)
        handler = _HANDLERS.get(inst.op)
        if handler is None:
            raise _Refuse('no C kernel for operator %s' % inst.op)
        if any(isinstance(v, Program) for v in inst.attrs.values()):
            raise _Refuse('sub-programs are not supported')
        return handler(self, inst)

    def _gemm(self, inst: Instruction, fused: bool = False) -> _Step:
        a = inst.attrs
        if fused and a.get('activation') != 'Relu':
            raise _Refuse("FusedGemm activation %r is not 'Relu'" % a.get('activation'))
        sa, sb = self._shape(inst, 0), self._shape(inst, 1)
        if len(sa) != 2 or len(sb) != 2:
            raise _Refuse('Gemm needs 2-D A and B, got %s and %s' % (list(sa), list(sb)))
        trans_a, trans_b = int(a.get('transA', 0)), int(a.get('transB', 0))
        alpha, beta = float(a.get('alpha', 1.0)), float(a.get('beta', 1.0))
        M, K = (sa[1], sa[0]) if trans_a else sa
        Kb, N = (sb[1], sb[0]) if trans_b else sb
        if K != Kb:
            raise _Refuse('Gemm inner sizes differ: %s x %s' % (list(sa), list(sb)))
        bias_rs = bias_cs = 0
        if self._has(inst, 2):
            sc = self._shape(inst, 2)
            padded = (1,) * (2 - len(sc)) + sc if len(sc) <= 2 else None
            if padded is None or padded[0] not in (1, M) or padded[1] not in (1, N):
                raise _Refuse('Gemm bias of shape %s does not broadcast to %s'
                              % (list(sc), [M, N]))
            bias_cs = 1 if padded[1] != 1 else 0
            bias_rs = padded[1] if padded[0] != 1 else 0
        return self._product(inst, (M, N), M, N, K, 1 if trans_a else K, M if trans_a else 1,
                             trans_b, alpha, beta, fused, bias_rs, bias_cs)

    def _product(self, inst, out_shape, M, N, K, a_rs, a_cs, trans_b, alpha, beta, relu,
                 bias_rs=0, bias_cs=0) -> _Step:
        """Gemm and MatMul: B goes to the kernel as row-major K x N, from a
        pre-transposed constant or transposed into scratch at run time."""
        b_reg = inst.inputs[1]
        b_const = b_reg in self.consts
        b_name = self.weight(b_reg, transposed=bool(trans_b)) if b_const else None
        has_bias = self._has(inst, 2)

        def render(ref, scratch):
            y = ref(inst.outputs[0])
            lines = []
            b = b_name or ref(b_reg)
            if trans_b and not b_const:
                lines.append('ccn_transpose(%d, %d, %s, %s);' % (N, K, ref(b_reg), scratch))
                b = scratch
            lines.append('ccn_gemm_init(%d, %d, %s, %s, %d, %d, %s);' % (
                M, N, y, ref(inst.inputs[2]) if has_bias else 'NULL', bias_rs, bias_cs,
                _cfloat(beta)))
            lines.append('ccn_gemm(%d, %d, %d, %s, %d, %d, %s, %s, %s);' % (
                M, N, K, ref(inst.inputs[0]), a_rs, a_cs, b, _cfloat(alpha), y))
            if relu:
                lines.append('ccn_relu(%d, %s, %s);' % (M * N, y, y))
            return lines
        scratch = K * N if trans_b and not b_const else 0
        return _Step('connection', [out_shape], render, scratch=scratch,
                     also=('activation',) if relu else ())

    def _matmul(self, inst: Instruction) -> _Step:
        sa, sb = self._shape(inst, 0), self._shape(inst, 1)
        if len(sa) < 2 or len(sb) != 2 or sa[-1] != sb[0]:
            raise _Refuse('MatMul supports (..., M, K) x (K, N) only, got %s x %s'
                          % (list(sa), list(sb)))
        M, K, N = math.prod(sa[:-1]), sa[-1], sb[1]
        return self._product(inst, sa[:-1] + (N,), M, N, K, K, 1, 0, 1.0, 0.0, False)

    def _conv(self, inst: Instruction) -> _Step:
        a = inst.attrs
        sx, sw = self._shape(inst, 0), self._shape(inst, 1)
        if len(sx) != 4 or len(sw) != 4:
            raise _Refuse('only 2-D convolution (4-D input and weight) is supported, got '
                          '%s and %s' % (list(sx), list(sw)))
        N, C, H, W = sx
        M, Cg, KH, KW = sw
        group = int(a.get('group', 1))
        if a.get('kernel_shape') is not None and tuple(a['kernel_shape']) != (KH, KW):
            raise _Refuse('kernel_shape %s differs from the weight' % list(a['kernel_shape']))
        if group < 1 or C % group or M % group or Cg * group != C:
            raise _Refuse('group=%d does not fit input %s and weight %s'
                          % (group, list(sx), list(sw)))
        if self._has(inst, 2) and self._shape(inst, 2) != (M,):
            raise _Refuse('bias shape %s is not (%d,)' % (list(self._shape(inst, 2)), M))
        win = self._window(a, (H, W), (KH, KW))
        OH, OW = win.out
        direct = (KH, KW, OH, OW) == (1, 1, H, W) and win.strides == (1, 1) \
            and win.pads_begin == (0, 0)
        has_bias = self._has(inst, 2)

        def render(ref, scratch):
            return ['ccn_conv2d(%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d,'
                    % (N, C, H, W, M, KH, KW, OH, OW, group, win.strides[0], win.strides[1],
                       win.dilations[0], win.dilations[1], win.pads_begin[0],
                       win.pads_begin[1]),
                    '           %s, %s, %s, %s, %s);' % (
                        ref(inst.inputs[0]), ref(inst.inputs[1]),
                        ref(inst.inputs[2]) if has_bias else 'NULL', ref(inst.outputs[0]),
                        'NULL' if direct else scratch)]
        return _Step('connection', [(N, M, OH, OW)], render,
                     scratch=0 if direct else Cg * KH * KW * OH * OW)

    def _window(self, a, spatial, kernel, ceil_mode=0):
        try:
            return window_geometry(spatial, kernel, a.get('strides'), a.get('dilations'),
                                   a.get('pads'), a.get('auto_pad', 'NOTSET'), ceil_mode)
        except (ValueError, IndexError, TypeError) as e:
            raise _Refuse(str(e)) from None

    def _pool(self, inst: Instruction) -> _Step:
        a = inst.attrs
        sx = self._shape(inst, 0)
        if len(sx) != 4:
            raise _Refuse('only 2-D pooling (4-D input) is supported, got %s' % list(sx))
        kernel = tuple(a.get('kernel_shape') or ())
        if len(kernel) != 2:
            raise _Refuse('kernel_shape %s is not 2-D' % list(kernel))
        N, C, H, W = sx
        win = self._window(a, (H, W), kernel, int(a.get('ceil_mode', 0)))
        (OH, OW), (KH, KW), (sh, sw) = win.out, win.kernel, win.strides
        pt, pl = win.pads_begin
        if inst.op == 'MaxPool':
            self._only_first_output(inst, 'Indices')
            dh, dw = win.dilations

            def render(ref, scratch):
                return ['ccn_maxpool2d(%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, '
                        '%s, %s);' % (N * C, H, W, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl,
                                      ref(inst.inputs[0]), ref(inst.outputs[0]))]
        else:
            if win.dilations != (1, 1):
                raise _Refuse('AveragePool with dilations is not supported')
            pb, pr = win.pads_end
            include = int(a.get('count_include_pad', 0))

            def render(ref, scratch):
                return ['ccn_avgpool2d(%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, '
                        '%s, %s);' % (N * C, H, W, OH, OW, KH, KW, sh, sw, pt, pl, pb, pr,
                                      include, ref(inst.inputs[0]), ref(inst.outputs[0]))]
        shapes: list[Shape | None] = [(N, C, OH, OW)] + [None] * (len(inst.outputs) - 1)
        return _Step('pooling', shapes, render)

    def _global_average_pool(self, inst: Instruction) -> _Step:
        sx = self._shape(inst, 0)
        if len(sx) < 3:
            raise _Refuse('GlobalAveragePool needs a (N, C, ...) input, got %s' % list(sx))

        def render(ref, scratch):
            return ['ccn_global_avgpool(%d, %d, %s, %s);' % (
                sx[0] * sx[1], math.prod(sx[2:]), ref(inst.inputs[0]), ref(inst.outputs[0]))]
        return _Step('pooling', [sx[:2] + (1,) * (len(sx) - 2)], render)

    def _batch_norm(self, inst: Instruction) -> _Step:
        a = inst.attrs
        if batch_norm_trains(inst.version, len(inst.outputs), a.get('training_mode', 0),
                             a.get('is_test', 0)):
            raise _Refuse('training-mode BatchNormalization is not supported')
        if not a.get('spatial', 1):
            raise _Refuse('BatchNormalization with spatial=0 is not supported')
        self._only_first_output(inst, 'statistics')
        sx = self._shape(inst, 0)
        if len(sx) < 2:
            raise _Refuse('BatchNormalization needs a (N, C, ...) input')
        for k in range(1, 5):
            if self._shape(inst, k) != (sx[1],):
                raise _Refuse('input %d has shape %s, not (%d,)'
                              % (k, list(self._shape(inst, k)), sx[1]))
        eps = float(a.get('epsilon', 1e-5))

        def render(ref, scratch):
            return ['ccn_batchnorm(%d, %d, %d, %s, %s, %s, %s, %s, %s, %s);' % (
                sx[0], sx[1], math.prod(sx[2:]), _cfloat(eps),
                *(ref(r) for r in inst.inputs[:5]), ref(inst.outputs[0]))]
        return _Step('normalization', [sx] + [None] * (len(inst.outputs) - 1), render)

    def _unary(self, inst: Instruction) -> _Step:
        sx = self._shape(inst, 0)
        n = math.prod(sx)
        kernel = {'Relu': 'ccn_relu', 'Sigmoid': 'ccn_sigmoid', 'Tanh': 'ccn_tanh',
                  'LeakyRelu': 'ccn_leaky_relu'}[inst.op]
        extra = ' %s,' % _cfloat(inst.attrs.get('alpha', 0.01)) if inst.op == 'LeakyRelu' \
            else ''

        def render(ref, scratch):
            return ['%s(%d,%s %s, %s);' % (kernel, n, extra, ref(inst.inputs[0]),
                                           ref(inst.outputs[0]))]
        return _Step('activation', [sx], render)

    def _softmax(self, inst: Instruction) -> _Step:
        sx = self._shape(inst, 0)
        if not sx:
            raise _Refuse('%s of a 0-d input is not supported' % inst.op)
        axis = inst.attrs.get('axis')
        if axis is not None and not -len(sx) <= axis < len(sx):
            raise _Refuse('axis %d is out of range for rank %d' % (axis, len(sx)))
        axes = softmax_axes(inst.version, len(sx), axis)
        first, last = (axes[0], axes[-1]) if axes else (len(sx), len(sx) - 1)
        outer, length = math.prod(sx[:first]), math.prod(sx[first:last + 1])
        inner = math.prod(sx[last + 1:])
        log = int(inst.op == 'LogSoftmax')

        def render(ref, scratch):
            return ['ccn_softmax(%d, %d, %d, %d, %s, %s);' % (
                outer, length, inner, log, ref(inst.inputs[0]), ref(inst.outputs[0]))]
        return _Step('activation', [sx], render)

    def _binary(self, inst: Instruction) -> _Step:
        sa, sb = self._shape(inst, 0), self._shape(inst, 1)
        if inst.version < 7 and sa != sb:
            raise _Refuse('legacy (opset < 7) broadcasting is not supported')
        try:
            out = tuple(numpy.broadcast_shapes(sa, sb))
        except ValueError:
            raise _Refuse('shapes %s and %s do not broadcast' % (list(sa), list(sb))) from None
        if len(out) > MAX_RANK:
            raise _Refuse('rank %d is above %d' % (len(out), MAX_RANK))

        def strides(shape):
            shape = (1,) * (len(out) - len(shape)) + shape
            result, step = [], 1
            for d in reversed(shape):
                result.append(step if d != 1 else 0)
                step *= d
            return result[::-1]
        op = {'Add': 'CCN_ADD', 'Sub': 'CCN_SUB', 'Mul': 'CCN_MUL', 'Div': 'CCN_DIV'}[inst.op]
        tag = inst.outputs[0]

        def render(ref, scratch):
            return ['{',
                    '    static const long shape[] = %s, a_strides[] = %s, b_strides[] = %s;'
                    % (_clist(out), _clist(strides(sa)), _clist(strides(sb))),
                    '    ccn_binary(%s, %d, shape, %s, a_strides, %s, b_strides, %s);'
                    % (op, len(out), ref(inst.inputs[0]), ref(inst.inputs[1]), ref(tag)),
                    '}']
        return _Step('math', [out], render)

    def _reshape_like(self, inst: Instruction) -> _Step:
        sx = self._shape(inst, 0)
        a = inst.attrs
        if inst.op == 'Reshape':
            out = self._reshape_target(inst, sx)
        elif inst.op == 'Flatten':
            axis = int(a.get('axis', 1))
            if not -len(sx) <= axis <= len(sx):
                raise _Refuse('axis %d is out of range for rank %d' % (axis, len(sx)))
            axis = axis + len(sx) if axis < 0 else axis
            out = (math.prod(sx[:axis]), math.prod(sx[axis:]))
        else:
            out = sx
            if inst.op == 'Dropout':
                self._check_dropout(inst)
        if len(out) > MAX_RANK:
            raise _Refuse('rank %d is above %d' % (len(out), MAX_RANK))
        # Share the input's memory unless the result is a program output,
        # which must land in the caller's buffer.
        alias = not any(v.register == inst.outputs[0] for v in self.p.outputs)
        n = math.prod(sx)

        def render(ref, scratch):
            if alias:
                return ['/* no copy: %%%d shares the memory of %%%d */'
                        % (inst.outputs[0], inst.inputs[0])]
            return ['ccn_copy(%d, %s, %s);' % (n, ref(inst.inputs[0]), ref(inst.outputs[0]))]
        shapes: list[Shape | None] = [out] + [None] * (len(inst.outputs) - 1)
        return _Step('array', shapes, render, alias=alias)

    def _reshape_target(self, inst: Instruction, sx: Shape) -> Shape:
        if inst.version < 5:
            target = [int(d) for d in inst.attrs.get('shape', ())]
        else:
            r = inst.inputs[1] if len(inst.inputs) > 1 else NO_REGISTER
            if r not in self.consts:
                raise _Refuse('the target shape must be a constant')
            target = [int(d) for d in self.consts[r].reshape(-1)]
        allowzero = int(inst.attrs.get('allowzero', 0))
        dims = [sx[i] if d == 0 and not allowzero and i < len(sx) else d
                for i, d in enumerate(target)]
        if dims.count(-1) > 1 or any(d < -1 for d in dims):
            raise _Refuse('bad target shape %s' % target)
        if -1 in dims:
            known = math.prod(d for d in dims if d != -1)
            if known == 0 or math.prod(sx) % known:
                raise _Refuse('cannot reshape %s to %s' % (list(sx), target))
            dims[dims.index(-1)] = math.prod(sx) // known
        if math.prod(dims) != math.prod(sx):
            raise _Refuse('cannot reshape %s to %s' % (list(sx), target))
        return tuple(dims)

    def _check_dropout(self, inst: Instruction):
        self._only_first_output(inst, 'mask')
        a = inst.attrs
        if inst.version < 7 and not a.get('is_test', 0):
            raise _Refuse('training-mode Dropout (is_test=0) is not supported')
        if inst.version >= 12 and self._has(inst, 2):
            mode = self.consts.get(inst.inputs[2])
            if mode is None or bool(mode):
                raise _Refuse('Dropout with training_mode other than a constant false')

    # -- writing -----------------------------------------------------------------
    def write(self, directory: str) -> EmitResult:
        self._plan()
        os.makedirs(directory, exist_ok=True)
        families = sorted({f for s in self.steps if s is not None for f in (s.family,) + s.also}
                          | ({'array'} if self.final_copies else set()))
        sources = {
            '%s.h' % self.name: self._header(),
            '%s.c' % self.name: self._model_c(),
            '%s_weights.c' % self.name: self._weights_c(),
            'main.c': self._main_c(),
            'Makefile': self._makefile(families),
        }
        files = []
        for filename, text in sources.items():
            path = os.path.join(directory, filename)
            with open(path, 'w') as f:
                f.write(text)
            files.append(path)
        for filename in [KERNEL_HEADER] + ['ccn_%s.c' % f for f in families]:
            files.append(shutil.copyfile(os.path.join(KERNEL_DIR, filename),
                                         os.path.join(directory, filename)))
        return EmitResult(directory, files, self.arena_bytes,
                          sum(aligned(b.nbytes) for b in self.buffers),
                          [(b.key, self.offsets[b.key], b.nbytes, b.start, b.end)
                           for b in self.buffers],
                          [self.shapes[v.register] for v in self.p.outputs])

    def _plan(self):
        """Decide where every value lives: caller's input or output buffer,
        a weight, an alias of another value, or an arena offset."""
        p = self.p
        self.output_of: dict[int, int] = {}
        self.final_copies: list[tuple[int, int]] = []  # (output index, register)
        self.alias_of: dict[int, int] = {}
        produced = {}
        for i, (inst, step) in enumerate(zip(p.instructions, self.steps)):
            assert step is not None
            if step.alias:
                src = inst.inputs[0]
                self.alias_of[inst.outputs[0]] = self.alias_of.get(src, src)
            else:
                for r, s in zip(inst.outputs, step.shapes):
                    if s is not None and r != NO_REGISTER:
                        produced[r] = i
        for k, v in enumerate(p.outputs):
            if v.register in produced and v.register not in self.output_of:
                self.output_of[v.register] = k
            else:
                self.final_copies.append((k, v.register))
        last_use: dict[int, int] = {}
        for i, inst in enumerate(p.instructions):
            for r in inst.inputs:
                if r != NO_REGISTER:
                    root = self.alias_of.get(r, r)
                    last_use[root] = i
        self.buffers = []
        for r, i in produced.items():
            if r not in self.output_of:
                nbytes = 4 * math.prod(self.shapes[r])
                self.buffers.append(Buffer(r, nbytes, i, max(i, last_use.get(r, i))))
        for i, step in enumerate(self.steps):
            if step is not None and step.scratch:
                self.buffers.append(Buffer(('scratch', i), 4 * step.scratch, i, i))
        self.offsets, self.arena_bytes = plan_arena(self.buffers)

    def ref(self, r: int) -> str:
        """The C expression of register ``r``'s data."""
        r = self.alias_of.get(r, r)
        if r in self.input_of:
            return 'in_%d' % self.input_of[r]
        if r in self.consts:
            return self.weight(r)
        if r in self.output_of:
            return 'out_%d' % self.output_of[r]
        return 't%d' % r

    def _describe(self, r: int) -> str:
        name = self.p.register_names.get(r)
        for v in self.p.inputs + self.p.outputs:
            if v.register == r:
                name = v.name
        return '%%%d %s' % (r, name) if name else '%%%d' % r

    def _params(self) -> str:
        ins = ['const float *in_%d' % k for k in range(len(self.p.inputs))]
        outs = ['float *out_%d' % k for k in range(len(self.p.outputs))]
        return ', '.join(ins + outs) or 'void'

    def _args(self) -> str:
        return ', '.join(['in_%d' % k for k in range(len(self.p.inputs))]
                         + ['out_%d' % k for k in range(len(self.p.outputs))])

    def _tensor_macros(self, kind: str, values) -> list[str]:
        lines = []
        up = self.name.upper()
        for k, v in enumerate(values):
            shape = self.shapes[v.register]
            prefix = '%s_%s_%d' % (up, kind, k)
            lines += ['#define %s_NAME %s' % (prefix, _cstring(v.name)),
                      '#define %s_DTYPE "float32"' % prefix,
                      '#define %s_RANK %d' % (prefix, len(shape)),
                      '#define %s_SHAPE %s' % (prefix, _clist(shape)),
                      '#define %s_SIZE %d' % (prefix, math.prod(shape)),
                      '']
        return lines

    def _header(self) -> str:
        n, up = self.name, self.name.upper()
        ins, outs = self.p.inputs, self.p.outputs
        doc = ['/* %s.h: the C API of model %s, generated by chainer-compiler emit-c.' % (n, n),
               ' *',
               ' * Inputs and outputs are float32 arrays in C (row-major) order with',
               ' * the static shapes below; they must not overlap.',
               ' *',
               ' *   %s_run(...)        runs on a static arena (not thread-safe);' % n,
               ' *   %s_run_arena(...)  runs on an arena of %s_ARENA_BYTES bytes that the'
               % (n, up),
               ' *                      caller owns (float-aligned; one per thread);',
               ' *   %s_run_v(in, out)  takes arrays of input and output pointers.' % n,
               ' * Each returns 0 on success and 1 when a pointer is NULL.',
               ' */']
        lines = doc + ['#ifndef %s_H' % up, '#define %s_H' % up, '',
                       '#ifdef __cplusplus', 'extern "C" {', '#endif', '',
                       '#define %s_NUM_INPUTS %d' % (up, len(ins)),
                       '#define %s_NUM_OUTPUTS %d' % (up, len(outs)),
                       '/* Peak size of the intermediate values (planned at emit time). */',
                       '#define %s_ARENA_BYTES %dUL' % (up, self.arena_bytes),
                       '/* Highest rank of an input or output. */',
                       '#define %s_MAX_RANK %d' % (up, self._max_rank()), '']
        lines += self._tensor_macros('INPUT', ins) + self._tensor_macros('OUTPUT', outs)
        lines += ['typedef struct {',
                  '    const char *name;   /* the value\'s name in the graph */',
                  '    const char *dtype;  /* "float32" */',
                  '    int rank;',
                  '    long shape[%s_MAX_RANK];' % up,
                  '    long size;          /* number of elements */',
                  '} %s_tensor_info;' % n, '',
                  '/* One entry per input and output, in graph order. */',
                  'extern const %s_tensor_info %s_inputs[];' % (n, n),
                  'extern const %s_tensor_info %s_outputs[];' % (n, n), '',
                  'int %s_run(%s);' % (n, self._params()),
                  'int %s_run_arena(void *arena%s);' % (
                      n, ''.join(', ' + p for p in self._params().split(', ')
                                 if p != 'void')),
                  'int %s_run_v(const float *const *inputs, float *const *outputs);' % n, '',
                  '#ifdef __cplusplus', '}', '#endif', '#endif /* %s_H */' % up, '']
        return '\n'.join(lines)

    def _max_rank(self) -> int:
        return max([1] + [len(self.shapes[v.register]) for v in self.p.inputs + self.p.outputs])

    def _info_table(self, values) -> list[str]:
        rows = ['    {%s, "float32", %d, %s, %d},' % (
            _cstring(v.name), len(self.shapes[v.register]), _clist(self.shapes[v.register]),
            math.prod(self.shapes[v.register])) for v in values]
        return rows or ['    {"", "float32", 0, {0}, 0},']

    def _model_c(self) -> str:
        n, up, p = self.name, self.name.upper(), self.p
        body: list[str] = []
        # Rendering requests weights (and transposed weights) by name.
        for i, (inst, step) in enumerate(zip(p.instructions, self.steps)):
            assert step is not None
            ins = ', '.join('_' if r == NO_REGISTER else self._describe(r) for r in inst.inputs)
            outs = ', '.join('_' if r == NO_REGISTER else self._describe(r)
                             for r in inst.outputs)
            attrs = ', '.join('%s=%s' % (k, v) for k, v in sorted(inst.attrs.items()))
            body.append('')
            body.append('    /* %d: %s%s: %s = %s(%s)%s */' % (
                i, inst.qualified_op, " '%s'" % inst.name if inst.name else '', outs,
                inst.op, ins, ' {%s}' % attrs if attrs else ''))
            scratch = 's%d' % i if step.scratch else 'NULL'
            body += ['    ' + line for line in step.render(self.ref, scratch)]
        for k, r in self.final_copies:
            body.append('    ccn_copy(%d, %s, out_%d);  /* output %s */' % (
                math.prod(self.shapes[r]), self.ref(r), k, _comment(p.outputs[k].name)))
        decls = []
        for b in sorted(self.buffers, key=lambda b: self.offsets[b.key]):
            off = self.offsets[b.key]
            if isinstance(b.key, tuple):
                decls.append('    float *const s%d = arena + %d;  /* scratch of instruction %d, '
                             'bytes [%d, %d) */' % (b.key[1], off // 4, b.key[1], off,
                                                     off + b.nbytes))
            else:
                reg = b.key
                assert isinstance(reg, int)
                decls.append('    float *const t%d = arena + %d;  /* %s %s, bytes [%d, %d), '
                             'live %d..%d */' % (reg, off // 4, _comment(self._describe(reg)),
                                                 _shape_text(self.shapes[reg]), off,
                                                 off + b.nbytes, b.start, b.end))
        null_checks = ['!%s' % a for a in self._args().split(', ') if a]
        lines = ['/* %s.c: model %s as straight-line C, generated by chainer-compiler emit-c.'
                 % (n, n),
                 ' * One block per Program instruction; intermediate values live at fixed',
                 ' * offsets of one arena (%d bytes) planned from their lifetimes. */'
                 % self.arena_bytes,
                 '#include <math.h>', '#include <stddef.h>', '',
                 '#include "%s"' % KERNEL_HEADER, '#include "%s.h"' % n, '']
        lines += ['extern const float %s[%d];  /* %s */' % (
            w, max(1, a.size), ' x '.join(str(d) for d in a.shape) or 'scalar')
            for w, a in sorted(self.weights.items())]
        lines += ['', 'const %s_tensor_info %s_inputs[] = {' % (n, n)]
        lines += self._info_table(p.inputs) + ['};', '']
        lines += ['const %s_tensor_info %s_outputs[] = {' % (n, n)]
        lines += self._info_table(p.outputs) + ['};', '']
        arena_param = 'void *arena_memory' + ''.join(
            ', ' + q for q in self._params().split(', ') if q != 'void')
        lines += ['int %s_run_arena(%s)' % (n, arena_param), '{',
                  '    float *const arena = (float *)arena_memory;',
                  '    if (%s)' % ' || '.join(['(!arena && %s_ARENA_BYTES)' % up]
                                              + null_checks),
                  '        return 1;',
                  '    (void)arena;']
        lines += decls + body + ['    return 0;', '}', '']
        lines += ['int %s_run(%s)' % (n, self._params()), '{',
                  '    /* Static storage: no allocation per run, but not reentrant. */',
                  '    static float storage[%d];' % max(1, self.arena_bytes // 4),
                  '    return %s_run_arena(storage%s);' % (
                      n, ''.join(', ' + a for a in self._args().split(', ') if a)),
                  '}', '']
        call = ', '.join(['inputs[%d]' % k for k in range(len(p.inputs))]
                         + ['outputs[%d]' % k for k in range(len(p.outputs))])
        lines += ['int %s_run_v(const float *const *inputs, float *const *outputs)' % n, '{',
                  '    (void)inputs;', '    (void)outputs;',
                  '    return %s_run(%s);' % (n, call), '}', '']
        return '\n'.join(lines)

    def _weights_c(self) -> str:
        lines = ['/* %s_weights.c: the constants of model %s (float32, exact literals),'
                 % (self.name, self.name),
                 ' * generated by chainer-compiler emit-c.  Names end in _T for a',
                 ' * transpose made at emit time. */',
                 '#include <math.h>', '']
        for w, a in sorted(self.weights.items()):
            flat = a.reshape(-1)
            values = [_cfloat(v) for v in flat.tolist()] or ['0.0f']
            lines.append('extern const float %s[%d];' % (w, max(1, flat.size)))
            lines.append('const float %s[%d] = {  /* shape (%s) */' % (
                w, max(1, flat.size), ', '.join(str(d) for d in a.shape)))
            for start in range(0, len(values), 8):
                lines.append('    ' + ', '.join(values[start:start + 8]) + ',')
            lines += ['};', '']
        if not self.weights:
            lines.append('typedef int %s_no_weights;  /* C forbids an empty file */' % self.name)
        return '\n'.join(lines) + '\n'

    def _main_c(self) -> str:
        with open(os.path.join(KERNEL_DIR, 'main.c.in')) as f:
            text = f.read()
        return text.replace('@UNAME@', self.name.upper()).replace('@NAME@', self.name)

    def _makefile(self, families: list[str]) -> str:
        n = self.name
        objs = ' '.join(['%s.o' % n, '%s_weights.o' % n] + ['ccn_%s.o' % f for f in families])
        return '\n'.join([
            '# Builds %s (command line) and lib%s.so; generated by chainer-compiler '
            'emit-c.' % (n, n),
            '# Plain C99 with libc and libm.  `make OPENMP=1` adds -fopenmp when the',
            '# compiler accepts it (the kernels then also link libgomp).',
            'CC ?= cc',
            'CFLAGS ?= -O3 -std=c99 -Wall -Wextra',
            'OPENMP ?= 0',
            'ifeq ($(OPENMP),1)',
            "OMPFLAGS := $(shell printf 'int main(void){return 0;}\\n' | "
            '$(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo -fopenmp)',
            'endif',
            'ALL_CFLAGS = $(CFLAGS) -fPIC $(OMPFLAGS)',
            'LDLIBS = -lm',
            'OBJS = %s' % objs,
            '',
            'all: %s lib%s.so' % (n, n),
            '',
            '%s: main.o $(OBJS)' % n,
            '\t$(CC) $(ALL_CFLAGS) -o $@ main.o $(OBJS) $(LDLIBS)',
            '',
            'lib%s.so: $(OBJS)' % n,
            '\t$(CC) $(ALL_CFLAGS) -shared -o $@ $(OBJS) $(LDLIBS)',
            '',
            '%.o: %.c ' + '%s %s.h' % (KERNEL_HEADER, n),
            '\t$(CC) $(ALL_CFLAGS) -c -o $@ $<',
            '',
            'clean:',
            '\trm -f *.o %s lib%s.so' % (n, n),
            '',
            '.PHONY: all clean',
            ''])


_HANDLERS: dict[str, Callable[[_Emitter, Instruction], _Step]] = {
    'Gemm': _Emitter._gemm,
    'MatMul': _Emitter._matmul,
    'Conv': _Emitter._conv,
    'MaxPool': _Emitter._pool,
    'AveragePool': _Emitter._pool,
    'GlobalAveragePool': _Emitter._global_average_pool,
    'BatchNormalization': _Emitter._batch_norm,
    'Relu': _Emitter._unary,
    'LeakyRelu': _Emitter._unary,
    'Sigmoid': _Emitter._unary,
    'Tanh': _Emitter._unary,
    'Softmax': _Emitter._softmax,
    'LogSoftmax': _Emitter._softmax,
    'Add': _Emitter._binary,
    'Sub': _Emitter._binary,
    'Mul': _Emitter._binary,
    'Div': _Emitter._binary,
    'Reshape': _Emitter._reshape_like,
    'Flatten': _Emitter._reshape_like,
    'Identity': _Emitter._reshape_like,
    'Dropout': _Emitter._reshape_like,
}
