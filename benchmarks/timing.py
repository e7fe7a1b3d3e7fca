"""Timing on a shared, noisy machine: warm up, then interleave the
candidates round by round (so a burst of load hits them all alike) and take
each one's median."""
import math
import statistics
import time


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
        min(max_reps, max(min_reps, budget_s / max(estimate[name], 1e-7))) / rounds))
        for name in candidates}
    samples = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            for _ in range(per_round[name]):
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) * 1e3 for name, s in samples.items()}
