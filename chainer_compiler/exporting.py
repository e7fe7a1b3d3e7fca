"""chainer_compiler.export: a Chainer model to an ONNX file."""
import logging
import os
import tempfile
import time

from onnx import helper

from . import __version__
from .runtime.files import atomic_write

TRANSLATORS = ('onnx_chainer', 'ch2o')

#: metadata_props keys of an exported file: the translator that wrote it
#: and the ai.onnx opset it targets.
TRANSLATOR_KEY = 'chainer_compiler.translator'
OPSET_KEY = 'chainer_compiler.opset'

_log = logging.getLogger(__name__)


def export(model, inputs, filename=None, translator='onnx_chainer', opset_version=None,
           input_names=None, output_names=None, train=False, external_converters=None):
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
    """
    _log.info('exporting %s with translator %s', type(model).__name__, translator)
    start = time.perf_counter()
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


def _record_provenance(model_proto, translator):
    """Record in ``model_proto`` (whose producer_name the GraphBuilder set)
    the producer's version, the translator and the opset."""
    model_proto.producer_version = __version__
    opset = next(o.version for o in model_proto.opset_import if o.domain in ('', 'ai.onnx'))
    helper.set_model_props(model_proto, {TRANSLATOR_KEY: translator, OPSET_KEY: str(opset)})


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
