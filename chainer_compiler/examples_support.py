"""What the training examples (examples/mnist, examples/imagenet) share: the
flags and the two steps of the seed document's workflow.

    --export FILE   build the model, write it as ONNX at the training batch
                    size, exit (one process);
    --compile FILE  in a fresh process, compile FILE around the model's own
                    Parameters and train the compiled model.

Without either flag an example trains the plain Chainer model, the baseline
the compiled one is compared with.
"""
import numpy

from . import allocators
from .compiled_model import compile_onnx
from .exporting import TRANSLATORS, export
from .pipeline import CompilerOptions
from .recompute import POLICIES


def add_workflow_arguments(parser):
    """Add the workflow's flags to the argparse ``parser``: --export,
    --compile, --translator, --computation-order, --use-unified-memory,
    --no-fixed-batch-dataset (``args.use_fixed_batch_dataset``) and
    --dump-onnx."""
    parser.add_argument('--export', type=str, default=None,
                        help='export the model to this ONNX file and exit')
    parser.add_argument('--compile', type=str, default=None,
                        help='compile this ONNX file and train with it')
    parser.add_argument('--translator', default='onnx_chainer', choices=list(TRANSLATORS))
    parser.add_argument('--computation-order', type=str, default=None,
                        choices=command_line_policies(),
                        help='recompute policy of the compiled backward (default: retain all)')
    parser.add_argument('--use-unified-memory', action='store_true',
                        help='use CUDA unified memory (GPU only)')
    parser.add_argument('--no-fixed-batch-dataset', dest='use_fixed_batch_dataset',
                        action='store_false',
                        help='do not pad the data to a multiple of the batch size')
    parser.add_argument('--dump-onnx', action='store_true',
                        help='write the compiled forward/backward graphs as ONNX')


def command_line_policies():
    """Names of the recompute policies (recompute.POLICIES) that a name
    alone selects; those that need further compiler options (such as
    'custom', which needs ``retain`` or ``order``) are left out."""
    names = []
    for name in POLICIES:
        try:
            CompilerOptions(computation_order=name)
        except ValueError:
            continue
        if name is not None:
            names.append(name)
    return names


def export_model(model, input_shape, device, args):
    """The export part: trace ``model`` on a float32 zero batch of
    ``input_shape`` (its first axis is the batch size every compiled
    iteration must have) and write ``args.export``."""
    if args.use_unified_memory:
        allocators.use_unified_memory_allocator()
    model.to_device(device)
    x = model.xp.zeros(input_shape, numpy.float32)
    export(model, [x], args.export, args.translator)
    print('exported the model to %s' % args.export)


def compile_model(model, device, args):
    """The compile part: the compiled Chain of ``args.compile`` around
    ``model``'s own Parameters (parameters not initialized yet take the
    file's shapes), with the recompute policy ``args.computation_order``."""
    if device.xp is not numpy:
        # The VM and Chainer draw from one CuPy memory pool.
        allocators.use_chainerx_shared_allocator()
    model.to_device(device)
    return compile_onnx(model, args.compile, args.translator, dump_onnx=args.dump_onnx,
                        computation_order=args.computation_order)
