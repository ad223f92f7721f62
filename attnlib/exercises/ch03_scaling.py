"""Exercises of chapter 03 (why divide by sqrt(d_k)): ``dot_product_variance`` (predict
Var(q·k), means included) and ``softmax_jacobian``."""
from __future__ import annotations

import numpy as np

from ._core import Case, Exercise, Mistake, register

# --------------------------------------------------------------------------- dot_product_variance


def _np(x):
    return np.asarray(x, dtype=np.float64)


def _f(*xs):
    return [float(x) for x in xs]


def dot_product_variance_reference(d_k, mu_q, sigma_q, mu_k, sigma_k):
    """Var(q·k) for ``q``, ``k`` with ``d_k`` independent components each.

    Args:
        d_k: number of components.
        mu_q, sigma_q: mean and standard deviation of every component of ``q``.
        mu_k, sigma_k: the same for ``k``.

    Returns:
        float: ``d_k (σ_q²σ_k² + σ_q²μ_k² + μ_q²σ_k²)``. One term ``q_i k_i`` has
        ``E[(q_i k_i)²] = (σ_q² + μ_q²)(σ_k² + μ_k²)`` and mean ``μ_q μ_k``; the ``d_k``
        terms are independent, so their variances add.
    """
    d, mq, sq, mk, sk = _f(d_k, mu_q, sigma_q, mu_k, sigma_k)
    one_term = (sq**2 + mq**2) * (sk**2 + mk**2) - (mq * mk) ** 2
    return d * one_term


def _dpv_ignores_means(d_k, mu_q, sigma_q, mu_k, sigma_k):
    d, mq, sq, mk, sk = _f(d_k, mu_q, sigma_q, mu_k, sigma_k)
    return d * sq**2 * sk**2


def _dpv_second_moment(d_k, mu_q, sigma_q, mu_k, sigma_k):
    d, mq, sq, mk, sk = _f(d_k, mu_q, sigma_q, mu_k, sigma_k)
    return d * (sq**2 + mq**2) * (sk**2 + mk**2)


def _dpv_with_squared_mean(d_k, mu_q, sigma_q, mu_k, sigma_k):
    d, mq, sq, mk, sk = _f(d_k, mu_q, sigma_q, mu_k, sigma_k)
    return dot_product_variance_reference(d, mq, sq, mk, sk) + (d * mq * mk) ** 2


def _dpv_mean(d_k, mu_q, sigma_q, mu_k, sigma_k):
    d, mq, sq, mk, sk = _f(d_k, mu_q, sigma_q, mu_k, sigma_k)
    return d * mq * mk


def _dpv_sigma_as_variance(d_k, mu_q, sigma_q, mu_k, sigma_k):
    d, mq, sq, mk, sk = _f(d_k, mu_q, sigma_q, mu_k, sigma_k)
    return d * (sq * sk + sq * mk**2 + mq**2 * sk)


def _dpv_d_squared(d_k, mu_q, sigma_q, mu_k, sigma_k):
    d, mq, sq, mk, sk = _f(d_k, mu_q, sigma_q, mu_k, sigma_k)
    return d * dot_product_variance_reference(d, mq, sq, mk, sk)


def _dpv_one_cross_term(d_k, mu_q, sigma_q, mu_k, sigma_k):
    d, mq, sq, mk, sk = _f(d_k, mu_q, sigma_q, mu_k, sigma_k)
    return d * (sq**2 * sk**2 + mq**2 * sk**2)


def _dpv_sqrt_d(d_k, mu_q, sigma_q, mu_k, sigma_k):
    d, mq, sq, mk, sk = _f(d_k, mu_q, sigma_q, mu_k, sigma_k)
    return dot_product_variance_reference(d, mq, sq, mk, sk) / d * d**0.5


def _dpv_variances_added(d_k, mu_q, sigma_q, mu_k, sigma_k):
    d, mq, sq, mk, sk = _f(d_k, mu_q, sigma_q, mu_k, sigma_k)
    return d * (sq**2 + sk**2)


def _dpv_std(d_k, mu_q, sigma_q, mu_k, sigma_k):
    return dot_product_variance_reference(d_k, mu_q, sigma_q, mu_k, sigma_k) ** 0.5


def _dpv_cases():
    grid = [((64, 0.0, 1.0, 0.0, 1.0), "unit-variance components of mean 0, d_k = 64"),
            ((16, 0.0, 2.0, 0.0, 0.5), "mean 0, σ_q = 2, σ_k = 0.5, d_k = 16"),
            ((32, 1.0, 1.0, 1.0, 1.0), "mean 1 and standard deviation 1 on both sides, d_k = 32"),
            ((8, 2.0, 1.0, 0.0, 3.0), "q has mean 2, k has mean 0, d_k = 8"),
            ((100, 0.5, 1.0, -1.0, 2.0), "means 0.5 and -1, σ_q = 1, σ_k = 2, d_k = 100"),
            ((10, 1.0, 0.0, 0.0, 1.0), "q is the constant vector of ones, k ~ N(0, 1), d_k = 10"),
            ((1, 3.0, 0.0, 2.0, 0.0), "q and k both constant: a single dot product, d_k = 1"),
            ((512, 0.1, 0.3, 0.2, 0.5), "small means, d_k = 512")]
    return [Case(args, label=label) for args, label in grid]


register(Exercise(
    name="dot_product_variance",
    chapter="03_scaling",
    prompt="Predict Var(q·k) for d_k independent components with means μ_q, μ_k and standard deviations "
           "σ_q, σ_k.",
    stub='''def dot_product_variance(d_k, mu_q, sigma_q, mu_k, sigma_k):
    """Variance of the dot product q·k of two random vectors.

    Every component q_i is independent with mean mu_q and standard deviation
    sigma_q; every k_i is independent with mean mu_k and standard deviation
    sigma_k (and independent of q).

    Args:
        d_k: number of components of q and of k.
        mu_q, sigma_q: mean and standard deviation of each q_i.
        mu_k, sigma_k: mean and standard deviation of each k_i.

    Returns:
        float: Var(q·k), exactly (no sampling).
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=dot_product_variance_reference,
    cases=_dpv_cases,
    rtol=1e-9,
    atol=1e-9,
    mistakes=[
        Mistake("ignores_means", "The means are left out",
                "σ_q²σ_k² d_k holds only for components of mean 0. With a non-zero mean a component "
                "also carries its mean into the product: Var(q_i k_i) = E[q_i²]E[k_i²] - (E[q_i]E[k_i])², "
                "with E[q_i²] = σ_q² + μ_q². Expand it: two more terms appear.",
                _dpv_ignores_means),
        Mistake("second_moment", "The squared mean of each term is not subtracted",
                "(σ_q² + μ_q²)(σ_k² + μ_k²) is E[(q_i k_i)²], the second moment of one term, not its "
                "variance. Subtract the square of its mean, (μ_q μ_k)², before multiplying by d_k.",
                _dpv_second_moment),
        Mistake("with_squared_mean", "The mean of q·k counted as spread",
                "You added (d_k μ_q μ_k)², the square of the MEAN of q·k. The mean does grow with d_k "
                "when μ_q μ_k ≠ 0, but a shift is not spread: the variance is E[(q·k - E[q·k])²] and "
                "grows only like d_k. Leave the squared mean out.",
                _dpv_with_squared_mean),
        Mistake("mean_not_variance", "The mean instead of the variance",
                "d_k μ_q μ_k is E[q·k], the mean of the dot product (0 when either mean is 0). The "
                "question is about its spread around that mean: the variance.",
                _dpv_mean),
        Mistake("sigma_as_variance", "Standard deviations used as variances",
                "sigma_q and sigma_k are standard deviations; the variance of a component is their "
                "square, σ_q². Square them before you combine them.",
                _dpv_sigma_as_variance),
        Mistake("d_k_squared", "Variances scaled by d_k² as if the terms were copies",
                "Var(d_k X) = d_k² Var(X) holds for d_k copies of ONE number. The d_k terms q_i k_i are "
                "independent, and the variance of a sum of independent terms is the sum of their "
                "variances: d_k · Var(q_i k_i).",
                _dpv_d_squared),
        Mistake("sqrt_d_k", "√d_k instead of d_k",
                "√d_k is how the STANDARD DEVIATION of q·k grows (that is why the scores are divided by "
                "√d_k). The variance is its square: the d_k independent terms each add their variance, "
                "so the sum has d_k times the variance of one term.",
                _dpv_sqrt_d),
        Mistake("std_not_variance", "The standard deviation instead of the variance",
                "Your numbers are the square roots of the variance: the standard deviation of q·k. "
                "The question asks for the variance itself; do not take the square root at the end.",
                _dpv_std),
        Mistake("variances_added", "The variances of q_i and k_i added",
                "q_i k_i is a product, not a sum: Var(q_i + k_i) = σ_q² + σ_k², but the variance of a "
                "product of independent numbers is E[q_i²] E[k_i²] - (E[q_i] E[k_i])². Work it out "
                "from the second moments.",
                _dpv_variances_added),
        Mistake("one_cross_term", "Only one of the two cross terms",
                "Both means enter symmetrically: Var(q_i k_i) = σ_q²σ_k² + σ_q²μ_k² + μ_q²σ_k². You "
                "kept μ_q²σ_k² but dropped σ_q²μ_k².",
                _dpv_one_cross_term),
    ],
    hint="Split q·k into its d_k independent terms q_i k_i: how do the variances of independent terms "
         "combine? For one term, start from Var(X) = E[X²] - E[X]². Which expectations does independence "
         "let you split, and what is E[q_i²] for a number with mean μ_q and standard deviation σ_q?",
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


def _jac_one_vector_only(x):
    p = _softmax(_np(x))
    return np.diag(p) - np.outer(p, p)   # right for one vector; raises or is wrong for a batch


def _jac_negated(x):
    return -softmax_jacobian_reference(x)


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
        Mistake("negated", "Every sign is flipped: p pᵀ - diag(p)",
                "Raising x_i raises p_i, so the diagonal entries p_i(1 - p_i) must be positive, and it "
                "lowers every other p_j, so the off-diagonal entries -p_i p_j are negative. Yours has "
                "the opposite signs: subtract the outer product from diag(p), not the other way round.",
                _jac_negated),
        Mistake("uses_x", "The formula applied to the logits",
                "diag(p) - p pᵀ needs the probabilities p = softmax(x), not the logits x themselves. "
                "Compute p first.",
                _jac_uses_x),
        Mistake("one_vector_only", "Right for one vector, not for a batch",
                "np.diag and np.outer treat their input as ONE vector: for a batch (..., n), np.diag "
                "takes a diagonal and np.outer flattens everything. Build the (..., n, n) result by "
                "broadcasting instead: give p a new axis for i and another for j, and use np.eye(n) "
                "for the diagonal.",
                _jac_one_vector_only),
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
    hint="Differentiate p_i = e^(x_i) / Σ e^(x_j) with the quotient rule, once for j = i and once for "
         "j ≠ i: both cases fit one formula in p alone. Then build it for a whole batch with broadcasting "
         "(a new axis for j).",
))
