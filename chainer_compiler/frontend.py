"""The compiler front: ONNX model in, Program out.

load -> onnx.checker -> inline local functions -> shape inference ->
expand kernel-less operators into their function bodies -> fold constants
-> remove dead code -> check every operator has a kernel -> emit a Program
with liveness-based frees.
"""
import os

import onnx
import onnx.inliner
from onnx import shape_inference

from .codegen import emit_program
from .onnx_graph import all_nodes, opset_versions, schema_version
from .passes.constant_folding import fold_constants
from .passes.dead_code import remove_dead_code
from .passes.expand_functions import expand_functions
from .runtime.ops.registry import has_kernel

#: The newest ai.onnx opset onnx 1.22 defines.
MAX_OPSET = onnx.defs.onnx_opset_version()


class InvalidModelError(Exception):
    """The file is not a valid ONNX model (the message says why)."""


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


def load_onnx(model, check=True):
    """Load an ONNX model (path, bytes or ModelProto), check it and infer
    shapes.  Raises InvalidModelError with the file name and the reason."""
    source = model if isinstance(model, (str, os.PathLike)) else '<model>'
    if isinstance(model, (str, os.PathLike)):
        if not os.path.exists(model):
            raise InvalidModelError('ONNX file %s does not exist' % model)
        try:
            model = onnx.load(model)
        except Exception as e:
            raise InvalidModelError('%s is not a readable ONNX model: %s' % (source, e)) from e
    elif isinstance(model, bytes):
        model = onnx.load_from_string(model)
    else:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    opset = opset_versions(model).get('')
    if opset is not None and opset > MAX_OPSET:
        raise InvalidModelError('%s uses ai.onnx opset %d; this onnx (%s) knows opsets up to %d'
                                % (source, opset, onnx.__version__, MAX_OPSET))
    if check:
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as e:
            raise InvalidModelError('%s fails onnx.checker: %s' % (source, e)) from e
    if model.functions:
        model = onnx.inliner.inline_local_functions(model)
    return shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)


def build_program(model, check=True, fold=True):
    """Compile an ONNX model (path, bytes or ModelProto) into a Program.

    Raises InvalidModelError for a broken model and UnsupportedOperatorsError
    listing every node whose operator has no kernel.
    """
    model = expand_functions(load_onnx(model, check=check))
    opsets = opset_versions(model)
    if fold:
        fold_constants(model.graph, opsets)
    remove_dead_code(model.graph)
    missing = [('%s::%s' % (n.domain, n.op_type) if n.domain else n.op_type,
                schema_version(n, opsets), n.name or 'unnamed')
               for n in all_nodes(model.graph)
               if not has_kernel(n.op_type, n.domain, schema_version(n, opsets))]
    if missing:
        raise UnsupportedOperatorsError(missing)
    return emit_program(model.graph, opsets)
