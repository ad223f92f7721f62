"""Plain-NumPy helpers shared by the exercises' references and catalogued mistakes.

The checker does not trust the code it teaches: the references are written here, in
float64 NumPy, independent of attnlib's kernels (:mod:`attnlib.kernels.softmax`,
:mod:`attnlib.kernels.attention`, ...). One copy of each helper serves every chapter's module.
No helper is named like an exercise (``softmax``, ...): the checker refuses any attnlib function
of an exercise's own name as that exercise's borrowed answer.
"""
from __future__ import annotations

import numpy as np

__all__ = ["f64", "as_np", "stable_softmax", "stable_log_softmax", "random_mask"]


def as_np(x, dtype=None) -> np.ndarray:
    """A NumPy array of a list, a NumPy array or a torch tensor (CPU or CUDA)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def f64(x) -> np.ndarray:
    """``x`` as a float64 NumPy array (a list, an array or a torch tensor)."""
    return as_np(x, np.float64)


def stable_softmax(x, axis=-1) -> np.ndarray:
    """The stable softmax of ``x`` along ``axis``: ``exp(x - max) / sum(exp(x - max))``.

    No guard: a slice that is all ``-inf`` gives NaN (the masked references handle that
    case themselves)."""
    x = f64(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))  # every exponent <= 0: no overflow
    return e / e.sum(axis=axis, keepdims=True)


def stable_log_softmax(x, axis=-1) -> np.ndarray:
    """``log(softmax(x))`` computed stably: ``x - m - log(sum(exp(x - m)))``."""
    x = f64(x)
    z = x - x.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


def random_mask(rng: np.random.Generator, shape, p: float = 0.6) -> np.ndarray:
    """A random bool mask whose every row and column (over the last two axes) has at
    least one True and one False, so that no case has a fully masked row by accident."""
    *batch, L, S = shape
    out = np.empty(shape, dtype=bool)
    for b in np.ndindex(*batch):  # rejection sampling, one (L, S) slice at a time
        while True:
            m = rng.random((L, S)) < p
            if m.any(-1).all() and (~m).any(-1).all() and m.any(-2).all() and (~m).any(-2).all():
                out[b] = m
                break
    return out
