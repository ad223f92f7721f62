"""Measuring the cost of attention (the helpers of chapters 7 and 8): time, peak memory, fitted exponents.

These are the measurement tools the chapter uses, kept here so that each notebook cell
shows one idea. Peak memory is measured with :mod:`tracemalloc`, which sees NumPy's
allocations (NumPy reports them) but not torch's; use NumPy inputs when measuring it.
"""
from __future__ import annotations

import contextlib
import gc
import math
import sys
import time
import tracemalloc

import numpy as np
from ..i18n import N_

__all__ = ["best_time", "best_times", "peak_memory", "fit_exponent", "score_matrix_bytes", "human_bytes",
           "attention_flops", "hbm_bytes_plain", "hbm_bytes_flash", "causal_tiles", "ring_timeline",
           "saved_tensors", "blas_threads", "count_flops", "tiled_loop_diagram"]

_ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "float8": 1}


def _sync() -> None:
    """Wait for queued CUDA work, if torch has started using a GPU in this process."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def best_time(fn, repeats=3, *, threads=None, clock="wall"):
    """The fastest of ``repeats`` calls of ``fn()`` after one warm-up call, in seconds.

    The minimum is the least disturbed by other work on the machine. CUDA work is
    waited for before the clock is read.

    Args:
        fn: a function of no arguments.
        repeats: timed calls. Default: ``3``.
        threads: if given, torch and NumPy's BLAS run with this many CPU threads during
            the timing (one thread makes timings of CPU code far less sensitive to other
            programs on a busy machine). Default: ``None`` (leave it).
        clock: ``"wall"`` (:func:`time.perf_counter`), ``"cpu"`` (:func:`time.process_time`,
            the CPU time of this process: time spent waiting for a core taken by another
            program is not counted) or ``"thread"`` (:func:`time.thread_time`, the CPU time
            of the calling thread only: exact for code that runs on one thread, e.g. with
            ``threads=1``). Default: ``"wall"``.

    Example::

        >>> cx.best_time(lambda: q @ k.T)
    """
    return best_times([fn], repeats, threads=threads, clock=clock)[0]


def best_times(fns, repeats=3, *, threads=None, clock="wall"):
    """:func:`best_time` of several functions, their calls interleaved (``f0, f1, f0,
    f1, ...``) so that a slow phase of a busy machine falls on all of them alike.

    Args:
        fns: a list of functions of no arguments.
        repeats, threads, clock: as for :func:`best_time`.

    Returns:
        a list with the best time of each function, in seconds.

    Example::

        >>> t_multi, t_one = al.complexity.best_times([multi, one], repeats=7)
    """
    clocks = {"wall": time.perf_counter, "cpu": time.process_time, "thread": time.thread_time}
    if clock not in clocks:
        raise ValueError(f"clock must be 'wall', 'cpu' or 'thread', got {clock!r}")
    now = clocks[clock]
    old = None
    if threads is not None:
        import torch

        old = torch.get_num_threads()
        torch.set_num_threads(threads)
    try:
        with blas_threads(threads):
            return _best_times(fns, repeats, now)
    finally:
        if old is not None:
            torch.set_num_threads(old)


def _best_times(fns, repeats, now):
    for fn in fns:
        fn()  # warm-up: first-call costs (allocations, kernel selection)
    best = [math.inf] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            _sync()  # CUDA runs asynchronously: start from an idle GPU ...
            t0 = now()
            fn()
            _sync()  # ... and wait for the result before reading the clock
            best[i] = min(best[i], now() - t0)
    return best


@contextlib.contextmanager
def blas_threads(n):
    """Run NumPy's BLAS (matrix products) on ``n`` threads inside the ``with`` block.

    Uses ``threadpoolctl`` when it is installed; without it (or with ``n=None``) nothing
    changes.

    Example::

        >>> with al.complexity.blas_threads(1):
        ...     q @ k.T
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        threadpool_limits = None
    if n is None or threadpool_limits is None:
        yield
        return
    with threadpool_limits(limits=n, user_api="blas"):
        yield


def count_flops(fn):
    """Floating-point operations of the torch calls ``fn()`` makes, counted by
    :class:`torch.utils.flop_counter.FlopCounterMode` (matrix products and other counted
    operations; an elementwise operation is not counted).

    Example::

        >>> cx.count_flops(lambda: q @ k.mT)   # 2 L S E
    """
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def saved_tensors(fn, *, exclude=()):
    """The tensors autograd keeps for the backward pass while ``fn()`` runs.

    Recorded with :func:`torch.autograd.graph.saved_tensors_hooks`; a storage saved by
    several operations (e.g. the softmax output, saved by the softmax and by the product
    with V) is counted once. Works on the ``"meta"`` device, where tensors have shapes
    but no data, so large models cost nothing to measure.

    Args:
        fn: a function of no arguments that runs a forward pass.
        exclude: tensors not to count (e.g. the parameters, which are kept anyway).
            Default: ``()``.

    Returns:
        a list of ``(shape, bytes)``, one per distinct storage saved.

    Example::

        >>> saved = al.complexity.saved_tensors(lambda: model(x), exclude=model.parameters())
    """
    import torch

    def key(t):
        return t.untyped_storage()._cdata  # the storage's identity (also on "meta")

    skip = {key(t) for t in exclude}
    seen = {}

    def pack(t):
        k = key(t)
        if k not in skip and k not in seen:
            seen[k] = (tuple(t.shape), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return list(seen.values())


def peak_memory(fn, *, warmup=True):
    """Peak bytes allocated (and traced by :mod:`tracemalloc`) while ``fn()`` runs.

    Counts NumPy arrays created during the call, including temporaries freed before it
    returns; the inputs, allocated before, are not counted.

    Args:
        fn: a function of no arguments.
        warmup: call ``fn()`` once untraced first, so that one-time costs (lazy imports,
            caches) are not counted. Default: ``True``.

    Example::

        >>> cx.peak_memory(lambda: al.scaled_dot_product_attention(q, k, v))
    """
    if warmup:
        fn()
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def fit_exponent(ns, ys):
    """The slope ``p`` of the least-squares line ``log y = p log n + c``: ``y ~ n^p``.

    Example::

        >>> cx.fit_exponent([1, 2, 4], [3, 12, 48])   # 2.0
    """
    ns, ys = np.asarray(ns, dtype=float), np.asarray(ys, dtype=float)
    if ns.shape != ys.shape or ns.size < 2 or np.any(ns <= 0) or np.any(ys <= 0):
        raise ValueError(f"fit_exponent needs two equally long lists of >= 2 positive numbers, got "
                         f"{ns.size} sizes and {ys.size} values")
    return float(np.polyfit(np.log(ns), np.log(ys), 1)[0])


def score_matrix_bytes(n, dtype="float32"):
    """Entries and bytes of one ``(n, n)`` score matrix (one head, one sequence, one layer).

    Args:
        n: sequence length. dtype: one of ``float64``, ``float32``, ``bfloat16``,
            ``float16``, ``float8``. Default: ``"float32"``.

    Returns:
        ``(entries, bytes)`` as Python ints.

    Example::

        >>> cx.score_matrix_bytes(4096, "float16")   # (16777216, 33554432)
    """
    if dtype not in _ITEMSIZE:
        raise ValueError(f"dtype must be one of {sorted(_ITEMSIZE)}, got {dtype!r}")
    return n * n, n * n * _ITEMSIZE[dtype]


def human_bytes(b):
    """``b`` bytes in binary units, e.g. ``'64.0 MiB'``, ``'32.0 GiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(b) < 1024 or unit == "PiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024


def attention_flops(L, S, E, Ev=None):
    """Floating-point operations of the two matmuls of attention: ``2 L S E + 2 L S Ev``.

    (Each of the ``L S`` scores is a dot product of ``E`` multiply-adds; each of the
    ``L Ev`` outputs sums ``S`` products. The softmax adds ``O(L S)``.)
    """
    Ev = E if Ev is None else Ev
    return 2 * L * S * E + 2 * L * S * Ev


def hbm_bytes_plain(n, d, itemsize=2):
    """Bytes plain attention moves through slow GPU memory (HBM), one head, ``L = S = n``.

    Reads Q, K, V and writes O (``4 n d`` numbers), then writes the scores, reads them,
    writes the weights and reads them again (``4 n^2`` numbers).

    Args:
        n: sequence length. d: head width (``d_k = d_v``). itemsize: bytes per number.
            Default: ``2`` (fp16/bf16).

    Example::

        >>> cx.hbm_bytes_plain(4096, 64)   # 136314880
    """
    return itemsize * (4 * n * d + 4 * n * n)


def hbm_bytes_flash(n, d, block=128, itemsize=2):
    """Bytes a tiled (FlashAttention-style) kernel moves through HBM, one head, ``L = S = n``.

    Q is read and O written once (``2 n d``); K and V are read once per block of
    ``block`` queries (``2 n d * ceil(n / block)``); no ``(n, n)`` array is written.

    Args:
        n, d, itemsize: as for :func:`hbm_bytes_plain`. block: query rows per tile.
            Default: ``128``.

    Example::

        >>> cx.hbm_bytes_flash(4096, 64)   # 34603008
    """
    return itemsize * (2 * n * d + 2 * n * d * math.ceil(n / block))


def causal_tiles(n, block):
    """Which ``block x block`` tiles of an ``(n, n)`` causal score matrix a tiled kernel computes.

    Returns:
        int array ``(nb, nb)``, ``nb = ceil(n / block)``: ``0`` skipped (every key after
        every query of the tile), ``1`` on the diagonal (computed, masked inside),
        ``2`` below it (computed, nothing masked).

    Example::

        >>> cx.causal_tiles(8, 4)   # [[1, 0], [2, 1]]
    """
    nb = math.ceil(n / block)
    i = np.arange(nb)[:, None]  # (nb, 1) query tile
    j = np.arange(nb)[None, :]  # (1, nb) key tile
    first_q = i * block
    last_q = np.minimum(n, (i + 1) * block) - 1
    first_k, last_k = j * block, (j + 1) * block - 1
    # a tile is skipped when its first key comes after its last query; nothing inside
    # it is masked when its last key comes no later than its first query
    return np.where(first_k > last_q, 0, np.where(last_k <= first_q, 2, 1))


def ring_timeline(trace, *, time_per_pair=1.0, transfer=0.0, overlap=True):
    """Replay a ring-attention trace on a clock: when each device computes, and how long it waits.

    Each device computes its step ``t`` for ``pairs * time_per_pair`` (the ``pairs`` of the
    trace, counted while the simulation computed them) and moves a key/value block to its
    neighbour in ``transfer``. It can start step ``t + 1`` once it has finished step ``t``
    and the next block has arrived from device ``p - 1``:

    * ``overlap=True``: device ``p - 1`` starts sending a block as soon as it starts computing
      on it, so the transfer hides behind the computation;
    * ``overlap=False``: blocks are exchanged after the computation, and both wait for it.

    Args:
        trace: the events of :func:`attnlib.ring_attention_simulated` (``return_trace=True``).
        time_per_pair: time units per computed score. Default: ``1.0``.
        transfer: time units to pass one block to the next device. Default: ``0.0``.
        overlap: overlap transfers with computation. Default: ``True``.

    Returns:
        a dict with ``total`` (the time until the last device finishes), ``busy`` and ``idle``
        (lists, one per device: time computing, time waiting) and ``spans`` (one list per
        device of ``(start, stop)`` per step, for a picture).

    Example::

        >>> out, trace = al.ring_attention_simulated(q, k, v, 4, is_causal=True, return_trace=True)
        >>> cx.ring_timeline(trace, transfer=100.0)["idle"]
    """
    P = 1 + max(e.device for e in trace)
    T = 1 + max(e.step for e in trace)
    work = [[0.0] * T for _ in range(P)]
    for e in trace:
        work[e.device][e.step] = e.pairs * time_per_pair
    start = [[0.0] * T for _ in range(P)]
    stop = [[0.0] * T for _ in range(P)]
    for t in range(T):
        for p in range(P):
            if t == 0:
                begin = 0.0  # every device starts with its own block
            elif overlap:  # the block was sent when device p - 1 started on it
                begin = max(stop[p][t - 1], start[(p - 1) % P][t - 1] + transfer)
            else:  # exchanged after both finished computing
                begin = max(stop[p][t - 1], stop[(p - 1) % P][t - 1]) + transfer
            start[p][t], stop[p][t] = begin, begin + work[p][t]
    total = max(stop[p][T - 1] for p in range(P))
    busy = [sum(w) for w in work]
    return {"total": total, "busy": busy, "idle": [total - b for b in busy],
            "spans": [list(zip(start[p], stop[p])) for p in range(P)]}


def tiled_loop_diagram(ax=None):
    """Draw the loop of tiled (flash) attention: what stays in slow memory and what sits in fast memory.

    On top, slow memory (GPU HBM): ``Q``, ``K``, ``V`` and ``O``, each ``n x d``, with the
    blocks of the current step highlighted. Below, fast memory (on-chip SRAM): one query
    block, one key/value block, their ``B x B`` score tile and the running ``m, l, acc``.
    Drawn tall (4.6 x 6.6 inches) so that a phone's screen shows its text at a readable size.

    Args:
        ax: a matplotlib axes to draw on. Default: ``None`` (a new tall figure).

    Returns:
        the matplotlib figure.

    Example::

        >>> cx.tiled_loop_diagram()
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    if ax is None:  # tall, so that a phone's screen (390 px) shows it at a readable size
        fig, ax = plt.subplots(figsize=(4.6, 6.6))
        fig.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=0.94)
    ax.set_xlim(0, 9)
    ax.set_ylim(0, 15.9)
    ax.axis("off")
    dark, light, fast = "#4a7ab5", "#dfe8f3", "#f6d7a7"
    # slow memory, on top: four tall n x d matrices, one block highlighted in each
    ax.add_patch(Rectangle((0.15, 10.0), 8.7, 5.3, fill=False, ls="--", lw=1, ec="grey"))
    ax.text(4.5, 15.45, N_("slow memory (HBM): large, each n × d"), ha="center", fontsize=10)
    rows = {"Q": 1, "K": 3, "V": 3, "O": 1}  # which block of B rows is in use
    left = {"Q": 0.6, "K": 2.65, "V": 4.7, "O": 7.8}
    col = {}
    for name, r in rows.items():
        x = left[name]
        low = 14.3 - (r + 1) * 0.85           # bottom edge of the highlighted block
        col[name] = (x + 0.5, low)            # its centre line and bottom edge
        ax.add_patch(Rectangle((x, 10.5), 1.0, 3.8, fc=light, ec="black", lw=0.8))
        ax.add_patch(Rectangle((x, low), 1.0, 0.85, fc=dark, ec="black", lw=0.8))
        sub = "i" if name in "QO" else "j"
        ax.text(x + 0.5, 14.4, name, ha="center", va="bottom", fontsize=9)
        ax.text(x + 0.5, low + 0.42, f"{name}$_{sub}$", ha="center", va="center", fontsize=9, color="white")
    # fast memory, below: the tiles of one step
    ax.add_patch(Rectangle((0.15, 0.15), 8.7, 7.6, fill=False, ls="--", lw=1, ec="grey"))
    ax.text(4.5, 7.05, N_("fast memory (SRAM): small"), ha="center", fontsize=10,
            bbox=dict(fc="white", ec="none", pad=1))
    boxes = [((0.35, 5.0), (3.75, 1.5), N_("Q$_i$  (B × d)\nkept for all j")),
             ((4.3, 5.0), (3.6, 1.5), N_("K$_j$, V$_j$  (B × d)\nreplaced each step")),
             ((0.35, 2.9), (3.75, 1.5), N_("S = Q$_i$K$_j^T$/√d\n(B × B) tile")),
             ((4.3, 2.9), (3.6, 1.5), N_("running m, ℓ  (B)\nacc  (B × d)")),
             ((4.3, 0.5), (3.6, 1.5), N_("after the last j:\nO$_i$ = acc / ℓ"))]
    for (x, y), (w, h), label in boxes:
        ax.add_patch(Rectangle((x, y), w, h, fc=fast, ec="black", lw=0.8))
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=9)

    def arrow(start, end, label=None, where=None, style="arc3,rad=0", ha="center"):
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, lw=1, color="#444",
                                     connectionstyle=style))
        if label:
            ax.text(*where, label, fontsize=9, color="#444", ha=ha, va="center",
                    bbox=dict(fc="white", ec="none", pad=1))

    arrow(col["Q"], (col["Q"][0], 6.5), N_("once"), (col["Q"][0] + 0.2, 8.3), ha="left")
    arrow(col["K"], (5.2, 6.5))
    arrow(col["V"], (6.0, 6.5), N_("one block per step, j = 0, 1, 2, …"), (4.6, 9.2))
    arrow((7.9, 1.25), (col["O"][0], 10.5), N_("once"), (col["O"][0] - 0.2, 8.3), ha="right",
          style="angle,angleA=0,angleB=-90,rad=0")
    ax.set_title(N_("One step of the tiled loop: only B × B scores exist at a time"), fontsize=10)
    return ax.figure
