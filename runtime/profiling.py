"""Per-instruction tracing: a readable trace and Chrome-tracing JSON."""
import collections
import json
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
        if self.stream is not None:
            self.stream.write('[%s %4d] %-24s %8.3f ms  (%s) -> (%s)%s\n' % (
                program_name, index, inst.qualified_op, (end - start) * 1e3,
                ', '.join(describe_value(v) for v in inputs),
                ', '.join(describe_value(v) for v in outputs),
                '  # ' + inst.name if inst.name else ''))
        totals = self._totals.setdefault(inst.qualified_op, [0, 0.0])
        totals[0] += 1
        totals[1] += end - start
        if self.keep_events:
            self.events.append({
                'name': inst.qualified_op, 'cat': program_name, 'ph': 'X', 'pid': 0, 'tid': 0,
                'ts': (start - self._origin) * 1e6, 'dur': (end - start) * 1e6,
                'args': {'index': index, 'node': inst.name,
                         'inputs': [describe_value(v) for v in inputs],
                         'outputs': [describe_value(v) for v in outputs]}})

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
    warm-up outputs and a 'N iterations: mean, best' line (None for one)."""
    outputs = executor.run(inputs)
    if iterations <= 1:
        return outputs, None
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        executor.run(inputs)
        times.append((time.perf_counter() - start) * 1e3)
    return outputs, '%d iterations: mean %.3f ms, best %.3f ms' % (
        iterations, sum(times) / len(times), min(times))
