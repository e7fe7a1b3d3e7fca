"""Exceptions raised by the VM. Each names what went wrong and where."""


class RuntimeVMError(Exception):
    """Base class of every error the VM raises on purpose."""


class UnsupportedOperatorError(RuntimeVMError):
    """No kernel is registered for an operator (or for its opset version)."""

    def __init__(self, op, domain='', version=None, node_name=''):
        self.op = op
        self.domain = domain
        self.version = version
        self.node_name = node_name
        qualified = '%s::%s' % (domain, op) if domain else op
        where = " (node '%s')" % node_name if node_name else ''
        ver = ' at opset version %s' % version if version is not None else ''
        super().__init__('no kernel for operator %s%s%s' % (qualified, ver, where))


class KernelError(RuntimeVMError):
    """A kernel rejected its inputs; the message names the instruction."""


class InputValidationError(RuntimeVMError):
    """Program inputs do not match the declared names, dtypes or shapes."""


class OutputValidationError(RuntimeVMError):
    """A program output does not have its declared dtype or shape."""


class NonFiniteError(RuntimeVMError):
    """An instruction produced NaN or Inf while NaN checks were enabled."""


class ProgramFormatError(RuntimeVMError):
    """A Program file is not one this version can read, is damaged, or holds
    a malformed Program (as may a Program built in memory)."""


class KernelBindError(ProgramFormatError):
    """A kernel cannot accept the static attributes of an instruction."""


class ConfigurationError(RuntimeVMError, ValueError):
    """An option or an environment variable has a value it cannot take;
    the message names it."""


class NativeBuildError(RuntimeVMError):
    """backend='native' cannot build its library: no C compiler, or the
    compiler failed (the message quotes its first error lines)."""
