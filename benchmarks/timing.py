"""Timing on a shared, noisy machine: warm up, then interleave the
candidates round by round (so a burst of load hits them all alike) and take
each one's median."""
import math
import statistics
import time


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


def time_interleaved(candidates, budget_s=2.0, min_reps=5, max_reps=300, rounds=5):
    """``candidates``: {name: zero-argument callable}.  Returns {name: median
    milliseconds per call}.  Each candidate gets about ``budget_s`` seconds
    of timed calls (within ``min_reps``..``max_reps``)."""
    estimate = {}
    for name, fn in candidates.items():
        start = time.perf_counter()
        for _ in range(3):  # warm-up: caches, lazy compilation, allocator pools
            fn()
        estimate[name] = (time.perf_counter() - start) / 3
    per_round = {name: max(1, math.ceil(
        repetitions(budget_s, estimate[name], min_reps, max_reps) / rounds))
        for name in candidates}
    samples = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            for _ in range(per_round[name]):
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) * 1e3 for name, s in samples.items()}
