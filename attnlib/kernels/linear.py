"""Linear attention with the feature map phi(x) = elu(x) + 1 (Katharopoulos et al., 2020).

Softmax attention weighs key ``j`` for query ``i`` by ``exp(q_i . k_j / sqrt(E))``.
Linear attention replaces that kernel with a dot product of positive features,
``phi(q_i) . phi(k_j)``, and then the sum can be regrouped::

    out_i = sum_j (phi(q_i) . phi(k_j)) v_j / sum_j phi(q_i) . phi(k_j)
          = phi(q_i)^T [sum_j phi(k_j) v_j^T]  /  phi(q_i)^T [sum_j phi(k_j)]
                       `------ KV (E, Ev) -----'              `--- z (E) ---'

``KV`` and ``z`` are computed once, so the cost is ``O(n E Ev)`` time and ``O(E Ev)``
extra memory: linear in ``n``. With ``is_causal`` the sums run over ``j <= i`` only:
they become running (prefix) sums, updated chunk by chunk.

**Error against softmax attention.** With the ``elu + 1`` feature map, linear attention is
a *different* kernel, not an approximation that converges to softmax attention: on the same
``q, k, v`` the outputs differ. (Positive random features, :mod:`attnlib.kernels.performer`, estimate
the softmax kernel instead, and their error falls as the number of features grows.) They
agree when softmax attention is nearly uniform (small scores: both become
the mean of the values) and drift apart as softmax attention gets peaked, because
``phi(q) . phi(k)`` grows only polynomially where ``exp`` grows exponentially.
``tests/test_linear.py`` measures both regimes.
"""
from __future__ import annotations


from ._array import all_finite, check_finite, check_float, compute_dtype, namespace
from ._shared import causal_kernel_attention, check_kernel_args, safe_divide

__all__ = ["linear_attention", "elu_feature_map"]


def elu_feature_map(x):
    """``phi(x) = elu(x) + 1``: ``x + 1`` for ``x > 0`` and ``exp(x)`` otherwise; always > 0
    (in exact arithmetic: ``exp`` underflows to 0 below about -745 in float64, -103 in float32).

    Args:
        x: a floating NumPy array or torch tensor of any shape, e.g. ``q`` ``(N..., L, E)``.

    Returns:
        ``phi(x)``, same shape, type, dtype and device. NaN or inf in ``x`` raise a
        ValueError naming ``x``.

    Example::

        >>> al.elu_feature_map(np.array([-1.0, 0.0, 2.0]))   # [0.368, 1., 3.]
    """
    xp = namespace(x=x)
    check_float(xp, "x", x)
    if not all_finite(xp, x):  # NaN and inf are refused, as by the attention functions
        check_finite(xp, x=x, who="elu_feature_map")
    return _elu_plus_one(xp, x)


def _elu_plus_one(xp, x):
    return xp.where(x > 0, x + 1, xp.exp(xp.minimum(x, 0.0)))


def linear_attention(q, k, v, *, is_causal=False, chunk_size=64):
    """Linear attention with the ``elu + 1`` feature map.

    Args:
        q: ``(N..., L, E)``; k: ``(N..., S, E)``; v: ``(N..., S, Ev)``.
        is_causal: query ``i`` only sees keys ``j <= i`` (running sums). Default: ``False``.
        chunk_size: positions per chunk of the causal running sums; within a chunk a
            small ``(C, C)`` masked product is used. Default: ``64``.

    Returns:
        out: ``(N..., L, Ev)``, never NaN. Very negative inputs are rescaled exactly
        before the feature map (see :func:`_lift`), so features do not underflow; in
        the causal case a query whose visible keys are all some 1e38 times (float32)
        smaller in feature than the sequence's largest key gets zeros.
        NaN or inf in q, k, v raise a ValueError naming the input, as in
        :func:`attnlib.scaled_dot_product_attention`.

    Example::

        >>> out = al.linear_attention(q, k, v, is_causal=True)
    """
    xp, is_causal, chunk_size = check_kernel_args("linear_attention", q, k, v, is_causal, chunk_size)
    out_dtype, ct = q.dtype, compute_dtype(xp, q)
    q, k, v = xp.astype(q, ct), xp.astype(k, ct), xp.astype(v, ct)
    fq = _elu_plus_one(xp, _lift(xp, q, axis=(-1,)))  # (N..., L, E)
    fk = _elu_plus_one(xp, _lift(xp, k, axis=(-2, -1)))  # (N..., S, E)
    if not is_causal:
        kv = fk.mT @ v  # (N..., E, S) @ (N..., S, Ev) -> (N..., E, Ev)
        z = xp.sum(fk, axis=-2)[..., None]  # (N..., E, 1)
        return xp.astype(safe_divide(xp, fq @ kv, fq @ z), out_dtype)  # (N..., L, Ev) / (N..., L, 1)
    return xp.astype(causal_kernel_attention(xp, fq, fk, v, chunk_size), out_dtype)


def _lift(xp, x, axis):
    """Shift ``x`` up by ``-max`` over ``axis`` where that max is negative.

    Where every entry is <= 0, ``phi(x) = exp(x)`` and ``phi(x - m) = phi(x) e^{-m}``: an
    exact rescaling, which the ratio of linear attention does not see (one factor per
    query row; one factor for all the keys of a sequence). Without it, entries below
    about -103 in float32 make every feature underflow to 0 and the output 0/0.
    """
    m = xp.max(x, axis=axis, keepdims=True)
    return x - xp.minimum(m, 0.0)
