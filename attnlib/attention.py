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
  they return for a fully masked row: zeros in PyTorch 2.13 on the CPU, NaN before
  PyTorch 2.5 (pytorch/pytorch#103963; #131060 added a "safe softmax" to the math kernel),
  and not every GPU kernel is verified here. So :func:`_kernel_verified` probes the kernel
  once per device type and dtype; where it is not verified to give zeros (every device but
  the CPU), the fast path zeroes such rows itself, at the cost of one pass over the mask.
  Either way a non-finite output with finite inputs sends the call to the plain path. The
  tests check that both paths agree, also with a kernel that returns NaN there. Without a
  mask the kernel is called before attnlib's own checks (:func:`_try_fast`), which then
  run only to explain an input torch refused.

NaN and inf inputs are refused on every path (see the function's docstring). They are
found from the output, one reduction over ``(N..., L, Ev)``, plus direct checks of the few
inputs the output may not show (:func:`_hidden`).

Everything else (validation, broadcasting rules, error messages) is shared, so both
paths accept and reject exactly the same input.
"""
from __future__ import annotations

import functools
import math

from array_api_compat import device as _device

from ._array import (all_finite, broadcast_batch, can_overwrite, check_finite, check_flag, check_float,
                     check_mask, check_scale, compute_dtype, exp_, fmt_shape, in_vmap, is_torch, namespace)
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
    if is_torch(q) and in_vmap(q):  # torch.func.vmap (seeds trained together, chapter 7): the
        # plain path (the fused CPU kernels have no vmap batching rule), without the checks
        # that need a Python number from the values (see _ensure_finite)
        xp, batch, L, S = _check_args(q, k, v, attn_mask, is_causal)
        return _attention(xp, q, k, v, attn_mask, bool(is_causal), check_scale(scale, q.shape[-1]),
                          return_weights)
    if not return_weights and is_torch(q) and type(q) is type(k) is type(v) is type(
            q if attn_mask is None else attn_mask):
        out = (_try_fast(q, k, v, is_causal, scale) if attn_mask is None else  # the hot paths: a few
               _try_fast_masked(q, k, v, attn_mask, is_causal, scale))  # us on top of torch's kernel
        if out is not None:
            return out
    xp, batch, L, S = _check_args(q, k, v, attn_mask, is_causal)
    is_causal = bool(is_causal)  # a NumPy bool
    if attn_mask is not None and is_torch(q) and len(_CHECKED) < 1024:  # see _try_fast_masked
        _CHECKED.add((q.dtype, k.dtype, v.dtype, attn_mask.dtype, q.shape, k.shape, v.shape, attn_mask.shape))
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
    is finite: naming the non-finite input, or saying the scores overflowed. Skipped inside
    ``torch.func.vmap`` (see :func:`attnlib._array.in_vmap`), where the caller checks the
    result (:func:`attnlib.train.train_seeds` checks each seed's loss)."""
    if is_torch(q) and in_vmap(q) or all_finite(xp, *checks):
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
def _kernel_verified(device_type: str, dtype) -> bool:
    """Does the fused kernel, given a mask, give the answers attnlib promises by itself?

    Feature detection, once per device type and dtype, on tiny inputs (3-D and 4-D, which
    reach different CPU kernels, and one longer than a CPU kernel block) with a bool and a
    float ``-inf`` mask that hide one query row and one key column entirely:

    * a query with no visible key gets exact zeros (PyTorch 2.13's CPU kernels do; before
      2.5 they gave NaN: pytorch/pytorch#103963, #131060);
    * a NaN in the hidden query row, key or value still reaches the output, so checking the
      output is enough to refuse NaN inputs (see :func:`_hidden`).

    When both hold, the fast path skips its own fully-masked-row guard (a pass over the
    ``(..., L, S)`` mask: 10-30% of the call) and the direct checks of q, k, v (three
    reductions). On other devices the kernel is chosen per shape and dtype (FlashAttention,
    memory-efficient, cuDNN, math) and a probe on a tiny input may not meet the kernel a
    real call gets, so nothing is assumed there: False, the guard and the checks stay.
    """
    sdpa = _fused_sdpa()
    if device_type != "cpu" or sdpa is None:
        return False
    import contextlib

    import torch

    try:  # keep the probe out of a FlopCounterMode (or other dispatch mode) the caller has on
        from torch.utils._python_dispatch import _disable_current_modes as quiet
    except ImportError:  # pragma: no cover - private API; without it the probe is merely counted
        quiet = contextlib.nullcontext
    with torch.no_grad(), quiet():
        return _probe(sdpa, torch, dtype)


def _probe(sdpa, torch, dtype) -> bool:
    """The checks of :func:`_kernel_verified` (see there)."""
    for shape in ((1, 3, 4), (1, 1, 3, 4), (1, 1, 600, 8)):
        L = shape[-2]
        keep = torch.ones(L, L, dtype=torch.bool)
        keep[1, :] = False  # query 1 sees nothing
        keep[:, L - 1] = False  # no query sees the last key
        for m in (keep, torch.zeros(L, L, dtype=dtype).masked_fill(~keep, -torch.inf)):
            q = torch.ones(shape, dtype=dtype)
            out = sdpa(q, q, q, attn_mask=m)
            if not (bool((out[..., 1, :] == 0).all()) and bool(torch.isfinite(out).all())):
                return False
            for where in ("q", "k", "v"):
                x = [q.clone(), q.clone(), q.clone()]
                x["qkv".index(where)][..., 1 if where == "q" else L - 1, :] = torch.nan
                if not bool(torch.isnan(sdpa(*x, attn_mask=m)).any()):
                    return False
    return True


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
    if sdpa is None or is_causal.__class__ is not bool or k.ndim < 2 or q.ndim < 2:
        return None  # a non-bool is_causal: attnlib's message
    S = k.shape[-2]
    if S == 0:
        return None  # S = 0: torch gets N... wrong
    if scale is not None:
        scale = check_scale(scale, q.shape[-1])
    try:
        out = sdpa(q, k, v, is_causal=is_causal, scale=scale)
    except (RuntimeError, ValueError, TypeError, IndexError):
        return None
    if is_causal and q.shape[-2] < S or v.shape[-1] == 0:  # inputs the output may not show
        return out if all_finite(None, out, *_hidden(q, k, v, False, is_causal)) else None
    if math.isfinite(out.detach().sum() if out.requires_grad else out.sum()):  # one reduction
        return out
    return None  # the checked path names the non-finite input


_CHECKED: set = set()  # (dtypes, shapes) of torch calls with a mask that passed _check_args


def _try_fast_masked(q, k, v, m, is_causal, scale):
    """Torch tensors with a mask, no weights: the fused kernel without re-validating.

    attnlib's checks depend only on dtypes and shapes, except devices (torch's kernel
    refuses mixed devices itself). A call whose dtypes and shapes already passed them
    (:data:`_CHECKED`) skips them: they cost about as much as the rest of the wrapper.
    Taken only where the kernel is verified (:func:`_kernel_verified`) and the mask needs
    no conversion; anything else, and any failure, returns None for the checked path.
    """
    sdpa = _fused_sdpa()
    if sdpa is None or is_causal is not False or not q.is_cpu:
        return None
    if (q.dtype, k.dtype, v.dtype, m.dtype, q.shape, k.shape, v.shape, m.shape) not in _CHECKED:
        return None
    if not (m.dtype == _torch_bool() or m.dtype == q.dtype) or not _kernel_verified("cpu", q.dtype):
        return None
    if v.shape[-1] == 0:
        return None  # an empty output shows no NaN: the checked path looks at the inputs
    if scale is not None:
        scale = check_scale(scale, q.shape[-1])
    try:
        out = sdpa(q, k, v, attn_mask=m, scale=scale)
    except (RuntimeError, ValueError, TypeError, IndexError):
        return None
    if math.isfinite(out.detach().sum() if out.requires_grad else out.sum()):
        return out
    return None  # the checked path names the non-finite input


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
    verified = m is None or (q.is_cpu and _kernel_verified("cpu", q.dtype))
    if not verified:
        visible = m if m.dtype == _torch_bool() else m > -float("inf")  # (..., L, S)
        dead = ~visible.any(dim=-1, keepdim=True)  # (..., L, 1): row i sees no key at all
        out = out.masked_fill(dead, 0.0)  # zeros, whatever the kernel gave there
        hidden = _hidden(q, k, v, m.dtype == _torch_bool(), is_causal)  # a bool mask can hide NaN
    elif (is_causal and q.shape[-2] < k.shape[-2]) or v.shape[-1] == 0:
        hidden = _hidden(q, k, v, False, is_causal)
    else:  # the common case: the output shows every non-finite input; one reduction
        hidden = ()
        if math.isfinite(out.detach().sum() if out.requires_grad else out.sum()):
            return out if out.dtype == dtype else out.to(dtype)
    if not all_finite(xp, out, *hidden):
        check_finite(xp, q=q, k=k, v=v, attn_mask=attn_mask)  # raises for a non-finite input
        return None  # finite inputs: let the plain path compute (and explain an overflow)
    return out if out.dtype == dtype else out.to(dtype)


@functools.lru_cache(maxsize=None)
def _torch_bool():
    import torch

    return torch.bool
