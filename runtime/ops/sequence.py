"""sequence kernels: tensor sequences and optionals.

A sequence value is a Python list of arrays; kernels never mutate a list they
receive, they build a new one.  An optional holding a value is that value
itself (a tensor or a list); an empty optional is None.
"""
import itertools

from .registry import kernel


def _index(position, length, allow_end):
    """Python index for an ONNX ``position`` tensor, checking the range
    [-n, n - 1] (or [-n, n] when ``allow_end``)."""
    i = int(position.reshape(()).item())
    high = length if allow_end else length - 1
    if not -length <= i <= high:
        raise IndexError('sequence position %d out of range [%d, %d]' % (i, -length, high))
    return i + length if i < 0 else i


@kernel('SequenceEmpty', gradient=False)  # no inputs: nothing to differentiate
def sequence_empty(xp, *, dtype=None):
    # The element type only matters to type inference; a list holds any.
    return []


@kernel('SequenceConstruct')
def sequence_construct(xp, *inputs):
    return list(inputs)


@kernel('SequenceInsert')
def sequence_insert(xp, input_sequence, tensor, position=None):
    result = list(input_sequence)
    if position is None:
        result.append(tensor)
    else:
        result.insert(_index(position, len(result), allow_end=True), tensor)
    return result


@kernel('SequenceErase')
def sequence_erase(xp, input_sequence, position=None):
    result = list(input_sequence)
    if not result:
        raise IndexError('SequenceErase on an empty sequence')
    del result[-1 if position is None else _index(position, len(result), allow_end=False)]
    return result


@kernel('SequenceAt')
def sequence_at(xp, input_sequence, position):
    return input_sequence[_index(position, len(input_sequence), allow_end=False)]


@kernel('SequenceLength', gradient=False)  # an integer
def sequence_length(xp, input_sequence):
    return xp.asarray(len(input_sequence), dtype=xp.int64)


@kernel('ConcatFromSequence')
def concat_from_sequence(xp, input_sequence, *, axis, new_axis=0):
    if new_axis:
        return xp.stack(input_sequence, axis=axis)
    return xp.concatenate(input_sequence, axis=axis)


@kernel('SplitToSequence')
def split_to_sequence(xp, input, split=None, *, axis=0, keepdims=1):
    axis = axis + input.ndim if axis < 0 else axis
    length = input.shape[axis]
    if split is None:
        sizes = [1] * length
    elif split.ndim == 0:
        size = int(split.item())
        if size <= 0:
            raise ValueError('SplitToSequence: split must be positive, got %d' % size)
        sizes = [size] * (length // size) + ([length % size] if length % size else [])
    else:
        sizes = split.tolist()
        if sum(sizes) != length:
            raise ValueError('SplitToSequence: split %s does not add up to dimension %d'
                             % (sizes, length))
    bounds = [0, *itertools.accumulate(sizes)]
    lead = (slice(None),) * axis
    parts = [input[lead + (slice(start, stop),)] for start, stop in zip(bounds, bounds[1:])]
    if split is None and not keepdims:
        # keepdims only applies to the default split into ones.
        parts = [p.squeeze(axis) for p in parts]
    return parts


@kernel('SequenceMap', recompute=False)
def sequence_map(xp, input_sequence, *additional_inputs, body, n_outputs):
    # Sequence inputs contribute their i-th element, tensors are passed whole.
    n = len(input_sequence)
    for extra in additional_inputs:
        if isinstance(extra, list) and len(extra) != n:
            raise ValueError('SequenceMap: sequence inputs have lengths %d and %d'
                             % (n, len(extra)))
    results = tuple([] for _ in range(n_outputs))
    for i in range(n):
        outputs = body(input_sequence[i],
                       *[extra[i] if isinstance(extra, list) else extra
                         for extra in additional_inputs])
        for acc, value in zip(results, outputs):
            acc.append(value)
    return results


@kernel('Optional')
def optional(xp, input=None, *, type=None):
    # ``type`` only describes the empty optional's element type.
    return input


@kernel('OptionalHasElement')
def optional_has_element(xp, input=None):
    return xp.asarray(input is not None)


@kernel('OptionalGetElement')
def optional_get_element(xp, input):
    if input is None:
        raise ValueError('OptionalGetElement on an empty optional')
    return input
