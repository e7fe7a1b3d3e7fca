"""The fusion rules the VM's fusion (chainer_compiler/passes/vm_fusion.py)
and the native backend's (runtime/native/fusion.py) share, read from the
operators' records: which activation a product may apply as it stores its
result (OpRecord.epilogue) and with which slope.  Neither pass keeps a
list of its own."""
import math

import numpy

from .registry import lookup, records

#: The epilogues the VM's FusedGemm kernel applies (math.fused_gemm); the
#: native kernels apply every one of epilogue_ops().
VM_GEMM_EPILOGUES = ('Relu',)


def epilogue_ops() -> list[str]:
    """The activations (default domain) a product may apply as it stores
    its result: those whose records say ``epilogue``."""
    return [r.op for r in records() if r.epilogue and r.domain == '']


def epilogue_alpha(op: str, attrs: dict) -> float:
    """The ``activation_alpha`` of epilogue ``op`` given its node's
    ``attrs``: its ``alpha`` attribute, the kernel's default when absent
    (LeakyRelu's slope), 0 for an activation without one."""
    alpha = lookup(op).with_defaults(attrs).get('alpha')
    return 0.0 if alpha is None else float(alpha)


def vm_gemm_epilogue(op: str, domain: str) -> bool:
    """Whether the VM fuses activation ``op`` into the Gemm before it (a
    FusedGemm): an epilogue its kernel applies."""
    return domain in ('', 'ai.onnx') and op in VM_GEMM_EPILOGUES and op in epilogue_ops()


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
