"""Exercises of chapter 03 (why divide by sqrt(d_k)): ``dot_product_variance`` (predict
Var(q·k), means included) and ``softmax_jacobian``."""
from __future__ import annotations

import numpy as np

from ...i18n import N_
from .._model import Case, Exercise, Mistake, register
from ._ref import f64 as _np
from ._ref import stable_softmax as _softmax

# --------------------------------------------------------------------------- dot_product_variance


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
    # (σ_q² + μ_q²)(σ_k² + μ_k²) - (μ_q μ_k)², expanded: every term is >= 0, so a constant
    # q and k give exactly 0 (the factored form can round to -1e-15)
    one_term = sq**2 * sk**2 + sq**2 * mk**2 + mq**2 * sk**2
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


def _dpv_sigma_product(d_k, mu_q, sigma_q, mu_k, sigma_k):
    d, mq, sq, mk, sk = _f(d_k, mu_q, sigma_q, mu_k, sigma_k)
    return d * sq * sk


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


def _dpv_cases(rng):
    u = lambda lo, hi: float(np.round(rng.uniform(lo, hi), 2))  # noqa: E731 - readable values
    d = lambda lo, hi: int(rng.integers(lo, hi + 1))             # noqa: E731
    same = u(0.5, 2.0)
    grid = [((d(16, 128), 0.0, 1.0, 0.0, 1.0), N_("unit-variance components of mean 0")),
            ((d(8, 32), 0.0, u(1.5, 3.0), 0.0, u(0.2, 0.8)), N_("mean 0, different standard deviations")),
            ((d(16, 64), same, same, same, same), N_("the same mean and standard deviation on both sides")),
            ((d(4, 16), u(1.0, 3.0), u(0.5, 1.5), 0.0, u(1.0, 3.0)), N_("q has a mean, k has mean 0")),
            ((d(50, 150), u(0.2, 1.0), u(0.5, 1.5), -u(0.5, 1.5), u(1.0, 3.0)),
             N_("means of opposite signs, different standard deviations")),
            ((d(5, 20), u(0.5, 2.0), 0.0, 0.0, u(0.5, 2.0)), N_("q is a constant vector, k has mean 0")),
            ((1, u(1.0, 3.0), 0.0, u(1.0, 3.0), 0.0), N_("q and k both constant: a single dot product")),
            ((d(256, 1024), u(0.05, 0.2), u(0.2, 0.5), u(0.1, 0.3), u(0.3, 0.7)), N_("small means, wide vectors"))]
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
    # a formula: float64 answers are exact to ~1e-15; float32 ones to ~1e-6 of the largest
    # term (a product of squares up to ~100 in the constant case), so 1e-4 absolute
    rtol=1e-5,
    atol=1e-4,
    mistakes=[
        Mistake("ignores_means", "The means are left out",
                "σ_q²σ_k² d_k holds only for components of mean 0. With a non-zero mean a component "
                "also carries its mean into the product. Start from the variance of one product "
                "q_i k_i written with second moments, and expand it: two more terms appear.",
                _dpv_ignores_means,
                fix="Var(q_i k_i) = E[q_i²]E[k_i²] - (E[q_i]E[k_i])² with E[q_i²] = σ_q² + μ_q², so "
                    "Var(q·k) = d_k (σ_q²σ_k² + σ_q²μ_k² + μ_q²σ_k²)."),
        Mistake("second_moment", "The squared mean of each term is not subtracted",
                "(σ_q² + μ_q²)(σ_k² + μ_k²) is the second moment of one term, E[(q_i k_i)²], not its "
                "variance. A variance is the second moment minus the square of the mean.",
                _dpv_second_moment,
                fix="Subtract (μ_q μ_k)² before multiplying by d_k: "
                    "d_k ((σ_q² + μ_q²)(σ_k² + μ_k²) - (μ_q μ_k)²)."),
        Mistake("with_squared_mean", "The mean of q·k counted as spread",
                "You added the square of the MEAN of q·k, (d_k μ_q μ_k)². The mean does grow with d_k "
                "when μ_q μ_k ≠ 0, but a shift is not spread: the variance measures the spread around "
                "the mean and grows only like d_k.",
                _dpv_with_squared_mean,
                fix="Leave (d_k μ_q μ_k)² out: d_k (σ_q²σ_k² + σ_q²μ_k² + μ_q²σ_k²)."),
        Mistake("mean_not_variance", "The mean instead of the variance",
                "d_k μ_q μ_k is E[q·k], the mean of the dot product (0 when either mean is 0). The "
                "question is about its spread around that mean: the variance.",
                _dpv_mean,
                fix="Var(q·k) = d_k (E[q_i²]E[k_i²] - (μ_q μ_k)²)."),
        Mistake("sigma_as_variance", "Standard deviations used as variances",
                "sigma_q and sigma_k are standard deviations; the variance of a component is their "
                "square.",
                _dpv_sigma_as_variance, variants=(_dpv_sigma_product,),
                fix="Use sigma_q**2 and sigma_k**2 wherever a variance appears."),
        Mistake("d_k_squared", "Variances scaled by d_k² as if the terms were copies",
                "Var(d_k X) = d_k² Var(X) holds for d_k copies of ONE number. The d_k terms q_i k_i are "
                "independent, and the variance of a sum of independent terms is the sum of their "
                "variances.",
                _dpv_d_squared,
                fix="Multiply the variance of one term by d_k, not by d_k²."),
        Mistake("sqrt_d_k", "√d_k instead of d_k",
                "√d_k is how the STANDARD DEVIATION of q·k grows (that is why the scores are divided by "
                "√d_k). The variance is its square: the d_k independent terms each add their variance.",
                _dpv_sqrt_d,
                fix="Multiply the variance of one term by d_k."),
        Mistake("std_not_variance", "The standard deviation instead of the variance",
                "Your numbers are the square roots of the variance: the standard deviation of q·k. "
                "The question asks for the variance itself; do not take the square root at the end.",
                _dpv_std,
                fix="Return d_k (σ_q²σ_k² + σ_q²μ_k² + μ_q²σ_k²) without math.sqrt."),
        Mistake("variances_added", "The variances of q_i and k_i added",
                "q_i k_i is a product, not a sum: the variances of independent numbers add for a sum, "
                "but for a product you must work from the second moments of the two factors.",
                _dpv_variances_added,
                fix="Var(q_i k_i) = E[q_i²] E[k_i²] - (E[q_i] E[k_i])², with E[q_i²] = σ_q² + μ_q²."),
        Mistake("one_cross_term", "Only one of the two cross terms",
                "Both means enter symmetrically: the mean of q meets the spread of k, and the mean of k "
                "meets the spread of q. You kept only one of those two terms.",
                _dpv_one_cross_term,
                fix="Var(q_i k_i) = σ_q²σ_k² + σ_q²μ_k² + μ_q²σ_k²: add σ_q²μ_k²."),
    ],
    hint="Split q·k into its d_k independent terms q_i k_i: how do the variances of independent terms "
         "combine? For one term, start from Var(X) = E[X²] - E[X]². Which expectations does independence "
         "let you split, and what is E[q_i²] for a number with mean μ_q and standard deviation σ_q?",
    hints=("Independence gives E[(q_i k_i)²] = E[q_i²] E[k_i²] and E[q_i k_i] = μ_q μ_k, and "
           "E[q_i²] = σ_q² + μ_q². The d_k terms are independent, so their variances add.",
           "One term: (σ_q² + μ_q²)(σ_k² + μ_k²) - (μ_q μ_k)²; the answer is d_k times that."),
))

# --------------------------------------------------------------------------- softmax_jacobian


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


def _jac_elementwise_vector(x):
    p = _softmax(_np(x))
    return p * (1 - p)  # (..., n): one derivative per entry, as for a sigmoid


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


def _jac_cases(rng):
    n = rng.standard_normal
    return [
        Case((np.round(2 * n(4), 2),), label="one vector of 4 logits"),
        Case((n((3, 5)),), label="a batch of 3 vectors, n = 5"),
        Case((n((2, 3, 4)),), label="two batch dimensions (2, 3), n = 4"),
        Case((n((4, 2)),), label="n = 2, batch 4"),
        Case((790.0 + 2.0 * n((2, 6)),), label="large logits near 800 (exp overflows without the max trick)"),
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
    # entries lie in [-0.25, 0.25] (atol is relative to that scale); a float32 answer on logits
    # near 790 starts from inputs rounded by ~3e-5, which moves the entries by about as much
    rtol=1e-4, atol=2e-4,
    mistakes=[
        Mistake("diag_only", "Only diag(p)",
                "∂p_i/∂x_j is not zero for i ≠ j: raising one logit takes weight from all the others, "
                "because the weights must still sum to 1. The off-diagonal entries are negative.",
                _jac_diag_only,
                fix="Subtract the outer product: J = diag(p) - p pᵀ, i.e. "
                    "p[..., :, None] * np.eye(n) - p[..., :, None] * p[..., None, :]."),
        Mistake("elementwise", "Softmax differentiated like an elementwise sigmoid",
                "p_i(1 - p_i) is only the diagonal (and a Jacobian is an (n, n) matrix per vector, not n "
                "numbers). Softmax couples the entries, so every p_i also "
                "depends on the other logits: the off-diagonal terms are missing.",
                _jac_elementwise, variants=(_jac_elementwise_vector,),
                fix="J = diag(p) - p pᵀ: off the diagonal, J_ij = -p_i p_j."),
        Mistake("outer_only", "The diagonal term is missing",
                "You kept the outer-product term but dropped the direct effect of x_i on p_i. A quick "
                "check: each row of J must sum to 0.",
                _jac_outer_only,
                fix="J = diag(p) - p pᵀ: add p[..., :, None] * np.eye(n)."),
        Mistake("plus_outer", "Wrong sign on the outer product",
                "Raising x_j lowers every other p_i, so the off-diagonal entries must be negative. A "
                "quick check: each row of J sums to 0 because the weights always sum to 1.",
                _jac_plus_outer,
                fix="∂p_i/∂x_j = p_i(δ_ij - p_j): J = diag(p) - p pᵀ, with a minus."),
        Mistake("negated", "Every sign is flipped: p pᵀ - diag(p)",
                "Raising x_i raises p_i, so the diagonal entries p_i(1 - p_i) must be positive, and it "
                "lowers every other p_j, so the off-diagonal entries -p_i p_j are negative. Yours has "
                "the opposite signs.",
                _jac_negated,
                fix="Subtract the outer product from diag(p): diag(p) - p pᵀ, not p pᵀ - diag(p)."),
        Mistake("uses_x", "The formula applied to the logits",
                "The formula for the Jacobian is written in the probabilities p = softmax(x), not in the "
                "logits x themselves.",
                _jac_uses_x,
                fix="Compute p = softmax(x) over the last axis first, then diag(p) - p pᵀ."),
        Mistake("one_vector_only", "Right for one vector, not for a batch",
                "np.diag and np.outer treat their input as ONE vector: for a batch (..., n), np.diag "
                "takes a diagonal and np.outer flattens everything. Build the (..., n, n) result by "
                "broadcasting instead, with one new axis for i and another for j.",
                _jac_one_vector_only,
                fix="p[..., :, None] * np.eye(n) - p[..., :, None] * p[..., None, :] (or np.einsum)."),
        Mistake("wrong_axis", "Softmax over the batch axis",
                "For a batch (..., n) the softmax runs over the last axis; yours normalised over "
                "axis 0, across the batch.",
                _jac_wrong_axis,
                fix="Compute p with axis=-1 (and keepdims=True when you subtract the max and divide)."),
        Mistake("naive_exp", "Overflow in exp",
                "Right on small logits, NaN on large ones: exp(800) overflows (float64 overflows "
                "beyond exp(709.78)) and inf / inf is NaN. Shift the logits by their largest value "
                "before exp: the softmax does not change.",
                _jac_naive_exp,
                fix="e = np.exp(x - x.max(axis=-1, keepdims=True)); p = e / e.sum(axis=-1, keepdims=True)."),
    ],
    hint="Differentiate p_i = e^(x_i) / Σ e^(x_j) with the quotient rule, once for j = i and once for "
         "j ≠ i: both cases fit one formula in p alone. Then build it for a whole batch with broadcasting "
         "(a new axis for j).",
    hints=("The derivative is p_i (δ_ij - p_j): the matrix diag(p) minus the outer product p pᵀ. "
           "Compute p with a stable softmax over the last axis; each row of J sums to 0.",
           "p of shape (..., n); the diagonal part is p with a new last axis times the identity; the "
           "outer product is p with a new last axis times p with a new second-to-last axis."),
))
