"""ONNX schemas of this project's own operators (the org.chainer_compiler
domain), generated from their kernels' records and registered so that
``onnx.shape_inference`` types their outputs and ``onnx.checker`` checks
their nodes like any other operator's.

A schema's inputs are its kernel's positional parameters (optional where
they have a default), its attributes the keyword-only ones (typed by their
default, or by the record's ``attributes``), its outputs the record's
``outputs`` (all but the first optional when the kernel takes
``n_outputs``), and its inference function the record's type rule.  Every
input and output may be a tensor of any element type: the type rules say
which.
"""
import atexit
import inspect

import numpy
import onnx
from onnx import defs, helper, shape_inference

from .onnx_graph import attribute_value
from .runtime.ops import CUSTOM_DOMAIN, registered_kernels

_registered = False

_A = defs.OpSchema.AttrType
#: The ONNX attribute types OpRecord.attributes names.
_ATTRIBUTE_TYPES = {'int': _A.INT, 'ints': _A.INTS, 'float': _A.FLOAT, 'floats': _A.FLOATS,
                    'string': _A.STRING, 'strings': _A.STRINGS}

#: Every tensor type ONNX knows.
_TENSOR_TYPES = ['tensor(%s)' % name.lower() for name, value in
                 onnx.TensorProto.DataType.items() if value != onnx.TensorProto.UNDEFINED]


def register_schemas():
    """Register the schema of every operator of this project's domain whose
    kernel declares its outputs, with ONNX (once per process)."""
    global _registered
    if _registered:
        return
    _registered = True
    for spec in registered_kernels():
        if spec.domain == CUSTOM_DOMAIN and spec.record.outputs is not None:
            defs.register_schema(schema(spec))
            # ONNX's registry would outlive the interpreter and release the
            # Python inference function after it is gone (a crash at exit):
            # unregister first.
            atexit.register(defs.deregister_schema, spec.op, 1, CUSTOM_DOMAIN)


def schema(spec):
    """The OpSchema (version 1) of the custom-domain kernel ``spec``."""
    record = spec.record
    if record.types is None:
        raise TypeError('%s declares its outputs but no type rule (OpRecord.types)' % spec.op)
    param = defs.OpSchema.FormalParameter
    option = defs.OpSchema.FormalParameterOption
    params = list(inspect.signature(spec.fn).parameters.values())[1:]  # after xp
    inputs = [p for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    attributes = [p for p in params if p.kind == p.KEYWORD_ONLY and p.name != 'n_outputs']
    result = defs.OpSchema(
        spec.op, CUSTOM_DOMAIN, 1, inspect.cleandoc(spec.fn.__doc__ or ''),
        inputs=[param(p.name, 'I%d' % i,
                      'updated in place' if i in record.updated_inputs else '',
                      param_option=option.Single if p.default is p.empty else option.Optional)
                for i, p in enumerate(inputs)],
        outputs=[param(name, 'O%d' % i, param_option=option.Optional
                       if i and spec.accepts_n_outputs else option.Single)
                 for i, name in enumerate(record.outputs)],
        type_constraints=[(t, _TENSOR_TYPES, '') for t in
                          ['I%d' % i for i in range(len(inputs))]
                          + ['O%d' % i for i in range(len(record.outputs))]],
        attributes=[_attribute(spec.op, p, record.attributes or {}) for p in attributes])
    result.set_type_and_shape_inference_function(_inference(record.types, attributes))
    return result


def _attribute(op, parameter, declared):
    """The OpSchema.Attribute of a keyword-only ``parameter`` of ``op``'s
    kernel, its type ``declared`` or told by its default."""
    name, default = parameter.name, parameter.default
    if name in declared:
        return defs.OpSchema.Attribute(name, _ATTRIBUTE_TYPES[declared[name]], '',
                                       required=default is parameter.empty)
    if default is parameter.empty or default is None:
        raise TypeError('%s: declare the type of attribute %s (OpRecord.attributes)'
                        % (op, name))
    return defs.OpSchema.Attribute(name, helper.make_attribute(name, default), '')


def _inference(rule, attributes):
    """An ONNX inference function applying the type ``rule`` (see
    runtime/ops/registry.py) to a node with the kernel's ``attributes``
    (its keyword-only parameters)."""
    defaults = {p.name: p.default for p in attributes if p.default is not p.empty}

    def infer(ctx):
        inputs = [_signature(ctx.get_input_type(i)) if ctx.has_input(i) else None
                  for i in range(ctx.get_num_inputs())]
        values = dict(defaults)
        for p in attributes:
            attr = ctx.get_attribute(p.name)
            if attr is not None:
                values[p.name] = attribute_value(attr)
        try:
            types = rule(inputs, values)
        except (LookupError, TypeError, ValueError) as e:
            # A malformed node (a required attribute missing ...): say which.
            raise shape_inference.InferenceError(
                '%s: its type rule failed: %s: %s'
                % (ctx.get_display_name(), type(e).__name__, e)) from e
        for k, typed in enumerate(types[:ctx.get_num_outputs()]):
            if typed is not None:
                ctx.set_output_type(k, _type_proto(*typed))
    return infer


def _signature(type_proto):
    """(element type, shape) of a tensor TypeProto for a type rule, None when
    it is not a typed tensor."""
    if type_proto is None or type_proto.WhichOneof('value') != 'tensor_type' \
            or not type_proto.tensor_type.elem_type:
        return None
    t = type_proto.tensor_type
    shape = None
    if t.HasField('shape'):
        shape = tuple(d.dim_value if d.HasField('dim_value') else (d.dim_param or None)
                      for d in t.shape.dim)
    return t.elem_type, shape


def _type_proto(dtype, shape):
    """The tensor TypeProto of a type rule's (dtype, shape)."""
    if isinstance(dtype, str):  # a NumPy dtype name
        dtype = helper.np_dtype_to_tensor_dtype(numpy.dtype(dtype))
    return helper.make_tensor_type_proto(dtype, None if shape is None else list(shape))
