"""attnlib's scaled_dot_product_attention against the obvious alternatives.

* torch inputs, no weights: ``al.scaled_dot_product_attention`` vs calling
  ``torch.nn.functional.scaled_dot_product_attention`` directly with the same arguments,
  without a mask, causal, with a bool mask and with a float mask. attnlib takes the fused
  kernel too, so the ratio measures its overhead (validation, the NaN check on the output,
  dispatch); target <= 1.05 on every path.
* NumPy inputs: attnlib's plain path vs the textbook NumPy line
  ``softmax(q @ k.T / sqrt(E)) @ v``; target <= 1.0.

Timing: interleaved batches, the minimum over many repeats (see ``_timing.compare_min``).
The torch comparison runs with one torch thread and counts this thread's CPU time
(``time.thread_time``), which a busy machine cannot inflate by descheduling us; attnlib's
overhead is per-call Python work, so one thread shows it against the full kernel cost.
``--wall`` (``python -m benchmarks.bench_sdpa --wall``) times wall-clock with torch's
default threads instead. The NumPy rows count thread CPU time when BLAS has one thread
(``python -m benchmarks --threads 1``), wall-clock otherwise.
"""
from __future__ import annotations

import math
import os
import sys
import time

import numpy as np

import attnlib as al

from ._timing import compare_min, row

# (batch dims N..., L, S, E, Ev): the shapes of issue 10, and one larger.
SIZES = [((8,), 64, 64, 32, 32), ((4, 8), 128, 128, 64, 64), ((2, 4), 512, 512, 64, 64),
         ((), 1024, 1024, 64, 64)]
MASKS = ["none", "causal", "bool", "float"]


def plain_numpy(q, k, v):
    """The textbook NumPy attention: softmax(q kᵀ / sqrt(E)) v, written inline."""
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return s / s.sum(axis=-1, keepdims=True) @ v


def _mask(torch, kind, batch, L, S, gen):
    if kind in ("none", "causal"):
        return None
    keep = torch.rand(*batch, L, S, generator=gen) > 0.3
    keep[..., 0] = True
    if kind == "bool":
        return keep
    return torch.zeros(keep.shape).masked_fill(~keep, -torch.inf)


def main(sizes=SIZES, repeats: int = 41, target_s: float = 0.002, wall: bool = False):
    """Print one line per comparison and return the results as dicts."""
    import torch
    import torch.nn.functional as F

    threads = torch.get_num_threads()
    clock = time.perf_counter if wall else time.thread_time
    if not wall:
        torch.set_num_threads(1)
    print(f"  torch: {'wall-clock, %d threads' % threads if wall else 'thread CPU time, 1 thread'}; "
          f"min of {repeats} interleaved batches")
    print(f"  {'case':<40} {'attnlib':>12} {'reference':>12}")
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    results = []
    try:
        for batch, L, S, E, Ev in sizes:
            q, k, v = (rng.standard_normal((*batch, n, e)).astype(np.float32)
                       for n, e in ((L, E), (S, E), (S, Ev)))
            shape = f"N={batch} L={L} E={E}"
            tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
            for kind in MASKS:
                m, causal = _mask(torch, kind, batch, L, S, gen), kind == "causal"
                a, b, r = compare_min(
                    lambda: al.scaled_dot_product_attention(tq, tk, tv, m, is_causal=causal),
                    lambda: F.scaled_dot_product_attention(tq, tk, tv, attn_mask=m, is_causal=causal),
                    repeats=repeats, target_s=target_s, clock=clock)
                print(row(f"torch {kind:<6} {shape}", a, b, r, 1.05), flush=True)
                results.append(dict(case=f"torch {kind} vs F.sdpa", shape=shape, ratio=r, target=1.05))
        torch.set_num_threads(threads)
        one_blas_thread = os.environ.get("OPENBLAS_NUM_THREADS") == "1"
        np_clock = time.thread_time if one_blas_thread and not wall else time.perf_counter
        print(f"  numpy: {'thread CPU time, 1 BLAS thread' if np_clock is time.thread_time else 'wall-clock'}")
        for batch, L, S, E, Ev in sizes:
            q, k, v = (rng.standard_normal((*batch, n, e)).astype(np.float32)
                       for n, e in ((L, E), (S, E), (S, Ev)))
            shape = f"N={batch} L={L} E={E}"
            a, b, r = compare_min(lambda: al.scaled_dot_product_attention(q, k, v),
                                  lambda: plain_numpy(q, k, v), repeats=repeats, target_s=target_s,
                                  clock=np_clock)
            print(row(f"numpy none   {shape}", a, b, r, 1.0), flush=True)
            results.append(dict(case="numpy vs inline", shape=shape, ratio=r, target=1.0))
    finally:
        torch.set_num_threads(threads)
    return results


if __name__ == "__main__":
    main(wall="--wall" in sys.argv)
