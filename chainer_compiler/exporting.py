"""chainer_compiler.export: a Chainer model to an ONNX file."""
import logging
import os
import tempfile
import time

import numpy
import onnx
from onnx import helper, numpy_helper

from . import __version__
from .runtime.files import atomic_write
from .runtime.validation import is_symbol
from .shapes import infer_shapes

TRANSLATORS = ('onnx_chainer', 'ch2o')

#: metadata_props keys of an exported file: the translator that wrote it
#: and the ai.onnx opset it targets.
TRANSLATOR_KEY = 'chainer_compiler.translator'
OPSET_KEY = 'chainer_compiler.opset'
#: metadata_props key of a file exported with dynamic_axes: the sizes its
#: symbolic dimensions had in the trace ("batch=8"), which compile_onnx
#: compiles for when it is called.
TRACED_SIZES_KEY = 'chainer_compiler.traced_sizes'

_log = logging.getLogger(__name__)


def export(model, inputs, filename=None, translator='onnx_chainer', opset_version=None,
           input_names=None, output_names=None, train=False, external_converters=None,
           dynamic_axes=None):
    """Export ``model`` called on ``inputs`` to ONNX and return the file name.

    ``inputs`` is an array, a Variable, a tuple/list (``model(*inputs)``) or
    a dict (``model(**inputs)``, tracing only).  ``translator``:
    ``'onnx_chainer'`` runs the model once and records what it computed;
    ``'ch2o'`` translates the Python source of ``forward``, so loops, ifs
    and lists that depend on the inputs become ONNX Loop, If and sequences
    (docs/ch2o.md); its inputs may also be Python scalars (0-d tensors) and
    lists of arrays (sequences).  ``filename`` None writes a new temporary
    file; the file is written whole or not at all (an existing one is
    replaced in one step, and left as it was when export fails).
    ``opset_version`` defaults to 17; 11 to 26 are supported.
    ``train=True`` exports training-mode forms (batch statistics, random
    Dropout).  ``external_converters`` maps FunctionNode class names
    to converters ``fn(ctx, call)`` that take precedence over the built-in
    ones.  Graph inputs are named ``input_0``... and outputs ``output_0``...
    unless ``input_names``/``output_names`` say otherwise (distinct,
    non-empty strings, none a parameter's name: ValueError otherwise);
    parameters by their link path (``/predictor/l1/W``).  Every parameter
    and persistent array of the model is in the file, used by the graph or
    not, as ``compile_onnx`` requires.  The file records its producer
    (``chainer-compiler`` and its version) and, in ``metadata_props``, the
    translator and the opset (``compile_onnx`` checks its
    ``used_translator`` against the translator).

    ``dynamic_axes`` makes dimensions symbolic, as ``torch.onnx.export``'s
    does: ``{'input_0': {0: 'batch'}, 'output_0': {0: 'batch'}}`` (or
    ``{'input_0': [0]}``, naming the axis ``input_0_dynamic_axes_1``), or
    the shorthand ``'batch'``: axis 0 of every input and output is the
    symbol ``batch``.  The model is traced a second time with each symbolic
    axis one or more longer, and the two graphs must differ only in
    Reshape targets (the changing entry becomes -1) and in the symbolic
    sizes: anything else that changes (a Python branch on ``x.shape``, a
    constant computed from it, a parameter's shape) is a ValueError naming
    the node.  Parameters never take a symbolic dimension; output axes that
    change with an input's symbol take its name.
    """
    _log.info('exporting %s with translator %s', type(model).__name__, translator)
    start = time.perf_counter()

    def translate(inputs):
        return _translate(model, inputs, translator, opset_version, input_names, output_names,
                          train, external_converters)

    model_proto = translate(inputs)
    if dynamic_axes is not None:
        _make_dynamic(model_proto, dynamic_axes, inputs,
                      lambda probe: _keeping_state(model, translate, probe))
    _record_provenance(model_proto, translator)
    if filename is not None:
        write_onnx(model_proto, filename)
    else:
        fd, filename = tempfile.mkstemp(suffix='.onnx', prefix='chainer_compiler_')
        os.close(fd)
        try:
            write_onnx(model_proto, filename)
        except BaseException:
            os.remove(filename)  # the caller never learns its name
            raise
    _log.info('exported %s to %s (%d nodes) in %.1f s', type(model).__name__, filename,
              len(model_proto.graph.node), time.perf_counter() - start)
    return filename


def _translate(model, inputs, translator, opset_version, input_names, output_names, train,
               external_converters):
    """The ModelProto of ``model`` on ``inputs`` (export's arguments)."""
    if translator == 'ch2o':
        if train or external_converters:
            raise ValueError("translator 'ch2o' exports inference forms (compile_onnx makes "
                             "the training forms); train and external_converters are "
                             "tracing options")
        from .translators.ch2o import export_model as translate
        if isinstance(inputs, dict):
            raise ValueError("translator 'ch2o' takes forward's positional arguments as a "
                             "list or tuple, not a dict")
        model_proto = translate(model, inputs if isinstance(inputs, (list, tuple)) else [inputs],
                                opset_version=opset_version, input_names=input_names,
                                output_names=output_names)
    elif translator == 'onnx_chainer':
        from .translators.onnx_chainer import export_model
        model_proto = export_model(model, inputs, opset_version=opset_version,
                                   input_names=input_names, output_names=output_names,
                                   train=train, external_converters=external_converters)
    else:
        raise ValueError('unknown translator %r: choose one of %s' % (translator, TRANSLATORS))
    return model_proto


def _make_dynamic(proto, dynamic_axes, inputs, translate):
    """Make the axes ``dynamic_axes`` names symbolic in ``proto`` (traced
    on ``inputs``), checked against a second trace by ``translate`` with
    each symbolic axis longer (export's docstring says what may differ)."""
    graph = proto.graph
    initializers = {t.name for t in graph.initializer}
    data_inputs = [v for v in graph.input if v.name not in initializers]
    axes = _dynamic_axes(dynamic_axes, data_inputs, graph.output)
    sizes = {}  # symbol -> (traced size, where)
    for value in data_inputs:
        dims = value.type.tensor_type.shape.dim
        for axis, symbol in axes.get(value.name, {}).items():
            where = "input '%s' axis %d" % (value.name, axis)
            size, first = sizes.setdefault(symbol, (dims[axis].dim_value, where))
            if size != dims[axis].dim_value:
                raise ValueError('dynamic_axes: %s names %s, which is %d there, but %s is %d'
                                 % (where, symbol, dims[axis].dim_value, first, size))
            if size == 0:
                raise ValueError('dynamic_axes: %s (%s) is empty in the example inputs; '
                                 'export with at least one element there' % (where, symbol))
    # Each symbol longer by a different amount, so that sizes tell symbols apart.
    probe_sizes = {symbol: size + 1 + k for k, (symbol, (size, _)) in enumerate(sizes.items())}
    positions = {v.name: i for i, v in enumerate(data_inputs)}
    resized = {positions[name]: {axis: probe_sizes[s] for axis, s in named.items()}
               for name, named in axes.items() if name in positions}
    probe = translate(_resized_inputs(inputs, resized))
    describe = ', '.join('%s=%d' % (s, n) for s, n in probe_sizes.items())
    _check_same_nodes(graph, probe.graph, describe)
    _generalize_constants(graph, probe.graph, describe)
    by_sizes = {(size, probe_sizes[s]): s for s, (size, _) in sizes.items()}
    probe_values = {v.name: v for v in list(probe.graph.input) + list(probe.graph.output)}
    for value in data_inputs + list(graph.output):
        named = axes.get(value.name, {})
        if not value.type.tensor_type.HasField('shape'):
            continue
        probe_dims = probe_values[value.name].type.tensor_type.shape.dim
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            symbol = named.get(axis)
            if symbol is None and dim.dim_value != probe_dims[axis].dim_value:
                symbol = by_sizes.get((dim.dim_value, probe_dims[axis].dim_value))
                if symbol is None:
                    raise ValueError("dynamic_axes: axis %d of '%s' is %d in the trace and %d "
                                     "at %s, not a size of the inputs: name it in dynamic_axes"
                                     % (axis, value.name, dim.dim_value,
                                        probe_dims[axis].dim_value, describe))
            if symbol is not None:
                dim.dim_param = symbol  # clears dim_value (a oneof)
    # Shapes inferred at the traced sizes would contradict the symbols.
    del graph.value_info[:]
    helper.set_model_props(proto, {TRACED_SIZES_KEY: ','.join(
        '%s=%d' % (s, n) for s, (n, _) in sizes.items())})
    try:
        onnx.checker.check_model(proto, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise ValueError('dynamic_axes: the symbolic graph does not check: %s' % e) from e


def _dynamic_axes(dynamic_axes, inputs, outputs):
    """{value name: {axis: symbol}} from export's ``dynamic_axes``."""
    values = {v.name: len(v.type.tensor_type.shape.dim) for v in list(inputs) + list(outputs)
              if v.type.tensor_type.HasField('shape')}
    if dynamic_axes == 'batch':
        return {name: {0: 'batch'} for name, rank in values.items() if rank}
    if not isinstance(dynamic_axes, dict):
        raise ValueError("dynamic_axes is a dict {name: {axis: symbol}} or 'batch', not %r"
                         % (dynamic_axes,))
    axes = {}
    for name, named in dynamic_axes.items():
        if name not in values:
            raise ValueError("dynamic_axes names '%s', which is no tensor input or output "
                             "(they are: %s)" % (name, ', '.join(values)))
        if isinstance(named, (list, tuple)):  # torch's form: names made up
            named = {a: '%s_dynamic_axes_%d' % (name, i + 1) for i, a in enumerate(named)}
        if not isinstance(named, dict):
            raise ValueError("dynamic_axes['%s'] is a dict {axis: symbol} or a list of axes, "
                             "not %r" % (name, named))
        axes[name] = {}
        for axis, symbol in named.items():
            if not isinstance(axis, int) or not -values[name] <= axis < values[name]:
                raise ValueError("dynamic_axes['%s']: axis %r is not an axis of a rank-%d "
                                 "value" % (name, axis, values[name]))
            if not is_symbol(symbol):
                raise ValueError("dynamic_axes['%s']: %r is not a dimension name (an "
                                 "identifier)" % (name, symbol))
            axes[name][axis % values[name]] = symbol
    return axes


def _keeping_state(model, translate, inputs):
    """``translate(inputs)``, ``model``'s persistent arrays as they were
    before (a training-mode trace updates running averages): the second
    trace of dynamic_axes changes nothing the first one did not."""
    from .translators.onnx_chainer.naming import named_arrays
    saved = [(a.link, a.attribute, a.value.copy()) for a in named_arrays(model)
             if not a.is_parameter]
    try:
        return translate(inputs)
    finally:
        for link, attribute, value in saved:
            getattr(link, attribute)[...] = value


def _resized_inputs(inputs, resized):
    """``inputs`` (export's argument) with the arrays at the positions of
    ``resized`` ({position: {axis: size}}) grown to those sizes by
    repeating their elements."""
    import chainer  # only for dynamic_axes: the module loads without Chainer

    def grow(value, new_sizes):
        variable = isinstance(value, chainer.Variable)
        array = value.array if variable else value
        if not hasattr(array, 'shape'):
            raise ValueError('dynamic_axes names an input that is not an array (%s)'
                             % type(value).__name__)
        xp = chainer.backend.get_array_module(array)
        for axis, size in new_sizes.items():
            array = xp.take(array, xp.arange(size) % array.shape[axis], axis=axis)
        return chainer.Variable(array) if variable else array

    if isinstance(inputs, dict):
        return {k: grow(v, resized[i]) if i in resized else v
                for i, (k, v) in enumerate(inputs.items())}
    if not isinstance(inputs, (list, tuple)):
        return grow(inputs, resized[0]) if 0 in resized else inputs
    return type(inputs)(grow(v, resized[i]) if i in resized else v
                        for i, v in enumerate(inputs))


def _check_same_nodes(graph, probe, describe):
    """Refuse a trace whose nodes change with the symbolic sizes."""
    for i, (node, other) in enumerate(zip(graph.node, probe.node)):
        if node != other:
            raise ValueError("dynamic_axes: node %d '%s' (%s) changes with the symbolic sizes "
                             "(traced again at %s it is '%s' (%s)): the model's control flow "
                             "or attributes depend on them" % (i, node.name, node.op_type,
                                                              describe, other.name,
                                                              other.op_type))
    if len(graph.node) != len(probe.node):
        raise ValueError('dynamic_axes: the graph has %d nodes, and %d traced again at %s: '
                         "the model's control flow depends on the symbolic sizes"
                         % (len(graph.node), len(probe.node), describe))


def _generalize_constants(graph, probe, describe):
    """Make the constants that changed in ``probe`` symbolic: a Reshape
    target whose one changing entry becomes -1; refuse any other."""
    changed = {}
    others = {t.name: t for t in probe.initializer}
    for tensor in graph.initializer:
        other = others.get(tensor.name)
        if tensor.name.startswith('/') and other is not None and other.dims == tensor.dims:
            continue  # a parameter or persistent array: running averages may differ
        value = numpy_helper.to_array(tensor)
        if other is None or not numpy.array_equal(value, numpy_helper.to_array(other)) \
                or value.shape != tuple(other.dims):
            changed[tensor.name] = (tensor, value,
                                    None if other is None else numpy_helper.to_array(other))
    checked = set()
    for node in graph.node:
        for slot, name in enumerate(node.input):
            if name not in changed:
                continue
            tensor, value, other = changed[name]
            where = "node '%s' (%s) input %d" % (node.name, node.op_type, slot)
            if name.startswith('/'):  # the exporter's names for parameters
                raise ValueError("dynamic_axes: parameter %s (%s) changes its shape with the "
                                 "symbolic sizes; parameters never take one" % (name, where))
            is_target = node.op_type == 'Reshape' and slot == 1 and other is not None \
                and other.shape == value.shape and value.ndim == 1
            differing = numpy.flatnonzero(value != other) if is_target else ()
            if len(differing) != 1:
                raise ValueError("dynamic_axes: %s is a constant computed from the symbolic "
                                 "sizes (%s in the trace, %s at %s), which the file would get "
                                 "wrong at other sizes: export with fixed sizes"
                                 % (where, _short(value), _short(other), describe))
            checked.add(name)
    unchecked = sorted(set(changed) - checked)
    if unchecked:  # read only inside a Loop or If body
        raise ValueError('dynamic_axes: constant %s changes with the symbolic sizes (traced '
                         'again at %s) and is not a Reshape target' % (unchecked[0], describe))
    for tensor, value, other in changed.values():
        value = numpy.where(value != other, -1, value)
        tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))


def _short(value):
    return 'absent' if value is None else numpy.array2string(numpy.asarray(value), threshold=8)


def with_sizes(model_proto, sizes, source='<model>'):
    """A copy of ``model_proto`` whose graph inputs and outputs have the
    symbolic dimensions named in ``sizes`` ({symbol: size}) set to those
    sizes, its value types inferred again for them: a model of symbolic
    shapes made one of a concrete signature, to compile (compile_onnx,
    ``emit-c --symbolic-dims``).  A symbol no input declares is a
    ValueError naming the ones they do; ``source`` names the model in
    errors of shape inference (InvalidModelError)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model_proto)
    declared = {d.dim_param for v in copy.graph.input for d in v.type.tensor_type.shape.dim
                if d.dim_param}
    unknown = sorted(set(sizes) - declared)
    if unknown:
        raise ValueError('%s: no input has the symbolic dimension %s (the inputs have: %s)'
                         % (source, ', '.join(unknown), ', '.join(sorted(declared)) or 'none'))
    del copy.graph.value_info[:]  # inferred for the symbols: inferred again below
    for value in list(copy.graph.input) + list(copy.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in sizes:
                dim.dim_value = sizes[dim.dim_param]
    return infer_shapes(copy, source)


def _record_provenance(model_proto, translator):
    """Record in ``model_proto`` (whose producer_name the GraphBuilder set)
    the producer's version, the translator and the opset."""
    model_proto.producer_version = __version__
    opset = next(o.version for o in model_proto.opset_import if o.domain in ('', 'ai.onnx'))
    props = {p.key: p.value for p in model_proto.metadata_props}  # dynamic_axes' sizes
    helper.set_model_props(model_proto, {**props, TRANSLATOR_KEY: translator,
                                         OPSET_KEY: str(opset)})


def recorded_translator(model_proto):
    """The translator an exported ``model_proto`` records, or None when it
    records none (a file another tool wrote)."""
    return next((p.value for p in model_proto.metadata_props if p.key == TRANSLATOR_KEY), None)


def write_onnx(model_proto, filename):
    """Write ``model_proto`` to ``filename`` whole or not at all: a failure
    (a model over protobuf's 2 GiB, a full disk) leaves an existing file as
    it was."""
    data = model_proto.SerializeToString()
    with atomic_write(filename) as f:
        f.write(data)
