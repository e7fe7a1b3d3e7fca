"""chainer_compiler.export: a Chainer model to an ONNX file."""
import os
import tempfile

import onnx

TRANSLATORS = ('onnx_chainer', 'ch2o')


def export(model, inputs, filename=None, translator='onnx_chainer', opset_version=None,
           input_names=None, output_names=None, train=False, external_converters=None):
    """Export ``model`` called on ``inputs`` to ONNX and return the file name.

    ``inputs`` is an array, a Variable, a tuple/list (``model(*inputs)``) or
    a dict (``model(**inputs)``).  ``filename`` None writes a new temporary
    file.  ``opset_version`` defaults to 17; 11 to 26 are supported.
    ``train=True`` exports training-mode forms (batch statistics,
    random Dropout).  ``external_converters`` maps FunctionNode class names
    to converters ``fn(ctx, call)`` that take precedence over the built-in
    ones.  Graph inputs are named ``input_0``... and outputs ``output_0``...
    unless ``input_names``/``output_names`` say otherwise; parameters by
    their link path (``/predictor/l1/W``).
    """
    if translator == 'ch2o':
        raise ValueError("translator 'ch2o' (the Python-AST translator) is not available yet; "
                         "use translator='onnx_chainer'")
    if translator != 'onnx_chainer':
        raise ValueError('unknown translator %r: choose one of %s' % (translator, TRANSLATORS))
    from .translators.onnx_chainer import export_model
    model_proto = export_model(model, inputs, opset_version=opset_version,
                               input_names=input_names, output_names=output_names,
                               train=train, external_converters=external_converters)
    if filename is None:
        fd, filename = tempfile.mkstemp(suffix='.onnx', prefix='chainer_compiler_')
        os.close(fd)
    onnx.save(model_proto, filename)
    return filename
