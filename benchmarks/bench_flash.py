"""flash_attention against plain attention: time and peak memory for n = 512 ... 16,384.

* CPU (NumPy, float32): plain is ``al.scaled_dot_product_attention`` (its plain path
  builds the ``(n, n)`` scores and their exponentials); flash is ``al.flash_attention``
  with its **default** ``block_size`` (chosen in ``attnlib.kernels.flash.default_block_size``).
  Peak memory is traced with ``tracemalloc`` (NumPy reports its allocations to it)
  in a separate call from the timing. With one BLAS thread (``--threads 1``) the time is
  this thread's CPU time (``time.thread_time``), which other processes on a busy machine
  cannot inflate; otherwise wall-clock. Either way interleaved, minimum of the repeats.
* CUDA (torch, float32), when a GPU is present: plain is attnlib's plain Array-API path
  (which materialises the scores on the GPU), peak memory is
  ``torch.cuda.max_memory_allocated`` above the inputs.

Targets: flash/plain time <= 1.0 from n = 4,096 up, and plain/flash peak memory >= 10 at
n = 8,192. Timing is interleaved (see ``_timing.py``); large sizes get fewer repeats.
"""
from __future__ import annotations

import os
import time

import numpy as np

import attnlib as al
from attnlib.instruments.complexity import peak_memory
from attnlib.kernels.flash import default_block_size

from ._timing import compare_min

NS = [512, 1024, 2048, 4096, 8192, 16384]
E = 64
TIME_TARGET, MEM_TARGET = 1.0, 10.0


def _one_thread() -> bool:
    """True when BLAS runs on this thread only, so thread CPU time counts all the work."""
    return os.environ.get("OPENBLAS_NUM_THREADS") == "1"


def _repeats(n):
    return 15 if n <= 1024 else 7 if n <= 4096 else 5 if n <= 8192 else 3


def _peak_cuda(fn):
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def _header(device, block):
    import torch

    threads = (f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
               f"{'thread CPU time' if _one_thread() else 'wall-clock'}" if device == "cpu"
               else torch.cuda.get_device_name())
    print(f"  device {device} ({threads}), float32, E = {E}, one head, default block_size = {block}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    print(f"  {'n':>6} {'plain ms':>11} {'flash ms':>11} {'time ratio':>11} {'plain MiB':>10} "
          f"{'flash MiB':>10} {'mem ratio':>10}", flush=True)


def _busy_machine_note():
    """On a machine busier than its cores, multithreaded BLAS makes the many small matmuls of
    the tiled loop wait for descheduled threads; say so, with the fix."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load > cores and "OPENBLAS_NUM_THREADS" not in os.environ:
        print(f"  note: load average {load:.1f} on {cores} cores. Multithreaded BLAS slows the tiled loop "
              "badly on a busy machine; for steadier figures run OPENBLAS_NUM_THREADS=1 make bench", flush=True)


def run_cpu(ns=NS):
    rng = np.random.default_rng(0)
    rows = []
    _busy_machine_note()
    x = rng.standard_normal((64, E)).astype(np.float32)
    _header("cpu", default_block_size(x))
    al.scaled_dot_product_attention(x, x, x), al.flash_attention(x, x, x)  # first-call costs, untraced
    clock = time.thread_time if _one_thread() else time.perf_counter
    for n in ns:
        q, k, v = (rng.standard_normal((n, E)).astype(np.float32) for _ in range(3))
        plain = lambda: al.scaled_dot_product_attention(q, k, v)  # noqa: E731
        flash = lambda: al.flash_attention(q, k, v)  # noqa: E731 - the default block_size
        mp, mf = peak_memory(plain, warmup=False), peak_memory(flash, warmup=False)
        tf, tp, r = compare_min(flash, plain, repeats=_repeats(n), target_s=0.0, clock=clock)
        rows.append(_row(n, tp, tf, mp, mf))
    return rows


def run_cuda(ns=NS):
    import torch

    from attnlib.kernels.attention import _attention

    from array_api_compat import array_namespace

    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    _header("cuda", default_block_size(torch.zeros(1, device="cuda")))
    for n in ns:
        q, k, v = (torch.randn(n, E, device="cuda", generator=g) for _ in range(3))
        xp = array_namespace(q)
        plain = lambda: _attention(xp, q, k, v, None, False, E ** -0.5, False)  # noqa: E731
        flash = lambda: al.flash_attention(q, k, v)  # noqa: E731 - the default block_size
        mp, mf = _peak_cuda(plain), _peak_cuda(flash)
        tf, tp, r = compare_min(flash, plain, repeats=_repeats(n), target_s=0.0, sync=torch.cuda.synchronize)
        rows.append(_row(n, tp, tf, mp, mf))
    return rows


def _row(n, tp, tf, mp, mf):
    r_t, r_m = tf / tp, mp / max(mf, 1)
    flag = ""
    if n >= 4096:
        ok = r_t <= TIME_TARGET and (n != 8192 or r_m >= MEM_TARGET)
        flag = "  ok" if ok else "  ABOVE TARGET"
        flag += f" (targets: time <= {TIME_TARGET}" + (f", memory >= {MEM_TARGET:g}x)" if n == 8192 else ")")
    print(f"  {n:>6} {tp * 1e3:11.1f} {tf * 1e3:11.1f} {r_t:11.3f} {mp / 2**20:10.1f} {mf / 2**20:10.2f} "
          f"{r_m:9.1f}x{flag}", flush=True)
    return dict(n=n, plain_s=tp, flash_s=tf, time_ratio=r_t, plain_bytes=mp, flash_bytes=mf, mem_ratio=r_m)


BLOCKS = [128, 256, 512, 1024, 2048, 4096]


def run_blocks(device="cuda", n=8192, blocks=BLOCKS):
    """flash_attention's time and peak memory for each ``block_size`` at one ``n``, on a
    torch device: the measurement behind ``default_block_size`` for that device."""
    import torch

    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(n, E, device=device, generator=g) for _ in range(3))
    sync = torch.cuda.synchronize if device != "cpu" else None
    base = lambda: al.flash_attention(q, k, v, block_size=blocks[0])  # noqa: E731
    print(f"  block_size sweep, device {device}, n = {n}, E = {E}, float32 "
          f"(time relative to block_size {blocks[0]}, interleaved)", flush=True)
    print(f"  {'block':>6} {'flash ms':>10} {'ratio':>7} {'peak MiB':>9}", flush=True)
    rows = []
    for b in blocks:
        fn = lambda: al.flash_attention(q, k, v, block_size=b)  # noqa: E731
        mem = _peak_cuda(fn) if device != "cpu" else float("nan")
        t, t0, r = compare_min(fn, base, repeats=_repeats(n), target_s=0.0, sync=sync)
        print(f"  {b:>6} {t * 1e3:10.2f} {r:7.3f} {mem / 2**20:9.1f}", flush=True)
        rows.append(dict(device=device, n=n, block_size=b, flash_s=t, ratio=r, peak_bytes=mem))
    return rows


def main(ns=NS):
    t0 = time.perf_counter()
    rows = run_cpu(ns)
    try:
        import torch

        if torch.cuda.is_available():
            rows += run_cuda(ns)
            rows += run_blocks("cuda")
    except ImportError:  # pragma: no cover
        pass
    print(f"  (flash vs plain: {time.perf_counter() - t0:.0f} s)")
    return rows


if __name__ == "__main__":
    main()
