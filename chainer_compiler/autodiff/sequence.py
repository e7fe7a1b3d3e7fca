"""Gradient rules for the sequence family.

The gradient of a sequence is the sequence of its elements' gradients, of
the same length (BackwardBuilder.add_gradients sums two element by
element).  Lengths and positions are run-time values, so the rules build
what they need with sequence operators instead of static shapes.
SequenceEmpty has no inputs and SequenceLength (an integer) is declared
without gradient in its kernel's record.
"""
import numpy

from ..onnx_graph import optional_input
from .registry import gradient


def _from_front(b, position, length):
    """``position`` (ONNX counts negative ones from the back) as an index
    from the front of a sequence of ``length`` elements."""
    zero = b.constant(numpy.zeros((), numpy.int64), hint='zero')
    negative = b.node('Less', [position, zero])
    return b.node('Where', [negative, b.node('Add', [position, length]), position])


def _length(b, seq, less=0):
    """SequenceLength of ``seq``, minus ``less``."""
    length = b.node('SequenceLength', [seq])
    if less:
        length = b.node('Sub', [length, b.constant(numpy.asarray(less, numpy.int64), hint='n')])
    return length


@gradient('SequenceConstruct')
def sequence_construct_grad(b, node, gys):
    gy, = gys
    return [b.node('SequenceAt', [gy, b.constant(numpy.asarray(i, numpy.int64), hint='i')])
            for i in range(len(node.input))]


@gradient('SequenceInsert')
def sequence_insert_grad(b, node, gys):
    # The inserted tensor's gradient is the output gradient's element at its
    # position; the rest is the input sequence's.
    gy, = gys
    position = optional_input(node, 2)
    if not position:  # appended: the last element
        return [b.node('SequenceErase', [gy]),
                b.node('SequenceAt', [gy, b.constant(numpy.asarray(-1, numpy.int64), hint='i')])]
    # The input was one element shorter than the gradient.
    at = _from_front(b, position, _length(b, gy, less=1))
    return [b.node('SequenceErase', [gy, at]), b.node('SequenceAt', [gy, at]), None]


@gradient('SequenceAt')
def sequence_at_grad(b, node, gys):
    # Zeros like every element, the output gradient at the position read.
    gy, = gys
    seq, position = node.input
    at = _from_front(b, position, _length(b, seq))
    zeros = b.node('SequenceErase', [b.zeros_like(seq), at])
    return [b.node('SequenceInsert', [zeros, gy, at]), None]


@gradient('SequenceErase')
def sequence_erase_grad(b, node, gys):
    # The erased element gets zeros: put them back where it was.
    gy, = gys
    seq, position = node.input[0], optional_input(node, 1)
    element = tuple(b.value_types[seq])
    if not position:
        last = b.constant(numpy.asarray(-1, numpy.int64), hint='i')
        zeros = b.zeros_like(b.node('SequenceAt', [seq, last]), element)
        return [b.node('SequenceInsert', [gy, zeros])]
    at = _from_front(b, position, _length(b, seq))
    zeros = b.zeros_like(b.node('SequenceAt', [seq, at]), element)
    return [b.node('SequenceInsert', [gy, zeros, at]), None]


@gradient('ConcatFromSequence')
def concat_from_sequence_grad(b, node, gys):
    gy, = gys
    seq = node.input[0]
    axis, new_axis = b.attr(node, 'axis'), b.attr(node, 'new_axis')
    if new_axis:  # stacked: split back into slices of one, the axis dropped
        return [b.node('SplitToSequence', [gy], axis=axis, keepdims=0)]
    # Concatenated: split back into the elements' sizes along the axis.
    sizes = b.map_sequences(
        lambda sb, x: sb.node('Gather', [sb.node('Shape', [x]), sb.int64s([axis])]),
        [seq], (numpy.dtype(numpy.int64), (1,)), hint='sizes')
    sizes = b.node('ConcatFromSequence', [sizes], axis=0)
    return [b.node('SplitToSequence', [gy, sizes], axis=axis)]


@gradient('SplitToSequence')
def split_to_sequence_grad(b, node, gys):
    gy, = gys
    axis = b.attr(node, 'axis')
    # Parts lost their axis only when split into ones with keepdims=0.
    squeezed = not optional_input(node, 1) and not b.attr(node, 'keepdims')
    grads = [b.node('ConcatFromSequence', [gy], axis=axis, new_axis=int(squeezed))]
    return grads + [None] * (len(node.input) - 1)
