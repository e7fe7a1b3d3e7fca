"""The table of supported Chainer functions, generated from the registry.

    python -m chainer_compiler.translators.onnx_chainer.function_table > docs/supported_functions.md
"""
from .registry import supported_functions

#: FunctionNodes the reference exporter (onnx-chainer 1.6, bundled with
#: Chainer 7.8.1 as the top-level ``onnx_chainer``) converts, for comparison.
#: It also lists names no Chainer 7.8.1 function records, left out here:
#: ``Shape``; ``Selu`` (F.selu is ELU * scale); ``MaxPooling2D`` (2-D max
#: pooling records ``MaxPoolingND``); ``sign`` and ``n_step_gru`` (plain
#: functions: see recordable.py and rnn.py).
ONNX_CHAINER_FUNCTIONS = frozenset("""
ClippedReLU ELU HardSigmoid LeakyReLU LogSoftmax PReLUFunction ReLU Sigmoid Softmax Softplus
Tanh Cast Concat Copy Depth2Space Dstack ExpandDims GetItem Hstack Moveaxis Pad Permutate Repeat
Reshape ResizeImages Rollaxis SelectItem Separate Space2Depth SplitAxis Squeeze Stack
Swapaxes Tile Transpose TransposeSequence Vstack Where Convolution2DFunction ConvolutionND
Deconvolution2DFunction DeconvolutionND EmbedIDFunction LinearFunction SoftmaxCrossEntropy
Absolute Add AddConstant Arccos Arcsin Arctan ArgMax ArgMin BroadcastTo Clip Cos Cosh Div
DivFromConstant Exp Identity LinearInterpolate Log LogSumExp MatMul Max Maximum Mean Min Minimum
Mul MulConstant Neg PowConstVar PowVarConst PowVarVar Prod Sin Sinh Sqrt Square Sub
SubFromConstant Sum Tan Dropout BatchNormalization FixedBatchNormalization GroupNormalization
LocalResponseNormalization NormalizeL2 AveragePooling2D AveragePoolingND
MaxPoolingND ROIPooling2D Unpooling2D
""".split())


def markdown():
    """The docs/supported_functions.md text."""
    table = supported_functions()
    ours = set(table)
    lines = [
        '# Chainer functions the tracing translator exports',
        '',
        'Generated from the converter registry by',
        '`python -m chainer_compiler.translators.onnx_chainer.function_table`; do not edit.',
        '',
        '%d FunctionNodes are supported; onnx-chainer 1.6 supported %d, of which %d are here%s.'
        % (len(ours), len(ONNX_CHAINER_FUNCTIONS), len(ours & ONNX_CHAINER_FUNCTIONS),
           '' if ONNX_CHAINER_FUNCTIONS <= ours else ' (missing: %s)'
           % ', '.join(sorted(ONNX_CHAINER_FUNCTIONS - ours))),
        '',
        '| family | FunctionNode | in onnx-chainer 1.6 |',
        '|---|---|---|',
    ]
    for name, family in sorted(table.items(), key=lambda item: (item[1], item[0])):
        lines.append('| %s | `%s` | %s |' % (family, name,
                                           'yes' if name in ONNX_CHAINER_FUNCTIONS else 'new'))
    return '\n'.join(lines) + '\n'


if __name__ == '__main__':
    print(markdown(), end='')
