"""The fusion rules of every backend, one Program-to-Program pass: the
VM's pipeline runs it after code generation (chainer_compiler/pipeline.py,
``fuse``) and the native backend before lowering (emit_c.py,
``fuse_epilogues``), each with the rules runtime/ops/fusion_rules.RULES
gives it (its kernels run their fused forms).  The rules match Programs,
not ONNX graphs, so that a saved Program compiles to C where only the
runtime is installed, and so that the fused Program the VM runs is the one
its memory model (chainer_compiler/memory_model.py) reads, frees included.
The module lives here, not in runtime/ops, by the size budgets; the VM's
Executor never imports it, the compiler when it fuses.

* An inference BatchNormalization whose parameters are constants, reading
  the output of a Conv or Gemm with a constant weight (and constant or no
  bias) that nothing else reads, is folded into that weight and bias: per
  channel, ``s = scale / sqrt(var + eps)``, the weight's output channel is
  scaled by ``s`` and the bias becomes ``(bias - mean) * s + B``.
* An activation whose record says ``epilogue`` (Relu, LeakyRelu, Sigmoid,
  Tanh, HardSwish, Swish), or a Clip from 0 to a constant (ReLU6), that is
  the only reader of a Conv,
  Gemm or MatMul output (not itself a program output), or of a Reshape,
  Flatten, Squeeze or Unsqueeze that alone reads it, becomes that
  instruction's ``activation`` attribute (``activation_alpha`` for
  LeakyRelu's slope), which the kernels apply as they store the product;
  a Gemm so fused becomes FusedGemm, as in the VM's own fusion.  On the
  native backend one of NORM_EPILOGUES so reading an inference
  BatchNormalization becomes its epilogue too (DenseNet's pre-activation
  BatchNormalization and Relu, which no Conv before it can fold: one pass
  over the tensor instead of two).
* An AveragePool without padding (or a GlobalAveragePool) that alone
  reads a 1x1 Conv's output runs before it, on the Conv's input, and the
  Conv on the pooled pixels: both are linear per pixel, so the result is
  the same up to rounding, for a quarter of the products after a 2x2 pool
  (DenseNet's transitions).
* An Add of another float32 tensor of exactly the output's shape (no
  broadcasting) that alone reads a 2-D Conv's output (a ResNet block's
  residual) becomes that Conv's fourth input, which its product starts
  from (with the bias) before any activation fused after it: one pass
  over the output instead of three with the Relu.  The other operand must
  be made before the Conv (in a downsampling block the later of the two
  convolutions takes it).
* An Add of a constant bias along the last axis that alone reads a MatMul
  by a constant 2-D B (a Linear layer as exported: BERT, ConvNeXt) becomes
  that MatMul's third input, which its product starts from (before any
  activation fused after it).
* A Sigmoid read only by a Mul of its own input (SiLU as exported:
  ``x * Sigmoid(x)``) becomes one Swish in the Mul's place, and then the
  epilogue of the Conv, Gemm or MatMul making x when nothing else reads x.
* GELU written out as element-wise nodes around an Erf or a Tanh (BERT's
  ``x * 0.5 * (1 + erf(x / sqrt 2))``, GPT-2's and ALBERT's tanh
  approximation with ``Pow(x, 3)``: five to nine passes over the tensor)
  becomes one Gelu (opset 20) in the last node's place, when those nodes
  compute GELU from one input and scalar constants alone: the VM's own
  kernels evaluate them on sample points against Gelu's, so any order
  or spelling of the formula is recognised and nothing else is.
* An SGDUpdate of a float32 parameter whose gradient is a Gemm without C
  (and without transB) that nothing else reads becomes one GemmSGDUpdate
  in the SGDUpdate's place: the product goes straight into the parameter,
  ``param -= lr * alpha * op(A) B``, and the gradient is never stored.
* A training BatchNormalizationGrad that would recompute X's batch mean
  and variance reads them from the training BatchNormalization of the
  same X instead, which outputs them as the pre-opset-14 form does (two
  new registers, freed after the gradient).

The fused instruction takes the place of the producer and writes the
register the folded instruction wrote, so every later reader is unchanged.
Sub-programs (Loop, If and Scan bodies) are fused each on its own; the
registers of the program around a body reads are the instruction's
captures, which count as reads there.
"""
import dataclasses

import numpy

from ..ops.fusion_rules import GELU_FORMS, RULES, clip_epilogue, epilogue_alpha, epilogue_fuses
from ..ops.opset_rules import batch_norm_trains, softmax_axes
from ..ops.registry import CUSTOM_DOMAIN, fill_defaults, lookup, operator_record
from ..program import NO_REGISTER, Instruction, Program

_DEFAULT_DOMAINS = ('', 'ai.onnx')

#: The element-wise ops a written-out GELU is made of, the most nodes one
#: may have (GPT-2's tanh form has nine) and after the Erf or Tanh (three).
_GELU_PARTS = ('Add', 'Sub', 'Mul', 'Div', 'Pow', 'Erf', 'Tanh')
_GELU_MAX_NODES, _GELU_MAX_AFTER = 12, 4
#: Where a candidate is compared with Gelu: both forms and their
#: difference (up to 2e-4 of GELU's value) lie in [-5, 5].
_GELU_SAMPLES = numpy.linspace(-5.0, 5.0, 81)
_GELU_VERSION = 20  # the first with Gelu
#: The views that give their input's elements in order under another shape:
#: an element-wise activation after one may be applied before it.
_SHAPE_VIEWS = ('Reshape', 'Flatten', 'Squeeze', 'Unsqueeze')
_BATCH_NORM_GRAD = CUSTOM_DOMAIN + '::BatchNormalizationGrad'
#: The epilogues an inference BatchNormalization applies (the simple ones
#: of ccn_gemm.h's ccn_activate_simple; lowerings/normalization.py).
NORM_EPILOGUES = ('Relu', 'LeakyRelu', 'HardSwish', 'Clip')
#: Most keys (columns of the scores) a fused attention takes: its kernel
#: holds blocks of at least 16 rows of scores in a 256 KiB stack buffer
#: (CCN_ATTENTION_BLOCK, ccn_attention.c; CCN_ATTENTION_KEYS there).
ATTENTION_MAX_KEYS = 4096


def mask_fits(mask: tuple[int, ...], scores: tuple[int, ...]) -> bool:
    """Whether an attention's mask of shape ``mask`` broadcasts to the
    scores' shape without enlarging it, one value per key (its last axis
    the keys'): what FusedAttention takes, fused here or written in a file
    (lowerings/attention.py)."""
    return 0 < len(mask) <= len(scores) and mask[-1] == scores[-1] and all(
        d in (1, s) for d, s in zip(mask[::-1], scores[::-1]))


def _unpadded(attrs: dict) -> bool:
    """Whether a Conv's or pool's ``attrs`` add no padding."""
    return not any(attrs.get('pads') or ()) and attrs.get('auto_pad', 'NOTSET') in (
        'NOTSET', 'VALID')


def written_inputs(inst: Instruction) -> list[int]:
    """The registers ``inst`` updates in place (its operator's record says
    which inputs: the optimizer updates)."""
    record = operator_record(inst.op, inst.domain)
    positions = record.updated_inputs if record is not None else ()
    return [inst.inputs[k] for k in positions
            if k < len(inst.inputs) and inst.inputs[k] != NO_REGISTER]


def fuse(program: Program, backend: str = 'native') -> Program:
    """``program`` with the rules ``backend`` applies (fusion_rules.RULES):
    BatchNormalizations folded into the Conv or Gemm before them,
    activations fused into the products before them, SGD updates computing
    their Gemm gradients and BatchNormalization gradients reading the
    forward's batch statistics...; the same object when nothing fuses."""
    return _Fuser(program, backend).run()


def _renumbered(program: Program) -> Program:
    """``program`` with its registers numbered in order of definition: the
    values fused away leave gaps, and a Program holds no more registers
    than it defines (validate_program)."""
    order: dict[int, int] = {}

    def new(r: int) -> int:
        return r if r == NO_REGISTER else order.setdefault(r, len(order))

    def each(registers: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(new(r) for r in registers)

    for r in [v.register for v in program.inputs] + list(program.constants) + [
            r for inst in program.instructions for r in inst.outputs]:
        new(r)
    instructions = [dataclasses.replace(
        inst, inputs=each(inst.inputs), outputs=each(inst.outputs), frees=each(inst.frees),
        captures=each(inst.captures)) for inst in program.instructions]
    return dataclasses.replace(
        program, instructions=instructions,
        inputs=[dataclasses.replace(v, register=new(v.register)) for v in program.inputs],
        outputs=[dataclasses.replace(v, register=new(v.register)) for v in program.outputs],
        constants={new(r): a for r, a in program.constants.items()},
        register_names={order[r]: n for r, n in program.register_names.items() if r in order},
        types={order[r]: t for r, t in program.types.items() if r in order},
        num_registers=len(order))


class _Fuser:
    """The pass's state: the instructions being rewritten, the constants
    (new folded weights added) and who reads each register."""

    def __init__(self, program: Program, backend: str):
        self.p = program
        self.backend = backend
        self.rules = {rule for rule, backends in RULES.items() if backend in backends}
        self.insts: list[Instruction | None] = list(program.instructions)
        self.constants = dict(program.constants)
        self.next_register = max([program.num_registers, *(r + 1 for r in program.constants)])
        self.names = dict(program.register_names)
        self.outputs = {v.register for v in program.outputs}
        #: register -> indices of the instructions reading it (once per read)
        self.readers: dict[int, list[int]] = {}
        #: register -> index of the instruction making it
        self.producer: dict[int, int] = {}
        for i, inst in enumerate(program.instructions):
            for r in inst.inputs + inst.captures:
                self.readers.setdefault(r, []).append(i)
            for r in inst.outputs:
                self.producer[r] = i
        self.float32_inputs = {v.register for v in program.inputs if v.dtype == 'float32'}

    def run(self) -> Program:
        changed = self._fuse_bodies()
        for i in range(len(self.insts)):
            inst = self.insts[i]
            if inst is not None and inst.qualified_op == _BATCH_NORM_GRAD:
                changed |= self._apply('share_batch_statistics', i)
            if inst is None or inst.domain not in _DEFAULT_DOMAINS:
                continue
            if inst.op in ('Conv', 'Gemm'):
                changed |= self._apply('fold_batch_norm', i)
            if inst.op == 'Conv':
                changed |= self._apply('fuse_residual', i)
                if self._apply('pool_first', i):
                    changed = True
                    continue
            if inst.op == 'MatMul':
                changed |= self._apply('fuse_attention', i) or self._apply('fuse_bias', i)
            if self.insts[i] is None:
                continue
            if inst.op in ('Conv', 'Gemm', 'MatMul') or (
                    inst.op == 'BatchNormalization' and self._inference(inst)):
                changed |= self._apply('fuse_activation', i)
            if inst.op == 'Sigmoid':
                changed |= self._apply('fuse_swish', i)
            if inst.op in ('Erf', 'Tanh'):
                changed |= self._apply('fuse_gelu', i)
            fused = self.insts[i]
            if fused is not None and fused.op == 'Gemm':
                changed |= self._apply('fuse_sgd_update', i)
        if not changed:
            return self.p
        insts = [inst for inst in self.insts if inst is not None]
        read = {r for inst in insts for r in inst.inputs + inst.captures} | self.outputs
        # The weights BatchNormalization was folded from are read no more:
        # a backend holding every constant (the VM) would hold both.
        constants = {r: a for r, a in self.constants.items() if r in read}
        return _renumbered(dataclasses.replace(
            self.p, instructions=insts, constants=constants, register_names=self.names))

    def _apply(self, rule: str, i: int) -> bool:
        """Apply ``rule`` (a key of fusion_rules.RULES) at instruction
        ``i`` when this backend's kernels run its fused form."""
        return rule in self.rules and getattr(self, '_' + rule)(i)

    def _fuse_bodies(self) -> bool:
        """Fuse each sub-program of an instruction on its own."""
        changed = False
        for i, inst in enumerate(self.insts):
            assert inst is not None
            bodies = {k: fuse(v, self.backend) for k, v in inst.attrs.items()
                      if isinstance(v, Program)}
            if any(body is not inst.attrs[k] for k, body in bodies.items()):
                self.insts[i] = dataclasses.replace(inst, attrs={**inst.attrs, **bodies})
                changed = True
        return changed

    def _only_reader(self, r: int) -> tuple[int, Instruction] | None:
        """(index, instruction) of the one instruction reading ``r`` when
        ``r`` has one reader and is no program output; else None."""
        users = self.readers.get(r, [])
        reader = self.insts[users[0]] if len(users) == 1 else None
        if r in self.outputs or reader is None:
            return None
        return users[0], reader

    def _sole_reader(self, r: int) -> int | None:
        """The index of the instruction reading ``r`` when that is the only
        read of ``r``, as input 0 of a default-domain op, and ``r`` is no
        program output; else None."""
        j, reader = self._only_reader(r) or (-1, None)
        if reader is None or reader.domain not in _DEFAULT_DOMAINS or not reader.inputs \
                or reader.inputs[0] != r:
            return None
        return j

    def _unread(self, r: int) -> bool:
        return r == NO_REGISTER or (r not in self.readers and r not in self.outputs)

    def _const(self, inst: Instruction, k: int):
        """Input ``k`` of ``inst`` as a float32 constant array, else None."""
        if k >= len(inst.inputs) or inst.inputs[k] not in self.constants:
            return None
        a = numpy.asarray(self.constants[inst.inputs[k]])
        return a if a.dtype == numpy.float32 else None

    def _new_constant(self, array, name: str) -> int:
        r = self.next_register
        self.next_register += 1
        self.constants[r] = array
        self.names[r] = name
        return r

    def _replace(self, i: int, new: Instruction, j: int):
        """Put ``new`` at ``i`` and drop instruction ``j``, whose work it
        took."""
        folded = self.insts[j]
        assert folded is not None
        gone = {folded.inputs[0]} | set(new.outputs)  # the value no longer made
        # Both nodes stay named ('Conv_0+Relu_1'): the C comment and errors
        # quote the name.
        name = '+'.join(n for n in (new.name, folded.name) if n)
        self.insts[i] = dataclasses.replace(
            new, name=name,
            frees=tuple(r for r in new.frees + folded.frees if r not in gone))
        self.insts[j] = None
        # (A Gelu or Swish fused later looks its product up by its output.)
        self.producer.update((r, i) for r in new.outputs)

    def _fold_batch_norm(self, i: int) -> bool:
        """Fold the BatchNormalization reading Conv/Gemm ``i`` into its
        weight and bias, when it is an inference one of constants."""
        inst = self.insts[i]
        assert inst is not None
        j = self._sole_reader(inst.outputs[0])
        bn = None if j is None else self.insts[j]
        if j is None or bn is None or bn.op != 'BatchNormalization' \
                or not self._inference(bn):
            return False
        params = [self._const(bn, k) for k in range(1, 5)]
        weight = self._const(inst, 1)
        has_bias = len(inst.inputs) > 2 and inst.inputs[2] != NO_REGISTER
        bias = self._const(inst, 2) if has_bias else None
        if weight is None or any(p is None for p in params) or (has_bias and bias is None):
            return False
        gamma, beta, mean, var = (numpy.asarray(p, dtype=numpy.float64) for p in params)
        eps = float(bn.attrs['epsilon'])
        scale = gamma / numpy.sqrt(var + eps)
        folded = self._scaled(inst, weight, bias, scale)
        if folded is None:
            return False
        new_w, new_b = folded
        new_b = new_b + (beta - mean * scale)
        name = self.p.register_name(inst.inputs[1])
        w_reg = self._new_constant(new_w.astype(numpy.float32), name + '_bn_folded')
        b_reg = self._new_constant(new_b.astype(numpy.float32), name + '_bn_folded_bias')
        attrs = dict(inst.attrs)
        if inst.op == 'Gemm':
            attrs['beta'] = 1.0
        new = dataclasses.replace(inst, inputs=(inst.inputs[0], w_reg, b_reg),
                                  outputs=(bn.outputs[0],), attrs=attrs)
        self._replace(i, new, j)
        return True

    def _inference(self, bn: Instruction) -> bool:
        """Whether ``bn`` normalises with constant statistics and only its
        first output is used."""
        a = bn.attrs
        return not batch_norm_trains(bn.version, len(bn.outputs), a.get('training_mode', 0),
                                     a.get('is_test', 0)) \
            and a.get('spatial', 1) and all(self._unread(r) for r in bn.outputs[1:])

    @staticmethod
    def _scaled(inst: Instruction, weight, bias, scale):
        """(weight with output channel c scaled by scale[c], bias times
        scale, in float64), or None when the shapes do not fit."""
        if inst.op == 'Conv':
            channels = weight.shape[0] if weight.ndim >= 1 else -1
            if scale.shape != (channels,) or (bias is not None and bias.shape != scale.shape):
                return None
            w = weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
            return w, (0.0 if bias is None else bias * scale)
        # Gemm: channel n is column n of op(B); the bias C (times beta)
        # broadcasts to (M, N) from the right.
        trans_b = int(inst.attrs['transB'])
        if weight.ndim != 2 or scale.shape != (weight.shape[0 if trans_b else 1],):
            return None
        w = weight * (scale[:, None] if trans_b else scale[None, :])
        if bias is None:
            return w, numpy.zeros_like(scale)
        if bias.ndim > 2:
            return None
        beta = float(inst.attrs['beta'])
        try:
            return w, beta * bias.astype(numpy.float64) * scale
        except ValueError:  # the bias does not broadcast to the channels
            return None

    def _fuse_residual(self, i: int) -> bool:
        """Make the Add that alone reads Conv ``i``'s output, of another
        tensor of the same shape made before ``i``, the Conv's residual."""
        inst = self.insts[i]
        assert inst is not None
        y = inst.outputs[0]
        j, add = self._only_reader(y) or (-1, None)
        if add is None or add.op != 'Add' or add.domain not in _DEFAULT_DOMAINS \
                or len(add.inputs) != 2 or len(inst.outputs) != 1 \
                or 'activation' in inst.attrs or len(inst.inputs) > 3:
            return False
        r = add.inputs[1] if add.inputs[0] == y else add.inputs[0]
        kinds = [self.p.types.get(k) for k in (y, r, add.outputs[0])]
        shapes = {None if kind is None or kind.dtype != 'float32' else kind.shape
                  for kind in kinds}
        shape = shapes.pop() if len(shapes) == 1 else None
        # Known and equal shapes: an Add that broadcasts stays as it is.
        if r == y or self.producer.get(r, -1) >= i or shape is None or len(shape) != 4 \
                or not all(isinstance(d, int) for d in shape):
            return False
        # The residual's last read may be the Add's (its free moves to i):
        # then nothing may read it between i and j; nor update it there.
        between = [inst for inst in self.insts[i + 1:j] if inst is not None]
        if (r in add.frees and any(i < k < j for k in self.readers.get(r, []))) or any(
                self._root(w) == self._root(r) for inst in between for w in written_inputs(inst)):
            return False
        bias = inst.inputs[2] if len(inst.inputs) > 2 else NO_REGISTER
        self.insts[j] = dataclasses.replace(add, inputs=(y, r))  # the product first
        self._replace(i, dataclasses.replace(inst, inputs=inst.inputs[:2] + (bias, r),
                                             outputs=add.outputs), j)
        self.readers[r] = [i if k == j else k for k in self.readers[r]]
        self.producer[add.outputs[0]] = i
        return True

    def _pool_first(self, i: int) -> bool:
        """Make the unpadded AveragePool or GlobalAveragePool that alone
        reads 1x1 Conv ``i``'s output, and leaves fewer pixels, pool the
        Conv's input at ``i``, and the Conv read the pooled input at the
        pool's place."""
        conv = self.insts[i]
        assert conv is not None
        j = self._sole_reader(conv.outputs[0])
        pool = None if j is None else self.insts[j]
        a, w = conv.attrs, self._float32_shape(conv.inputs[1])
        x, z = self._float32_shape(conv.inputs[0]), self._float32_shape(
            pool.outputs[0]) if pool is not None else ()
        if j is None or pool is None or pool.op not in ('AveragePool', 'GlobalAveragePool') \
                or len(conv.inputs) > 3 or len(conv.outputs) != 1 or 'activation' in a \
                or len(w) != 4 or w[2:] != (1, 1) or any(s != 1 for s in a.get('strides') or ()) \
                or not _unpadded(a) or not _unpadded(pool.attrs) or pool.attrs.get('ceil_mode') \
                or len(x) != 4 or len(z) != 4 or z[2] * z[3] >= x[2] * x[3]:
            return False
        y, pooled = conv.outputs[0], self.next_register
        self.next_register += 1
        self.names[pooled] = self.p.register_name(conv.inputs[0]) + '_pooled'
        # The weights (a computed W too) are read at j now: freed there.
        weights = conv.inputs[1:]
        self.insts[i] = dataclasses.replace(
            pool, inputs=conv.inputs[:1], outputs=(pooled,),
            frees=tuple(r for r in conv.frees if r not in weights))
        self.insts[j] = dataclasses.replace(
            conv, inputs=(pooled,) + weights, outputs=pool.outputs,
            frees=tuple(r for r in pool.frees if r != y) + (pooled,)
            + tuple(r for r in conv.frees if r in weights))
        del self.readers[y]
        for r in set(weights) - {NO_REGISTER}:
            self.readers[r] = sorted(j if k == i else k for k in self.readers[r])
        self.readers[pooled], self.producer[pooled] = [j], i
        self.producer[pool.outputs[0]] = j
        return True

    def _fuse_bias(self, i: int) -> bool:
        """Make the Add of a constant bias (N values along the last axis)
        that alone reads MatMul ``i``'s product by a constant K x N B its
        third input."""
        inst = self.insts[i]
        assert inst is not None
        m = inst.outputs[0]
        j, add = self._only_reader(m) or (-1, None)
        weight = self._const(inst, 1)
        if add is None or add.op != 'Add' or add.domain not in _DEFAULT_DOMAINS \
                or add.version < 7 or len(add.inputs) != 2 or len(inst.inputs) != 2 \
                or weight is None or weight.ndim != 2 or 'activation' in inst.attrs:
            return False
        k = 1 if add.inputs[0] == m else 0
        bias = self._const(add, k)
        kind = self.p.types.get(inst.inputs[0])
        rank = None if kind is None or kind.shape is None else len(kind.shape)
        # A bias of more dims than the product's would broadcast it up.
        if bias is None or bias.size != weight.shape[1] or rank is None or rank < 2 \
                or bias.ndim > rank or bias.shape[-1:] != weight.shape[1:]:
            return False
        # Add is commutative: the product first, as _replace expects.
        self.insts[j] = dataclasses.replace(add, inputs=(m, add.inputs[k]))
        self._replace(i, dataclasses.replace(inst, inputs=inst.inputs + (add.inputs[k],),
                                             outputs=add.outputs), j)
        return True

    def _fuse_attention(self, i: int) -> bool:
        """Make MatMul ``i`` (q by kt), the Mul by a scalar (or Div by a
        power of two) and the Add of a mask that may follow it, the
        Softmax over the last axis and the MatMul of its result by v one
        FusedAttention in the second MatMul's place, when each value is
        read by the next node alone and the shapes are known."""
        first = self.insts[i]
        assert first is not None
        chain, r, scale, mask = [i], first.outputs[0], 1.0, None
        j, inst = self._only_reader(r) or (-1, None)
        if inst is not None and inst.op in ('Mul', 'Div') and inst.domain in _DEFAULT_DOMAINS:
            c = self._const(inst, 1 if inst.inputs[0] == r else 0)
            if c is None or c.size != 1 or (inst.op == 'Div' and (
                    inst.inputs[0] != r or numpy.frexp(c)[0].item() != 0.5)):
                return False  # x / c is x * (1 / c) only for powers of two
            scale = float(c.item()) if inst.op == 'Mul' else 1.0 / float(c.item())
            chain.append(j)
            r = inst.outputs[0]
            j, inst = self._only_reader(r) or (-1, None)
        if inst is not None and inst.op == 'Add' and inst.domain in _DEFAULT_DOMAINS \
                and inst.version >= 7 and len(inst.inputs) == 2:
            mask = inst.inputs[1] if inst.inputs[0] == r else inst.inputs[0]
            if mask == r:
                return False
            chain.append(j)
            r = inst.outputs[0]
            j, inst = self._only_reader(r) or (-1, None)
        if inst is None or inst.op != 'Softmax' or inst.domain not in _DEFAULT_DOMAINS:
            return False
        chain.append(j)
        k, last = self._only_reader(inst.outputs[0]) or (-1, None)
        if last is None or last.op != 'MatMul' or last.domain not in _DEFAULT_DOMAINS \
                or last.inputs[:1] != inst.outputs or len(last.inputs) != 2 \
                or 'activation' in first.attrs or 'activation' in last.attrs \
                or len(first.inputs) != 2:
            return False
        q, kt, v, scores = (self._float32_shape(x) for x in first.inputs[:2] + (
            last.inputs[1], first.outputs[0]))
        rank = len(scores)
        # (A scale or mask of more dims than the scores would broadcast them up.)
        if rank < 2 or not len(q) == len(kt) == len(v) == rank or 0 in q + kt + v \
                or self._float32_shape(inst.outputs[0]) != scores \
                or not q[:-2] == kt[:-2] == v[:-2] or scores[-1] > ATTENTION_MAX_KEYS \
                or softmax_axes(inst.version, rank, inst.attrs.get('axis')) != (rank - 1,) \
                or (mask is not None and not mask_fits(self._float32_shape(mask), scores)):
            return False
        return self._attention_replaces(chain, k, (first.inputs[0], first.inputs[1],
                                                   last.inputs[1]), mask, scale)

    def _float32_shape(self, r: int) -> tuple[int, ...]:
        """The static shape of float32 register ``r``; () when it is not
        float32 or its shape is not known in numbers."""
        kind = self.p.types.get(r)
        shape = () if kind is None or kind.dtype != 'float32' else kind.shape or ()
        return tuple(d for d in shape if isinstance(d, int)) \
            if all(isinstance(d, int) for d in shape) else ()

    def _attention_replaces(self, chain: list[int], k: int, qkv: tuple, mask, scale) -> bool:
        """Put the FusedAttention of ``qkv`` (and ``mask``) at ``k``, the
        second MatMul, dropping ``chain``; the operands it reads there are
        freed there, not before, and nothing between may update them."""
        read = set(qkv[:2]) | ({mask} if mask is not None else set())
        roots = {self._root(x) for x in read}
        if any(self._root(w) in roots for inst in self.insts[chain[0] + 1:k]
               if inst is not None for w in written_inputs(inst)):
            return False
        insts = self._cone(chain + [k])
        made = {inst.outputs[0] for inst in insts[:-1]}
        late = set()
        for x in range(chain[0], k):
            inst = self.insts[x]
            if inst is not None and read & set(inst.frees):
                late |= read & set(inst.frees)
                self.insts[x] = dataclasses.replace(
                    inst, frees=tuple(r for r in inst.frees if r not in read))
        frees = [r for inst in insts for r in inst.frees if r not in made and r not in read]
        self.insts[k] = Instruction(
            op='FusedAttention', domain=CUSTOM_DOMAIN, version=1, attrs={'scale': scale},
            inputs=qkv + ((mask,) if mask is not None else ()), outputs=insts[-1].outputs,
            name='+'.join(inst.name for inst in insts if inst.name),
            frees=tuple(dict.fromkeys(frees + sorted(late))))
        for x in chain:
            self.insts[x] = None
        for r in made:
            self.readers.pop(r, None)
        for r in read:
            self.readers[r] = [k if x in chain else x for x in self.readers[r]]
        return True

    def _fuse_activation(self, i: int) -> bool:
        """Make the activation reading product ``i`` its epilogue, also
        through a shape view between them (the dynamo exporter's Gemm,
        Reshape, then GELU): the activation is element-wise, so the view
        then gives the activated values under its shape."""
        inst = self.insts[i]
        assert inst is not None
        j = self._sole_reader(inst.outputs[0])
        view, v = None if j is None else self.insts[j], -1
        if j is not None and view is not None and view.op in _SHAPE_VIEWS:
            v, j = j, self._sole_reader(view.outputs[0])
        else:
            view = None
        act = None if j is None else self.insts[j]
        if j is None or act is None or act.domain not in _DEFAULT_DOMAINS \
                or not epilogue_fuses(self.backend, inst.op, act.op) \
                or (inst.op == 'BatchNormalization' and act.op not in NORM_EPILOGUES) \
                or 'activation' in inst.attrs:
            return False
        attrs = dict(inst.attrs, activation=act.op)
        if act.op == 'Clip':
            bound = clip_epilogue(act.version, act.attrs, {
                k: self.constants.get(r) for k, r in enumerate(act.inputs)
                if k > 0 and r != NO_REGISTER})
            if bound is None:
                return False
            attrs['activation_alpha'] = bound
        elif 'alpha' in lookup(act.op, act.domain, act.version).attribute_types \
                or act.op == 'Gelu':  # its form (epilogue_alpha)
            attrs['activation_alpha'] = epilogue_alpha(act.op, act.attrs)
        through = view is not None
        new = dataclasses.replace(inst, attrs=attrs, outputs=inst.outputs if through else (
            act.outputs[0],) + inst.outputs[1:])
        if inst.op == 'Gemm':
            # Gemm's attributes but ``broadcast`` (before opset 7), which
            # FusedGemm's kernel does not take: the backends broadcast C anyway.
            taken = lookup('FusedGemm', CUSTOM_DOMAIN).attribute_names | {'activation_alpha'}
            new = dataclasses.replace(new, op='FusedGemm', domain=CUSTOM_DOMAIN, version=1,
                                      attrs={k: v for k, v in attrs.items() if k in taken})
        if through:
            self._view_activated(i, new, v, j)
        else:
            self._replace(i, new, j)
        return True

    def _view_activated(self, i: int, new: Instruction, v: int, j: int):
        """Put product ``new`` (its activation fused) at ``i`` and make view
        ``v`` write what activation ``j`` wrote; drop ``j``."""
        view, act = self.insts[v], self.insts[j]
        assert view is not None and act is not None
        x = view.outputs[0]  # read by the activation alone: no longer made
        self.insts[i] = dataclasses.replace(new, name='+'.join(
            n for n in (new.name, act.name) if n))
        self.insts[v] = dataclasses.replace(view, outputs=act.outputs, frees=view.frees + tuple(
            r for r in act.frees if r != x))
        self.insts[j] = None
        self.readers.pop(x, None)
        self.producer[act.outputs[0]] = v

    def _fuse_swish(self, i: int) -> bool:
        """Make Sigmoid ``i`` and the Mul that alone reads it, by the
        Sigmoid's own input, one Swish (SiLU, x * sigmoid(x), as exporters
        write it): one pass over the tensor instead of two."""
        sigmoid = self.insts[i]
        assert sigmoid is not None
        s, x = sigmoid.outputs[0], sigmoid.inputs[0]
        j, mul = self._only_reader(s) or (-1, None)
        if mul is None or mul.op != 'Mul' or mul.domain not in _DEFAULT_DOMAINS \
                or sorted(mul.inputs) != sorted((x, s)):
            return False
        # At the Mul's place, where x is still alive.
        name = '+'.join(n for n in (sigmoid.name, mul.name) if n)
        self.insts[j] = dataclasses.replace(
            sigmoid, op='Swish', name=name, attrs={'alpha': 1.0}, outputs=mul.outputs,
            frees=tuple(r for r in sigmoid.frees + mul.frees if r != s))
        self.insts[i] = None
        self.readers[x] = [k for k in self.readers[x] if k != i]
        del self.readers[s]
        self._fuse_into_producer(x)
        return True

    def _fuse_into_producer(self, x: int):
        """Make the activation just made of ``x`` (Swish, Gelu) the
        epilogue of the product making x, if one does (the product's own
        turn came before the nodes were one activation)."""
        k = self.producer.get(x, -1)
        producer = self.insts[k] if k >= 0 else None
        if producer is not None and producer.op in _SHAPE_VIEWS \
                and producer.domain in _DEFAULT_DOMAINS:
            x = producer.inputs[0]  # the product's output, seen through the view
            k = self.producer.get(x, -1)
            producer = self.insts[k] if k >= 0 else None
        if producer is not None and producer.outputs[:1] == (x,) \
                and producer.op in ('Conv', 'Gemm', 'MatMul') \
                and producer.domain in _DEFAULT_DOMAINS:
            self._apply('fuse_activation', k)

    def _fuse_gelu(self, i: int) -> bool:
        """Make the nodes computing GELU around Erf or Tanh ``i`` one Gelu:
        the value they end in is found along the sole readers of ``i``'s
        output (the farthest that works), what it is computed from by
        walking back to the one input read more than once (x)."""
        anchor = self.insts[i]
        assert anchor is not None
        chain = [anchor.outputs[0]]
        while len(chain) <= _GELU_MAX_AFTER:
            users = self.readers.get(chain[-1], [])
            reader = self.insts[users[0]] if len(users) == 1 else None
            if chain[-1] in self.outputs or reader is None or not self._gelu_part(reader):
                break
            chain.append(reader.outputs[0])
        for end in reversed(chain):
            cone = self._gelu_cone(end)
            approximate = None if cone is None else self._gelu_form(*cone, end)
            if cone is not None and approximate in GELU_FORMS[self.backend]:
                self._replace_by_gelu(*cone, end, approximate)
                self._fuse_into_producer(cone[0])
                return True
        return False

    def _gelu_part(self, inst: Instruction) -> bool:
        """Whether ``inst`` may be a node of a written-out GELU: a
        default-domain element-wise op of _GELU_PARTS whose constant
        inputs are single numbers."""
        return inst.domain in _DEFAULT_DOMAINS and inst.op in _GELU_PARTS \
            and len(inst.outputs) == 1 and all(
                numpy.size(self.constants[r]) == 1 for r in inst.inputs if r in self.constants)

    def _gelu_cone(self, end: int) -> tuple[int, list[int]] | None:
        """(x, the indices in order of the instructions computing ``end``
        from x and constants), or None when it is computed from more than
        one value.  A value read more than once, or made by anything but a
        _gelu_part, is an input of the cone (so a value the cone makes is
        read only inside it)."""
        indices: set[int] = set()
        leaves, stack = set(), [end]
        while stack:
            r = stack.pop()
            if r in self.constants:
                continue
            k = self.producer.get(r, -1)
            inst = None if k < 0 else self.insts[k]
            if inst is None or inst.outputs[:1] != (r,) or not self._gelu_part(inst) \
                    or (r != end and (len(self.readers.get(r, [])) != 1 or r in self.outputs)):
                leaves.add(r)
            elif k not in indices:
                if len(indices) == _GELU_MAX_NODES:
                    return None
                indices.add(k)
                stack.extend(inst.inputs)
        if len(leaves) != 1 or not indices:
            return None
        x, ordered = leaves.pop(), sorted(indices)
        # A constant of higher rank than x would broadcast x up.
        kind = self.p.types.get(x)
        rank = None if kind is None or kind.shape is None else len(kind.shape)
        if kind is None or kind.dtype not in ('float32', 'float64') or rank is None or any(
                numpy.ndim(self.constants[r]) > rank
                for inst in self._cone(ordered) for r in inst.inputs if r in self.constants):
            return None
        return x, ordered

    def _cone(self, indices: list[int]) -> list[Instruction]:
        """The instructions at ``indices`` (none of them fused away)."""
        cone = [inst for inst in (self.insts[k] for k in indices) if inst is not None]
        assert len(cone) == len(indices)
        return cone

    def _gelu_form(self, x: int, indices: list[int], end: int) -> str | None:
        """Gelu's ``approximate`` ('none' or 'tanh') whose values the
        instructions ``indices`` compute from x at _GELU_SAMPLES, in
        float64 by the VM's kernels; None when neither's."""
        values = {x: _GELU_SAMPLES}
        for inst in self._cone(indices):
            args = [values[r] if r in values else
                    numpy.asarray(self.constants[r], dtype=numpy.float64) for r in inst.inputs]
            out = lookup(inst.op, inst.domain, inst.version).evaluate(args, inst.attrs, 1)
            if out is None or numpy.shape(out[0]) != _GELU_SAMPLES.shape:
                return None
            values[inst.outputs[0]] = out[0]
        gelu = lookup('Gelu', '', _GELU_VERSION)
        for approximate in ('none', 'tanh'):
            want = gelu.evaluate([_GELU_SAMPLES], {'approximate': approximate}, 1)
            # float32 constants (0.7978846 for sqrt(2 / pi)) are within 1e-7.
            if want is not None and numpy.allclose(values[end], want[0], rtol=1e-6, atol=1e-9):
                return approximate
        return None

    def _replace_by_gelu(self, x: int, indices: list[int], end: int, approximate: str):
        """One Gelu of x into ``end`` at the last of ``indices`` (where x
        must still be alive: its free moves there if it came earlier)."""
        last = indices[-1]
        frees = []
        for k in range(indices[0], last + 1):
            inst = self.insts[k]
            if inst is not None and x in inst.frees:
                frees.append(x)
                self.insts[k] = dataclasses.replace(
                    inst, frees=tuple(r for r in inst.frees if r != x))
        names = [inst.name for inst in self._cone(indices)]
        self.insts[last] = Instruction(
            op='Gelu', inputs=(x,), outputs=(end,), name='+'.join(n for n in names if n),
            attrs=fill_defaults('Gelu', '', _GELU_VERSION, {'approximate': approximate}),
            version=_GELU_VERSION, frees=tuple(frees))
        for inst in self._cone(indices[:-1]):
            for r in inst.outputs:
                self.readers.pop(r, None)
        for k in indices[:-1]:
            self.insts[k] = None
        self.readers[x] = [k for k in self.readers[x] if k not in indices] + [last]

    def _fuse_sgd_update(self, i: int) -> bool:
        """Make the SGDUpdate that alone reads Gemm ``i``'s product (its
        parameter's gradient) compute that product into the parameter."""
        gemm = self.insts[i]
        assert gemm is not None
        g = gemm.outputs[0]
        j, update = self._only_reader(g) or (-1, None)
        if update is None or update.qualified_op != CUSTOM_DOMAIN + '::SGDUpdate' \
                or len(update.inputs) != 3 or update.inputs[1] != g \
                or update.inputs[0] not in self.float32_inputs \
                or not self._unread(gemm.inputs[2] if len(gemm.inputs) > 2 else NO_REGISTER) \
                or gemm.attrs['transB']:
            return False
        # The product now happens at j: its operands must hold the same
        # values there, so nothing in between may update them in place,
        # and the parameter it is added into must not be one of them.
        between = [inst for inst in self.insts[i + 1:j] if inst is not None]
        operands = {self._root(r) for r in gemm.inputs[:2]}
        if self._root(update.inputs[0]) in operands or any(
                self._root(r) in operands for inst in between for r in written_inputs(inst)):
            return False
        # The operands' last reads may have been at or after the Gemm: they
        # are now freed after the fused instruction.
        operand_registers, late = set(gemm.inputs[:2]), set()
        for k in range(i, j):
            inst = self.insts[k]
            freed = operand_registers.intersection(inst.frees) if inst is not None else set()
            if inst is not None and freed:
                late |= freed
                self.insts[k] = dataclasses.replace(
                    inst, frees=tuple(r for r in inst.frees if r not in freed))
        attrs = fill_defaults('GemmSGDUpdate', CUSTOM_DOMAIN, update.version, {
            name: value for name, value in gemm.attrs.items() if name in ('alpha', 'transA')})
        name = '+'.join(n for n in (gemm.name, update.name) if n)
        self.insts[j] = dataclasses.replace(
            update, op='GemmSGDUpdate', name=name, attrs=attrs,
            inputs=(update.inputs[0], gemm.inputs[0], gemm.inputs[1], update.inputs[2]),
            frees=tuple(r for r in update.frees if r != g) + tuple(sorted(late)))
        self.insts[i] = None
        for r in gemm.inputs[:2]:  # later rules must see who reads the operands now
            self.readers[r] = [k if k != i else j for k in self.readers[r]]
        del self.readers[g]
        return True

    def _share_batch_statistics(self, j: int) -> bool:
        """Make training BatchNormalizationGrad ``j``, which has no mean and
        variance inputs, read them from the latest training
        BatchNormalization of its X before it (the same register, so the
        same values)."""
        grad = self.insts[j]
        assert grad is not None
        if len(grad.inputs) != 3 or not grad.attrs['training']:
            return False
        x = grad.inputs[0]
        forward = [k for k in self.readers.get(x, []) if k < j and self._batch_trains(k, x)]
        if not forward:
            return False
        i = forward[-1]
        bn = self.insts[i]
        assert bn is not None
        statistics = []
        for what in ('batch_mean', 'batch_var'):
            r = self.next_register
            self.next_register += 1
            self.names[r] = '%s_%s' % (self.p.register_name(x), what)
            self.producer[r] = i
            self.readers[r] = [j]
            statistics.append(r)
        self.insts[i] = dataclasses.replace(
            bn, outputs=bn.outputs + (NO_REGISTER,) * (3 - len(bn.outputs)) + tuple(statistics))
        self.insts[j] = dataclasses.replace(grad, inputs=grad.inputs + tuple(statistics),
                                            frees=grad.frees + tuple(statistics))
        return True

    def _batch_trains(self, k: int, x: int) -> bool:
        """Whether instruction ``k`` is a BatchNormalization of input ``x``
        with the batch's statistics and without the outputs for them."""
        bn = self.insts[k]
        return bn is not None and bn.op == 'BatchNormalization' \
            and bn.domain in _DEFAULT_DOMAINS and bn.inputs[:1] == (x,) \
            and len(bn.outputs) <= 3 and batch_norm_trains(
                bn.version, len(bn.outputs), bn.attrs.get('training_mode', 0),
                bn.attrs.get('is_test', 0))

    def _root(self, r: int) -> int:
        """The register whose array ``r`` may share: through the ops whose
        records say output 0 may be a view of an input (view_of; the native
        backend aliases them)."""
        while r in self.producer:
            inst = self.insts[self.producer[r]]
            if inst is None:
                break
            record = operator_record(inst.op, inst.domain)
            if record is None or record.view_of is None or record.view_of >= len(inst.inputs):
                break
            r = inst.inputs[record.view_of]
        return r
