"""Interleaved timing: measure two functions alternately in one process.

Timing A fully and then B lets drift (CPU frequency, caches, other processes on a shared
machine) fall on one side. Here each repeat times a batch of A calls and then a batch of
B calls (the order swaps every repeat); the reported ratio is the median of the
per-repeat ratios A/B.
"""
from __future__ import annotations

import statistics
import time

__all__ = ["compare", "compare_min", "autorange", "row"]


def autorange(fn, target_s: float = 0.01) -> int:
    """How many calls of ``fn`` take about ``target_s`` seconds (at least 1)."""
    fn()  # warm-up: first-call costs (imports, allocations, kernel selection)
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= target_s or n >= 1 << 16:
            return max(1, int(n * target_s / max(dt, 1e-9)))
        n *= 2


def compare(fa, fb, *, repeats: int = 21, target_s: float = 0.01, sync=None):
    """Time ``fa`` and ``fb`` interleaved; return ``(median_a_s, median_b_s, ratio)``,
    where ``ratio`` is the median over repeats of ``time_a / time_b``.

    Args:
        fa, fb: zero-argument callables.
        repeats: number of (A batch, B batch) pairs. Default: ``21``.
        target_s: length of one batch in seconds. Default: ``0.01``.
        sync: called after each batch (e.g. ``torch.cuda.synchronize``). Default: ``None``.
    """
    number = max(1, min(autorange(fa, target_s), autorange(fb, target_s)))
    ta, tb = [], []
    for r in range(repeats):
        order = ((fa, ta), (fb, tb)) if r % 2 == 0 else ((fb, tb), (fa, ta))
        for fn, out in order:
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            if sync is not None:
                sync()
            out.append((time.perf_counter() - t0) / number)
    a, b = statistics.median(ta), statistics.median(tb)
    # the ratio is the median of the per-repeat ratios: each A batch is compared with the B
    # batch timed right next to it, so slow phases of a busy machine cancel out
    return a, b, statistics.median(x / y for x, y in zip(ta, tb))


def compare_min(fa, fb, *, repeats: int = 41, target_s: float = 0.002, clock=time.perf_counter,
                sync=None):
    """Time ``fa`` and ``fb`` interleaved; return ``(min_a_s, min_b_s, min_a / min_b)``.

    The minimum over ``repeats`` short batches is the robust statistic on a machine shared
    with other work: other processes only ever add time (preemption, cache eviction), so
    the fastest batch is the closest to the undisturbed cost, and interleaving gives both
    sides the same chances. ``clock=time.thread_time`` counts only this thread's CPU time
    (immune to being descheduled); use it only where all the work runs on this thread
    (e.g. ``torch.set_num_threads(1)``, ``OPENBLAS_NUM_THREADS=1``).
    """
    number = max(1, min(autorange(fa, target_s), autorange(fb, target_s)))
    ta, tb = [], []
    for r in range(repeats):
        order = ((fa, ta), (fb, tb)) if r % 2 == 0 else ((fb, tb), (fa, ta))
        for fn, out in order:
            t0 = clock()
            for _ in range(number):
                fn()
            if sync is not None:
                sync()
            out.append((clock() - t0) / number)
    a, b = min(ta), min(tb)
    return a, b, a / b


def row(label: str, a: float, b: float, ratio: float, target: float) -> str:
    """One line of a results table."""
    ok = "ok" if ratio <= target else "ABOVE TARGET"
    return f"  {label:<34} {a * 1e3:9.3f} ms {b * 1e3:9.3f} ms   ratio {ratio:5.3f} (target <= {target:.2f}) {ok}"
