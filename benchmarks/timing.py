"""Timing on a shared, noisy machine: warm up, then interleave the
candidates round by round (so a burst of load hits them all alike) and take
each one's median.

``clock``: 'wall' (time.perf_counter, what a user waits) or 'cpu'
(time.process_time: the CPU seconds of this process's threads, what the
work costs while the OS runs others beside it; on a loaded machine it moves
far less than the wall time).  Compare candidates on one thread each with
'cpu': with more, it adds up every thread's time."""
import contextlib
import math
import statistics
import subprocess
import sys
import time

#: The clocks ``clock`` names.
CLOCKS = {'wall': time.perf_counter, 'cpu': time.process_time}


def repetitions(budget_s, estimate_s, min_reps=5, max_reps=300):
    """How many timed calls of about ``estimate_s`` seconds each fill
    ``budget_s`` seconds, within ``min_reps``..``max_reps``."""
    return math.ceil(min(max_reps, max(min_reps, budget_s / max(estimate_s, 1e-7))))


def timed(fn):
    """(``fn()``, seconds it took): for one-off costs such as emitting or
    compiling, which are not repeated."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def timed_calls(fn, n, clock='wall'):
    """Seconds of each of ``n`` calls of ``fn`` by ``clock``; a candidate
    that times itself elsewhere (in another process) has
    ``fn.timed_calls(n, clock)``."""
    if hasattr(fn, 'timed_calls'):
        return fn.timed_calls(n, clock)
    now = CLOCKS[clock]
    seconds = []
    for _ in range(n):
        start = now()
        fn()
        seconds.append(now() - start)
    return seconds


def interleaved_samples(candidates, budget_s=2.0, min_reps=5, max_reps=300, rounds=5,
                        clock='wall'):
    """``candidates``: {name: zero-argument callable, or an object with
    ``timed_calls(n)``}.  Returns {name: seconds of each timed call}, round
    by round: with one call per round (``per_round``), the i-th samples of
    all candidates were taken side by side.  Each candidate gets about
    ``budget_s`` seconds of timed calls (within ``min_reps``..``max_reps``);
    the candidates take turns in their order, and in the reverse order on
    every other round, so that none always follows the same other.  Times
    by ``clock`` (the module docstring)."""
    # Warm-up: caches, lazy compilation, allocator pools.
    estimate = {name: statistics.mean(timed_calls(fn, 3, clock))
                for name, fn in candidates.items()}
    per_round = {name: max(1, math.ceil(
        repetitions(budget_s, estimate[name], min_reps, max_reps) / rounds))
        for name in candidates}
    samples = {name: [] for name in candidates}
    order = list(candidates)
    for round_ in range(rounds):
        for name in (order if round_ % 2 == 0 else order[::-1]):
            samples[name] += timed_calls(candidates[name], per_round[name], clock)
    return samples


def time_interleaved(candidates, budget_s=2.0, min_reps=5, max_reps=300, rounds=5,
                     clock='wall'):
    """{name: median milliseconds per call} of interleaved_samples (the
    same arguments)."""
    samples = interleaved_samples(candidates, budget_s, min_reps, max_reps, rounds, clock)
    return {name: statistics.median(s) * 1e3 for name, s in samples.items()}


# The neighbour spins while its parent lives: a benchmark killed before its
# cleanup (a timeout, ^C, SIGKILL) must not leave a core busy under every
# later measurement on the machine.
_SPIN_WHILE_PARENT_LIVES = ('import os\nparent = os.getppid()\n'
                            'while os.getppid() == parent:\n'
                            '    for _ in range(100000):\n        pass\n')


@contextlib.contextmanager
def busy_neighbour(on=True):
    """While the block runs (when ``on``), one child process keeps a CPU
    busy: the competing process a shared machine has.  It is killed when the
    block ends and exits by itself if this process dies first.  Yields the
    child (None when not ``on``)."""
    child = subprocess.Popen([sys.executable, '-c', _SPIN_WHILE_PARENT_LIVES]) if on else None
    try:
        if child is not None:
            time.sleep(0.3)  # let it get going
        yield child
    finally:
        if child is not None:
            child.kill()
            child.wait()
