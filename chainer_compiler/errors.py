"""The compiler's own error types.  Each message names the file or node and
the problem; the command line turns them into one line and exit status 2."""


class InvalidModelError(Exception):
    """The file is not a valid ONNX model (the message says why)."""


class ModelMismatchError(InvalidModelError):
    """The ONNX file does not match the model's parameters and persistent
    arrays: the message names the file and lists each one missing in the
    file, unknown to the model, or of another dtype or shape."""


class BackwardReleasedError(RuntimeError):
    """A compiled training step's backward ran a second time: its first run
    freed the values the forward program retained for it."""


class UnsupportedOperatorsError(Exception):
    """The model uses operators the VM has no kernel for; lists every one."""

    def __init__(self, missing):
        self.missing = missing  # list of (qualified op, version, node name)
        by_op = {}
        for op, version, node_name in missing:
            by_op.setdefault((op, version), []).append(node_name)
        lines = ['%s (opset version %d) in node(s) %s' % (op, version, ', '.join(names))
                 for (op, version), names in sorted(by_op.items())]
        super().__init__('%d node(s) use operators the VM does not support:\n  %s'
                         % (len(missing), '\n  '.join(lines)))


class InvalidTestDataError(Exception):
    """An ONNX test folder or data set file is missing, misnamed or
    malformed; the message names the file."""
