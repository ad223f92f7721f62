"""The pieces of ring attention that a device runs, shared by the simulation in this
process (:mod:`attnlib.kernels.ring`) and the real processes of
:func:`attnlib.ring_attention_distributed` (:mod:`attnlib.kernels._ring_worker`)."""
from __future__ import annotations

from ._array import check_positive_int, check_size
from ._shared import causal_tile, online_finish, online_update


def shard_bounds(n, P):
    """Split ``range(n)`` into ``P`` contiguous shards as evenly as possible.

    Args:
        n: the number of positions (e.g. ``L`` or ``S``).
        P: the number of shards (devices).

    Returns:
        a list of ``P`` pairs ``(start, stop)``; the first ``n % P`` shards are one longer.

    Example::

        >>> al.shard_bounds(10, 4)   # [(0, 3), (3, 6), (6, 8), (8, 10)]
    """
    n, P = check_size("n", n), check_positive_int(P, "P")
    sizes = [n // P + (1 if p < n % P else 0) for p in range(P)]
    starts = [sum(sizes[:p]) for p in range(P)]
    return [(s, s + z) for s, z in zip(starts, sizes)]


def block_state(xp, q_blk, k_blk, v_blk, q0, k0, is_causal):
    """The partial softmax state ``(m, l, acc)`` of one query shard against one key block.

    ``q_blk`` is already scaled; ``q0`` and ``k0`` are the global positions of the first
    query and key (for the causal mask). Shapes: ``(N..., Lp, E)``, ``(N..., Sp, E)``,
    ``(N..., Sp, Ev)`` -> ``m, l (N..., Lp)``, ``acc (N..., Lp, Ev)``. Returns ``None``
    when the causal mask hides the whole block. The same step as
    :func:`attnlib.attention_state`, with global positions for the causal mask.
    """
    Lp = q_blk.shape[-2]
    if is_causal and k0 > q0 + Lp - 1:
        return None  # every key of this block lies in the future of every query
    s = q_blk @ k_blk.mT  # (N..., Lp, E) @ (N..., E, Sp) -> (N..., Lp, Sp)
    if is_causal:
        s = causal_tile(xp, s, q0, k0)
    m, l, acc = online_update(xp, None, s, v_blk)  # (N..., Lp, 1), (N..., Lp, 1), (N..., Lp, Ev)
    return m[..., 0], l[..., 0], acc


def finish_state(xp, state, shape, dtype, dev):
    """``acc / l`` of a state (zeros where ``l == 0``, or for no state at all)."""
    if state is None:
        return xp.zeros(shape, dtype=dtype, device=dev)
    m, l, acc = state
    return online_finish(xp, (m[..., None], l[..., None], acc))  # (N..., Lp, Ev)
