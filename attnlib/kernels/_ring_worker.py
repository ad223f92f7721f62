"""The per-process side of :func:`attnlib.ring_attention_distributed` (private).

It lives in its own importable module because ``torch.multiprocessing`` starts fresh
interpreters ("spawn") that must import the function they run; a function defined in
a notebook cell cannot be found there.
"""
from __future__ import annotations

import datetime


def ring_worker(rank, world_size, port, q, k, v, is_causal, scale, timeout, results, fail_rank=None):
    """Rank ``rank`` of the ring: keep query shard ``rank``, pass K/V blocks to ``rank + 1``.

    Args:
        rank: this process's index (``torch.multiprocessing`` passes it first).
        world_size: P. port: the TCP port on 127.0.0.1 where the group meets.
        q, k, v: the full NumPy inputs (each rank takes its own shards).
        is_causal, scale: as in :func:`attnlib.ring_attention_distributed`.
        timeout: seconds for joining the group and for each transfer.
        results: a queue receiving ``(rank, out_shard)`` as a NumPy array.
        fail_rank: for tests: this rank raises at start-up, as a process that fails to
            start would.
    """
    import torch
    import torch.distributed as dist
    from array_api_compat import array_namespace

    from .flash import online_softmax_merge
    from ._ring_blocks import block_state, finish_state, shard_bounds

    if rank == fail_rank:
        raise RuntimeError(f"rank {rank} was told to fail at start-up (test of the error path)")
    torch.set_num_threads(1)  # P processes share the machine's cores
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=timeout))
    try:
        P, xp = world_size, array_namespace(torch.empty(0))
        qs, ks = shard_bounds(q.shape[-2], P), shard_bounds(k.shape[-2], P)
        a, b = qs[rank]
        q_blk = torch.from_numpy(q[..., a:b, :]) * scale  # (N..., Lp, E)
        E = k.shape[-1]
        a, b = ks[rank]
        kv = torch.from_numpy(_concat_kv(k[..., a:b, :], v[..., a:b, :]))  # (N..., Sp, E + Ev), one message
        state = None
        for t in range(P):
            j = (rank - t) % P  # the block held at step t
            if t < P - 1:  # start passing it on before computing on it: transfer overlaps compute
                nxt = (rank - t - 1) % P
                buf = torch.empty(kv.shape[:-2] + (ks[nxt][1] - ks[nxt][0], kv.shape[-1]), dtype=kv.dtype)
                reqs = [dist.isend(kv, dst=(rank + 1) % P), dist.irecv(buf, src=(rank - 1) % P)]
            new = block_state(xp, q_blk, kv[..., :E], kv[..., E:], qs[rank][0], ks[j][0], is_causal)
            if new is not None:
                state = new if state is None else online_softmax_merge(*state, *new)
            if t < P - 1:
                for r in reqs:
                    r.wait()
                kv = buf
        shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) + (q_blk.shape[-2], v.shape[-1])
        out = finish_state(xp, state, shape, q_blk.dtype, "cpu")
        results.put((rank, out.numpy().copy()))
        dist.barrier()  # nobody leaves while a neighbour may still be sending
    finally:
        dist.destroy_process_group()


def _concat_kv(k, v):
    import numpy as np

    batch = np.broadcast_shapes(k.shape[:-2], v.shape[:-2])
    k = np.broadcast_to(k, batch + k.shape[-2:])
    v = np.broadcast_to(v, batch + v.shape[-2:])
    return np.ascontiguousarray(np.concatenate([k, v], axis=-1))  # (N..., Sp, E + Ev)
