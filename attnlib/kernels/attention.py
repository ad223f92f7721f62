"""Scaled dot-product attention, the same for NumPy arrays and torch tensors.

``out = softmax(q @ k^T * scale + mask) @ v`` with ``scale = 1/sqrt(E)`` by default.
Semantics follow ``torch.nn.functional.scaled_dot_product_attention``: a bool
``attn_mask`` is True where a query *may* attend, a float mask is added to the scores,
``is_causal=True`` keeps key ``j <= i`` for query ``i`` (top-left aligned). A query
that may attend to nothing gets zeros (weights and output), never NaN.

Two paths compute it, and both accept and refuse exactly the same input (the checks are
shared: :mod:`attnlib.kernels._shared`):

* the plain path, :func:`_attention` below, written once against the Array API: NumPy,
  torch on any device, 16-bit floats (computed in float32) and ``return_weights=True``.
  It reads like the formula; its two guards are named where they act (a fully masked row
  gives zeros; NaN and inf inputs are refused). This is the reference the course teaches
  from.
* the fast path, :mod:`attnlib.kernels._fast`: PyTorch's fused kernel for torch tensors when the
  weights are not requested, which never stores the ``(L, S)`` weights. When it is used,
  and what attnlib adds around it so that it gives the plain path's answer, is explained
  there, in one place. The tests hold both paths to the same numbers.
"""
from __future__ import annotations

from array_api_compat import device as _device

from ._array import broadcast_batch, check_scale, compute_dtype
from ._fast import divide, exp_shifted, fused_attention
from ._shared import check_attention_args, refuse_non_finite
from .masks import causal_mask

__all__ = ["scaled_dot_product_attention"]


def scaled_dot_product_attention(q, k, v, attn_mask=None, *, is_causal=False, scale=None,
                                 return_weights=False):
    r"""Scaled dot-product attention: ``softmax(q kᵀ · scale + mask) v``.

    Args:
        q: queries, shape ``(N..., L, E)``: ``N...`` are any batch dims (none, ``(N,)``,
            ``(N, h)``, ...). A floating NumPy array or torch tensor.
        k: keys, shape ``(N..., S, E)``.
        v: values, shape ``(N..., S, Ev)``. The batch dims of q, k, v must broadcast.
        attn_mask: a mask broadcastable to the scores ``(N..., L, S)``. Bool: True where
            the query may attend to the key. Float: added to the scores (use 0 and
            ``-inf``). Must come from the same library and device as ``q``.
            Default: ``None`` (everything may attend).
        is_causal: apply a causal mask, query ``i`` sees keys ``j <= i`` (top-left
            aligned, as ``torch.tril(torch.ones(L, S))``). Cannot be combined with
            ``attn_mask``: pass ``attn_mask & al.causal_mask(L, S, like=q)`` instead.
            ``True`` or ``False`` (a NumPy bool too). Default: ``False``.
        scale: multiplies the scores before the softmax. Default: ``None`` (``1/sqrt(E)``).
        return_weights: also return the attention weights. Default: ``False``.

    Returns:
        ``out`` of shape ``(N..., L, Ev)``, or ``(out, weights)`` with weights of shape
        ``(N..., L, S)`` when ``return_weights=True``; in ``q``'s library, dtype and
        device. Rows of ``weights`` sum to 1, or are all 0 where nothing may be attended.

    One answer on every path. NumPy, torch's fused kernel, ``return_weights=True`` and
    :func:`attnlib.flash_attention` return the same numbers (to rounding) for the same input:

    * **16-bit inputs** (float16, bfloat16) are computed in float32 and a float mask is added
      to the scores in that compute dtype, never rounded to float16 first. Rounding would
      change the answer: float16 has no -1e9, so a mask of -1e9 would become -inf, and a row
      that is all -1e9 would give zeros on one path and the softmax of the shifted scores on
      another. (A row that is all -1e9 is a constant shift, which the softmax ignores; in
      float32 the shift swallows the scores, so the weights come out uniform. float64 keeps
      the scores and gives the unshifted softmax. To *hide* keys use -inf or a bool mask: a
      row with nothing visible then gives zeros in every dtype.)
    * **NaN and inf are refused**: a ValueError names the argument (q, k, v or attn_mask)
      and says where the first bad value sits. They cannot give a meaningful answer
      (``inf - inf`` and ``0 * inf`` are NaN), and whether a mask hides them differs between
      kernels (a masked-out NaN key was ignored by NumPy's ``where`` but spread by torch's
      kernel), so refusing them everywhere is the one behaviour every path can share: also
      an infinite entry of q or k whose scores come out exactly ``-inf`` (which would
      silently drop a key), and NaN where the output would not show it. A float mask may
      hold ``-inf`` (it blocks). Scores that overflow to inf (e.g. huge inputs in float16)
      raise too: attnlib never returns NaN silently.

    Example::

        >>> out = al.scaled_dot_product_attention(q, k, v, is_causal=True)  # (N..., L, Ev)
    """
    if not return_weights:  # torch tensors: PyTorch's fused kernel, where it applies (see attnlib.kernels._fast)
        out = fused_attention(q, k, v, attn_mask, is_causal, scale)
        if out is not None:
            return out
    xp, _, _, _ = check_attention_args(q, k, v, attn_mask, is_causal)
    scale = check_scale(scale, q.shape[-1])
    return _attention(xp, q, k, v, attn_mask, bool(is_causal), scale, return_weights)


def _attention(xp, q, k, v, attn_mask, is_causal, scale, return_weights):
    """The plain path: ``softmax(q kᵀ · scale + mask) v`` for checked arguments, one
    Array-API implementation for every library and device. Returns ``out`` (N..., L, Ev),
    or ``(out, weights)`` with weights (N..., L, S), in q's dtype."""
    inputs = q, k, v, attn_mask  # as given, for the check of NaN and inf at the end
    dtype, L, S = q.dtype, q.shape[-2], k.shape[-2]
    if S == 0:
        return _no_keys(xp, *inputs, return_weights)
    ct = compute_dtype(xp, q)  # float16 / bfloat16 are computed in float32
    q, k, v = (xp.astype(x, ct, copy=False) for x in (q, k, v))
    if is_causal:
        attn_mask = causal_mask(L, S, like=q)  # (L, S): key j <= query i
    scores = (q * scale) @ k.mT  # (N..., L, E) @ (N..., E, S) -> (N..., L, S)
    if attn_mask is not None:
        scores = _add_mask(xp, scores, attn_mask)  # (N..., L, S); blocked pairs are -inf

    # softmax over the keys, stably: subtract the row maximum, so every exponent is <= 0
    m = xp.max(scores, axis=-1, keepdims=True)  # (N..., L, 1)
    if attn_mask is not None:  # guard: a row the mask blocks entirely is all -inf: exp(-inf - 0) = 0, not NaN
        m = xp.where(m == -xp.inf, 0.0, m)
    e = exp_shifted(xp, scores, m)  # exp(scores - m), (N..., L, S) (in the memory of scores: attnlib.kernels._fast)
    total = xp.sum(e, axis=-1, keepdims=True)  # (N..., L, 1)
    if attn_mask is not None:  # guard: ... so its weights and output stay 0 (0 / 1, not 0 / 0)
        total = xp.where(total == 0, 1.0, total)

    if return_weights:
        weights = divide(e, total)  # (N..., L, S); rows sum to 1, or are all 0
        out = weights @ v  # (N..., L, S) @ (N..., S, Ev) -> (N..., L, Ev)
    else:  # normalise after the product: L*Ev divisions instead of L*S
        out = divide(e @ v, total)  # (N..., L, S) @ (N..., S, Ev) -> (N..., L, Ev)
    refuse_non_finite(xp, out, *inputs, is_causal=is_causal)  # guard: NaN and inf inputs raise
    out = xp.astype(out, dtype, copy=False)
    return (out, xp.astype(weights, dtype, copy=False)) if return_weights else out


def _add_mask(xp, scores, attn_mask):
    """The masked scores: a bool mask puts -inf where it is False (the key is blocked), a
    float mask is added, in the compute dtype of the scores (never rounded to float16)."""
    if xp.isdtype(attn_mask.dtype, "bool"):
        return xp.where(attn_mask, scores, -xp.inf)
    return scores + xp.astype(attn_mask, scores.dtype, copy=False)


def _no_keys(xp, q, k, v, attn_mask, return_weights):
    """``S = 0``: no key at all, so every query row is fully masked: zero output
    (N..., L, Ev) and weights (N..., L, 0). NaN in q is refused even so."""
    refuse_non_finite(xp, None, q, k, v, attn_mask)  # (the output, all zeros, shows nothing)
    batch = broadcast_batch(q=q.shape[:-2], k=k.shape[:-2], v=v.shape[:-2])
    L, Ev, dev = q.shape[-2], v.shape[-1], _device(q)
    out = xp.zeros((*batch, L, Ev), dtype=q.dtype, device=dev)  # (N..., L, Ev)
    return (out, xp.zeros((*batch, L, 0), dtype=q.dtype, device=dev)) if return_weights else out
