"""The native backend: a Program as plain C (no Python at run time).

``emit_c(program, directory, name)`` writes ``NAME.h`` (the C API),
``NAME.c`` (the program as straight-line kernel calls over one planned
arena), ``NAME_weights.c`` (the constants), the kernel sources it needs,
``main.c`` (a command line reading and writing .npy files) and a Makefile.
library.py builds the same C into a cached shared library for
``Executor(backend='native')``; auto.py decides ``backend='auto'``.
emit_c.py runs the backend's stages: lower.py (folding and the
lowerings), plan.py (the arena) and render.py (the files' text);
lowering.py is the interface between the emitter and the per-family
lowerings in lowerings/.

The VM imports this package only when a native or auto Executor is built
(executor.py), so a NumPy run loads none of it.  Importing the package
loads the emitter: ``emit_c`` stays an eager export, because once the
submodule of the same name is imported it would shadow a lazy one.
"""
from .arena import plan_arena
from .emit_c import EmitResult, emit_c
from .errors import NativeEmitError, UnsupportedNativeOpsError

__all__ = ['EmitResult', 'NativeEmitError', 'UnsupportedNativeOpsError', 'emit_c', 'plan_arena']
