"""The chainer-compiler VM.

Runs a compiled Program on NumPy (CPU) or CuPy (GPU).  This package imports
only the standard library, NumPy and, when asked for, CuPy, so a compiled
model runs where neither Chainer nor ONNX is installed.
"""
from .backend import cupy_unavailable_reason, default_backend, get_array_module
from .errors import (
                     InputValidationError,
                     KernelBindError,
                     KernelError,
                     NonFiniteError,
                     OutputValidationError,
                     ProgramFormatError,
                     RuntimeVMError,
                     UnsupportedOperatorError,
)
from .executor import Executor
from .profiling import Tracer
from .program import NO_REGISTER, Instruction, Program, ValueInfo
from .serialization import load_program, save_program
from .validation import validate_program

__all__ = [
    'Executor', 'Instruction', 'InputValidationError', 'KernelBindError', 'KernelError',
    'NO_REGISTER', 'NonFiniteError', 'OutputValidationError', 'Program', 'ProgramFormatError',
    'RuntimeVMError', 'Tracer', 'UnsupportedOperatorError', 'ValueInfo',
    'cupy_unavailable_reason', 'default_backend', 'get_array_module', 'load_program',
    'save_program', 'validate_program',
]
