"""Helpers for chapter 3 (why divide by sqrt(d_k)): Monte Carlo of dot products and
softmax saturation metrics.

Measuring instruments for the lesson, not part of the attention API: import them as
``from attnlib.instruments import scaling``. Plain NumPy, deterministic for a given seed.

Symbols: ``E`` (= d_k) query/key width, ``S`` number of keys, ``N`` number of samples.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["dot_products", "dot_product_moments", "softmax_np", "softmax_jacobian_np",
           "saturation", "random_logits", "query_grad_norms", "query_grad_norms_both", "grad_summary",
           "linear_init_scores"]


def dot_products(d_k: int, n: int, rng: np.random.Generator, *, sigma_q: float = 1.0,
                 sigma_k: float = 1.0, chunk: int = 1 << 20) -> np.ndarray:
    """``n`` samples of ``q·k`` where ``q`` and ``k`` have ``d_k`` independent
    ``N(0, sigma²)`` components. Drawn in chunks so memory stays below ~``chunk`` floats.
    Returns shape ``(n,)``.
    """
    rows = max(1, chunk // d_k)
    out = []
    for start in range(0, n, rows):
        m = min(rows, n - start)
        q = sigma_q * rng.standard_normal((m, d_k))   # (m, E)
        k = sigma_k * rng.standard_normal((m, d_k))   # (m, E)
        out.append(np.einsum("me,me->m", q, k))       # row-wise dot products -> (m,)
    return np.concatenate(out)


def dot_product_moments(d_ks, n: int = 5000, seed: int = 0, **kw) -> tuple[np.ndarray, np.ndarray]:
    """Sample mean and variance of ``q·k`` for every ``d_k`` in ``d_ks``.

    Returns ``(means, variances)``, each of shape ``(len(d_ks),)``.
    """
    rng = np.random.default_rng(seed)
    samples = [dot_products(int(d), n, rng, **kw) for d in d_ks]
    return np.array([s.mean() for s in samples]), np.array([s.var() for s in samples])


def softmax_np(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Stable softmax in NumPy (used here so the helpers do not depend on the core)."""
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def softmax_jacobian_np(p: np.ndarray) -> np.ndarray:
    """Jacobian of softmax given its output ``p`` (shape ``(..., S)``):
    ``diag(p) - p pᵀ``, shape ``(..., S, S)``."""
    return p[..., :, None] * np.eye(p.shape[-1]) - p[..., :, None] * p[..., None, :]


def random_logits(d_k: int, S: int, trials: int, rng: np.random.Generator,
                  scaled: bool) -> np.ndarray:
    """Scores of one query against ``S`` keys, ``trials`` times: ``K q`` (optionally
    ``/ sqrt(d_k)``) with unit-variance components. Returns ``(trials, S)``."""
    q = rng.standard_normal((trials, d_k, 1))            # (N, E, 1)
    k = rng.standard_normal((trials, S, d_k))            # (N, S, E)
    s = (k @ q)[..., 0]                                  # (N, S, E) @ (N, E, 1) -> (N, S)
    return s / math.sqrt(d_k) if scaled else s


def saturation(logits: np.ndarray) -> dict:
    """How saturated the softmax of each row of ``logits`` (shape ``(N, S)``) is.

    Returns a dict of averages over the rows:
    ``max_weight`` (largest weight, 1/S = uniform, 1 = one-hot), ``selectivity`` (the
    largest weight rescaled so that uniform weights give 0 and one-hot weights 1: how
    much the row singles out one key), ``entropy`` (nats;
    ln S = uniform, 0 = one-hot) and ``jacobian_norm`` (Frobenius norm of
    ``diag(p) - p pᵀ``: how much the weights can still move, 0 = frozen), and
    ``jacobian_norm_median``, the same norm for the typical (median) row.
    """
    p = softmax_np(logits)                               # (N, S)
    ent = -(p * np.log(np.where(p > 0, p, 1.0))).sum(-1)  # 0·log 0 = 0
    jac = np.linalg.norm(softmax_jacobian_np(p), axis=(-2, -1))
    S = p.shape[-1]
    return {"max_weight": float(p.max(-1).mean()), "entropy": float(ent.mean()),
            "selectivity": float(((p.max(-1) - 1 / S) / (1 - 1 / S)).mean()),
            "jacobian_norm": float(jac.mean()),
            "jacobian_norm_median": float(np.median(jac))}


def _row_grads(q, K, V, up, c):
    """``‖∂L/∂q‖`` and the largest weight of each draw of ``o = softmax(K q · c) V``,
    ``L = up·o``, by autograd. ``q`` ``(m, E, 1)``, ``K`` ``(m, S, E)``, ``V`` ``(m, S, Ev)``,
    ``up`` ``(m, Ev)``; returns two ``(m,)`` tensors."""
    import torch

    q = q.detach().requires_grad_(True)
    w = torch.softmax((K @ q)[..., 0] * c, dim=-1)     # (m, S, E) @ (m, E, 1) -> (m, S)
    out = (w[:, None, :] @ V)[:, 0]                    # (m, 1, S) @ (m, S, Ev) -> (m, Ev)
    (grad,) = torch.autograd.grad((out * up).sum(), q)  # draws are independent: one backward
    return grad[..., 0].norm(dim=-1), w.detach().max(dim=-1).values


def _row_draws(d_k: int, S: int, n: int, d_v: int, seed: int, chunk: int):
    """The random draws of :func:`query_grad_norms`: chunks of ``(q, K, V, up)``."""
    import torch

    g = torch.Generator().manual_seed(seed)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        q = torch.randn(m, d_k, 1, generator=g, dtype=torch.float32)  # (m, E, 1)
        K = torch.randn(m, S, d_k, generator=g)                       # (m, S, E)
        V = torch.randn(m, S, d_v, generator=g)                       # (m, S, Ev)
        up = torch.randn(m, d_v, generator=g)                         # (m, Ev)
        yield q, K, V, up


def query_grad_norms(d_k: int, *, S: int = 16, n: int = 2000, d_v: int = 16, scaled: bool = True,
                     seed: int = 0, chunk: int = 250, with_max_weight: bool = False):
    """``‖∂L/∂q‖`` for ``n`` independent draws of one attention row, by autograd.

    Each draw has a query ``q`` ``(d_k,)``, keys ``K`` ``(S, d_k)`` and values ``V``
    ``(S, d_v)`` with independent N(0, 1) components, the output
    ``o = softmax(K q · c) V`` with ``c = 1/√d_k`` (``scaled``) or ``c = 1``, and the loss
    ``L = g·o`` for a random upstream gradient ``g ~ N(0, I)``. The gradient that reaches
    ``q`` is ``c Kᵀ J V g`` (``J`` the softmax Jacobian): it carries the factor ``K``, not
    only ``J``.

    Returns:
        ``(n,)`` gradient norms, one per draw (computed in float32, returned as float64);
        with ``with_max_weight=True`` also the ``(n,)`` largest softmax weight of each draw.
    """
    import torch

    c = 1 / math.sqrt(d_k) if scaled else 1.0
    norms, tops = [], []
    for q, K, V, up in _row_draws(d_k, S, n, d_v, seed, chunk):
        norm, top = _row_grads(q, K, V, up, c)
        norms.append(norm)
        tops.append(top)
    out = torch.cat(norms).double().numpy()
    return (out, torch.cat(tops).double().numpy()) if with_max_weight else out


def query_grad_norms_both(d_k: int, *, S: int = 16, n: int = 1000, d_v: int = 16, seed: int = 0,
                          chunk: int = 250) -> dict:
    """:func:`query_grad_norms` with and without the scale, on the *same* ``n`` draws.

    Each draw of ``q``, ``K``, ``V`` and the upstream gradient is used twice, with
    ``c = 1`` and ``c = 1/√d_k``, so the two are compared draw by draw and the random
    numbers are drawn once. The draws are those of :func:`query_grad_norms` with the same
    ``seed``, ``n`` and ``chunk``.

    Args:
        d_k: width of ``q`` and of each key.
        S: number of keys. Default: ``16``.
        n: number of draws. Default: ``1000``.
        d_v: width of each value. Default: ``16``.
        seed: seed of the draws. Default: ``0``.
        chunk: draws per autograd call (memory). Default: ``250``.

    Returns:
        a dict of ``(n,)`` float64 arrays: ``"unscaled"`` and ``"scaled"`` (the gradient
        norms), ``"max_weight_unscaled"`` and ``"max_weight_scaled"`` (each draw's largest
        softmax weight).

    Example: ``query_grad_norms_both(1024, n=500, seed=1)["unscaled"]`` is heavy-tailed.
    """
    import torch

    for name, value in (("d_k", d_k), ("S", S), ("n", n), ("d_v", d_v), ("chunk", chunk)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    parts = {"unscaled": [], "scaled": [], "max_weight_unscaled": [], "max_weight_scaled": []}
    for q, K, V, up in _row_draws(d_k, S, n, d_v, seed, chunk):
        for name, c in (("unscaled", 1.0), ("scaled", 1 / math.sqrt(d_k))):
            norm, top = _row_grads(q, K, V, up, c)
            parts[name].append(norm)
            parts["max_weight_" + name].append(top)
    return {name: torch.cat(v).double().numpy() for name, v in parts.items()}


def grad_summary(norms: np.ndarray, small: float = 1e-3) -> dict:
    """Mean, median and the share of draws below ``small`` of gradient norms."""
    norms = np.asarray(norms)
    return {"mean": float(norms.mean()), "median": float(np.median(norms)),
            "small": float((norms < small).mean())}


def linear_init_scores(d_model: int, d_k: int, *, n: int = 4096, seed: int = 0) -> dict:
    """Scores of queries and keys from ``torch.nn.Linear(d_model, d_k)`` layers with
    PyTorch's default initialisation, for ``n`` pairs of unit-variance input tokens.

    Returns a dict: ``var_q`` (the variance of one component of ``q``, averaged over the
    components), ``var_k``, ``var_score`` (the variance of ``q·k`` over the pairs) and
    ``var_scaled`` (of ``q·k/√d_k``).
    """
    import torch

    torch.manual_seed(seed)
    w_q, w_k = torch.nn.Linear(d_model, d_k), torch.nn.Linear(d_model, d_k)   # default init
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n, d_model, generator=g)     # (n, d_model): the token asking
    y = torch.randn(n, d_model, generator=g)     # (n, d_model): another token
    with torch.no_grad():
        q, k = w_q(x), w_k(y)                    # (n, d_k) each
        dots = (q * k).sum(-1).double()          # (n,): one score per pair
    return {"var_q": float(q.var(0).mean()), "var_k": float(k.var(0).mean()),
            "var_score": float(dots.var()), "var_scaled": float((dots / math.sqrt(d_k)).var())}
