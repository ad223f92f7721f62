"""Numerically stable softmax for NumPy arrays and torch tensors.

``softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m)`` with ``m = max_j x_j``: subtracting the
row maximum changes nothing mathematically (it cancels between numerator and denominator)
but keeps every exponent <= 0, so ``exp`` never overflows, even for logits of 1e4.
A row that is entirely ``-inf`` (nothing may be attended to) gives zeros, not NaN.
"""
from __future__ import annotations

from numbers import Integral

import numpy as np

from ._array import all_finite, check_finite, check_float, compute_dtype, fmt_shape, namespace

__all__ = ["softmax", "masked_softmax"]


def softmax(x, axis=-1):
    r"""Softmax along ``axis``, computed stably (row maximum subtracted first).

    Args:
        x: a floating NumPy array or torch tensor of any shape; a Python list is read
            as a float64 NumPy array. 16-bit floats (float16, bfloat16) are accumulated
            in float32 and returned in their own dtype.
        axis: the one axis to normalise over, an integer in ``[-x.ndim, x.ndim)``
            (``np.int64`` too). ``None`` and tuples are refused with a TypeError: to
            normalise over several axes, reshape them into one first. Default: ``-1``.

    Returns:
        an array of ``x``'s type, dtype, device and shape whose slices along ``axis`` are
        non-negative and sum to 1; a slice that is all ``-inf`` gives zeros. NaN and ``+inf``
        in ``x`` raise a ValueError naming ``x`` (their softmax would be NaN).

    Example::

        >>> al.softmax(np.array([1.0, 2.0, 3.0])).round(3)
        array([0.09 , 0.245, 0.665])
    """
    if isinstance(x, (list, tuple)):
        x = np.asarray(x, dtype=np.float64)
    elif isinstance(x, np.generic):  # a NumPy scalar, e.g. np.float32(2.0): a 0-d array
        x = np.asarray(x)
    xp = namespace(x=x)
    check_float(xp, "x", x)
    if isinstance(axis, bool) or not isinstance(axis, Integral):
        raise TypeError(f"axis must be one int, got {axis!r} of type {type(axis).__name__}; pass "
                        f"e.g. axis=-1 (to normalise over several axes, reshape them into one "
                        f"first, e.g. the last two: softmax(x.reshape(*x.shape[:-2], -1)).reshape(x.shape))")
    axis = int(axis)
    if x.ndim == 0:  # a single number: softmax over one element is 1
        check_finite(xp, x=x, minus_inf_ok=dict(x="-inf gets weight 0"), who="softmax")
        return xp.ones_like(x)
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis={axis} is out of range for x of shape {fmt_shape(x.shape)}; "
                         f"pass an axis in [-{x.ndim}, {x.ndim - 1}]")
    if x.shape[axis] == 0:
        return xp.asarray(x, copy=True)
    out = _softmax(xp, x, axis)
    if not all_finite(xp, out):  # NaN or +inf in x: refused, never a NaN result
        check_finite(xp, x=x, minus_inf_ok=dict(x="-inf gets weight 0"), who="softmax")
    return out


def _softmax(xp, x, axis):
    """The stable softmax of a floating array along ``axis``, in ``x``'s dtype."""
    dtype = x.dtype
    x = xp.astype(x, compute_dtype(xp, x), copy=False)  # float16/bfloat16 -> float32
    m = xp.max(x, axis=axis, keepdims=True)
    m = xp.where(m == -xp.inf, 0.0, m)  # an all -inf row: exp(-inf - 0) = 0, not exp(nan)
    e = xp.exp(x - m)  # every exponent <= 0: no overflow
    total = xp.sum(e, axis=axis, keepdims=True)
    out = e / xp.where(total == 0, 1.0, total)  # an all -inf row: 0 / 1 = 0
    return xp.astype(out, dtype, copy=False)


def masked_softmax(scores, mask):
    r"""Softmax over the keys of the allowed scores only; blocked keys get weight 0.

    ``weights = softmax(where(mask, scores, -inf))`` along the last axis: the mask is
    applied to the scores *before* the softmax, so each row is normalised over its allowed
    keys only and sums to 1. A row in which no key is allowed gives all zeros (never NaN,
    and never the uniform average that a finite fill such as ``-1e9`` produces). A blocked
    score takes no part at all: even a NaN or ``+inf`` there changes nothing.

    Args:
        scores: ``(..., L, S)``, a floating NumPy array or torch tensor. 16-bit floats are
            computed in float32 and returned in their own dtype.
        mask: a bool array of the same library, broadcastable to ``scores``: **True = may
            attend** (the convention of ``torch.nn.functional.scaled_dot_product_attention``).

    Returns:
        the weights, ``scores``' shape broadcast with ``mask``'s, dtype and device of
        ``scores``. NaN or ``+inf`` in an allowed score raise a ValueError naming ``scores``.

    Example::

        >>> al.masked_softmax(np.zeros((2, 3)), np.array([[True, True, False],
        ...                                              [False, False, False]]))
        array([[0.5, 0.5, 0. ],
               [0. , 0. , 0. ]])
    """
    if isinstance(scores, (list, tuple)):
        scores = np.asarray(scores, dtype=np.float64)
    if isinstance(mask, (list, tuple)):
        mask = np.asarray(mask, dtype=bool)
    xp = namespace(scores=scores, mask=mask)
    check_float(xp, "scores", scores)
    if mask.dtype != xp.bool:
        raise TypeError(f"mask must be a bool array (True = may attend), got dtype {mask.dtype}; "
                        "a float mask is added to the scores instead: softmax(scores + mask)")
    if scores.ndim < 1:
        raise ValueError("scores must have at least one axis (the keys), got a single number")
    try:
        shape = np.broadcast_shapes(tuple(scores.shape), tuple(mask.shape))
    except ValueError:
        raise ValueError(f"mask has shape {fmt_shape(mask.shape)} but the scores are "
                         f"{fmt_shape(scores.shape)}: the mask must broadcast to the scores "
                         "(e.g. (L, S) for every batch entry)") from None
    if len(shape) and shape[-1] == 0:
        return xp.zeros(shape, dtype=scores.dtype, **_device_kw(scores))
    blocked = xp.asarray(-xp.inf, dtype=scores.dtype, **_device_kw(scores))
    visible = xp.where(mask, scores, blocked)  # the blocked scores take no part at all
    out = _softmax(xp, visible, axis=-1)  # a row with nothing visible (all -inf) gives zeros
    if not all_finite(xp, out):  # NaN or +inf among the visible scores: refused, never NaN
        check_finite(xp, scores=visible, minus_inf_ok=dict(scores="-inf gets weight 0"), who="masked_softmax")
    return out


def _device_kw(x) -> dict:
    """``{"device": x.device}`` for torch tensors, ``{}`` for NumPy arrays."""
    return {} if isinstance(x, np.ndarray) else {"device": x.device}
