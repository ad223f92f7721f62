"""Scaled dot-product attention, the same for NumPy arrays and torch tensors.

``out = softmax(q @ k^T * scale + mask) @ v`` with ``scale = 1/sqrt(E)`` by default.
Semantics follow ``torch.nn.functional.scaled_dot_product_attention``: a bool
``attn_mask`` is True where a query *may* attend, a float mask is added to the scores,
``is_causal=True`` keeps key ``j <= i`` for query ``i`` (top-left aligned). A query
that may attend to nothing gets zeros (weights and output), never NaN.

Two paths compute it:

* the plain path (:func:`_attention`), written once against the Array API, serves NumPy,
  torch on any device, 16-bit floats (accumulated in float32) and ``return_weights=True``.
  This is the reference the course teaches from.
* the fast path: for torch tensors when the weights are *not* requested, attnlib calls
  PyTorch's fused ``F.scaled_dot_product_attention`` (FlashAttention / memory-efficient /
  C++ math kernels), which never stores the ``(L, S)`` weights. It is chosen in one
  place, :func:`_fused_sdpa`, by feature detection (torch >= 2.1, the first release
  whose SDPA takes ``scale``), and taken when ``S > 0``. Kernels have differed in what
  they return for a fully masked row: zeros in PyTorch 2.13 on the CPU (tested), NaN
  before PyTorch 2.5 (pytorch/pytorch#103963; #131060 added a "safe softmax" to the math
  kernel), and not every GPU kernel is verified here. So when a mask is given the fast
  path zeroes such rows itself, at the cost of one pass over the mask. The tests check
  that both paths agree, also with a kernel that returns NaN there. Without a mask the
  kernel is called before attnlib's own checks (:func:`_try_fast`), which then run only
  to explain an input torch refused: the wrapper costs about a microsecond.

Everything else (validation, broadcasting rules, error messages) is shared, so both
paths accept and reject exactly the same input.
"""
from __future__ import annotations

import functools

from array_api_compat import device as _device

from ._array import (all_finite, broadcast_batch, can_overwrite, check_finite, check_flag, check_float,
                     check_mask, check_scale, compute_dtype, exp_, fmt_shape, is_torch, namespace)
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
      kernel), so refusing them everywhere is the one behaviour every path can share. A
      float mask may hold ``-inf`` (it blocks). Scores that overflow to inf (e.g. huge
      inputs in float16) raise too: attnlib never returns NaN silently.

    Example::

        >>> out = al.scaled_dot_product_attention(q, k, v, is_causal=True)  # (N..., L, Ev)
    """
    if attn_mask is None and not return_weights and is_torch(q) and type(q) is type(k) is type(v):
        out = _try_fast(q, k, v, is_causal, scale)  # the hot path: a few us on top of torch's kernel
        if out is not None:
            return out
    xp, batch, L, S = _check_args(q, k, v, attn_mask, is_causal)
    is_causal = bool(is_causal)  # a NumPy bool
    if not return_weights and is_torch(q) and S:  # (S = 0: torch gets N... wrong; plain path)
        sdpa = _fused_sdpa()
        if sdpa is not None:  # torch's default scale is 1/sqrt(E) too; passing None is faster
            out = _fast(sdpa, xp, q, k, v, attn_mask, is_causal,
                        None if scale is None else check_scale(scale, q.shape[-1]))
            if out is not None:
                return out
    scale = check_scale(scale, q.shape[-1])
    return _attention(xp, q, k, v, attn_mask, is_causal, scale, return_weights)


def _check_args(q, k, v, attn_mask, is_causal):
    """The argument checks shared by every attention function (this module, ``flash.py``):
    q, k, v, the mask and ``is_causal``; returns ``(xp, batch shape N..., L, S)``."""
    is_causal = check_flag("is_causal", is_causal)
    xp = namespace(q=q, k=k, v=v, attn_mask=attn_mask)
    batch, L, S = _check_qkv(xp, q, k, v)
    if attn_mask is not None:
        if is_causal:
            raise ValueError("attn_mask and is_causal=True were both given (torch SDPA refuses "
                             "this too); fold the causal part into the mask: attn_mask = "
                             "attn_mask & al.causal_mask(L, S, like=q), and drop is_causal")
        check_mask(xp, "attn_mask", attn_mask, batch + (L, S), "(N..., L, S)", like=q)
    return xp, batch, L, S


def _hidden(q, k, v, bool_mask, is_causal):
    """The inputs whose NaN or inf the *output* may not show, so they are checked directly.

    Every other non-finite input reaches the output on every path (a NaN score makes its row
    NaN, ``0 * NaN`` is NaN in a matmul), so checking the output, one cheap reduction over
    ``(N..., L, Ev)``, proves all inputs finite. The exceptions: a bool mask can hide a
    query row or a key column from every score (NumPy's ``where`` drops it, a kernel may
    skip it); with ``Ev = 0`` the output is empty; with ``is_causal`` and ``L < S`` no query
    sees the keys from ``L`` on.
    """
    if bool_mask or v.shape[-1] == 0:
        return q, k, v
    L, S = q.shape[-2], k.shape[-2]
    if is_causal and L < S:
        return k[..., L:, :], v[..., L:, :]
    return ()


def _ensure_finite(xp, checks, q, k, v, attn_mask):
    """Raise a ValueError unless every array in ``checks`` (an output and :func:`_hidden`)
    is finite: naming the non-finite input, or saying the scores overflowed."""
    if all_finite(xp, *checks):
        return
    check_finite(xp, q=q, k=k, v=v, attn_mask=attn_mask)
    raise ValueError(f"the attention scores overflowed {q.dtype} (q·k·scale reached inf) although "
                     f"q, k, v are finite; scale q and k down (e.g. normalise them) or compute in "
                     f"a wider dtype")


def _check_qkv(xp, q, k, v):
    """Validate dtypes and shapes of q, k, v; return (batch shape N..., L, S).

    Written to cost a microsecond or two when everything is fine: it runs on every call
    except the unmasked torch fast path (see :func:`_try_fast`). ``flash.py``, ``sparse.py``,
    ``linear.py`` and ``ring.py`` reuse it, so they raise the same messages.
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


def _attention(xp, q, k, v, attn_mask, is_causal, scale, return_weights):
    """The plain path: one Array-API implementation for every library and device."""
    dtype, L, S = q.dtype, q.shape[-2], k.shape[-2]
    if S == 0:  # no key at all: every query row is fully masked
        _ensure_finite(xp, (q,), q, k, v, None)  # NaN is refused even where nothing is computed
        batch = broadcast_batch(q=q.shape[:-2], k=k.shape[:-2], v=v.shape[:-2])
        out = xp.zeros((*batch, L, v.shape[-1]), dtype=dtype, device=_device(q))  # (N..., L, Ev)
        weights = xp.zeros((*batch, L, 0), dtype=dtype, device=_device(q))  # (N..., L, S=0)
        return (out, weights) if return_weights else out
    inputs = q, k, v, attn_mask  # as given, for the finiteness check at the end
    bool_mask = attn_mask is not None and xp.isdtype(attn_mask.dtype, "bool")
    ct = compute_dtype(xp, q)  # float16 / bfloat16: accumulate in float32
    if ct != dtype:
        q, k, v = (xp.astype(x, ct) for x in (q, k, v))
    if is_causal:
        attn_mask = causal_mask(L, S, like=q)  # (L, S)
    scores = (q * scale) @ k.mT  # (N..., L, E) @ (N..., E, S) -> (N..., L, S)
    if attn_mask is not None:
        if xp.isdtype(attn_mask.dtype, "bool"):
            scores = xp.where(attn_mask, scores, -xp.inf)  # blocked pairs -> -inf
        else:  # added in the compute dtype (float32 for 16-bit inputs), like every path
            scores = scores + xp.astype(attn_mask, scores.dtype, copy=False)
    m = xp.max(scores, axis=-1, keepdims=True)  # (N..., L, 1) row maxima
    if attn_mask is not None:  # only a mask can hide every key of a row (causal never does)
        m = xp.where(m == -xp.inf, 0.0, m)  # a fully masked row: exp(-inf - 0) = 0, not NaN
    if can_overwrite(scores):  # a fresh array: update it in place, saving two (N..., L, S) copies
        scores -= m  # every exponent <= 0 now, so exp cannot overflow
        e = exp_(xp, scores)  # (N..., L, S) unnormalised weights
    else:  # autograd tracks it: max's and exp's backward need the old values
        e = xp.exp(scores - m)
    total = xp.sum(e, axis=-1, keepdims=True)  # (N..., L, 1); 0 for a fully masked row
    if attn_mask is not None:
        total = xp.where(total == 0, 1.0, total)  # ... whose weights and output stay 0
    if return_weights:
        weights = _divide(e, total)  # (N..., L, S)
        out = weights @ v  # (N..., L, S) @ (N..., S, Ev) -> (N..., L, Ev)
        _ensure_finite(xp, (out, *_hidden(*inputs[:3], bool_mask, is_causal)), *inputs)
        return xp.astype(out, dtype, copy=False), xp.astype(weights, dtype, copy=False)
    out = _divide(e @ v, total)  # (N..., L, S) @ (N..., S, Ev) -> (N..., L, Ev); normalising
    # after the matmul: L*Ev divisions, not L*S
    _ensure_finite(xp, (out, *_hidden(*inputs[:3], bool_mask, is_causal)), *inputs)
    return xp.astype(out, dtype, copy=False)


def _divide(x, total):
    """``x / total``, in place when ``x`` is a fresh array autograd does not track."""
    if can_overwrite(x):
        x /= total
        return x
    return x / total


@functools.lru_cache(maxsize=None)
def _fused_sdpa():
    """PyTorch's fused SDPA when this torch has it (with ``scale``, torch >= 2.1), else None.

    This is the one place the fast path is chosen; the result is cached.
    """
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:  # pragma: no cover
        return None
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 1) or not hasattr(F, "scaled_dot_product_attention"):
        return None  # pragma: no cover - the course pins torch 2.13
    return F.scaled_dot_product_attention


@functools.lru_cache(maxsize=None)
def _kernel_zeroes_dead_rows(device_type: str, dtype) -> bool:
    """Does the fused kernel itself return zeros for a query with no visible key?

    Feature detection, once per device type and dtype: on the CPU, run the kernel on a
    tiny input with a fully masked row (bool and float ``-inf`` masks, 3-D and 4-D inputs,
    which reach different CPU kernels) and check for exact zeros. PyTorch 2.13's CPU kernels
    pass (NaN before 2.5: pytorch/pytorch#103963, #131060). Then the fast path skips its own
    guard, a pass over the ``(..., L, S)`` mask that cost 10-30% of the call. On other
    devices the kernel is chosen per shape and dtype (FlashAttention, memory-efficient,
    cuDNN, math) and none is verified here, so the guard stays: False.
    """
    sdpa = _fused_sdpa()
    if device_type != "cpu" or sdpa is None:
        return False
    import torch

    ok = True
    for shape in ((1, 2, 4), (1, 1, 2, 4)):
        q = torch.ones(shape, dtype=dtype)
        keep = torch.tensor([[True, True], [False, False]])  # query 1 sees nothing
        for m in (keep, torch.zeros(2, 2, dtype=dtype).masked_fill(~keep, -torch.inf)):
            out = sdpa(q, q[..., :2, :], q[..., :2, :], attn_mask=m)
            ok = ok and bool((out[..., 1, :] == 0).all()) and bool(torch.isfinite(out).all())
    return ok


def _try_fast(q, k, v, is_causal, scale):
    """Torch tensors, no mask, no weights: call the fused kernel *before* validating.

    Python-level checks cost several microseconds per call, which is noticeable next to a
    small fused kernel. Without a mask, every input the checks would refuse is refused by
    torch too (wrong dims, shapes, dtypes or devices: the tests cover each case), so the
    kernel runs first and the checks run only when it fails, to explain the error in
    attnlib's words (or, if they find nothing wrong, to compute on the plain path). NaN and
    inf are found from the output (see :func:`_hidden`). Returns None when the caller
    should take the checked path.
    """
    sdpa = _fused_sdpa()
    if sdpa is None or is_causal.__class__ is not bool or k.ndim < 2 or k.shape[-2] == 0:
        return None  # S = 0: torch gets N... wrong; a non-bool is_causal: attnlib's message
    if scale is not None:
        scale = check_scale(scale, q.shape[-1])
    try:
        out = sdpa(q, k, v, is_causal=is_causal, scale=scale)
    except (RuntimeError, ValueError, TypeError, IndexError):
        return None
    if q.ndim < 2 or not all_finite(None, out, *_hidden(q, k, v, False, is_causal)):
        return None  # the checked path names the non-finite input
    return out


def _fast(sdpa, xp, q, k, v, attn_mask, is_causal, scale):
    """The fast path: torch's fused kernel, with fully masked rows giving zeros.

    Returns None when the kernel's output is not finite although every input is (a kernel
    that gives NaN for a fully masked row): the caller then takes the plain path.
    """
    dtype, m = q.dtype, attn_mask
    if m is not None and m.dtype != dtype and m.is_floating_point():
        ct = compute_dtype(xp, q)
        if ct != dtype:  # 16-bit q, k, v and a wider float mask: compute in float32 (see the
            q, k, v = (x.to(ct) for x in (q, k, v))  # docstring) rather than round the mask
        m = m.to(ct)  # SDPA wants a float mask in q's dtype
    out = sdpa(q, k, v, attn_mask=m, is_causal=is_causal, scale=scale)  # (N..., L, Ev)
    if m is not None and not _kernel_zeroes_dead_rows(q.device.type, q.dtype):
        visible = m if m.dtype == _torch_bool() else m > -float("inf")  # (..., L, S)
        dead = ~visible.any(dim=-1, keepdim=True)  # (..., L, 1): row i sees no key at all
        out = out.masked_fill(dead, 0.0)  # zeros, whatever the kernel gave there
    bool_mask = m is not None and m.dtype == _torch_bool()
    if not all_finite(xp, out, *_hidden(q, k, v, bool_mask, is_causal)):
        check_finite(xp, q=q, k=k, v=v, attn_mask=attn_mask)  # raises for a non-finite input
        return None  # finite inputs: let the plain path compute (and explain an overflow)
    return out if out.dtype == dtype else out.to(dtype)


@functools.lru_cache(maxsize=None)
def _torch_bool():
    import torch

    return torch.bool
