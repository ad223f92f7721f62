"""Sparse attention: a sliding window plus a few global tokens (Longformer-style).

Query ``i`` attends key ``j`` when

* ``|i - j| <= window`` (the local band), or
* ``j < num_global`` (every query reads the global tokens), or
* ``i < num_global`` (a global token reads every key),

and, with ``is_causal``, only when ``j <= i`` as well. The allowed pairs number about
``L (2 window + 1 + num_global) + num_global S``, so time is ``O(n (w + g) E)`` and memory
``O(n (w + g))`` instead of ``O(n^2 E)`` and ``O(n^2)``.

**Error against full softmax attention.** Let ``eps_i`` be the softmax weight that
full attention gives to the keys query ``i`` may *not* see. Full attention's output is
``(1 - eps_i) a_i + eps_i b_i`` where ``a_i`` (sliding-window output) and ``b_i`` are
weighted averages of values, so every coordinate ``c`` of the difference obeys::

    |out_full[i, c] - out_sparse[i, c]| <= eps_i * (max_j v[j, c] - min_j v[j, c]).

The error is small exactly when the attention that is cut away was small;
``tests/test_sparse.py`` checks the bound.
"""
from __future__ import annotations

import math
from numbers import Integral

import numpy as np
from array_api_compat import device as _device

from ._array import check_flag, check_positive_int, check_scale, check_size, compute_dtype, namespace
from ._shared import check_finite_qkv, online_finish, online_update
from .flash import flash_attention

__all__ = ["sliding_window_attention", "sliding_window_mask", "sliding_window_pairs"]


def _check_window(window, num_global, name):
    """``(window, num_global)`` as ints; any integer type is accepted (``np.int64`` too), bool is not."""
    if isinstance(window, bool) or not isinstance(window, Integral) or window < 0:
        raise ValueError(f"{name}: window must be an int >= 0 (keys at distance <= window are seen), got {window!r}")
    if isinstance(num_global, bool) or not isinstance(num_global, Integral) or num_global < 0:
        raise ValueError(f"{name}: num_global must be an int >= 0 (the first num_global tokens are global), "
                         f"got {num_global!r}")
    return int(window), int(num_global)


def _allowed(xp, rows, cols, window, num_global, is_causal):
    """Bool (Bq, Bk): may query ``rows[:, None]`` attend key ``cols[None, :]``?"""
    ok = (xp.abs(rows - cols) <= window) | (cols < num_global) | (rows < num_global)
    return ok & (cols <= rows) if is_causal else ok


def sliding_window_mask(L, S=None, *, window, num_global=0, is_causal=False, like=None):
    """The bool mask of :func:`sliding_window_attention`, for pictures and tests.

    Args:
        L: number of queries. S: number of keys. Default: ``None`` (``S = L``).
        window: keys at distance ``<= window`` are seen.
        num_global: the first ``num_global`` positions are global tokens. Default: ``0``.
        is_causal: also require ``j <= i``. Default: ``False``.
        like: an array whose library and device the mask should match (e.g. your
            ``q``). Default: ``None`` (a NumPy array).

    Returns:
        bool array ``(L, S)``, ``True`` where query ``i`` may attend key ``j``.

    Example::

        >>> al.sliding_window_mask(6, window=1, num_global=1)
    """
    L = check_size("L", L)
    S = L if S is None else check_size("S", S)
    window, num_global = _check_window(window, num_global, "sliding_window_mask")
    is_causal = check_flag("is_causal", is_causal)
    xp = np if like is None else namespace(like=like)
    dev = None if like is None else _device(like)
    rows = xp.arange(L, device=dev)[:, None]  # (L, 1)
    cols = xp.arange(S, device=dev)[None, :]  # (1, S)
    return _allowed(xp, rows, cols, window, num_global, is_causal)


def sliding_window_pairs(L, S=None, *, window, num_global=0, is_causal=False):
    """How many (query, key) pairs :func:`sliding_window_attention` computes: the number of
    True entries of :func:`sliding_window_mask`, counted row by row in ``O(L)`` without
    building the ``(L, S)`` mask.

    Args:
        L, S, window, num_global, is_causal: as in :func:`sliding_window_mask`.
            Default: ``S = None`` (``S = L``), ``num_global = 0``, ``is_causal = False``.

    Returns:
        the number of allowed pairs, an int (compare with ``L * S`` for full attention).

    Example::

        >>> al.sliding_window_pairs(16384, window=64, num_global=2)   # 2174650, not 268435456
    """
    L = check_size("L", L)
    S = L if S is None else check_size("S", S)
    window, num_global = _check_window(window, num_global, "sliding_window_pairs")
    is_causal = check_flag("is_causal", is_causal)
    i = np.arange(L, dtype=np.int64)  # query positions
    lo = np.maximum(0, i - window)  # the band of keys [lo, hi] around each query
    hi = np.minimum(S - 1, i if is_causal else i + window)
    band = np.maximum(0, hi - lo + 1)
    g = min(num_global, S)
    left = np.minimum(g, lo)  # global keys before the band
    right = 0 if is_causal else np.maximum(0, g - np.maximum(hi + 1, lo))  # global keys after it
    count = band + left + right
    rows = i < num_global  # global queries see every key (up to themselves when causal)
    count = np.where(rows, np.minimum(i + 1, S) if is_causal else S, count)
    return int(count.sum())


def sliding_window_attention(q, k, v, *, window, num_global=0, is_causal=False, scale=None, block_size=128):
    """Softmax attention restricted to a sliding window plus global tokens.

    Equal (to float rounding) to ``scaled_dot_product_attention(q, k, v,
    attn_mask=sliding_window_mask(L, S, window=..., num_global=..., is_causal=...))``,
    but only the allowed band of scores is computed: each block of ``block_size``
    queries looks at its ``block_size + 2 window`` neighbouring keys and the global keys.

    Args:
        q: ``(N..., L, E)``; k: ``(N..., S, E)``; v: ``(N..., S, Ev)``.
        window: keys at distance ``|i - j| <= window`` are seen.
        num_global: the first ``num_global`` tokens attend to, and are attended by,
            every position. Default: ``0``.
        is_causal: also require ``j <= i``. Default: ``False``.
        scale: multiplies the scores q·k. Default: ``None`` (``1 / sqrt(E)``).
        block_size: queries per block. Default: ``128``.

    Returns:
        out: ``(N..., L, Ev)``. NaN or inf in q, k, v raise a ValueError naming the input,
        as in :func:`attnlib.scaled_dot_product_attention`.

    Example::

        >>> out = al.sliding_window_attention(q, k, v, window=64, num_global=2)
    """
    name = "sliding_window_attention"
    xp, batch, L, S = check_finite_qkv(q, k, v)  # the window hides keys: q, k, v are checked directly
    window, num_global = _check_window(window, num_global, name)
    is_causal = check_flag("is_causal", is_causal)
    scale = check_scale(scale, q.shape[-1])
    block_size = check_positive_int(block_size)
    ct, dev = compute_dtype(xp, q), _device(q)  # float32 for 16-bit inputs
    out = xp.zeros(batch + (L, v.shape[-1]), dtype=q.dtype, device=dev)  # (N..., L, Ev), filled block by block
    g, gk = min(num_global, L), min(num_global, S)
    if g > 0:  # global queries read every key: a full (tiled) attention over g rows
        out[..., :g, :] = flash_attention(q[..., :g, :], k, v, is_causal=is_causal, scale=scale,
                                          block_size=block_size)
    k, v = xp.astype(k, ct, copy=False), xp.astype(v, ct, copy=False)
    for i0 in range(g, L, block_size):
        i1 = min(i0 + block_size, L)
        lo = max(gk, i0 - window)  # band of keys this block can see, after the global keys
        hi = max(lo, min(S, i1) if is_causal else min(S, i1 + window))
        if gk + hi - lo == 0:
            continue  # no key in reach: zeros, as for a fully masked row
        rows = xp.arange(i0, i1, device=dev)[:, None]  # (Bq, 1)
        cols = xp.asarray(list(range(gk)) + list(range(lo, hi)), dtype=xp.int64, device=dev)[None, :]  # (1, K)
        k_blk = xp.concat([k[..., :gk, :], k[..., lo:hi, :]], axis=-2)  # (N..., K, E), K = gk + band
        v_blk = xp.concat([v[..., :gk, :], v[..., lo:hi, :]], axis=-2)  # (N..., K, Ev)
        q_blk = xp.astype(q[..., i0:i1, :], ct) * scale  # (N..., Bq, E)
        s = q_blk @ k_blk.mT  # (N..., Bq, E) @ (N..., E, K) -> (N..., Bq, K)
        s = xp.where(_allowed(xp, rows, cols, window, num_global, is_causal), s, -math.inf)
        out[..., i0:i1, :] = xp.astype(online_finish(xp, online_update(xp, None, s, v_blk)), q.dtype, copy=False)
    return out
