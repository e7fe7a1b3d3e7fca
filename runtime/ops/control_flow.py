"""control_flow kernels: If, Loop and Scan.

Sub-graphs arrive as Python callables taking the sub-graph's formal inputs
positionally and returning a list of its outputs (outer-scope captures are
bound by the executor).  Values may be tensors, sequences (Python lists) or
empty optionals (None); the kernels pass them through untouched.

Per-iteration outputs that are accumulated (Loop scan outputs, Scan outputs)
are stacked along a new axis.  When no iteration runs there is nothing to
stack; the element's dtype and shape then come from the callable's
``outputs`` (the body's declared ValueInfos) when the executor provides them.
"""
from .registry import LATEST, kernel


def _truth(value):
    """Python bool of a one-element boolean tensor (syncs on GPU)."""
    return bool(value.reshape(()).item())


def _stack(xp, slices, axis, body, index):
    """Stack per-iteration ``slices`` along new ``axis`` (negative counts from
    the back of the result); an empty list gives a length-0 axis with the
    dtype and shape declared for body output ``index``."""
    if slices:
        return xp.stack(slices, axis=axis)
    dtype, shape = 'float32', ()
    declared = getattr(body, 'outputs', None)
    if declared is not None and index < len(declared):
        info = declared[index]
        dtype = info.dtype or dtype
        # Symbolic or unknown element dimensions cannot be known without an
        # iteration; zero keeps the result empty.
        shape = tuple(d if isinstance(d, int) else 0 for d in (info.shape or ()))
    empty = xp.zeros((0,) + shape, dtype=dtype)
    return xp.moveaxis(empty, 0, axis)


@kernel('If', recompute=False)
def if_(xp, cond, *, then_branch, else_branch):
    branch = then_branch if _truth(cond) else else_branch
    # A tuple even for one output: a branch output may itself be a list
    # (a sequence value), which must not be mistaken for several outputs.
    return tuple(branch())


@kernel('Loop', recompute=False)
def loop(xp, M=None, cond=None, *v_initial, body, n_outputs):
    trip_count = None if M is None else int(M.reshape(()).item())
    keep_going = True if cond is None else _truth(cond)
    carried = list(v_initial)
    n_carried = len(carried)
    scans = [[] for _ in range(n_outputs - n_carried)]
    i = 0
    while keep_going and (trip_count is None or i < trip_count):
        outputs = body(xp.asarray(i, dtype=xp.int64),
                       xp.asarray(keep_going, dtype=xp.bool_), *carried)
        # The body's condition output ends the loop even when the cond input
        # was omitted (onnxruntime behaves the same way).
        keep_going = _truth(outputs[0])
        carried = list(outputs[1:1 + n_carried])
        for acc, value in zip(scans, outputs[1 + n_carried:]):
            acc.append(value)
        i += 1
    return tuple(carried) + tuple(
        _stack(xp, acc, 0, body, 1 + n_carried + k) for k, acc in enumerate(scans))


def _run_scan(xp, states, scan_inputs, body, n_scan_outputs, input_axes,
              input_directions, output_axes, output_directions):
    """Run ``body`` over ``scan_inputs`` along ``input_axes``; returns
    (final states, scan outputs)."""
    n_states = len(states)
    views = [xp.moveaxis(x, axis, 0) for x, axis in zip(scan_inputs, input_axes)]
    length = views[0].shape[0] if views else 0
    if any(v.shape[0] != length for v in views):
        raise ValueError('Scan: scan inputs have different sequence lengths %s'
                         % [v.shape[0] for v in views])
    states = list(states)
    scans = [[] for _ in range(n_scan_outputs)]
    for t in range(length):
        slices = [v[length - 1 - t] if backward else v[t]
                  for v, backward in zip(views, input_directions)]
        outputs = body(*states, *slices)
        states = list(outputs[:n_states])
        for acc, value in zip(scans, outputs[n_states:]):
            acc.append(value)
    results = []
    for k, acc in enumerate(scans):
        if k < len(output_directions) and output_directions[k]:
            acc = acc[::-1]
        axis = output_axes[k] if k < len(output_axes) else 0
        results.append(_stack(xp, acc, axis, body, n_states + k))
    return states, results


@kernel('Scan', versions=(8, 8), recompute=False)
def scan_v8(xp, sequence_lens=None, *initial_state_and_scan_inputs, body,
            num_scan_inputs, directions=None, n_outputs):
    # Opset 8: axis 0 of every input (states included) is a batch axis and
    # axis 1 the sequence axis; each batch entry is scanned on its own, up to
    # its sequence length, and shorter outputs are zero-padded.
    values = initial_state_and_scan_inputs
    n_states = len(values) - num_scan_inputs
    states, scan_inputs = values[:n_states], values[n_states:]
    batch_size, max_len = scan_inputs[0].shape[:2]
    lengths = ([max_len] * batch_size if sequence_lens is None
               else [int(n) for n in sequence_lens.tolist()])
    batch_states, batch_scans = [], []
    for b in range(batch_size):
        final, scans = _run_scan(
            xp, [s[b] for s in states], [x[b, :lengths[b]] for x in scan_inputs], body,
            n_outputs - n_states, [0] * num_scan_inputs,
            directions or [0] * num_scan_inputs, [], [])
        batch_states.append(final)
        padded = []
        for y in scans:
            if y.shape[0] < max_len:
                pad = xp.zeros((max_len - y.shape[0],) + y.shape[1:], dtype=y.dtype)
                y = xp.concatenate([y, pad])
            padded.append(y)
        batch_scans.append(padded)
    finals = [xp.stack([s[j] for s in batch_states]) for j in range(n_states)]
    outs = [xp.stack([s[k] for s in batch_scans]) for k in range(n_outputs - n_states)]
    return tuple(finals + outs)


@kernel('Scan', versions=(9, LATEST))
def scan(xp, *initial_state_and_scan_inputs, body, num_scan_inputs,
         scan_input_axes=None, scan_input_directions=None,
         scan_output_axes=None, scan_output_directions=None, n_outputs):
    values = initial_state_and_scan_inputs
    n_states = len(values) - num_scan_inputs
    states, results = _run_scan(
        xp, values[:n_states], values[n_states:], body, n_outputs - n_states,
        scan_input_axes or [0] * num_scan_inputs,
        scan_input_directions or [0] * num_scan_inputs,
        scan_output_axes or [], scan_output_directions or [])
    return tuple(states) + tuple(results)
