"""Exercises of chapter 03 (why divide by sqrt(d_k)): ``dot_product_variance`` and
``softmax_jacobian``."""
from __future__ import annotations

import numpy as np

from ._core import Case, Exercise, Mistake, register

# --------------------------------------------------------------------------- dot_product_variance


def _np(x):
    return np.asarray(x, dtype=np.float64)


def dot_product_variance_reference(q, k):
    """Sample variance of the row-wise dot products ``q[i]·k[i]``.

    Args:
        q: ``(N, E)`` N sampled query vectors of width E = d_k.
        k: ``(N, E)`` N sampled key vectors (row i is paired with ``q[i]``).

    Returns:
        float: the variance of the N numbers ``q[i]·k[i]`` (dividing by N or N - 1 are
        both accepted: the cases have N ≥ 2000, inside the tolerance).
    """
    dots = (_np(q) * _np(k)).sum(axis=-1)   # (N, E) -> (N,): one dot product per row
    return float(dots.var())


def _dpv_std(q, k):
    return float((_np(q) * _np(k)).sum(-1).std())


def _dpv_mean_not_sum(q, k):
    return float((_np(q) * _np(k)).mean(-1).var())


def _dpv_elementwise(q, k):
    return float((_np(q) * _np(k)).var())


def _dpv_mean_square(q, k):
    return float(((_np(q) * _np(k)).sum(-1) ** 2).mean())


def _dpv_scaled(q, k):
    q = _np(q)
    return float(((q * _np(k)).sum(-1) / np.sqrt(q.shape[-1])).var())


def _dpv_cases():
    rng = np.random.default_rng(303)
    c = []
    for d_k in (1, 16, 256):
        c.append(Case((rng.standard_normal((2000, d_k)), rng.standard_normal((2000, d_k))),
                      label=f"unit-variance components, d_k = {d_k}"))
    c.append(Case((2.0 * rng.standard_normal((3000, 32)), 0.5 * rng.standard_normal((3000, 32))),
                  label="σ_q = 2, σ_k = 0.5, d_k = 32"))
    c.append(Case((3.0 * rng.standard_normal((2000, 8)), 1.5 * rng.standard_normal((2000, 8))),
                  label="σ_q = 3, σ_k = 1.5, d_k = 8"))
    c.append(Case((1.0 + rng.standard_normal((2500, 16)), 1.0 + rng.standard_normal((2500, 16))),
                  label="components with mean 1 (the mean of q·k is d_k, not 0)"))
    return c


register(Exercise(
    name="dot_product_variance",
    chapter="03_scaling",
    prompt="Given N sampled pairs (q[i], k[i]), return the sample variance of the N dot products q[i]·k[i].",
    stub='''def dot_product_variance(q, k):
    """Sample variance of row-wise dot products.

    Args:
        q: (N, d_k) array, N sampled query vectors.
        k: (N, d_k) array, N sampled key vectors (row i pairs with q[i]).

    Returns:
        float: the variance of the N numbers q[i] · k[i].
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=dot_product_variance_reference,
    cases=_dpv_cases,
    rtol=2e-3,   # accepts dividing by N or by N - 1 (N >= 2000)
    atol=1e-9,
    mistakes=[
        Mistake("std", "The standard deviation, not the variance",
                "You return the spread in the units of q·k (about √d_k). The claim is about the "
                "variance, which grows like d_k: drop the square root (use .var(), not .std()).",
                _dpv_std),
        Mistake("mean_not_sum", "Averaged over the components instead of summed",
                "A dot product sums its d_k products; taking their mean divides it by d_k and its "
                "variance by d_k². Use (q * k).sum(-1), or einsum('ne,ne->n', q, k).",
                _dpv_mean_not_sum),
        Mistake("elementwise", "Variance of the single products q_i k_i",
                "You took the variance over all the N·d_k products before summing them, which is "
                "about σ_q²σ_k² whatever d_k is. First sum each row into one dot product, then take "
                "the variance of those N numbers.",
                _dpv_elementwise),
        Mistake("mean_square", "Mean of the squares, without subtracting the mean",
                "E[(q·k)²] equals the variance only when the mean is 0. With components of mean 1 "
                "the dot products average d_k, so subtract their mean first (or use .var()).",
                _dpv_mean_square),
        Mistake("scaled", "Variance of the scaled scores",
                "You divided the dot products by √d_k, which is exactly the fix the chapter derives; "
                "this exercise asks for the variance of the raw q·k (which grows with d_k).",
                _dpv_scaled),
    ],
    hint="dots = (q * k).sum(axis=-1) has shape (N,); return its variance as a float.",
))

# --------------------------------------------------------------------------- softmax_jacobian


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softmax_jacobian_reference(x):
    """Jacobian of the softmax over the last axis, for a batch of vectors.

    Args:
        x: ``(..., n)`` logits.

    Returns:
        ``(..., n, n)``: entry ``[..., i, j]`` is ``∂p_i/∂x_j = p_i (δ_ij - p_j)`` with
        ``p = softmax(x)``, i.e. ``diag(p) - p pᵀ`` (a symmetric matrix).
    """
    p = _softmax(_np(x))                            # (..., n)
    diag = p[..., :, None] * np.eye(p.shape[-1])    # (..., n, 1) * (n, n) -> (..., n, n)
    outer = p[..., :, None] * p[..., None, :]       # (..., n, 1) * (..., 1, n) -> (..., n, n)
    return diag - outer


def _jac_diag_only(x):
    p = _softmax(_np(x))
    return p[..., :, None] * np.eye(p.shape[-1])


def _jac_outer_only(x):
    p = _softmax(_np(x))
    return -p[..., :, None] * p[..., None, :]


def _jac_plus_outer(x):
    p = _softmax(_np(x))
    return p[..., :, None] * np.eye(p.shape[-1]) + p[..., :, None] * p[..., None, :]


def _jac_elementwise(x):
    p = _softmax(_np(x))
    return (p * (1 - p))[..., :, None] * np.eye(p.shape[-1])


def _jac_uses_x(x):
    x = _np(x)
    return x[..., :, None] * np.eye(x.shape[-1]) - x[..., :, None] * x[..., None, :]


def _jac_wrong_axis(x):
    x = _np(x)
    p = _softmax(x, axis=0)
    return p[..., :, None] * np.eye(p.shape[-1]) - p[..., :, None] * p[..., None, :]


def _jac_naive_exp(x):
    e = np.exp(_np(x))
    p = e / e.sum(-1, keepdims=True)
    return p[..., :, None] * np.eye(p.shape[-1]) - p[..., :, None] * p[..., None, :]


def _jac_cases():
    rng = np.random.default_rng(304)
    return [
        Case((np.array([1.0, 2.0, 0.5, -1.0]),), label="one vector of 4 logits"),
        Case((rng.standard_normal((3, 5)),), label="a batch of 3 vectors, n = 5"),
        Case((rng.standard_normal((2, 3, 4)),), label="two batch dimensions (2, 3), n = 4"),
        Case((rng.standard_normal((4, 2)),), label="n = 2, batch 4"),
        Case((780.0 + 30.0 * rng.standard_normal((2, 6)),), label="large logits near 800 (exp overflows without the max trick)"),
    ]


register(Exercise(
    name="softmax_jacobian",
    chapter="03_scaling",
    prompt="For logits x of shape (..., n) return the Jacobian of softmax(x), shape (..., n, n).",
    stub='''def softmax_jacobian(x):
    """Jacobian of the softmax over the last axis.

    Args:
        x: (..., n) array of logits (any number of batch dimensions).

    Returns:
        (..., n, n) array J with J[..., i, j] = d softmax(x)_i / d x_j.
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=softmax_jacobian_reference,
    cases=_jac_cases,
    atol=1e-10,
    mistakes=[
        Mistake("diag_only", "Only diag(p)",
                "∂p_i/∂x_j is not zero for i ≠ j: raising one logit takes weight from all the others, "
                "because the weights must still sum to 1. Subtract the outer product: diag(p) - p pᵀ.",
                _jac_diag_only),
        Mistake("elementwise", "Softmax differentiated like an elementwise sigmoid",
                "p_i(1 - p_i) is only the diagonal. Softmax couples the entries, so the off-diagonal "
                "terms -p_i p_j are missing: J = diag(p) - p pᵀ.",
                _jac_elementwise),
        Mistake("outer_only", "The diagonal term is missing",
                "You kept -p pᵀ but dropped diag(p), the direct effect of x_i on p_i. "
                "J = diag(p) - p pᵀ; each row of J must sum to 0.",
                _jac_outer_only),
        Mistake("plus_outer", "Wrong sign on the outer product",
                "∂p_i/∂x_j = p_i(δ_ij - p_j): the outer product is subtracted. A quick check: each row "
                "of J sums to 0 because the weights always sum to 1.",
                _jac_plus_outer),
        Mistake("uses_x", "The formula applied to the logits",
                "diag(p) - p pᵀ needs the probabilities p = softmax(x), not the logits x themselves. "
                "Compute p first.",
                _jac_uses_x),
        Mistake("wrong_axis", "Softmax over the batch axis",
                "For a batch (..., n) the softmax runs over the last axis; yours normalised over "
                "axis 0. Use axis=-1 (and keepdims=True when you subtract the max and divide).",
                _jac_wrong_axis),
        Mistake("naive_exp", "Overflow in exp",
                "Right on small logits, NaN on large ones: exp(800) overflows (float64 overflows "
                "beyond exp(709.78)) and inf / inf is NaN. Subtract the max "
                "over the last axis before exp.",
                _jac_naive_exp),
    ],
    hint="p = softmax(x); p[..., :, None] * np.eye(n) is the batched diag(p); "
         "p[..., :, None] * p[..., None, :] is the batched outer product.",
))
