"""The native backend's errors (the runtime's RuntimeVMError family)."""
from ..errors import RuntimeVMError


class NativeEmitError(RuntimeVMError):
    """The Program cannot become C: a value without a static shape or of a
    dtype the C backend does not handle, or a bad model name."""


class UnsupportedNativeOpsError(NativeEmitError):
    """Instructions the C kernels cannot run; ``problems`` lists
    (instruction index, description, reason) for every one of them."""

    def __init__(self, problems: list[tuple[int, str, str]]):
        self.problems = problems
        super().__init__("backend 'native' cannot emit C for %d instruction(s):\n%s" % (
            len(problems), '\n'.join('  %s: %s' % (d, r) for _, d, r in problems)))

