"""ONNX schemas of this project's own training operators.

``passes/training_mode.py`` rewrites BatchNormalization into
``BatchNormalizationTraining``; registering its schema lets
``onnx.shape_inference`` type the operator's outputs like any other.
"""
import atexit

from onnx import defs, helper

from .runtime.ops.registry import CUSTOM_DOMAIN

_registered = False


def register_schemas():
    """Register the schemas with ONNX (once per process)."""
    global _registered
    if _registered:
        return
    _registered = True
    name = 'BatchNormalizationTraining'
    param = defs.OpSchema.FormalParameter
    schema = defs.OpSchema(
        name, CUSTOM_DOMAIN, 1,
        'Batch normalization with the batch statistics and Chainer\'s update of the '
        'running averages (unbiased variance).',
        inputs=[param('X', 'T'), param('scale', 'U'), param('B', 'U'),
                param('running_mean', 'U'), param('running_var', 'U')],
        outputs=[param('Y', 'T'), param('new_running_mean', 'U'),
                 param('new_running_var', 'U'), param('saved_mean', 'U'),
                 param('saved_inv_std', 'U')],
        type_constraints=[
            ('T', ['tensor(float16)', 'tensor(float)', 'tensor(double)', 'tensor(bfloat16)'],
             'X and Y'),
            ('U', ['tensor(float16)', 'tensor(float)', 'tensor(double)', 'tensor(bfloat16)'],
             'parameters and statistics')],
        attributes=[
            defs.OpSchema.Attribute('epsilon', helper.make_attribute('epsilon', 1e-5),
                                    'added to the variance'),
            defs.OpSchema.Attribute('momentum', helper.make_attribute('momentum', 0.9),
                                    'Chainer\'s decay')])

    def infer(ctx):
        def copy(out, inp):
            if out < ctx.get_num_outputs() and inp < ctx.get_num_inputs():
                ctx.set_output_type(out, ctx.get_input_type(inp))
        copy(0, 0)
        copy(1, 3)
        copy(2, 4)
        copy(3, 3)
        copy(4, 3)

    schema.set_type_and_shape_inference_function(infer)
    defs.register_schema(schema)
    # ONNX's registry would outlive the interpreter and release the Python
    # inference function after it is gone (a crash at exit): unregister first.
    atexit.register(defs.deregister_schema, name, 1, CUSTOM_DOMAIN)

