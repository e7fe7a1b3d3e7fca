"""The fusion rules the VM's fusion (chainer_compiler/passes/vm_fusion.py)
and the native backend's (runtime/native/fusion.py) share, read from the
operators' records: which activation a product may apply as it stores its
result (OpRecord.epilogue) and with which slope.  Neither pass keeps a
list of its own."""
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
