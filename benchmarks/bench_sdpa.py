"""attnlib's scaled_dot_product_attention against the obvious alternatives.

* torch inputs, no weights: ``al.scaled_dot_product_attention`` vs calling
  ``torch.nn.functional.scaled_dot_product_attention`` directly. attnlib takes the fused
  kernel too, so the ratio measures its overhead (validation, dispatch); target <= 1.05.
* NumPy inputs: attnlib's plain path vs the textbook NumPy line
  ``softmax(q @ k.T / sqrt(E)) @ v``; target <= 1.0.
"""
from __future__ import annotations

import math

import numpy as np

import attnlib as al

from ._timing import compare, row

# (batch dims N..., L, S, E, Ev): a few shapes of the sizes the course uses.
SIZES = [((8,), 64, 64, 32, 32), ((4, 8), 128, 128, 64, 64), ((2, 4), 512, 512, 64, 64),
         ((), 1024, 1024, 64, 64)]


def plain_numpy(q, k, v):
    """The textbook NumPy attention: softmax(q kᵀ / sqrt(E)) v, written inline."""
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return s / s.sum(axis=-1, keepdims=True) @ v


def main(sizes=SIZES, repeats: int = 61, target_s: float = 0.003):
    """Print one line per comparison and return the results as dicts. Short interleaved
    batches (``target_s``) and many ``repeats`` keep the ratios steady on a busy machine."""
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(0)
    results = []
    print(f"  {'case':<34} {'attnlib':>12} {'reference':>12}")
    for batch, L, S, E, Ev in sizes:
        q, k, v = (rng.standard_normal((*batch, n, e)).astype(np.float32)
                   for n, e in ((L, E), (S, E), (S, Ev)))
        label = f"N={batch} L={L} S={S} E={E}"
        tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
        a, b, r = compare(lambda: al.scaled_dot_product_attention(tq, tk, tv),
                          lambda: F.scaled_dot_product_attention(tq, tk, tv), repeats=repeats,
                          target_s=target_s)
        print(row("torch  " + label, a, b, r, 1.05), flush=True)
        results.append(dict(case="torch vs F.sdpa", shape=label, ratio=r, target=1.05))
        a, b, r = compare(lambda: al.scaled_dot_product_attention(q, k, v),
                          lambda: plain_numpy(q, k, v), repeats=repeats, target_s=target_s)
        print(row("numpy  " + label, a, b, r, 1.0), flush=True)
        results.append(dict(case="numpy vs inline", shape=label, ratio=r, target=1.0))
    return results


if __name__ == "__main__":
    main()
