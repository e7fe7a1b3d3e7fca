"""Per-instruction tracing: a readable trace and Chrome-tracing JSON."""
import collections
import json
import statistics
import time

from .files import atomic_write


def describe_value(v):
    """Short text for a register value: dtype[shape], seq(n) or none."""
    if v is None:
        return 'none'
    if isinstance(v, list):
        return 'seq(%d)' % len(v)
    shape = getattr(v, 'shape', None)
    dtype = getattr(v, 'dtype', None)
    if shape is None:
        return type(v).__name__
    return '%s%s' % (dtype, list(shape))


def trace_event_fields(program, index, inputs, outputs, inst=None):
    """The name and args of the Chrome-trace event of instruction ``index``
    of ``program`` (or ``inst``), whose values are described (describe_value)
    by ``inputs`` and ``outputs``: the same on the VM, on the native backend
    and in an emitted program's --profile."""
    inst = inst or program.instructions[index]
    return {'name': inst.qualified_op,
            'args': {'index': index, 'node': inst.name, 'inputs': inputs, 'outputs': outputs}}


class Tracer:
    """Collects one event per executed instruction.

    With ``stream`` set, each event is also printed as it happens.  Only the
    latest ``max_events`` events are kept (all of them with None), so tracing
    a long run holds bounded memory; ``summary()`` counts every event
    nonetheless.  Kept events can be written as Chrome tracing JSON (open in
    chrome://tracing or Perfetto).
    """

    def __init__(self, stream=None, keep_events=True, max_events=100_000):
        self.stream = stream
        self.keep_events = keep_events
        self.events: collections.deque = collections.deque(maxlen=max_events)
        self._totals: dict[str, list] = {}  # operator -> [events, seconds], over every event
        self._origin = time.perf_counter()

    def record(self, program_name, index, inst, inputs, outputs, start, end):
        """One event: instruction ``index`` ``inst`` of program
        ``program_name`` read ``inputs`` and wrote ``outputs`` (values)
        from ``start`` to ``end`` (time.perf_counter seconds)."""
        self.record_described(program_name, index, inst, [describe_value(v) for v in inputs],
                              [describe_value(v) for v in outputs], start, end)

    def record_described(self, program_name, index, inst, inputs, outputs, start, end):
        """record, with the values already described (describe_value's
        text): what the native backend knows of them."""
        if self.stream is not None:
            self.stream.write('[%s %4d] %-24s %8.3f ms  (%s) -> (%s)%s\n' % (
                program_name, index, inst.qualified_op, (end - start) * 1e3,
                ', '.join(inputs), ', '.join(outputs),
                '  # ' + inst.name if inst.name else ''))
        totals = self._totals.setdefault(inst.qualified_op, [0, 0.0])
        totals[0] += 1
        totals[1] += end - start
        if self.keep_events:
            event = trace_event_fields(None, index, inputs, outputs, inst)
            event.update({'cat': program_name, 'ph': 'X', 'pid': 0, 'tid': 0,
                          'ts': (start - self._origin) * 1e6, 'dur': (end - start) * 1e6})
            self.events.append(event)

    def record_native(self, program, profiled, marks_ns):
        """The events of one native run of ``program``: ``profiled`` is
        EmitResult.profiled, ``marks_ns`` the run's marks (NAME_profile:
        CLOCK_MONOTONIC nanoseconds before the first instruction and after
        each)."""
        # perf_counter and CLOCK_MONOTONIC may differ by a constant.
        shift = time.perf_counter() - time.clock_gettime_ns(time.CLOCK_MONOTONIC) / 1e9
        for k, (index, inst, inputs, outputs) in enumerate(profiled):
            self.record_described(program.name, index, inst, inputs, outputs,
                                  marks_ns[k] / 1e9 + shift, marks_ns[k + 1] / 1e9 + shift)

    def write_chrome_tracing(self, path):
        """Write the kept events to ``path`` (atomically) as Chrome tracing JSON."""
        with atomic_write(path, 'w') as f:
            json.dump({'traceEvents': list(self.events), 'displayTimeUnit': 'ms'}, f)

    def summary(self):
        """(operator, events, total milliseconds) of every event recorded,
        kept or not, slowest operator first."""
        return sorted(((name, n, seconds * 1e3) for name, (n, seconds) in self._totals.items()),
                      key=lambda t: -t[2])


def time_runs(executor, inputs, iterations):
    """Run once to warm up, then ``iterations`` timed runs.  Returns the
    warm-up outputs and a 'N iterations: mean, median, best' line (None for
    one), as the emitted executable prints it."""
    outputs = executor.run(inputs)
    if iterations <= 1:
        return outputs, None
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        executor.run(inputs)
        times.append((time.perf_counter() - start) * 1e3)
    return outputs, '%d iterations: mean %.3f ms, median %.3f ms, best %.3f ms' % (
        iterations, statistics.mean(times), statistics.median(times), min(times))
