"""What fraction of the machine's matmul throughput does attention reach?

Attention on ``(L, E)`` queries and ``(S, E)`` keys/values does two matmuls,
``q kᵀ`` and ``weights v``: ``4 L S E`` floating-point operations (the softmax adds
``O(L S)`` exponentials that are not counted). Dividing that by the measured time gives
the achieved FLOP/s, compared here with the FLOP/s of one large square float32 matmul
measured on the same machine, in the same process, just before, with the same library
(torch and NumPy may use different BLAS builds and thread counts).

A fraction well below 1 on a CPU is the softmax's memory traffic and the exponentials;
on a GPU it is the reason FlashAttention exists.
"""
from __future__ import annotations

import time

import numpy as np

import attnlib as al

N, E = 4096, 64


def _best(fn, repeats=5, sync=None):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_flops(device="cpu", n=2048, library="torch"):
    """FLOP/s of an ``(n, n) @ (n, n)`` float32 matmul (best of a few runs), in ``library``
    (``"torch"`` or ``"numpy"``: they may link different BLAS libraries and thread counts)."""
    if library == "numpy":
        a, b = (np.random.default_rng(0).standard_normal((n, n)).astype(np.float32) for _ in range(2))
        return 2 * n**3 / _best(lambda: a @ b)
    import torch

    a, b = (torch.randn(n, n, device=device) for _ in range(2))
    sync = torch.cuda.synchronize if device != "cpu" else None
    return 2 * n**3 / _best(lambda: a @ b, sync=sync)


def run(device="cpu"):
    import torch
    import torch.nn.functional as F

    peaks = {"torch": matmul_flops(device)}
    if device == "cpu":
        peaks["numpy"] = matmul_flops(device, library="numpy")
    for lib, peak in peaks.items():
        print(f"  device {device}: {lib} float32 matmul 2048^3 reaches {peak / 1e9:8.1f} GFLOP/s", flush=True)
    flops = 4 * N * N * E
    sync = torch.cuda.synchronize if device != "cpu" else None
    q, k, v = (torch.randn(N, E, device=device) for _ in range(3))
    cases = {
        "torch F.scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(q, k, v),
        "al.scaled_dot_product_attention (torch)": lambda: al.scaled_dot_product_attention(q, k, v),
        "al.flash_attention (torch, block 512)": lambda: al.flash_attention(q, k, v, block_size=512),
    }
    if device == "cpu":
        qn, kn, vn = (x.numpy() for x in (q, k, v))
        cases["al.scaled_dot_product_attention (numpy)"] = lambda: al.scaled_dot_product_attention(qn, kn, vn)
        cases["al.flash_attention (numpy, block 512)"] = lambda: al.flash_attention(qn, kn, vn, block_size=512)
    rows = []
    print(f"  attention L = S = {N}, E = {E}: 4 L S E = {flops / 1e9:.1f} GFLOP per call", flush=True)
    for label, fn in cases.items():
        t = _best(fn, repeats=3, sync=sync)
        frac = flops / t / peaks["numpy" if "numpy" in label else "torch"]
        print(f"  {label:<42} {t * 1e3:9.1f} ms {flops / t / 1e9:8.1f} GFLOP/s  {frac:6.1%} of its matmul",
              flush=True)
        rows.append(dict(device=device, case=label, seconds=t, fraction=frac))
    return rows


def main():
    import torch

    rows = run("cpu")
    if torch.cuda.is_available():
        rows += run("cuda")
    return rows


if __name__ == "__main__":
    main()
