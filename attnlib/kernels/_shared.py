"""What attnlib's attention functions share (private; not part of the public API).

``attention.py``, ``flash.py``, ``sparse.py``, ``linear.py``, ``performer.py`` and ``ring.py``
import these by name, so that one rule has one implementation:

* **Argument checks.** Every attention function accepts and refuses the same input with the
  same message, which names the argument, the shapes seen and the fix:
  :func:`check_qkv` (dtypes, shapes, devices of q, k, v), :func:`check_attention_args`
  (those, the mask and ``is_causal``), :func:`check_finite_qkv` and
  :func:`check_kernel_args` (for the methods that look at q, k, v directly for NaN and
  inf), :func:`check_has_keys` and :func:`check_has_features` (for the methods that cannot
  define an answer without keys or features), and :func:`refuse_non_finite` with
  :func:`hidden_inputs` (NaN and inf, found from the output).
* **The online softmax**, the recurrence that FlashAttention, sliding-window and ring
  attention run on (derived in :mod:`attnlib.kernels.flash`): :func:`online_update` folds one tile of
  scores into the running state ``(m, l, acc)``, :func:`online_finish` turns the state into
  the output, :func:`causal_tile` hides the future inside a tile.
* **The running sums of kernelised attention** (linear attention and random features):
  :func:`causal_kernel_attention` and :func:`safe_divide`.

Argument checks that are not about attention (array library, dtypes, masks, sizes, flags,
finiteness) live in :mod:`attnlib.kernels._array`.
"""
from __future__ import annotations

import math

from array_api_compat import device as _device

from ._array import (all_finite, broadcast_batch, check_finite, check_flag, check_float, check_mask,
                     check_positive_int, fmt_shape, in_vmap, is_torch, namespace)

__all__ = ["check_qkv", "check_attention_args", "check_finite_qkv", "check_kernel_args", "check_has_keys",
           "check_has_features", "hidden_inputs", "refuse_non_finite",
           "online_update", "online_finish", "causal_tile", "causal_kernel_attention", "safe_divide"]


# ---- argument checks ----------------------------------------------------------------------
def check_qkv(xp, q, k, v):
    """Validate dtypes, shapes and devices of q, k, v; return (batch shape N..., L, S).

    Written to cost a microsecond or two when everything is fine: it runs on every checked
    call (the fused kernel's first call with new shapes, every NumPy call).
    """
    if not (q.dtype == k.dtype == v.dtype):
        for name, x in (("q", q), ("k", k), ("v", v)):
            check_float(xp, name, x)
        raise TypeError(f"q, k, v have dtypes {q.dtype}, {k.dtype}, {v.dtype}; they must match "
                        f"(cast them to one dtype, e.g. k = k.astype(q.dtype) / k.to(q.dtype))")
    check_float(xp, "q", q)
    if min(q.ndim, k.ndim, v.ndim) < 2:
        name, x = next((n, x) for n, x in (("q", q), ("k", k), ("v", v)) if x.ndim < 2)
        raise ValueError(f"{name} has shape {fmt_shape(x.shape)}; attention needs at least "
                         f"2 dims (..., length, features): a single vector is {name}[None, :]")
    qs, ks, vs = q.shape, k.shape, v.shape
    if qs[-1] != ks[-1]:
        raise ValueError(f"q has shape {fmt_shape(qs)} and k has shape {fmt_shape(ks)}: their "
                         f"last dims E must match ({qs[-1]} != {ks[-1]}), since each score is a "
                         f"dot product q_i · k_j")
    if ks[-2] != vs[-2]:
        raise ValueError(f"k has shape {fmt_shape(ks)} and v has shape {fmt_shape(vs)}: they must "
                         f"have the same length S along dim -2 ({ks[-2]} != {vs[-2]}), one value "
                         f"per key")
    if is_torch(q) and not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v are on devices {q.device}, {k.device}, {v.device}; move them to "
                         f"one device, e.g. k = al.to_device(k, q.device)")
    batch = qs[:-2]
    if not (batch == ks[:-2] == vs[:-2]):
        batch = broadcast_batch(q=batch, k=ks[:-2], v=vs[:-2])
    return tuple(batch), qs[-2], ks[-2]


def check_attention_args(q, k, v, attn_mask, is_causal):
    """The checks of :func:`attnlib.scaled_dot_product_attention` and
    :func:`attnlib.flash_attention`: q, k, v, the mask and ``is_causal``.

    Returns:
        ``(xp, batch shape N..., L, S)``.
    """
    is_causal = check_flag("is_causal", is_causal)
    xp = namespace(q=q, k=k, v=v, attn_mask=attn_mask)
    batch, L, S = check_qkv(xp, q, k, v)
    if attn_mask is not None:
        if is_causal:
            raise ValueError("attn_mask and is_causal=True were both given (torch SDPA refuses "
                             "this too); fold the causal part into the mask: attn_mask = "
                             "attn_mask & al.causal_mask(L, S, like=q), and drop is_causal")
        check_mask(xp, "attn_mask", attn_mask, batch + (L, S), "(N..., L, S)", like=q)
    return xp, batch, L, S


def check_finite_qkv(q, k, v):
    """``namespace`` and :func:`check_qkv`, then NaN and inf refused by looking at q, k, v
    directly: for the methods whose output cannot be relied on to show them (a window or
    the chunks of a ring hide keys, a feature map can turn NaN into 0). Returns
    ``(xp, batch shape N..., L, S)``."""
    xp = namespace(q=q, k=k, v=v)
    batch, L, S = check_qkv(xp, q, k, v)
    if not all_finite(xp, q, k, v):  # refused as in scaled_dot_product_attention
        check_finite(xp, q=q, k=k, v=v)
    return xp, batch, L, S


def check_kernel_args(fn: str, q, k, v, is_causal, chunk_size):
    """The checks of kernelised attention (:func:`attnlib.linear_attention`,
    :func:`attnlib.random_feature_attention`); returns ``(xp, is_causal, chunk_size)``."""
    xp, _, _, _ = check_finite_qkv(q, k, v)
    check_has_keys(fn, k, v)
    check_has_features(fn, q, k)
    return xp, check_flag("is_causal", is_causal), check_positive_int(chunk_size, "chunk_size")


def check_has_keys(fn: str, k, v):
    """Refuse ``S = 0`` for a method that has no answer without keys (linear attention,
    random features, ring attention), with one message for every such function."""
    if k.shape[-2] == 0:
        raise ValueError(f"{fn}: k and v have no positions (S = 0; k has shape {fmt_shape(k.shape)}, "
                         f"v {fmt_shape(v.shape)}); {fn} needs S >= 1 keys. (al.scaled_dot_product_"
                         f"attention defines the answer without keys: zeros.)")


def check_has_features(fn: str, q, k):
    """Refuse ``E = 0`` for a method whose feature map needs features (linear attention,
    random features), with one message for every such function."""
    if q.shape[-1] == 0:
        raise ValueError(f"{fn}: q and k have no features (E = 0; q has shape {fmt_shape(q.shape)}, "
                         f"k {fmt_shape(k.shape)}); the feature map of {fn} needs E >= 1 features "
                         f"per query and key")


def hidden_inputs(q, k, v, *, mask_hides: bool, is_causal: bool) -> list:
    """The inputs whose NaN or inf the attention *output* may not show, to be checked directly.

    Most non-finite inputs reach the output (a NaN score makes its row NaN, ``inf - inf``
    and ``0 * inf`` are NaN), so one reduction over it, ``(N..., L, Ev)``, is most of the
    check. The exceptions:

    * q and k, always: an infinite entry can make a score exactly ``-inf``, which drops that
      key (or leaves the row with nothing to attend to) instead of spreading NaN;
    * v, when a mask may hide a key from every query (``mask_hides``: NumPy's ``where``
      drops it, a kernel may skip it; a float mask's ``-inf`` keeps ``0 * NaN = NaN`` in the
      product, so only a bool mask hides); with ``is_causal`` and ``L < S``, the values
      from ``L`` on, which no query sees.
    """
    checks = [q] if k is q else [q, k]
    if mask_hides:
        checks.append(v)
    elif is_causal and q.shape[-2] < k.shape[-2]:
        checks.append(v[..., q.shape[-2]:, :])
    return checks


def refuse_non_finite(xp, out, q, k, v, attn_mask=None, *, is_causal=False):
    """NaN and inf are refused: raise a ValueError naming the first non-finite input (or, if
    every input is finite, saying the scores overflowed), unless ``out`` and the
    :func:`hidden_inputs` are all finite. Skipped inside ``torch.func.vmap``, where no value
    can be read back (:func:`attnlib.kernels._array.in_vmap`).

    Args:
        out: the output computed from the inputs, ``(N..., L, Ev)``, or None when there is
            none to look at (then only the inputs are checked).
        q, k, v, attn_mask: the inputs *as given* (before any cast).
        is_causal: the causal flag the output was computed with. Default: ``False``.
    """
    if is_torch(q) and in_vmap(q):  # torch.func.vmap: no value can be read back; the caller
        return  # checks the result (attnlib.instruments.train.train_seeds checks each seed's loss)
    bool_mask = attn_mask is not None and xp.isdtype(attn_mask.dtype, "bool")
    if all_finite(xp, out, *hidden_inputs(q, k, v, mask_hides=bool_mask, is_causal=is_causal)):
        return
    check_finite(xp, q=q, k=k, v=v, attn_mask=attn_mask)
    raise ValueError(f"the attention scores overflowed {q.dtype} (q·k·scale reached inf) although "
                     f"q, k, v are finite; scale q and k down (e.g. normalise them) or compute in "
                     f"a wider dtype")


# ---- the online softmax -------------------------------------------------------------------
def online_update(xp, state, s, v_blk):
    """One step of the online softmax: fold the scores ``s`` (N..., Bq, Bk) of one key
    tile and its values ``v_blk`` (N..., Bk, Ev) into ``state = (m, l, acc)`` (``None``
    before the first tile). See :mod:`attnlib.kernels.flash` for the recurrence."""
    m_tile = xp.max(s, axis=-1, keepdims=True)  # (N..., Bq, 1)
    m_new = m_tile if state is None else xp.maximum(state[0], m_tile)
    m_safe = xp.where(m_new == -math.inf, 0.0, m_new)  # a row masked so far: keep exp() at 0, not NaN
    p = xp.exp(s - m_safe)  # (N..., Bq, Bk)
    pv = p @ v_blk  # (N..., Bq, Bk) @ (N..., Bk, Ev) -> (N..., Bq, Ev)
    l_tile = xp.sum(p, axis=-1, keepdims=True)  # (N..., Bq, 1)
    if state is None:
        return m_new, l_tile, pv
    m, l, acc = state
    alpha = xp.exp(m - m_safe)  # (N..., Bq, 1)
    return m_new, alpha * l + l_tile, alpha * acc + pv


def online_finish(xp, state):
    """``acc / l`` (N..., Bq, Ev), with zeros for rows that had nothing to attend to (``l == 0``)."""
    m, l, acc = state
    return acc / xp.where(l == 0, 1.0, l)


def causal_tile(xp, s, i0, j0):
    """Hide the keys in the future of each query in a tile of scores ``s`` (N..., Bq, Bk)
    whose first query and key sit at global positions ``i0`` and ``j0`` (top-left aligned:
    key ``j`` is hidden from query ``i`` when ``j > i``). A tile wholly on or below the
    diagonal is returned unchanged."""
    Bq, Bk = s.shape[-2], s.shape[-1]
    if j0 + Bk - 1 <= i0:  # the last key is not after the first query: nothing to hide
        return s
    dev = _device(s)
    rows = xp.arange(i0, i0 + Bq, device=dev)[:, None]  # (Bq, 1) query positions
    cols = xp.arange(j0, j0 + Bk, device=dev)[None, :]  # (1, Bk) key positions
    return xp.where(cols <= rows, s, -math.inf)  # (N..., Bq, Bk)


# ---- kernelised attention: phi(q) . phi(k) in place of exp(q . k) --------------------------
def safe_divide(xp, num, den):
    """``num / den`` with a row whose denominator is 0 set to 0 (never NaN)."""
    safe = xp.where(den > 0, den, xp.ones_like(den))
    return xp.where(den > 0, num / safe, xp.zeros_like(num))


def causal_kernel_attention(xp, fq, fk, v, C):
    """Causal kernelised attention from the features ``fq`` (N..., L, F) and ``fk``
    (N..., S, F): ``out_i = sum_{j <= i} (fq_i . fk_j) v_j / sum_{j <= i} fq_i . fk_j``, by
    running sums over chunks of ``C`` positions (within a chunk, a small ``(C, C)`` masked
    product). Returns ``(N..., L, Ev)``; a row whose denominator is 0 gets zeros."""
    L, S = fq.shape[-2], fk.shape[-2]
    if L == 0:  # no query: an empty output, its batch dims broadcast as in the products
        return (fq @ fk.mT) @ v  # (N..., 0, F) @ (N..., F, S) @ (N..., S, Ev) -> (N..., 0, Ev)
    dev = _device(fq)
    kv = None  # running sum_j phi(k_j) v_j^T over the chunks already passed, (N..., F, Ev)
    z = None  # running sum_j phi(k_j), (N..., F, 1)
    outs = []
    for c0 in range(0, L, C):
        c1 = min(c0 + C, L)
        q_c = fq[..., c0:c1, :]  # (N..., C, F)
        k_c, v_c = fk[..., c0:min(c1, S), :], v[..., c0:min(c1, S), :]  # (N..., C', F), (N..., C', Ev)
        rows = xp.arange(c0, c1, device=dev)[:, None]  # (C, 1)
        cols = xp.arange(c0, c0 + k_c.shape[-2], device=dev)[None, :]  # (1, C')
        a = xp.where(cols <= rows, q_c @ k_c.mT, 0.0)  # (N..., C, F) @ (N..., F, C') -> (N..., C, C')
        num = a @ v_c  # (N..., C, C') @ (N..., C', Ev) -> (N..., C, Ev)
        den = xp.sum(a, axis=-1, keepdims=True)  # (N..., C, 1)
        if kv is not None:
            num = num + q_c @ kv  # (N..., C, F) @ (N..., F, Ev) -> (N..., C, Ev)
            den = den + q_c @ z  # (N..., C, F) @ (N..., F, 1) -> (N..., C, 1)
        outs.append(safe_divide(xp, num, den))
        if k_c.shape[-2]:
            kv_c = k_c.mT @ v_c  # (N..., F, C') @ (N..., C', Ev) -> (N..., F, Ev)
            z_c = xp.sum(k_c, axis=-2)[..., None]  # (N..., F, 1)
            kv, z = (kv_c, z_c) if kv is None else (kv + kv_c, z + z_c)
    return xp.concat(outs, axis=-2) if len(outs) > 1 else outs[0]  # (N..., L, Ev)
