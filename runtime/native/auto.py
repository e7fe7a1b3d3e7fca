"""backend='auto': the native backend when it can run a Program, else the
NumPy VM, decided from the Program and the machine without building C.

Native needs a C compiler (library.find_compiler), tensor inputs of static
shapes and of dtypes the C stores, no NaN checks or memory tracking (the
VM's instruments), and every instruction either lowered (its OpRecord's
'native' stage, asked here at run time, so a lowering added later counts)
or evaluated at emit time (folding.py: Shape and Size, and what computes
only on them and on constants).  What this cannot see (a lowering that
refuses an attribute or dtype, a failing compiler) the Executor meets when
it builds the library, and then falls back to NumPy with a warning.

CuPy is never chosen: a GPU pays a copy of the inputs and outputs at every
call and a launch per kernel, which small batches do not repay, and a GPU
being present says nothing about whether the caller's arrays live there;
a model on the GPU asks for 'cupy' itself.
"""
import os

from ..errors import NativeBuildError
from ..ops.registry import draws_random, has_kernel
from ..program import NO_REGISTER, Program
from .cformat import C_TYPES
from .folding import SHAPE_ONLY
from .library import find_compiler
from .lowering import lowering_for


def choose_backend(program: Program, instruments=()) -> tuple[str, str]:
    """('native' or 'numpy', why: the words the log line gives in
    parentheses) for ``program``; ``instruments`` names the Executor's
    options only the VM has (check_nans, track_memory)."""
    if instruments:
        return 'numpy', '%s needs the VM' % ', '.join(instruments)
    try:
        compiler = os.path.basename(find_compiler()[0])
    except NativeBuildError:
        return 'numpy', 'no C compiler: $CC is not an executable, or none of cc, gcc, ' \
                        'clang is on PATH'
    for v in program.inputs:
        if v.kind != 'tensor' or str(v.dtype) not in C_TYPES or v.shape is None or \
                not all(isinstance(d, int) for d in v.shape):
            # %r: a name is the Program's text, kept to one line of the log.
            return 'numpy', 'input %r is not a tensor of static shape and a C dtype' % v.name
    missing = unlowered(program)
    if missing:
        return 'numpy', 'no native lowering for %s' % ', '.join(missing)
    count = len(program.instructions)
    return 'native', '%s found, all %d instruction%s lowered' % (compiler, count,
                                                                 '' if count == 1 else 's')


def unlowered(program: Program) -> list[str]:
    """The operators of ``program``'s instructions that the C can neither
    run nor evaluate at emit time, each once, in program order."""
    known = set(program.constants)  # registers whose values emit time knows
    missing: dict[str, None] = {}
    for inst in program.instructions:
        body = any(isinstance(v, Program) for v in inst.attrs.values())
        inputs = [r for r in inst.inputs if r != NO_REGISTER]
        if not body and inst.domain in ('', 'ai.onnx') and (inst.op in SHAPE_ONLY or (
                set(inputs) <= known and has_kernel(inst.op, inst.domain, inst.version)
                and not draws_random(inst.op, inst.domain))):
            known.update(inst.outputs)
        elif body or lowering_for(inst.op, inst.domain) is None:
            missing[inst.qualified_op] = None
    return list(missing)
