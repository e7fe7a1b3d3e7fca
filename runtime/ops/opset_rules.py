"""ONNX semantics that changed between opsets, one function each.

The converter that writes a node, the gradient rule that reads it and the
kernel that runs it call the same function here, so they cannot disagree
about a version.  ``version`` is the node's schema version: the
``since_version`` ONNX resolves for the model's opset.  The model's opset
may stand in for it (the converters know only that): each threshold below
is a since_version of the operators it concerns, so both give the same
answer.

Standard library only: the runtime, the compiler and the translators all
import this module.
"""

#: Schema version from which an operator takes ``axes`` as an input rather
#: than an attribute.
_AXES_INPUT_SINCE = {
    'Squeeze': 13, 'Unsqueeze': 13, 'ReduceSum': 13,
    **{op: 18 for op in ('ReduceMean', 'ReduceMax', 'ReduceMin', 'ReduceProd', 'ReduceL1',
                         'ReduceL2', 'ReduceSumSquare', 'ReduceLogSum', 'ReduceLogSumExp')},
}

#: Schema version from which Softmax, LogSoftmax and Hardmax normalise along
#: one axis.
SINGLE_AXIS_SOFTMAX_SINCE = 13


def axes_input_since(op):
    """The schema version from which ``op`` (Squeeze, Unsqueeze or a Reduce*
    operator) takes its ``axes`` as an input instead of an attribute."""
    return _AXES_INPUT_SINCE[op]


def axes_are_input(op, version):
    """Whether ``op`` at schema ``version`` takes its ``axes`` as an input
    (an int64 tensor) rather than an attribute."""
    return version >= _AXES_INPUT_SINCE[op]


def node_axes(op, version, attrs, axes_input):
    """The ``axes`` a Squeeze, Unsqueeze or Reduce* node of schema
    ``version`` names, as ints: its ``axes`` attribute (``attrs``) before
    axes_input_since(op), from then ``axes_input()``, the caller's reading
    of the node's input 1 (a sequence, None when absent); None when the
    node names none."""
    axes = axes_input() if axes_are_input(op, version) else attrs.get('axes')
    return None if axes is None else [int(a) for a in axes]


def softmax_axes(version, rank, axis):
    """The axes Softmax, LogSoftmax or Hardmax of schema ``version``
    normalises over, for an input of ``rank`` dimensions and the node's
    ``axis`` attribute (None when absent).

    From version 13 that is the single ``axis`` (default -1).  Before, the
    input is coerced to 2-D at ``axis`` (default 1), so every axis from
    ``axis`` on (none for a 0-d input, which is one row of one element).
    A negative axis of a 0-d input is returned as is, for the caller to
    refuse."""
    if version >= SINGLE_AXIS_SOFTMAX_SINCE:
        axis = -1 if axis is None else axis
        return (axis % rank if rank else axis,)
    axis = 1 if axis is None else axis
    return tuple(range(axis % rank if rank else 0, rank))


#: Schema version from which BatchNormalization's ``training_mode``
#: attribute says whether it trains (before, its number of outputs did).
BATCH_NORM_TRAINING_MODE_SINCE = 14


def batch_norm_trains(version, n_outputs=1, training_mode=0, is_test=0):
    """Whether a BatchNormalization node of schema ``version`` normalises
    with the batch statistics (and updates the running averages): from
    version 14, when its ``training_mode`` attribute is 1; before, when it
    asks for the running statistics (more than one output) unless the
    version-1/6 ``is_test`` attribute says otherwise."""
    if version >= BATCH_NORM_TRAINING_MODE_SINCE:
        return bool(training_mode)
    return n_outputs > 1 and not is_test


def batch_norm_training_form(version):
    """(attributes, number of outputs) of a BatchNormalization node of
    schema ``version`` that trains (one batch_norm_trains says trains):
    ``training_mode=1`` and Y, running mean and variance from version 14;
    before, no attribute and five outputs (the batch mean and variance
    last)."""
    if version >= BATCH_NORM_TRAINING_MODE_SINCE:
        return {'training_mode': 1}, 3
    return {}, 5
