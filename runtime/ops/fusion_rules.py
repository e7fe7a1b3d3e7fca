"""Which fusion rule each backend applies, and the facts the rules read
from the operators' records: which activation a product may apply as it
stores its result (OpRecord.epilogue) and with which slope.

The rules themselves are written once, over Programs, in
runtime/native/fusion.py; the VM's pipeline (its ``fuse`` pass, after
``emit``) and the native backend (its ``fuse_epilogues`` stage) both run
them, each with the rules RULES gives it.  Neither keeps a list of its
own."""
import math

import numpy

from .registry import lookup, records

#: The backends that fuse: the NumPy/CuPy VM and the native C.
BACKENDS = ('vm', 'native')

#: Each rule of the fuser (a method of runtime/native/fusion.py's _Fuser,
#: ``_`` + the name) -> the backends that apply it: those whose kernels run
#: its fused form, where that pays (the exceptions say why not).
RULES = {
    # Folded weights: a plain Conv or Gemm, which every backend runs.
    'fold_batch_norm': BACKENDS,
    # A 1x1 Conv on pooled pixels: the native backend's (its results move
    # by rounding from the unfused Program's, which the VM runs as written).
    'pool_first': ('native',),
    # A fourth input of Conv: the native kernels only (on NumPy the Add is
    # one pass over the output either way).
    'fuse_residual': ('native',),
    # MatMul's third input (math.matmul adds it in place on the product).
    'fuse_bias': BACKENDS,
    # Attention's products around its Softmax as one FusedAttention: the
    # native kernel keeps a block of score rows in cache; the VM's kernel
    # would store the scores whole as the nodes do.
    'fuse_attention': ('native',),
    # Which product takes which activation: epilogue_fuses().
    'fuse_activation': BACKENDS,
    'fuse_swish': BACKENDS,
    # Into the forms of Gelu GELU_FORMS gives.
    'fuse_gelu': BACKENDS,
    # NumPy's kernel still makes the product in a temporary, and the fused
    # form holds both operands until the update, late in the step: the VM's
    # peak rose 1.7x on a deep MLP's training step.
    'fuse_sgd_update': ('native',),
    # Needs BatchNormalization's saved statistics from opset 14 on, which
    # only the native kernel outputs.
    'share_batch_statistics': ('native',),
}

#: The forms of Gelu (``approximate``) each backend fuses a written-out GELU
#: into.  The VM's exact Gelu evaluates erfc in float64, relatively exact in
#: the negative tail: 1.7x the time of the five float32 nodes BERT writes
#: out, where its tanh form takes a third of the nine of GPT-2's (NumPy's
#: Pow is slow): the VM fuses the tanh form alone.
GELU_FORMS = {'vm': ('tanh',), 'native': ('none', 'tanh')}

#: The epilogues the VM's FusedGemm kernel applies (math.fused_gemm); the
#: VM's other products apply none, the native products every one of
#: product_epilogues().
VM_GEMM_EPILOGUES = ('Relu',)


def epilogue_ops() -> list[str]:
    """The activations (default domain) a product may apply as it stores
    its result: those whose records say ``epilogue``."""
    return [r.op for r in records() if r.epilogue and r.domain == '']


def epilogue_alpha(op: str, attrs: dict) -> float:
    """The ``activation_alpha`` of epilogue ``op`` given its node's
    ``attrs``: its ``alpha`` attribute, the kernel's default when absent
    (LeakyRelu's slope), 0 for an activation without one; Gelu's form, 1
    for approximate 'tanh' and 0 for 'none' (the erf form)."""
    attrs = lookup(op).with_defaults(attrs)
    if op == 'Gelu':
        return float(attrs['approximate'] == 'tanh')
    alpha = attrs.get('alpha')
    return 0.0 if alpha is None else float(alpha)


def epilogue_fuses(backend: str, product: str, activation: str) -> bool:
    """Whether ``backend`` fuses ``activation`` (default domain) into the
    ``product`` (Conv, Gemm or MatMul) before it: an epilogue its kernel
    for the fused form applies (the VM: FusedGemm's)."""
    if backend == 'vm':
        return product == 'Gemm' and activation in VM_GEMM_EPILOGUES \
            and activation in epilogue_ops()
    return activation in product_epilogues()


def product_epilogues() -> list[str]:
    """Every activation the native products apply: epilogue_ops() and Clip
    from 0 to a constant (ReLU6 as exporters write it; clip_epilogue)."""
    return epilogue_ops() + ['Clip']


def clip_epilogue(version: int, attrs: dict, bounds: dict) -> float | None:
    """The upper bound of a Clip a product may apply as its epilogue (its
    activation_alpha): one whose lower bound is 0 and upper bound at least
    0; else None.  Before opset 11 the bounds are ``attrs``; from 11,
    ``bounds`` maps the inputs present (1: min, 2: max) to their constant
    values, None for a computed one."""
    if version < 11:
        low, high = attrs.get('min', -math.inf), attrs.get('max', math.inf)
    else:
        values = {k: bounds.get(k, numpy.float32(default))
                  for k, default in ((1, -math.inf), (2, math.inf))}
        if any(v is None or numpy.size(v) != 1 for v in values.values()):
            return None
        low, high = (float(numpy.reshape(values[k], -1)[0]) for k in (1, 2))
    return float(high) if low == 0 and high >= 0 else None
