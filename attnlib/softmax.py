"""Numerically stable softmax for NumPy arrays and torch tensors.

``softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m)`` with ``m = max_j x_j``: subtracting the
row maximum changes nothing mathematically (it cancels between numerator and denominator)
but keeps every exponent <= 0, so ``exp`` never overflows, even for logits of 1e4.
A row that is entirely ``-inf`` (nothing may be attended to) gives zeros, not NaN.
"""
from __future__ import annotations

from numbers import Integral

import numpy as np

from ._array import check_float, compute_dtype, fmt_shape, namespace

__all__ = ["softmax"]


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
        non-negative and sum to 1; a slice that is all ``-inf`` gives zeros.

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
        return xp.ones_like(x)
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis={axis} is out of range for x of shape {fmt_shape(x.shape)}; "
                         f"pass an axis in [-{x.ndim}, {x.ndim - 1}]")
    if x.shape[axis] == 0:
        return xp.asarray(x, copy=True)
    dtype = x.dtype
    x = xp.astype(x, compute_dtype(xp, x), copy=False)  # float16/bfloat16 -> float32
    m = xp.max(x, axis=axis, keepdims=True)
    m = xp.where(m == -xp.inf, 0.0, m)  # an all -inf row: exp(-inf - 0) = 0, not exp(nan)
    e = xp.exp(x - m)  # every exponent <= 0: no overflow
    total = xp.sum(e, axis=axis, keepdims=True)
    out = e / xp.where(total == 0, 1.0, total)  # an all -inf row: 0 / 1 = 0
    return xp.astype(out, dtype, copy=False)
