"""What makes :func:`attnlib.scaled_dot_product_attention` fast, kept apart from the maths
(private; not part of the public API).

``attention.py`` holds the plain path, which reads like the formula. This module holds the
rest, in two parts.

**1. PyTorch's fused kernel** (:func:`fused_attention`), ``F.scaled_dot_product_attention``:
FlashAttention, memory-efficient, cuDNN or C++ math kernels, which never store the ``(L, S)``
weights. It is used when

* q, k, v (and the mask) are torch tensors and the weights are not requested, outside
  ``torch.func.vmap`` (the fused CPU kernels have no vmap batching rule),
* this torch has the kernel with a ``scale`` argument (torch >= 2.1; :func:`fused_sdpa`,
  the one feature test), and
* there is at least one key (with ``S = 0`` torch gets the batch dims wrong).

Everywhere else, and whenever the kernel's answer cannot be shown to be attnlib's, the
plain path computes. What attnlib adds around the kernel, so that both paths give one answer:

* **Zeros for a query that may attend to nothing.** Kernels have differed there: zeros in
  PyTorch 2.13 on the CPU, NaN before 2.5 (pytorch/pytorch#103963; #131060 added a "safe
  softmax"), and not every GPU kernel is verified here. :func:`kernel_verified` probes the
  kernel once per device type and dtype; where it is not verified (every device but the
  CPU), such rows are zeroed here, at the cost of one pass over the mask.
* **NaN and inf refused**: one reduction over the output and the direct checks of
  :func:`attnlib.kernels._shared.hidden_inputs` (q and k). A non-finite output with finite inputs
  (a kernel that gives NaN for a fully masked row) sends the call to the plain path.
* **16-bit inputs with a wider float mask** are computed in float32, so the mask is never
  rounded to float16 (the plain path adds the mask in the compute dtype too).

attnlib's own argument checks cost a few microseconds, which is noticeable next to a small
kernel, so the kernel is first tried *before* them (:func:`_unchecked`):

* without a mask, torch refuses every input the checks would (wrong dims, shapes, dtypes or
  devices; the tests cover each case), so the checks run only when the kernel fails, to
  explain the error in attnlib's words;
* with a mask, a call whose dtypes and shapes already passed the checks (the shape cache
  :data:`_CHECKED`) skips them, on a verified kernel with a mask it can take as it is.

**2. Memory tricks of the plain path** (:func:`exp_shifted`, :func:`divide`): fresh
intermediates that autograd does not track are updated in place, which saves two
``(N..., L, S)`` copies: the NumPy path took 2.7 ms instead of 4.3 ms for float32 q, k, v of
shape ``(4, 8, 128, 64)`` on the course's 2-core machine.
"""
from __future__ import annotations

import contextlib
import functools

import numpy as np

from ._array import all_finite, check_finite, check_scale, compute_dtype, in_vmap, is_torch
from ._shared import check_attention_args, hidden_inputs

__all__ = ["fused_attention", "fused_sdpa", "kernel_verified", "can_overwrite", "exp_shifted", "divide"]


# ---- 1. PyTorch's fused kernel ------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def fused_sdpa():
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


def fused_attention(q, k, v, attn_mask, is_causal, scale):
    """Attention by the fused kernel, ``(N..., L, Ev)``, or None where the plain path must
    compute it. Bad input raises attnlib's errors (the checks of
    :func:`attnlib.kernels._shared.check_attention_args`), as on the plain path."""
    if not is_torch(q) or in_vmap(q):  # (torch.func.vmap, seeds trained together in chapter 9:
        return None  # the fused CPU kernels have no vmap batching rule)
    out = _unchecked(q, k, v, attn_mask, is_causal, scale)  # the hot path: a few us on top of torch
    if out is not None:
        return out
    xp, _, _, S = check_attention_args(q, k, v, attn_mask, is_causal)
    if attn_mask is not None and len(_CHECKED) < 1024:
        _CHECKED.add(_signature(q, k, v, attn_mask))
    sdpa = fused_sdpa()
    if sdpa is None or S == 0:  # S = 0: torch gets N... wrong
        return None
    scale = None if scale is None else check_scale(scale, q.shape[-1])  # torch's default is 1/sqrt(E) too
    return _checked(sdpa, xp, q, k, v, attn_mask, bool(is_causal), scale)


_CHECKED: set = set()  # signatures (dtypes, shapes) of masked torch calls that passed the checks


def _signature(q, k, v, m):
    return q.dtype, k.dtype, v.dtype, m.dtype, q.shape, k.shape, v.shape, m.shape


def _unchecked(q, k, v, m, is_causal, scale):
    """The fused kernel *before* attnlib's checks (see the module docstring); None when the
    call must take the checked path (a first masked call, a failure, a non-finite output)."""
    sdpa = fused_sdpa()
    if sdpa is None or is_causal.__class__ is not bool or type(q) is not type(k) or type(k) is not type(v):
        return None  # (a non-bool is_causal: attnlib's message)
    if q.ndim < 2 or k.ndim < 2 or k.shape[-2] == 0:  # S = 0: torch gets N... wrong
        return None
    if not (q.is_floating_point() and k.is_floating_point()):
        return None  # (complex, int, bool: attnlib's message names the argument)
    if m is not None:  # only a signature that passed the checks before, on a verified kernel
        if (type(m) is not type(q) or is_causal or not q.is_cpu or m.ndim < 2
                or _signature(q, k, v, m) not in _CHECKED):
            return None
        if not (m.dtype == _torch_bool() or m.dtype == q.dtype) or not kernel_verified("cpu", q.dtype):
            return None
    if scale is not None:
        scale = check_scale(scale, q.shape[-1])
    hidden = hidden_inputs(q, k, v, mask_hides=False, is_causal=is_causal)  # q and k (see there)
    if q.is_cpu and not all_finite(None, *hidden):  # on the CPU before the kernel: q and k are
        return None  # often still in cache from the projection that made them
    try:
        if m is not None:
            out = sdpa(q, k, v, attn_mask=m, scale=scale)  # (N..., L, Ev)
        elif is_causal or scale is not None:
            out = sdpa(q, k, v, is_causal=is_causal, scale=scale)
        else:  # (keyword arguments cost torch a microsecond: a tenth of attnlib's overhead)
            out = sdpa(q, k, v)
    except (RuntimeError, ValueError, TypeError, IndexError):
        return None  # the checked path explains it in attnlib's words
    ok = all_finite(None, out) if q.is_cpu else all_finite(None, out, *hidden)  # (a GPU: one sync)
    return out if ok else None  # (None: the checked path names the bad input)


def _checked(sdpa, xp, q, k, v, attn_mask, is_causal, scale):
    """The fused kernel after the checks, with fully masked rows giving zeros.

    Returns None when the kernel's output is not finite although every input is (a kernel
    that gives NaN for a fully masked row): the caller then takes the plain path.
    """
    dtype, m = q.dtype, attn_mask
    if m is not None and m.ndim < 2:
        m = m.reshape((1,) * (2 - m.ndim) + tuple(m.shape))  # (S,) -> (1, S): torch wants (L, S) at least
    if m is not None and m.dtype != dtype and m.is_floating_point():
        ct = compute_dtype(xp, q)
        if ct != dtype:  # 16-bit q, k, v and a wider float mask: compute in float32 (see the
            q, k, v = (x.to(ct) for x in (q, k, v))  # docstring) rather than round the mask
        m = m.to(ct)  # SDPA wants a float mask in q's dtype
    out = sdpa(q, k, v, attn_mask=m, is_causal=is_causal, scale=scale)  # (N..., L, Ev)
    bool_mask = m is not None and m.dtype == _torch_bool()
    verified = m is None or (q.is_cpu and kernel_verified("cpu", q.dtype))
    if not verified:
        # a key is hidden by False or -inf; NaN is not -inf, so a NaN row of a float mask keeps
        # its NaN and is refused below, as on the CPU (an H200 zeroed it when this said > -inf)
        visible = m if bool_mask else m != -float("inf")  # (..., L, S)
        dead = ~visible.any(dim=-1, keepdim=True)  # (..., L, 1): row i sees no key at all
        out = out.masked_fill(dead, 0.0)  # zeros, whatever the kernel gave there
    hidden = hidden_inputs(q, k, v, mask_hides=bool_mask and not verified, is_causal=is_causal)
    if not all_finite(xp, out, *hidden):
        check_finite(xp, q=q, k=k, v=v, attn_mask=attn_mask)  # raises for a non-finite input
        return None  # finite inputs: let the plain path compute (and explain an overflow)
    return out if out.dtype == dtype else out.to(dtype)


@functools.lru_cache(maxsize=None)
def kernel_verified(device_type: str, dtype) -> bool:
    """Does the fused kernel, given a mask, give the answers attnlib promises by itself?

    Feature detection, once per device type and dtype, on tiny inputs (3-D and 4-D, which
    reach different CPU kernels, and one longer than a CPU kernel block) with a bool and a
    float ``-inf`` mask that hide one query row and one key column entirely:

    * a query with no visible key gets exact zeros (PyTorch 2.13's CPU kernels do; before
      2.5 they gave NaN: pytorch/pytorch#103963, #131060);
    * a NaN in the hidden query row, key or value still reaches the output, so checking the
      output (and q and k) is enough to refuse NaN inputs (see
      :func:`attnlib.kernels._shared.hidden_inputs`).

    When both hold, the fast path skips its own fully-masked-row guard (a pass over the
    ``(..., L, S)`` mask: 10-30% of the call) and the direct check of v. On other devices the
    kernel is chosen per shape and dtype (FlashAttention, memory-efficient, cuDNN, math) and
    a probe on a tiny input may not meet the kernel a real call gets, so nothing is assumed
    there: False, the guard and the checks stay.
    """
    sdpa = fused_sdpa()
    if device_type != "cpu" or sdpa is None:
        return False
    import torch

    try:  # keep the probe out of a FlopCounterMode (or other dispatch mode) the caller has on
        from torch.utils._python_dispatch import _disable_current_modes as quiet
    except ImportError:  # pragma: no cover - private API; without it the probe is merely counted
        quiet = contextlib.nullcontext
    with torch.no_grad(), quiet():
        return _probe(sdpa, torch, dtype)


def _probe(sdpa, torch, dtype) -> bool:
    """The checks of :func:`kernel_verified` (see there)."""
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


@functools.lru_cache(maxsize=None)
def _torch_bool():
    import torch

    return torch.bool


# ---- 2. memory tricks of the plain path ---------------------------------------------------
def can_overwrite(x) -> bool:
    """True when ``x`` (a fresh intermediate) may be updated in place: always for NumPy,
    for torch only when autograd does not track it (its backward may need the old values).
    Never inside a ``torch.func`` transform, whose wrapped tensors do not show whether
    autograd tracks what they wrap (see :func:`attnlib.kernels._array.in_vmap`)."""
    return isinstance(x, np.ndarray) or (is_torch(x) and not x.requires_grad and not _functorch_wrapped(x))


def _functorch_wrapped(x) -> bool:
    import torch

    return torch._C._functorch.is_functorch_wrapped_tensor(x)


def exp_shifted(xp, scores, m):
    """``exp(scores - m)``, computed in the memory of ``scores`` when :func:`can_overwrite`
    allows (``scores`` is then consumed): saves two ``(N..., L, S)`` arrays."""
    if not can_overwrite(scores):  # autograd tracks it: max's and exp's backward need the old values
        return xp.exp(scores - m)
    scores -= m
    return np.exp(scores, out=scores) if isinstance(scores, np.ndarray) else scores.exp_()


def divide(x, total):
    """``x / total``, in place when ``x`` is a fresh array autograd does not track."""
    if can_overwrite(x):
        x /= total
        return x
    return x / total
