"""Positive random features (Performer / FAVOR+, Choromanski et al., 2021).

Linear attention with the ``elu + 1`` feature map (:mod:`attnlib.kernels.linear`) is a *different*
similarity from softmax attention's ``exp(q . k / sqrt(E))``. Random features instead
*estimate* that exponential. With ``x = q / E^(1/4)``, ``y = k / E^(1/4)`` (so that
``x . y = q . k / sqrt(E)``) and ``m`` random directions ``w_r`` drawn from ``N(0, I_E)``, the features::

    phi(x) = exp(W x - |x|^2 / 2) / sqrt(m)           (m,)  all entries > 0

satisfies ``E_W[phi(x) . phi(y)] = exp(x . y)``: each term ``exp(w.x - |x|^2/2) exp(w.y -
|y|^2/2)`` has expectation ``exp(x . y)`` because ``E[exp(w . u)] = exp(|u|^2 / 2)`` for
``u = x + y``. The dot product of features is an *unbiased* estimate of the softmax kernel,
and its variance falls like ``1 / m``. Plugged into the regrouped sums of linear attention::

    out_i = phi(x_i)^T [sum_j phi(y_j) v_j^T] / phi(x_i)^T [sum_j phi(y_j)],

it gives an ``O(n m E)`` approximation of softmax attention whose error shrinks as the
number of features ``m`` grows (the ratio of two unbiased sums is only *consistent*: its
bias and its spread both vanish as ``m`` grows). Orthogonal directions (blocks of ``E``
orthonormal rows, rescaled to the lengths of Gaussian vectors) keep the estimate unbiased
and lower its variance.

Numerics: the features are computed as ``exp(log phi - c)`` with ``c`` the largest log-feature
of each query row, and one ``c`` for all keys of a sequence. Such constant factors cancel in
the ratio, exactly, and keep every exponential <= 1.
"""
from __future__ import annotations

import math

import numpy as np
from array_api_compat import device as _device

from ._array import (all_finite, check_finite, check_float, check_positive_int, check_scale, compute_dtype,
                     fmt_shape, namespace)
from ._shared import causal_kernel_attention, check_kernel_args, safe_divide

__all__ = ["random_projection", "performer_feature_map", "random_feature_attention"]


def random_projection(num_features, E, *, seed=0, orthogonal=True, like=None):
    """The ``(num_features, E)`` matrix ``W`` of random directions for :func:`performer_feature_map`.

    Args:
        num_features: m, the number of random features (rows), ``>= 1``.
        E: the width of the vectors the features are computed for (``q.shape[-1]``).
        seed: seed of the NumPy generator that draws ``W``; the same seed gives the same
            ``W`` in NumPy and torch, on any device. Default: ``0``.
        orthogonal: draw blocks of ``E`` orthonormal rows, each rescaled to the length of a
            Gaussian vector (FAVOR+); otherwise i.i.d. ``N(0, 1)`` entries. Default: ``True``.
        like: an array whose library, dtype and device ``W`` should have. Default: ``None``
            (a NumPy float64 array).

    Returns:
        W: ``(num_features, E)``; every row is distributed as ``N(0, I_E)``.

    Example::

        >>> W = al.random_projection(64, 16, seed=0)   # (64, 16)
    """
    m, E = check_positive_int(num_features, "num_features"), check_positive_int(E, "E")
    rng = np.random.default_rng(seed)
    if orthogonal:
        blocks = []
        for _ in range(math.ceil(m / E)):
            qm, r = np.linalg.qr(rng.standard_normal((E, E)))  # (E, E), orthonormal columns
            # the signs of diag(r) make qm uniformly distributed (Haar); without them the
            # directions are biased and so is the estimate
            blocks.append((qm * np.sign(np.diag(r))).T)  # rows orthonormal
        lengths = np.linalg.norm(rng.standard_normal((m, E)), axis=1)  # (m,) chi_E lengths
        W = np.concatenate(blocks, axis=0)[:m] * lengths[:, None]  # (m, E)
    else:
        W = rng.standard_normal((m, E))
    if like is None:
        return W
    xp = namespace(like=like)
    return xp.asarray(W, dtype=compute_dtype(xp, like), device=_device(like))


def performer_feature_map(x, projection):
    """Positive random features ``phi(x) = exp(x W^T - |x|^2 / 2) / sqrt(m)`` (FAVOR+).

    ``phi(x) . phi(y)`` is an unbiased estimate of ``exp(x . y)`` over the draw of ``W``.
    Pass ``x = q / E**0.25`` and ``y = k / E**0.25`` to estimate softmax attention's
    ``exp(q . k / sqrt(E))``. No stabilising shift is applied here (see
    :func:`random_feature_attention`): large ``|x|`` overflows.

    Args:
        x: ``(N..., L, E)``, a floating NumPy array or torch tensor.
        projection: ``W`` of shape ``(m, E)`` from :func:`random_projection` (same library
            and device as ``x``).

    Returns:
        phi: ``(N..., L, m)``, all entries > 0 (in exact arithmetic). NaN or inf in ``x``
        or ``projection`` raise a ValueError naming it.

    Example::

        >>> W = al.random_projection(256, 16, like=q)
        >>> est = al.performer_feature_map(q / 2, W) @ al.performer_feature_map(k / 2, W).mT
    """
    xp = namespace(x=x, projection=projection)
    for name, a in (("x", x), ("projection", projection)):
        check_float(xp, name, a)
    if x.ndim < 1 or projection.ndim != 2 or projection.shape[1] != x.shape[-1]:
        raise ValueError(f"x has shape {fmt_shape(x.shape)} and projection {fmt_shape(projection.shape)}: the "
                         f"projection must be (m, E) with E = x.shape[-1], e.g. "
                         f"al.random_projection(m, x.shape[-1], like=x)")
    if not all_finite(xp, x, projection):  # NaN and inf are refused, as by the attention functions
        check_finite(xp, x=x, projection=projection, who="performer_feature_map")
    m = projection.shape[0]
    wx = x @ projection.mT  # (N..., L, E) @ (E, m) -> (N..., L, m)
    half_sq = xp.sum(x * x, axis=-1, keepdims=True) / 2  # (N..., L, 1)
    return xp.exp(wx - half_sq) / math.sqrt(m)


def random_feature_attention(q, k, v, num_features=256, *, is_causal=False, scale=None, seed=0,
                             orthogonal=True, chunk_size=64):
    """Softmax attention estimated with ``num_features`` positive random features (Performer).

    Args:
        q: ``(N..., L, E)``; k: ``(N..., S, E)``; v: ``(N..., S, Ev)``.
        num_features: m, the number of random features; the error against softmax
            attention falls as m grows. Default: ``256``.
        is_causal: query ``i`` only sees keys ``j <= i`` (running sums). Default: ``False``.
        scale: the score scale that softmax attention would use. Default: ``None``
            (``1 / sqrt(E)``).
        seed: seed of the random directions (:func:`random_projection`). Default: ``0``.
        orthogonal: orthogonal random directions. Default: ``True``.
        chunk_size: positions per chunk of the causal running sums. Default: ``64``.

    Returns:
        out: ``(N..., L, Ev)``, an estimate of
        ``scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)``;
        never NaN (a row whose features all underflow gets zeros). NaN or inf in q, k, v
        raise a ValueError naming the input; so do ``S = 0`` and ``E = 0``.

    Example::

        >>> out = al.random_feature_attention(q, k, v, num_features=512, seed=0)
    """
    xp, is_causal, chunk_size = check_kernel_args("random_feature_attention", q, k, v, is_causal, chunk_size)
    scale = check_scale(scale, q.shape[-1])
    if scale < 0:  # x . y = scale * q . k with x = sqrt|scale| q, y = -sqrt|scale| k
        k, scale = -k, -scale
    out_dtype, ct = q.dtype, compute_dtype(xp, q)
    q, k, v = xp.astype(q, ct), xp.astype(k, ct), xp.astype(v, ct)
    W = random_projection(num_features, q.shape[-1], seed=seed, orthogonal=orthogonal, like=q)  # (m, E)
    root = math.sqrt(scale)  # x . y = scale * q . k
    fq = _log_features(xp, q * root, W)  # (N..., L, m)
    fk = _log_features(xp, k * root, W)  # (N..., S, m)
    # constant factors cancel in the ratio: one per query row, one per sequence of keys
    fq = xp.exp(fq - xp.max(fq, axis=-1, keepdims=True))
    fk = xp.exp(fk - xp.max(fk, axis=(-2, -1), keepdims=True))
    if is_causal:
        return xp.astype(causal_kernel_attention(xp, fq, fk, v, chunk_size), out_dtype)
    kv = fk.mT @ v  # (N..., m, S) @ (N..., S, Ev) -> (N..., m, Ev)
    z = xp.sum(fk, axis=-2)[..., None]  # (N..., m, 1)
    return xp.astype(safe_divide(xp, fq @ kv, fq @ z), out_dtype)  # (N..., L, Ev) / (N..., L, 1)


def _log_features(xp, x, W):
    """``log`` of :func:`performer_feature_map` without the ``1/sqrt(m)`` (it cancels)."""
    return x @ W.mT - xp.sum(x * x, axis=-1, keepdims=True) / 2  # (N..., n, E) @ (E, m) -> (N..., n, m)
