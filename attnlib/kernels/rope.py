"""Rotary position embedding (RoPE, Su et al., 2024), in the half-split convention.

RoPE encodes a token's position ``m`` by *rotating* its query and key vectors, not by
adding a position vector to the token. The ``d`` features form ``d/2`` pairs; pair ``i``
is rotated by the angle ``m * theta_i`` with ``theta_i = base^(-2i/d)``, a different
frequency per pair (fast for ``i = 0``, slow for ``i = d/2 - 1``). Because a rotation by
``m * theta`` followed, in the dot product, by the inverse rotation ``-n * theta`` is a
rotation by ``(m - n) * theta``, the score ``rope(q, m) . rope(k, n)`` depends on the
positions only through ``m - n``: attention sees *relative* positions.

Which features form a pair is a convention:

* **half-split** ("rotate_half"; GPT-NeoX, Llama, Hugging Face ``transformers``): pair
  ``i`` is ``(x[i], x[i + d/2])``. This module uses it.
* **interleaved** (the RoFormer paper, GPT-J, Meta's original Llama code): pair ``i`` is
  ``(x[2i], x[2i + 1])``.

The two differ by a fixed permutation of the features, applied to both ``q`` and ``k``;
since the permutation does not change dot products, a model trained in one convention
runs in the other once its ``W_Q`` and ``W_K`` columns are permuted (chapter 12 checks it).
"""
from __future__ import annotations

import math
from numbers import Real

import numpy as np

from ._array import all_finite, check_finite, check_float, compute_dtype, fmt_shape, in_vmap, is_torch, namespace
from .devices import to_device

__all__ = ["apply_rope", "rope_angles"]


def rope_angles(positions, d, *, base=10000.0, xp=None, device=None, dtype=None):
    r"""The rotation angles ``positions[..., None] * base^(-2i/d)`` for ``i < d/2``.

    Args:
        positions: token positions, an array of shape ``(..., L)`` (ints or finite floats).
        d: the (even) feature size that is rotated.
        base: the base of the geometric frequencies, a positive finite number.
            Default: ``10000.0``.
        xp: the array namespace to compute in. Default: ``None`` (that of ``positions``).
        device: where the angles are made. Default: ``None`` (the namespace's default).
        dtype: the angles' dtype. Default: ``None`` (float64).

    Returns:
        the angles, shape ``(..., L, d/2)``; column ``i`` holds ``positions * base^(-2i/d)``.
    """
    xp = namespace(positions=positions) if xp is None else xp
    _check_base(base)
    _check_positions(xp, positions)
    dtype = xp.float64 if dtype is None else dtype
    i = xp.arange(d // 2, dtype=dtype, device=device)  # (d/2,) pair index
    inv_freq = base ** (-2.0 * i / d)  # (d/2,) theta_i = base^(-2i/d)
    pos = xp.astype(positions, dtype)
    return pos[..., None] * inv_freq  # (..., L, 1) * (d/2,) -> (..., L, d/2)


def apply_rope(x, positions=None, *, base=10000.0):
    r"""Rotate ``x`` by its positions: rotary position embedding, half-split convention.

    For pair ``i < d/2`` the features ``(x_i, x_{i+d/2})`` at position ``m`` become

    .. math::

        (x_i \cos m\theta_i - x_{i+d/2} \sin m\theta_i,\;
         x_{i+d/2} \cos m\theta_i + x_i \sin m\theta_i),\qquad \theta_i = \text{base}^{-2i/d},

    i.e. ``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = concat(-x2, x1)``, as in
    GPT-NeoX, Llama and Hugging Face ``transformers``. Apply it to queries and keys (per
    head, after the projection), never to values: then ``apply_rope(q, m) .
    apply_rope(k, n)`` depends on ``m`` and ``n`` only through ``m - n``.

    Args:
        x: queries or keys of shape ``(N..., L, d)`` with ``d`` even; NumPy or torch, any
            real floating dtype (16-bit floats are rotated in float32 and cast back).
        positions: the position of each of the ``L`` rows, shape ``(L,)`` (shared by every
            sequence and head) or with as many dims as ``x.shape[:-1]`` and broadcasting to
            it (e.g. ``(N, L)`` for ``x`` of ``(N, L, d)``, ``(N, 1, L)`` for ``(N, h, L, d)``:
            one offset per sequence). Integers or finite floats, same library as ``x``.
            Default: ``None``
            (``0, 1, ..., L-1``). When decoding against a cache, pass the absolute
            positions of the new tokens (``S_cached + arange(L)``), not ``arange(L)``.
        base: the base of the frequencies ``theta_i = base^(-2i/d)``, a positive finite
            number. Default: ``10000.0``.

    Returns:
        an array like ``x`` (shape ``(N..., L, d)``, dtype, library and device).

    Raises:
        ValueError: ``d`` is odd, ``x`` has fewer than 2 dims, ``positions`` does not
            broadcast to ``x.shape[:-1]`` or has 2 or more dims but fewer than it (a
            ``(N, L)`` array would line up with the heads of ``(N, h, L, d)``), NaN or inf in
            ``x`` or ``positions``, or ``base`` is not a positive finite number.

    Example::

        >>> q = al.apply_rope(q)                                # (N, h, L, d_head)
        >>> k_new = al.apply_rope(k_new, torch.arange(10, 12))  # 2 new tokens after 10 cached
    """
    xp = namespace(x=x, positions=positions)
    check_float(xp, "x", x)
    if x.ndim < 2:
        raise ValueError(f"x has shape {fmt_shape(x.shape)}; it must be (N..., L, d) with at least "
                         f"2 dims (one row per position), e.g. x[None, :] for one position")
    *batch, L, d = x.shape
    if d % 2:
        raise ValueError(f"x has shape {fmt_shape(x.shape)}: its last dim d = {d} must be even, "
                         f"because RoPE rotates the features in d/2 pairs; use an even head size")
    _check_base(base)
    dev = getattr(x, "device", None)
    if positions is None:
        positions = xp.arange(L, device=dev)  # (L,)
    else:
        if is_torch(positions) and positions.device != x.device:
            raise ValueError(f"positions is on {positions.device} but x is on {x.device}; move it "
                             f"with positions.to('{x.device}')")
        _check_positions(xp, positions)
        target = tuple(x.shape[:-1])
        ok = positions.ndim <= len(target) and all(
            p in (1, t) for p, t in zip(reversed(tuple(positions.shape)), reversed(target)))
        if not ok:
            raise ValueError(f"positions has shape {fmt_shape(positions.shape)} but x is "
                             f"{fmt_shape(x.shape)} (N..., L, d): positions must broadcast to "
                             f"x.shape[:-1] = {fmt_shape(target)}, e.g. a ({L},) array of the rows' "
                             f"positions")
        if 1 < positions.ndim < len(target) and any(p != 1 for p in positions.shape[:-1]):
            fix = positions.shape[0:1] + (1,) * (len(target) - positions.ndim) + tuple(positions.shape[1:])
            raise ValueError(f"positions has shape {fmt_shape(positions.shape)} and x {fmt_shape(x.shape)}: "
                             f"positions would line up with the last {positions.ndim} dims of x.shape[:-1] "
                             f"= {fmt_shape(target)} (e.g. with heads, not sequences); give positions as "
                             f"many dims as x.shape[:-1], e.g. positions.reshape{fmt_shape(fix)} for one row "
                             f"of positions per sequence")
    ct = compute_dtype(xp, x)
    xc = x if ct == x.dtype else xp.astype(x, ct)  # 16-bit floats are rotated in float32
    # angles in float64 (float32 on devices without it would also do): positions * theta
    # reach 1e5 radians in long contexts, where float32 keeps only ~3 correct digits
    adt = xp.float64 if not (is_torch(x) and x.device.type == "mps") else xp.float32
    angles = rope_angles(positions, d, base=float(base), xp=xp, device=dev, dtype=adt)  # (..., L, d/2)
    cos = xp.astype(xp.cos(angles), ct)  # (..., L, d/2)
    sin = xp.astype(xp.sin(angles), ct)
    x1, x2 = xc[..., : d // 2], xc[..., d // 2:]  # (N..., L, d/2) each: the two halves of every pair
    out = xp.concat([x1 * cos - x2 * sin,  # first halves:  x_i cos - x_{i+d/2} sin
                     x2 * cos + x1 * sin], axis=-1)  # second halves: x_{i+d/2} cos + x_i sin
    if not (is_torch(x) and in_vmap(x)) and not all_finite(xp, out):  # NaN or inf in x: refused
        check_finite(xp, x=x, who="apply_rope")  # (not inside torch.func.vmap: nothing can be read back)
    return xp.astype(out, x.dtype) if out.dtype != x.dtype else out  # (N..., L, d)


def _check_base(base):
    """``base`` must be a positive, finite real number."""
    if isinstance(base, bool) or not isinstance(base, Real) or not (base > 0 and math.isfinite(base)):
        raise ValueError(f"base must be a positive number, and finite (10000.0 in most models), got {base!r}")


def _check_positions(xp, positions):
    """Positions must be integers or finite floats: a NaN or infinite angle rotates to NaN."""
    if not (xp.isdtype(positions.dtype, "integral") or xp.isdtype(positions.dtype, "real floating")):
        raise TypeError(f"positions has dtype {positions.dtype}; pass integer or float positions")
    if (xp.isdtype(positions.dtype, "real floating") and not (is_torch(positions) and in_vmap(positions))
            and not all_finite(xp, positions)):
        bad = ~xp.isfinite(positions)
        first = tuple(int(i) for i in np.argwhere(np.asarray(to_device(bad, "numpy")))[0])
        raise ValueError(f"positions holds {int(xp.sum(xp.astype(bad, xp.int64)))} non-finite value(s) "
                         f"({float(positions[first])} at index {first}, shape {fmt_shape(positions.shape)}); "
                         f"a rotation by a NaN or infinite angle is NaN: pass finite positions, e.g. "
                         f"the integers 0, 1, ..., L - 1")
