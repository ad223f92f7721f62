"""Ring attention: exact attention for a sequence split over P devices (Liu et al., 2023).

Device ``p`` keeps one shard of the queries, ``q_p``, for the whole computation and
starts with the matching shard of keys and values, ``(k_p, v_p)``. In each of ``P``
steps it folds the key/value block it holds into its running softmax state
``(m, l, acc)`` (see :mod:`attnlib.kernels.flash`) and passes the block on to device ``p + 1``
(mod ``P``), receiving a new one from ``p - 1``. After ``P`` steps every query shard has
met every key block, and ``acc / l`` is exactly the attention output. No device ever
holds more than one ``(L/P, S/P)`` block of scores or more than two K/V blocks, and the
transfer of the next block can overlap the computation on the current one.

With a causal mask and contiguous shards the work is unbalanced: device ``p`` computes
``p + 1`` of the ``P`` blocks. The *zig-zag* layout (``layout="zigzag"``) cuts the sequence
into ``2P`` chunks and gives device ``p`` chunks ``p`` and ``2P - 1 - p``, one early and one
late, so that every device computes the same number of scores.
:func:`attnlib.instruments.complexity.ring_timeline` turns the simulation's trace into a timeline with
and without overlapping transfers.

Two versions, both equal to plain attention to float rounding:

* :func:`ring_attention_simulated` runs the P virtual devices one after another in
  this process (NumPy or torch, any device) and can report the schedule.
* :func:`ring_attention_distributed` runs P real processes on this machine that talk
  through ``torch.distributed`` with the gloo backend over 127.0.0.1; the per-process
  code is :func:`attnlib.kernels._ring_worker.ring_worker`.
"""
from __future__ import annotations

import queue as _queue
import socket
import time
from typing import NamedTuple

import numpy as np
from array_api_compat import device as _device

from ._array import check_flag, check_positive_int, check_scale, fmt_shape, is_torch
from ._ring_blocks import block_state, finish_state, shard_bounds
from ._shared import check_finite_qkv, check_has_keys
from .devices import to_device
from .flash import online_softmax_merge

__all__ = ["ring_attention_simulated", "ring_attention_distributed", "ring_schedule", "shard_bounds",
           "shard_parts", "RingStep"]


def ring_schedule(P):
    """Which key/value block each device holds at each step.

    Args:
        P: the number of devices in the ring.

    Returns:
        a list of ``P`` lists: ``schedule[t][p]`` is the block device ``p`` works on at
        step ``t``, namely ``(p - t) mod P``.

    Example::

        >>> al.ring_schedule(3)   # [[0, 1, 2], [2, 0, 1], [1, 2, 0]]
    """
    P = check_positive_int(P, "P")
    return [[(p - t) % P for p in range(P)] for t in range(P)]


def _check_devices(P, q, k, fn, arg):
    """``P`` (the argument ``arg``) as an int that splits L queries and S keys over P devices."""
    P = check_positive_int(P, arg)
    L, S = q.shape[-2], k.shape[-2]
    if P > min(L, S):
        fix = (f"use at most {min(L, S)} devices" if L else "pass at least one query")
        raise ValueError(f"{fn}: {arg}={P} devices but only L = {L} queries (q has shape {fmt_shape(q.shape)}) "
                         f"and S = {S} keys (k has shape {fmt_shape(k.shape)}); every device needs at least "
                         f"one of each, so {fix}")
    return P


def _prepare(q, k, v, P, scale, is_causal, name, arg):
    """The checks of both ring functions; returns ``(xp, batch N..., is_causal, scale)``."""
    xp, batch, _, _ = check_finite_qkv(q, k, v)  # a device skips blocks: q, k, v are checked directly
    is_causal = check_flag("is_causal", is_causal)
    check_has_keys(name, k, v)
    _check_devices(P, q, k, name, arg)
    return xp, batch, is_causal, check_scale(scale, q.shape[-1])


class RingStep(NamedTuple):
    """One event of :func:`ring_attention_simulated`'s trace: at ``step``, ``device``
    worked on the key/value block that started on device ``block``; ``computed`` is False
    when the causal mask hid all of it, and ``pairs`` counts the (query, key) scores it
    actually computed (its work)."""

    step: int
    device: int
    block: int
    computed: bool
    pairs: int


def shard_parts(n, P, layout="contiguous"):
    """The position ranges each of ``P`` devices holds under ``layout``.

    Args:
        n: the number of positions. P: the number of devices.
        layout: ``"contiguous"`` (device ``p`` holds shard ``p`` of :func:`shard_bounds`) or
            ``"zigzag"`` (the sequence is cut into ``2P`` chunks and device ``p`` holds
            chunks ``p`` and ``2P - 1 - p``: one early and one late chunk, which balances
            the work of a causal mask). Default: ``"contiguous"``.

    Returns:
        a list of ``P`` lists of ``(start, stop)`` pairs.

    Example::

        >>> al.shard_parts(8, 2, "zigzag")   # [[(0, 2), (6, 8)], [(2, 4), (4, 6)]]
    """
    if layout == "contiguous":
        return [[b] for b in shard_bounds(n, P)]
    if layout == "zigzag":
        chunks = shard_bounds(n, 2 * P)
        return [[chunks[p], chunks[2 * P - 1 - p]] for p in range(P)]
    raise ValueError(f"layout must be 'contiguous' or 'zigzag', got {layout!r}")


def ring_attention_simulated(q, k, v, num_devices, *, is_causal=False, scale=None, return_trace=False,
                             layout="contiguous"):
    """Ring attention over ``num_devices`` virtual devices, simulated in this process.

    Args:
        q: ``(N..., L, E)``; k: ``(N..., S, E)``; v: ``(N..., S, Ev)``.
        num_devices: P, the number of devices the sequence is split over (``<= min(L, S)``,
            ``<= min(L, S) / 2`` for ``layout="zigzag"``).
        is_causal: query ``i`` sees keys ``j <= i`` (global positions, top-left
            aligned); a device skips the computation on blocks wholly in the future.
            Default: ``False``.
        scale: multiplies the scores q·k. Default: ``None`` (``1 / sqrt(E)``).
        return_trace: also return the list of :class:`RingStep` events
            ``(step, device, block, computed, pairs)``. Default: ``False``.
        layout: how queries and keys are split over the devices, ``"contiguous"`` or
            ``"zigzag"`` (see :func:`shard_parts`). Default: ``"contiguous"``.

    Returns:
        out: ``(N..., L, Ev)`` (and the trace when asked). NaN or inf in q, k, v raise a
        ValueError naming the input, as in :func:`attnlib.scaled_dot_product_attention`.

    Example::

        >>> out = al.ring_attention_simulated(q, k, v, num_devices=4, is_causal=True)
    """
    name = "ring_attention_simulated"
    xp, batch, is_causal, scale = _prepare(q, k, v, num_devices, scale, is_causal, name, "num_devices")
    P = int(num_devices)
    if layout == "zigzag" and 2 * P > min(q.shape[-2], k.shape[-2]):
        raise ValueError(f"{name}: layout='zigzag' cuts the sequence into 2P = {2 * P} chunks but L = "
                         f"{q.shape[-2]}, S = {k.shape[-2]}; use at most {min(q.shape[-2], k.shape[-2]) // 2} "
                         f"devices, or layout='contiguous'")
    qs, ks = shard_parts(q.shape[-2], P, layout), shard_parts(k.shape[-2], P, layout)
    held = [[(k[..., a:b, :], v[..., a:b, :], a) for a, b in ks[p]] for p in range(P)]  # device p's K/V now
    states = [[None] * len(qs[p]) for p in range(P)]  # one running state per query part
    trace = []
    for t, blocks in enumerate(ring_schedule(P)):
        for p, j in enumerate(blocks):
            pairs = 0
            for i, (qa, qb) in enumerate(qs[p]):
                for k_blk, v_blk, k0 in held[p]:
                    new = block_state(xp, q[..., qa:qb, :] * scale, k_blk, v_blk, qa, k0, is_causal)
                    if new is not None:
                        pairs += (qb - qa) * k_blk.shape[-2]
                        states[p][i] = new if states[p][i] is None else online_softmax_merge(*states[p][i], *new)
            trace.append(RingStep(t, p, j, pairs > 0, pairs))
        held = [held[(p - 1) % P] for p in range(P)]  # pass every block one device on
    parts = [(qa, finish_state(xp, s, batch + (qb - qa, v.shape[-1]), q.dtype, _device(q)))
             for p in range(P) for s, (qa, qb) in zip(states[p], qs[p])]
    parts.sort(key=lambda part: part[0])  # back in sequence order
    out = xp.concat([o for _, o in parts], axis=-2)  # (N..., L, Ev)
    return (out, trace) if return_trace else out


def _free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_method():
    """"forkserver" where available: one server process imports torch and attnlib once and
    forks every worker from it, which starts P workers several times faster than "spawn"
    (P fresh interpreters each importing torch) and is safe, unlike a plain fork of a
    process that may already run threads. Elsewhere (Windows), "spawn"."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"  # pragma: no cover
    multiprocessing.set_forkserver_preload(["torch", "torch.distributed", "array_api_compat.torch",
                                            "attnlib.kernels._ring_worker", "attnlib.kernels._ring_blocks",
                                            "attnlib.kernels.ring"])
    return "forkserver"


def ring_attention_distributed(q, k, v, world_size, *, is_causal=False, scale=None, timeout=60.0,
                               _fail_rank=None):
    """Ring attention run for real: ``world_size`` processes, ``torch.distributed`` + gloo.

    Each process (rank ``p``) keeps query shard ``p`` and passes key/value blocks to rank
    ``p + 1`` with ``isend``/``irecv`` while it computes on the block it holds. The
    processes are started with ``torch.multiprocessing`` and meet on a free port of
    127.0.0.1; each sends its output shard back and this function joins them.

    Args:
        q: ``(N..., L, E)``; k: ``(N..., S, E)``; v: ``(N..., S, Ev)``: NumPy arrays or
            torch tensors (they are sent to the workers as NumPy; the result comes back
            in the caller's library, dtype and device).
        world_size: P, the number of processes (``<= min(L, S)``).
        is_causal: query ``i`` sees keys ``j <= i`` (top-left aligned). Default: ``False``.
        scale: multiplies the scores q·k. Default: ``None`` (``1 / sqrt(E)``).
        timeout: seconds to wait for all processes, start-up included. Default: ``60``.

    Returns:
        out: ``(N..., L, Ev)``.

    Raises:
        ValueError: NaN or inf in q, k or v (checked before any process starts), ``S = 0``,
            or more processes than queries or keys.
        RuntimeError: a process failed (to start, to join the process group, or while
            computing); the message names the rank and quotes its error.
        TimeoutError: the processes did not all finish within ``timeout`` seconds.

    Example::

        >>> out = al.ring_attention_distributed(q, k, v, world_size=4)
    """
    name = "ring_attention_distributed"
    xp, _, is_causal, scale = _prepare(q, k, v, world_size, scale, is_causal, name, "world_size")
    world_size = int(world_size)
    try:
        import torch.multiprocessing as mp
    except ImportError as exc:  # pragma: no cover
        raise RuntimeError(f"{name} needs PyTorch (torch.distributed); install torch") from exc
    from . import _ring_worker

    arrays = [to_device(x, "numpy") for x in (q, k, v)]
    method = _start_method()
    results = mp.get_context(method).Queue()
    port = _free_port()
    start = time.monotonic()
    procs = mp.start_processes(
        _ring_worker.ring_worker, nprocs=world_size, join=False, start_method=method,
        # the workers' own rendezvous timeout is generous: the deadline is enforced here, with a clear message
        args=(world_size, port, *arrays, is_causal, scale, max(float(timeout), 30.0), results, _fail_rank))
    outs = {}
    try:
        while len(outs) < world_size:
            try:
                rank, out = results.get(timeout=0.1)
                outs[rank] = out
                continue
            except _queue.Empty:
                pass
            if time.monotonic() - start > timeout:
                missing = sorted(set(range(world_size)) - set(outs))
                raise TimeoutError(f"{name}: ranks {missing} of {world_size} did not finish within "
                                   f"timeout={timeout:g} s (start-up included); the processes were "
                                   f"stopped. On a busy machine pass a larger timeout or fewer processes.")
            try:
                procs.join(timeout=0)  # raises if a process died with an error
            except Exception as exc:  # noqa: BLE001 - ProcessRaisedException / ProcessExitedException
                rank = getattr(exc, "error_index", "?")
                raise RuntimeError(f"{name}: process {rank} of {world_size} failed, so the ring is broken "
                                   f"and the run was stopped. Its error:\n{exc}") from None
        procs.join(timeout=max(1.0, timeout - (time.monotonic() - start)))
    finally:
        for pr in procs.processes:
            if pr.is_alive():
                pr.terminate()
        for pr in procs.processes:
            pr.join(1.0)
    out = np.concatenate([outs[r] for r in range(world_size)], axis=-2)  # (N..., L, Ev)
    out = to_device(out, q.device if is_torch(q) else "numpy")
    return xp.astype(out, q.dtype) if out.dtype != q.dtype else out
