"""Gradient rules for the connection family.

Conv's input gradient is a ConvTranspose of gy with the same weights (its
``output_padding`` restores the input rows a strided window never reached);
the weight gradient is the custom ``ConvGradFilter`` (im2col + one GEMM per
group over batch and window positions together).  ConvTranspose is Conv's
adjoint, so the roles swap: its input gradient is a Conv of gy, its weight
gradient ConvGradFilter with gy as the image.  Padding is resolved at
compile time where shapes are static, auto_pad included; where x's size is
known only at run time, Conv's input gradient is padded to it instead.
"""
from ..onnx_graph import optional_input
from ..runtime.ops.connection import conv_transpose_padding, window_geometry
from ..runtime.ops.registry import CUSTOM_DOMAIN
from .registry import GradientError, gradient


def _bias_grad(b, gy, ndim):
    """Gradient of a per-channel bias: gy summed over batch and space."""
    return b.reduce('ReduceSum', gy, [0] + list(range(2, ndim)), keepdims=False)


def _conv_attributes(b, node):
    """(x shape, spatial rank, kernel, group, strides, dilations) of a Conv
    or ConvTranspose node, defaults filled in."""
    x_shape = b.dims(node.input[0])
    n = len(x_shape) - 2
    kernel = list(b.shape(node.input[1])[2:])
    strides = list(b.attr(node, 'strides') or [1] * n)
    dilations = list(b.attr(node, 'dilations') or [1] * n)
    return x_shape, n, kernel, b.attr(node, 'group'), strides, dilations


@gradient('Conv')
def conv_grad(b, node, gys):
    gy, = gys
    x, w = node.input[:2]
    x_shape, n, kernel, group, strides, dilations = _conv_attributes(b, node)
    kernel = tuple(kernel)
    if all(isinstance(d, int) for d in x_shape[2:]):
        gx, pads = _conv_input_grad(b, node, gy, x_shape, kernel, group, strides, dilations)
    else:
        gx, pads = _conv_input_grad_dynamic(b, node, gy, kernel, group, strides, dilations)
    gw = b.node('ConvGradFilter', [x, gy], 1, domain=CUSTOM_DOMAIN, kernel_shape=list(kernel),
                strides=strides, dilations=dilations, pads=pads, group=group)
    grads = [gx, gw]
    if optional_input(node, 2):
        grads.append(_bias_grad(b, gy, len(x_shape)))
    return grads + [None] * (len(node.input) - len(grads))


def _conv_input_grad(b, node, gy, x_shape, kernel, group, strides, dilations):
    """(Conv's input gradient, its resolved pads) when x's size is static."""
    n = len(kernel)
    window = window_geometry(x_shape[2:], kernel, strides, dilations,
                             b.attr(node, 'pads'), b.attr(node, 'auto_pad'))
    pads = list(window.pads_begin + window.pads_end)
    # Input rows after the last full window get no gradient: output_padding
    # makes ConvTranspose's result exactly as large as x.
    output_padding = [x_shape[2 + i] + pads[i] + pads[n + i]
                      - ((kernel[i] - 1) * dilations[i] + 1)
                      - strides[i] * (window.out[i] - 1) for i in range(n)]
    gx = b.node('ConvTranspose', [gy, node.input[1]], 1, kernel_shape=list(kernel),
                strides=strides, dilations=dilations, pads=pads, group=group,
                output_padding=output_padding if any(output_padding) else None)
    return gx, pads


def _conv_input_grad_dynamic(b, node, gy, kernel, group, strides, dilations):
    """(Conv's input gradient, its pads) when x's spatial size is known
    only at run time: the ConvTranspose of gy, cropped of the begin pads
    only, is cut or padded at the end to x's run-time size (the end pads
    and the rows no window reached), in place of its ``output_padding``.
    Explicit pads only (SAME padding depends on the size)."""
    x, w = node.input[:2]
    n = len(kernel)
    auto_pad = b.attr(node, 'auto_pad')
    if auto_pad not in ('NOTSET', 'VALID') or b.opset < 11:
        raise GradientError('the gradient of %s (auto_pad %s) for %s, whose size is known '
                            'only at run time, needs explicit pads and opset 11'
                            % (node.name or node.op_type, auto_pad, x))
    pads = list(b.attr(node, 'pads') or [0] * (2 * n)) if auto_pad == 'NOTSET' \
        else [0] * (2 * n)
    spread = b.node('ConvTranspose', [gy, w], 1, kernel_shape=list(kernel), strides=strides,
                    dilations=dilations, pads=pads[:n] + [0] * n, group=group)
    size = b.shape_tensor(x)
    zeros = b.int64s([0] * (n + 2))
    missing = b.node('Max', [b.node('Sub', [size, b.node('Shape', [spread])]), zeros])
    padded = b.node('Pad', [spread, b.node('Concat', [zeros, missing], axis=0)])
    return b.node('Slice', [padded, zeros, size]), pads


def _conv_transpose_pads(b, node, in_shape, kernel, strides, dilations):
    """(begin, end, output spatial shape) of a ConvTranspose, resolved by
    the runtime kernel's own rule."""
    return conv_transpose_padding(
        in_shape, kernel, strides, dilations, b.attr(node, 'output_padding'),
        b.attr(node, 'output_shape'), b.attr(node, 'auto_pad'),
        b.attr(node, 'pads'))


@gradient('ConvTranspose')
def conv_transpose_grad(b, node, gys):
    gy, = gys
    x, w = node.input[:2]
    x_shape, n, kernel, group, strides, dilations = _conv_attributes(b, node)
    in_shape = list(x_shape[2:])
    begin, end, out = _conv_transpose_pads(b, node, in_shape, kernel, strides, dilations)
    # x[s] feeds y[s * stride + k * dilation - begin]: a Conv over gy with
    # pads (begin, end') whose windows are exactly x's positions.  Negative
    # pads (an output_shape larger than the full result) become crops.
    crop_lo = [max(0, -p) for p in begin]
    begin = [max(0, p) for p in begin]
    end = []
    crop_hi = []
    for i in range(n):
        size = out[i] - crop_lo[i]
        need = strides[i] * (in_shape[i] - 1) + (kernel[i] - 1) * dilations[i] + 1 \
            - size - begin[i]
        end.append(max(0, need))
        crop_hi.append(size + min(0, need))
    if any(crop_lo) or any(c != o for c, o in zip(crop_hi, out)):
        gy = b.slice(gy, [c + 0 for c in crop_lo], [lo + hi for lo, hi in zip(crop_lo, crop_hi)],
                     list(range(2, 2 + n)))
    pads = begin + end
    gx = b.node('Conv', [gy, w], 1, kernel_shape=kernel, strides=strides, dilations=dilations,
                pads=pads, group=group)
    gw = b.node('ConvGradFilter', [gy, x], 1, domain=CUSTOM_DOMAIN, kernel_shape=kernel,
                strides=strides, dilations=dilations, pads=pads, group=group)
    grads = [gx, gw]
    if optional_input(node, 2):
        grads.append(_bias_grad(b, gys[0], len(x_shape)))
    return grads + [None] * (len(node.input) - len(grads))
