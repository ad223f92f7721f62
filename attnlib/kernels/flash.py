"""FlashAttention: exact attention, tiled, with the online-softmax recurrence.

Plain attention builds the whole ``(L, S)`` score matrix, then its softmax, then
multiplies by ``v``. :func:`flash_attention` computes the same numbers one tile of
``Bq`` queries by ``Bk`` keys at a time and never holds more than one ``(Bq, Bk)`` tile
of scores. For each query row it keeps three running quantities over the key blocks
seen so far (Dao et al., 2022; Milakov and Gimelshein, 2018):

    m    the largest score so far                          (N..., Bq, 1)
    l    the sum of exp(score - m) so far                  (N..., Bq, 1)
    acc  the sum of exp(score - m) * v_j so far            (N..., Bq, Ev)

A new tile with scores ``s`` updates them by

    m_new = max(m, rowmax(s))
    alpha = exp(m - m_new)                 # rescales what was accumulated under the old max
    p     = exp(s - m_new)
    l     = alpha * l + rowsum(p)
    acc   = alpha * acc + p @ v_tile
    m     = m_new

and at the end ``out = acc / l``. Every step is exact algebra, so the result equals
softmax attention up to float rounding. Memory: ``O(Bq * Bk + L * Ev)`` instead of
``O(L * S)``; with ``is_causal`` the tiles wholly above the diagonal are skipped.

:func:`online_softmax_merge` is the same update written for two finished partial
states; ring attention (:mod:`attnlib.kernels.ring`) merges the blocks of different devices
with it.
"""
from __future__ import annotations

import math

from array_api_compat import device as _device

from ._array import all_finite, check_finite, check_positive_int, check_scale, compute_dtype, is_torch, namespace
from ._shared import (causal_tile, check_attention_args, check_qkv, online_finish, online_update,
                      refuse_non_finite)

__all__ = ["flash_attention", "online_softmax_merge", "attention_state", "default_block_size"]


def flash_attention(q, k, v, attn_mask=None, *, is_causal=False, scale=None, block_size=None):
    r"""Exact scaled dot-product attention, tiled over queries and keys.

    Same semantics as :func:`attnlib.scaled_dot_product_attention` (and
    ``torch.nn.functional.scaled_dot_product_attention``), computed one
    ``block_size x block_size`` tile of scores at a time with the online softmax, so
    that no ``L x S`` array is ever built.

    Args:
        q: queries, shape ``(N..., L, E)``.
        k: keys, shape ``(N..., S, E)``.
        v: values, shape ``(N..., S, Ev)``.
        attn_mask: optional mask broadcastable to ``(N..., L, S)``. A bool mask is
            ``True`` where a query *may* attend; a float mask is added to the scores.
            It is sliced per tile, so a broadcast mask (e.g. ``(1, S)``) stays small.
            Default: ``None``.
        is_causal: if ``True``, query ``i`` attends only to keys ``j <= i`` (top-left
            aligned); tiles wholly above the diagonal are skipped. Default: ``False``.
        scale: multiplier of the scores. Default: ``None`` (``1 / sqrt(E)``).
        block_size: tile size ``Bq = Bk`` in positions, any positive integer. Default:
            ``None``, chosen per library and device by :func:`default_block_size` (512 for
            NumPy and torch on the CPU, 1024 on a GPU), measured so that flash is no slower
            than plain attention from n = 4,096 up.

    Returns:
        out: shape ``(N..., L, Ev)``, the caller's array type, dtype and device. A query
        with nothing to attend to gets zeros. The same numbers (to rounding) as
        :func:`attnlib.scaled_dot_product_attention` for the same input, on every path: a
        float mask is added in the compute dtype (float32 for 16-bit inputs), and NaN or
        inf in q, k, v or the mask raise a ValueError, as there.

    Example::

        >>> out = al.flash_attention(q, k, v, is_causal=True, block_size=64)
    """
    xp, batch, mask, scale = _check_sdpa_args(q, k, v, attn_mask, is_causal, scale)
    is_causal = bool(is_causal)
    block_size = default_block_size(q) if block_size is None else check_positive_int(block_size)
    inputs = q, k, v, attn_mask  # as given, for the finiteness check at the end
    ct = compute_dtype(xp, q)  # float32 for 16-bit inputs
    k, v = xp.astype(k, ct, copy=False), xp.astype(v, ct, copy=False)
    if mask is not None and mask.dtype != xp.bool:
        mask = xp.astype(mask, ct, copy=False)
    L, S, dev = q.shape[-2], k.shape[-2], _device(q)
    out = xp.zeros(batch + (L, v.shape[-1]), dtype=q.dtype, device=dev)  # (N..., L, Ev), filled block by block
    for i0 in range(0, L, block_size):
        i1 = min(i0 + block_size, L)
        q_blk = xp.astype(q[..., i0:i1, :], ct) * scale  # (N..., Bq, E); scaling q costs Bq*E, not Bq*Bk
        state = None
        for j0 in range(0, S, block_size):
            j1 = min(j0 + block_size, S)
            if is_causal and j0 > i1 - 1:
                break  # this tile and all after it lie above the diagonal
            s = q_blk @ k[..., j0:j1, :].mT  # (N..., Bq, E) @ (N..., E, Bk) -> (N..., Bq, Bk)
            if mask is not None:
                s = _apply_mask(xp, s, _tile(mask, i0, i1, j0, j1))
            if is_causal:
                s = causal_tile(xp, s, i0, j0)
            state = online_update(xp, state, s, v[..., j0:j1, :])
        if state is not None:  # (S = 0 leaves nothing to attend to: zeros)
            out[..., i0:i1, :] = xp.astype(online_finish(xp, state), q.dtype, copy=False)
    refuse_non_finite(xp, out, *inputs, is_causal=is_causal)  # NaN and inf raise, as in scaled_dot_product_attention
    return out


# The default tile size, per library and device, measured with benchmarks/bench_flash.py
# (figures in benchmarks/RESULTS.md). On the CPU the plain path runs two big BLAS matmuls
# and the tiled loop many small ones, each with Python and library overhead: 128 x 128
# tiles made NumPy flash 2.0x slower than plain at n = 4,096 on the course's 2-core
# machine, 512 x 512 tiles (1 MiB of float32 scores, cache-sized) made it no slower from
# n = 4,096 up, while the tiles stay far below the (n, n) scores (>= 10x less memory at
# n = 8,192). torch on the CPU behaves the same. On a GPU every tile costs about ten
# kernel launches from Python, and the launches set the time: on an NVIDIA H200 at
# n = 8,192, each doubling of the tile made flash about 4x faster (658 ms at 128, 12.2 ms
# at 1024, 1.4 ms at 4096, against 1.1 ms for plain), while its peak memory grew (14.5 MiB
# at 1024, 51 at 2048, 196 at 4096, against 258 MiB for plain). 1024 is the largest tile
# that keeps flash's memory 10x below plain's there, the point of flash.
_BLOCK_CPU = 512
_BLOCK_GPU = 1024


def default_block_size(q) -> int:
    """The tile size :func:`flash_attention` uses when ``block_size=None``: the one place it
    is chosen, by the library and device of ``q``. See the comment above for the
    measurements behind it.

    Args:
        q: the queries, ``(N..., L, E)``, a NumPy array or torch tensor (only its library and
            device are read).

    Returns:
        an int: 512 on the CPU (NumPy or torch), 1024 on other torch devices.

    Example::

        >>> from attnlib.kernels.flash import default_block_size
        >>> default_block_size(np.zeros((8, 4)))
        512
    """
    dev = getattr(q, "device", None)
    if is_torch(q) and getattr(dev, "type", "cpu") != "cpu":
        return _BLOCK_GPU
    return _BLOCK_CPU


def _check_sdpa_args(q, k, v, attn_mask, is_causal, scale):
    """The checks of :func:`attnlib.scaled_dot_product_attention`, shared so that both
    raise the same errors; returns ``(xp, batch, mask, scale)`` with a 1-D mask made ``(1, S)``."""
    xp, batch, _, _ = check_attention_args(q, k, v, attn_mask, is_causal)  # is_causal too
    if attn_mask is not None and attn_mask.ndim < 2:  # (S,) -> (1, S); () -> (1, 1)
        attn_mask = xp.reshape(attn_mask, (1,) * (2 - attn_mask.ndim) + tuple(attn_mask.shape))
    return xp, batch, attn_mask, check_scale(scale, q.shape[-1])


def _tile(mask, i0, i1, j0, j1):
    """The part of a (broadcastable) mask that covers queries i0:i1 and keys j0:j1;
    a dimension of size 1 is broadcast, not sliced."""
    rows = slice(None) if mask.shape[-2] == 1 else slice(i0, i1)
    cols = slice(None) if mask.shape[-1] == 1 else slice(j0, j1)
    return mask[..., rows, cols]


def _apply_mask(xp, s, m):
    """Apply a mask tile ``m`` to the scores ``s`` (N..., Bq, Bk): bool -> -inf where False,
    float -> added."""
    if m.dtype == xp.bool:
        return xp.where(m, s, -math.inf)
    return s + m


def attention_state(q, k, v, *, scale=None):
    """The partial softmax state of ``q`` against one block of keys and values.

    Args:
        q: shape ``(N..., L, E)``; k: ``(N..., S, E)``; v: ``(N..., S, Ev)``.
        scale: multiplies the scores q·k. Default: ``None`` (``1 / sqrt(E)``).

    Returns:
        ``(m, l, acc)``: the row maximum of the scores ``(N..., L)``, the sum of
        ``exp(score - m)`` ``(N..., L)`` and the unnormalised output ``(N..., L, Ev)``;
        ``acc / l[..., None]`` is the attention output over this block. With no key
        (``S = 0``) the empty state ``(-inf, 0, 0)``, which :func:`online_softmax_merge`
        leaves unchanged. NaN or inf in q, k, v raise a ValueError naming the input, as in
        :func:`attnlib.scaled_dot_product_attention`.

    Example::

        >>> m, l, acc = al.attention_state(q, k[:64], v[:64])
    """
    xp = namespace(q=q, k=k, v=v)
    batch, L, S = check_qkv(xp, q, k, v)
    if S == 0:  # no key: the empty state, which online_softmax_merge leaves unchanged
        dev = _device(q)
        m = xp.full((*batch, L), -math.inf, dtype=q.dtype, device=dev)  # (N..., L)
        acc = xp.zeros((*batch, L, v.shape[-1]), dtype=q.dtype, device=dev)  # (N..., L, Ev)
        refuse_non_finite(xp, None, q, k, v)
        return m, xp.zeros((*batch, L), dtype=q.dtype, device=dev), acc
    s = (q * check_scale(scale, q.shape[-1])) @ k.mT  # (N..., L, E) @ (N..., E, S) -> (N..., L, S)
    m, l, acc = online_update(xp, None, s, v)  # (N..., L, 1), (N..., L, 1), (N..., L, Ev)
    refuse_non_finite(xp, acc, q, k, v)  # NaN and inf raise, as in scaled_dot_product_attention
    return m[..., 0], l[..., 0], acc


def online_softmax_merge(m1, l1, acc1, m2, l2, acc2):
    """Merge two partial softmax states of the same queries over two disjoint key sets.

    A state ``(m, l, acc)`` over keys ``J`` is ``m = max_j s_j``,
    ``l = sum_j exp(s_j - m)`` and ``acc = sum_j exp(s_j - m) v_j``. The state over
    ``J1 ∪ J2`` rescales both to the common maximum ``m = max(m1, m2)``:
    ``l = exp(m1 - m) l1 + exp(m2 - m) l2`` and likewise for ``acc``.

    Args:
        m1, l1: shape ``(N..., L)``; acc1: shape ``(N..., L, Ev)``.
        m2, l2, acc2: the same for the second key set.

    Returns:
        ``(m, l, acc)`` with the same shapes. A row with ``m = -inf`` in both (nothing
        to attend to) stays ``(-inf, 0, 0)``. NaN or inf in a state (``m`` may be ``-inf``)
        raise a ValueError naming it.

    Example::

        >>> m, l, acc = al.online_softmax_merge(*al.attention_state(q, k1, v1), *al.attention_state(q, k2, v2))
    """
    xp = namespace(m1=m1, l1=l1, acc1=acc1, m2=m2, l2=l2, acc2=acc2)
    m = xp.maximum(m1, m2)  # (N..., L)
    m_safe = xp.where(m == -math.inf, 0.0, m)
    a1, a2 = xp.exp(m1 - m_safe), xp.exp(m2 - m_safe)  # (N..., L)
    l, acc = a1 * l1 + a2 * l2, a1[..., None] * acc1 + a2[..., None] * acc2  # (N..., L), (N..., L, Ev)
    if not all_finite(xp, l, acc):  # a NaN or inf in any input reaches l or acc
        empty = "m = -inf is an empty state"
        check_finite(xp, m1=m1, l1=l1, acc1=acc1, m2=m2, l2=l2, acc2=acc2, minus_inf_ok=dict(m1=empty, m2=empty),
                     who="online_softmax_merge")
        raise ValueError("online_softmax_merge: l or acc overflowed although every input is finite; "
                         "merge states whose m is the true maximum of their scores (l <= the number of keys)")
    return m, l, acc
