"""Multi-head attention without biases, in the ``Q = X W^Q`` convention of the course's source
articles (weights act on the right, as in the chapters).

The ``d_model`` features are split into ``h`` heads of ``d_head = d_model / h`` features;
every head attends on its own (scale ``1/sqrt(d_head)``), the head outputs are concatenated
back to ``d_model`` features and mixed by ``W_O``. The split is a reshape *followed by a
transpose*: ``(N..., L, d_model) -> (N..., L, h, d_head) -> (N..., h, L, d_head)``. A
reshape straight to ``(N..., h, L, d_head)`` would run without error but mix positions
across heads (the course's "reshape-only bug").

Equal to ``torch.nn.MultiheadAttention(d_model, h, bias=False, batch_first=True)`` with
``in_proj_weight = cat([w_q.T, w_k.T, w_v.T])`` and ``out_proj.weight = w_o.T`` (it
computes ``x @ W.T``), and with its bool masks inverted (True = blocked there).

**Grouped-query attention** (``num_kv_heads = g``, Ainslie et al., 2023) keeps all ``h``
query heads but only ``g`` key/value heads; each key/value head serves ``h / g``
consecutive query heads. ``g = 1`` is multi-query attention (Shazeer, 2019), ``g = h``
ordinary multi-head attention. Only the keys and values shrink, so a decoder's cache of
them shrinks by ``h / g``. :func:`repeat_kv` expands the ``g`` heads to ``h`` for the
attention itself, like ``torch.nn.functional.scaled_dot_product_attention(...,
enable_gqa=True)``.
"""
from __future__ import annotations

import math
from numbers import Integral

from ._array import (all_finite, broadcast_batch, check_positive_int, check_finite, check_flag, check_float,
                     check_mask, fmt_shape, namespace)
from .attention import scaled_dot_product_attention

__all__ = ["multi_head_attention", "repeat_kv"]


def multi_head_attention(query, key, value, num_heads, w_q, w_k, w_v, w_o, *, attn_mask=None,
                         is_causal=False, return_weights=False, num_kv_heads=None):
    r"""Multi-head attention: ``concat(head_1, ..., head_h) W_O`` with
    ``head_i = attention(query W_Q[:, i], key W_K[:, i], value W_V[:, i])``.

    Args:
        query: ``(N..., L, d_model)``.
        key: ``(N..., S, d_k)``; usually ``d_k = d_model`` (self-attention: key = query).
        value: ``(N..., S, d_v)``; usually ``d_v = d_model``.
        num_heads: number of heads ``h``; must divide ``d_model``.
        w_q: ``(d_model, d_model)``, used as ``query @ w_q``; columns
            ``i*d_head:(i+1)*d_head`` belong to head ``i``.
        w_k: ``(d_k, d_model)``, used as ``key @ w_k``; with ``num_kv_heads = g``,
            ``(d_k, g * d_head)``.
        w_v: ``(d_v, d_model)``, used as ``value @ w_v``; with ``num_kv_heads = g``,
            ``(d_v, g * d_head)``.
        w_o: ``(d_model, d_model)``, used as ``concat(heads) @ w_o``.
        attn_mask: bool (True = may attend) or float (added to the scores) mask. Either
            broadcastable to ``(N..., L, S)`` and shared by every head (e.g. a
            :func:`~attnlib.padding_mask` ``(N, 1, S)`` or :func:`~attnlib.causal_mask`
            ``(L, S)``), or with one more dim than ``query``, broadcastable to
            ``(N..., h, L, S)``, for per-head masks. Default: ``None``.
        is_causal: apply a causal mask (query ``i`` sees keys ``j <= i``). Default: ``False``.
        return_weights: also return the per-head attention weights. Default: ``False``.
        num_kv_heads: number ``g`` of key/value heads (grouped-query attention); must
            divide ``num_heads``. Key/value head ``m`` serves query heads
            ``m * h/g, ..., (m+1) * h/g - 1``. ``1`` is multi-query attention.
            Default: ``None`` (``g = h``, ordinary multi-head attention).

    Returns:
        ``out`` of shape ``(N..., L, d_model)``, or ``(out, weights)`` with per-head
        weights ``(N..., h, L, S)`` when ``return_weights=True``.

    Example::

        >>> out = al.multi_head_attention(x, x, x, 4, w_q, w_k, w_v, w_o, is_causal=True)
        >>> out = al.multi_head_attention(x, x, x, 8, w_q, w_k2, w_v2, w_o, num_kv_heads=2)
    """
    xp = namespace(query=query, key=key, value=value, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o,
                   attn_mask=attn_mask)
    h, d_head = _check(xp, query, key, value, num_heads, w_q, w_k, w_v, w_o, num_kv_heads)
    g = h if num_kv_heads is None else int(num_kv_heads)  # key/value heads
    is_causal = check_flag("is_causal", is_causal)
    if not all_finite(xp, query, key, value, w_q, w_k, w_v, w_o):  # named here, not as the
        check_finite(xp, query=query, key=key, value=value, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o)  # heads' q
    if attn_mask is not None and attn_mask.ndim <= query.ndim:  # shared by every head
        batch = broadcast_batch(query=query.shape[:-2], key=key.shape[:-2], value=value.shape[:-2])
        check_mask(xp, "attn_mask", attn_mask, batch + (query.shape[-2], key.shape[-2]),
                   "(N..., L, S)", like=query)
        if attn_mask.ndim < 2:  # (S,) or (): a row shared by every query
            attn_mask = xp.reshape(attn_mask, (1,) * (2 - attn_mask.ndim) + tuple(attn_mask.shape))  # -> (1, S)
        attn_mask = xp.expand_dims(attn_mask, axis=-3)  # (N..., L, S) -> (N..., 1, L, S)
    q = _split_heads(xp, query @ w_q, h)  # (N..., L, d_model) @ (d_model, d_model) -> (N..., h, L, d_head)
    k = _split_heads(xp, key @ w_k, g)  # (N..., S, d_k) @ (d_k, g*d_head) -> (N..., g, S, d_head)
    v = _split_heads(xp, value @ w_v, g)  # (N..., S, d_v) @ (d_v, g*d_head) -> (N..., g, S, d_head)
    if g != h:  # grouped-query: each key/value head serves h/g consecutive query heads
        k, v = repeat_kv(k, h // g), repeat_kv(v, h // g)  # (N..., g, S, d_head) -> (N..., h, S, d_head)
    res = scaled_dot_product_attention(q, k, v, attn_mask, is_causal=is_causal,
                                       scale=1.0 / math.sqrt(d_head) if d_head else 1.0,  # (d_model = 0: as E = 0)
                                       return_weights=return_weights)
    heads, weights = res if return_weights else (res, None)  # (N..., h, L, d_head)
    out = _merge_heads(xp, heads) @ w_o  # (N..., L, d_model) @ (d_model, d_model) -> (N..., L, d_model)
    return (out, weights) if return_weights else out


def _split_heads(xp, x, h):
    """(N..., L, d_model) -> (N..., L, h, d_head) -> (N..., h, L, d_head)."""
    *batch, L, d_model = x.shape
    x = xp.reshape(x, (*batch, L, h, d_model // h))  # (N..., L, h, d_head)
    n = len(batch)
    return xp.permute_dims(x, (*range(n), n + 1, n, n + 2))  # (N..., h, L, d_head)


def _merge_heads(xp, x):
    """(N..., h, L, d_head) -> (N..., L, h, d_head) -> (N..., L, d_model): the concat."""
    *batch, h, L, d_head = x.shape
    n = len(batch)
    x = xp.permute_dims(x, (*range(n), n + 1, n, n + 2))  # (N..., L, h, d_head)
    return xp.reshape(x, (*batch, L, h * d_head))  # (N..., L, d_model)


def _check(xp, query, key, value, num_heads, w_q, w_k, w_v, w_o, num_kv_heads=None):
    """Validate inputs and weights; return (h, d_head)."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        check_float(xp, name, x)
        if x.ndim < 2:
            raise ValueError(f"{name} has shape {fmt_shape(x.shape)}; it must be (N..., length, "
                             f"features) with at least 2 dims, e.g. {name}[None, :]")
    d_model = query.shape[-1]
    num_heads = check_positive_int(num_heads, "num_heads")  # TypeError for a non-int, ValueError < 1
    if d_model % num_heads:
        divisors = [d for d in range(1, d_model + 1) if d_model % d == 0]
        raise ValueError(f"num_heads={num_heads} does not divide d_model={d_model} (query has "
                         f"shape {fmt_shape(query.shape)}): every head gets d_model / num_heads "
                         f"features; pick num_heads from {divisors}")
    d_kv = _check_kv_heads(num_kv_heads, num_heads, d_model)  # width of key @ w_k
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key has shape {fmt_shape(key.shape)} and value has shape "
                         f"{fmt_shape(value.shape)}: they must have the same length S along dim -2")
    expected = {"w_q": (d_model, d_model), "w_k": (key.shape[-1], d_kv),
                "w_v": (value.shape[-1], d_kv), "w_o": (d_model, d_model)}
    for (name, shape), w in zip(expected.items(), (w_q, w_k, w_v, w_o)):
        check_float(xp, name, w)
        if tuple(w.shape) != shape:
            src = {"w_q": "query", "w_k": "key", "w_v": "value", "w_o": "the concatenated heads"}[name]
            hint = " (a torch nn.Linear weight is (out, in): pass its .T)" if w.ndim == 2 else ""
            raise ValueError(f"{name} has shape {fmt_shape(w.shape)} but must be {fmt_shape(shape)}: "
                             f"it is used as x @ {name} on {src} (last dim {shape[0]}) and "
                             f"produces {shape[1]} features{_kv_note(name, w, num_kv_heads, num_heads, d_model)}{hint}")
        if w.dtype != query.dtype:
            raise TypeError(f"{name} has dtype {w.dtype} but query has {query.dtype}; cast the "
                            f"weights to the inputs' dtype")
    for name, x in (("key", key), ("value", value)):
        if x.dtype != query.dtype:
            raise TypeError(f"{name} has dtype {x.dtype} but query has {query.dtype}; cast it")
    broadcast_batch(query=query.shape[:-2], key=key.shape[:-2], value=value.shape[:-2])
    return num_heads, d_model // num_heads


def _check_kv_heads(num_kv_heads, num_heads, d_model) -> int:
    """Validate ``num_kv_heads`` (grouped-query attention); return the width ``g * d_head``
    of the key and value projections (``d_model`` when ``num_kv_heads`` is None)."""
    if num_kv_heads is None:
        return d_model
    if isinstance(num_kv_heads, bool) or not isinstance(num_kv_heads, Integral):
        raise TypeError(f"num_kv_heads must be a positive int or None, got {num_kv_heads!r}")
    if num_kv_heads < 1:
        raise ValueError(f"num_kv_heads must be >= 1 (1 is multi-query attention), got {num_kv_heads}")
    if num_heads % num_kv_heads:
        divisors = [d for d in range(1, num_heads + 1) if num_heads % d == 0]
        raise ValueError(f"num_kv_heads={num_kv_heads} does not divide num_heads={num_heads}: each "
                         f"key/value head serves num_heads / num_kv_heads query heads; pick "
                         f"num_kv_heads from {divisors}")
    return int(num_kv_heads) * (d_model // num_heads)


def _kv_note(name, w, num_kv_heads, num_heads, d_model) -> str:
    """The part of a w_k / w_v shape error that is about grouped-query attention."""
    if name not in ("w_k", "w_v") or w.ndim != 2:
        return ""
    d_head = d_model // num_heads
    if num_kv_heads is not None:
        return f" (num_kv_heads={num_kv_heads} heads of d_head = d_model / {num_heads} features each)"
    g, r = divmod(w.shape[-1], d_head)
    if not r and 1 <= g < num_heads and num_heads % g == 0:
        return f"; for grouped-query attention with {g} key/value heads pass num_kv_heads={g}"
    return ""


def repeat_kv(x, n_rep):
    r"""Repeat each key/value head ``n_rep`` times along the head axis (dim -3), for
    grouped-query attention.

    Head ``m`` of the input becomes heads ``m * n_rep, ..., (m+1) * n_rep - 1`` of the
    output: ``torch.repeat_interleave(x, n_rep, dim=-3)`` semantics (``[a, a, b, b]``),
    *not* ``torch.tile`` (``[a, b, a, b]``). That is the order in which
    ``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)`` and Llama's
    ``repeat_kv`` pair query heads with key/value heads.

    Args:
        x: keys or values of shape ``(N..., h_kv, S, E)``.
        n_rep: how many query heads each key/value head serves (``h / h_kv``), an int >= 1.

    Returns:
        an array of shape ``(N..., h_kv * n_rep, S, E)`` (``x`` itself when ``n_rep == 1``).

    Example::

        >>> k = np.zeros((2, 4, 10, 16))       # (N, h_kv, S, E)
        >>> al.repeat_kv(k, 3).shape           # 4 key/value heads for 12 query heads
        (2, 12, 10, 16)
    """
    xp = namespace(x=x)
    n_rep = check_positive_int(n_rep, "n_rep")  # query heads per key/value head, num_heads // num_kv_heads
    if x.ndim < 3:
        raise ValueError(f"x has shape {fmt_shape(x.shape)}; it must be (N..., h_kv, S, E) with at "
                         f"least 3 dims (add a head axis with x[None] for one head)")
    n_rep = int(n_rep)
    if n_rep == 1:
        return x
    *batch, h_kv, S, E = x.shape
    x = xp.expand_dims(x, axis=-3)  # (N..., h_kv, 1, S, E)
    x = xp.broadcast_to(x, (*batch, h_kv, n_rep, S, E))  # (N..., h_kv, n_rep, S, E), a view
    return xp.reshape(x, (*batch, h_kv * n_rep, S, E))  # (N..., h_kv*n_rep, S, E)
