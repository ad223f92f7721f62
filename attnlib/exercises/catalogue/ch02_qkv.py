"""Exercises of chapter 02 (Q, K and V): ``softmax``, ``attention`` and ``cross_attention``.

The reference solutions are plain NumPy written here, independent of
:mod:`attnlib.kernels.softmax` and :mod:`attnlib.kernels.attention`, so the checker does not trust the
code it teaches. Each catalogued mistake is a working implementation *of that mistake*;
the cases are chosen so that every mistake differs from the reference and from every
other mistake (``tests/test_exercises_contract.py`` verifies it).
"""
from __future__ import annotations

import math

import numpy as np

from ...i18n import N_
from .._model import ATTENTION_SHORTCUTS, SOFTMAX_SHORTCUTS, Case, Exercise, Mistake, register
from ._ref import f64 as _f64
from ._ref import stable_softmax as _stable_softmax

__all__ = []  # exercises register themselves; nothing to import from here


# --------------------------------------------------------------------------- softmax

def softmax_reference(x, axis=-1):
    """Stable softmax: ``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
    return _stable_softmax(x, axis=axis)  # every exponent <= 0: no overflow


def _softmax_no_max(x, axis=-1):
    e = np.exp(_f64(x))                              # exp(1000) = inf -> inf / inf = NaN
    return e / e.sum(axis=axis, keepdims=True)


def _softmax_global_max(x, axis=-1):
    x = _f64(x)
    e = np.exp(x - x.max())                          # one max for the whole array
    return e / e.sum(axis=axis, keepdims=True)


def _softmax_whole_array(x, axis=-1):
    x = _f64(x)
    e = np.exp(x - x.max())
    return e / e.sum()                               # normalised over every entry at once


def _softmax_whole_array_naive(x, axis=-1):
    e = np.exp(_f64(x))                              # the 1-D textbook formula on an array
    return e / e.sum()


def _softmax_no_keepdims(x, axis=-1):
    x = _f64(x)
    e = np.exp(x - x.max(axis=axis))                 # (n, m) - (n,) lines up with the LAST axis
    return e / e.sum(axis=axis)


def _softmax_axis0(x, axis=-1):
    return softmax_reference(x, axis=0)              # hard-coded axis=0


def _softmax_last_axis(x, axis=-1):
    return softmax_reference(x, axis=-1)             # the axis argument is ignored


def _softmax_unnormalised(x, axis=-1):
    x = _f64(x)
    return np.exp(x - x.max(axis=axis, keepdims=True))


def _softmax_unnormalised_raw(x, axis=-1):
    return np.exp(_f64(x))


def _softmax_in_place(x, axis=-1):
    x -= x.max(axis=axis, keepdims=True)             # changes the caller's array
    np.exp(x, out=x)
    x /= x.sum(axis=axis, keepdims=True)
    return x


def _softmax_cases(rng):
    n = rng.standard_normal
    levels = np.array([[1000.0], [0.0], [-1000.0]]) + rng.uniform(-50, 50, (3, 1))
    equal_row = np.vstack([np.full((1, 4), rng.uniform(-5, 5)), n((1, 4))])
    return [
        Case((2 * n(6),), label="a 1-D vector of 6 logits"),
        Case((n((3, 5)),), label="3 rows of 5 logits, axis left at its default"),
        Case((n((4, 4)),), {"axis": -1}, label="a square, non-symmetric 4 x 4 array, axis=-1"),
        Case((n((5, 3)),), {"axis": 0}, label="a 5 x 3 array normalised down the columns, axis=0"),
        Case((n((2, 3, 4)),), {"axis": -1}, label="a batch of two 3 x 4 score arrays, axis=-1"),
        Case((n((2, 4, 3)),), {"axis": 1}, label="a 3-D array normalised over its middle axis, axis=1"),
        Case((n((3, 2, 4)),), {"axis": 0}, label="a 3-D array normalised over its first axis, axis=0"),
        Case((levels + n((3, 5)),), label="rows at levels +1000, 0 and -1000"),
        Case((1000.0 + rng.uniform(-2, 2, 5),), label="1-D logits near +1000 (exp overflows)"),
        Case((np.full(5, -1000.0 + rng.uniform(-50, 0)),), label="five equal logits near -1000 (exp underflows)"),
        Case((equal_row,), label="a row of equal values"),
    ]


register(Exercise(
    name="softmax",
    chapter="02_qkv",
    prompt="Return the numerically stable softmax of x along axis: exp(x - max) / sum(exp(x - max)).",
    stub='''def softmax(x, axis=-1):
    """Numerically stable softmax of x along axis.

    Args:
        x: float array of any shape, e.g. (L, S) attention scores.
        axis: the axis to normalise over. Default: -1 (the last axis).

    Returns:
        an array of x's shape: non-negative, and every slice along axis sums to 1.
        x itself must be left unchanged.
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=softmax_reference,
    cases=_softmax_cases,
    mistakes=[
        Mistake("no_max_subtraction", "exp overflows: the maximum is not subtracted",
                "Right for small logits, NaN for large ones: exp(1000) is inf in float64 (and exp(89) "
                "already in float32), and inf / inf is NaN; logits of -1000 underflow to 0 / 0. Shift "
                "each slice by a constant that keeps every exponent at or below 0: the constant "
                "cancels between numerator and denominator.",
                fn=_softmax_no_max,
                fix="Subtract the maximum along the axis first, m = x.max(axis=axis, keepdims=True), "
                    "and use np.exp(x - m)."),
        Mistake("global_max", "One maximum for the whole array",
                "You subtract the maximum of the entire array. Rows far below that maximum (here a "
                "row 1000 below another) underflow to exp(-1000) = 0 everywhere, and 0 / 0 is NaN. "
                "Each slice needs its own maximum.",
                fn=_softmax_global_max,
                fix="Subtract each slice's own maximum: x.max(axis=axis, keepdims=True)."),
        Mistake("whole_array", "Normalised over the whole array",
                "Your weights add up to 1 over ALL entries instead of along the axis: the sum runs over "
                "everything. Sum (and take the maximum) along the given axis only.",
                fn=_softmax_whole_array, variants=(_softmax_whole_array_naive,),
                fix="Sum along the axis with keepdims=True: e.sum(axis=axis, keepdims=True), and "
                    "the maximum the same way, x.max(axis=axis, keepdims=True)."),
        Mistake("forgot_keepdims", "keepdims is missing in max or sum",
                "Reducing an (n, m) array along its last axis gives shape (n,), and x - (n,) lines it "
                "up with the LAST axis, so column j is shifted and divided by row j's numbers: wrong "
                "for square arrays and an error for non-square ones. Keep the reduced axis, with "
                "length 1, so that the result lines up with x.",
                fn=_softmax_no_keepdims,
                fix="x.max(axis=axis, keepdims=True) and e.sum(axis=axis, keepdims=True)."),
        Mistake("wrong_axis", "Softmax over the first axis",
                "Your function always normalises along axis 0 (down the columns), whatever axis it is "
                "given. Pass the argument on to both reductions.",
                fn=_softmax_axis0,
                fix="Reduce with axis=axis (not axis=0) in the max and in the sum, keepdims=True."),
        Mistake("ignores_axis", "The axis argument is ignored",
                "Your function always normalises along the last axis, so softmax(x, axis=0) is wrong. "
                "Use the axis argument in both reductions.",
                fn=_softmax_last_axis,
                fix="Reduce with axis=axis (not axis=-1) in the max and in the sum, keepdims=True."),
        Mistake("no_normalisation", "The exponentials are not normalised",
                "You return the exponentials but never divide by their sum, so the slices do not add "
                "up to 1.",
                fn=_softmax_unnormalised, variants=(_softmax_unnormalised_raw,),
                fix="Divide by e.sum(axis=axis, keepdims=True)."),
        Mistake("mutates", "Your function changes its input",
                "In-place operations (subtracting into x, exponentiating into x) overwrite the caller's "
                "array (here: the attention scores someone still needs). Compute into new arrays.",
                fn=_softmax_in_place, kind="mutates",
                fix="Write e = np.exp(x - m) instead of x -= m or np.exp(x, out=x)."),
    ],
    hint="softmax(x) = softmax(x - c) for any constant c, so choose a c per slice that keeps every "
         "exponent at or below 0. Reduce along `axis` only, and keep the reduced axis so the result "
         "lines up with x when you subtract and divide.",
    hints=("The constant is the slice's maximum: the largest exponent is then exactly 0, and the sum "
           "is at least 1, so there is neither overflow nor 0 / 0. Reduce with axis=axis and "
           "keepdims=True, and build new arrays rather than changing x.",
           "m = the max along axis (keepdims=True); e = exp(x - m); return e divided by its sum along "
           "axis (keepdims=True)."),
    rtol=1e-4, atol=1e-6,  # weights lie in [0, 1]: a float32 answer (rounding ~1e-7) passes
    time_limit=3.0,
    forbidden=SOFTMAX_SHORTCUTS,
))


# --------------------------------------------------------------------------- attention

def attention_reference(q, k, v, mask=None):
    """Scaled dot-product attention, bool ``mask`` True = may attend."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    E = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(E)  # (..., L, E) @ (..., E, S) -> (..., L, S)
    if mask is not None:
        scores = np.where(_f64(mask) != 0, scores, -np.inf)
    weights = _stable_softmax(scores, axis=-1)          # each query row sums to 1 over the keys
    return weights @ v                                  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)


def _attend(q, k, v, mask=None, *, scale="sqrt", axis=-1, kT="swap", wT=None, stable=True, softmax=True):
    """The reference with one thing changed; each keyword is one misconception."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    E = q.shape[-1]
    kt = {"swap": np.swapaxes(k, -1, -2), "T": k.T, "none": k}[kT]
    scores = q @ kt  # (..., L, E) @ (..., E, S) -> (..., L, S) when kT is right
    scores = scores / {"sqrt": math.sqrt(E), "one": 1.0, "E": float(E),
                       "S": math.sqrt(k.shape[-2])}[scale]
    if mask is not None:
        scores = np.where(_f64(mask) != 0, scores, -np.inf)
    if not softmax:
        weights = scores
    elif stable:
        weights = _stable_softmax(scores, axis=axis)
    else:
        e = np.exp(scores)
        weights = e / e.sum(axis=axis, keepdims=True)
    if wT == "swap":
        weights = np.swapaxes(weights, -1, -2)
    elif wT == "T":
        weights = weights.T
    return weights @ v


def _attention_loops(q, k, v, mask=None):
    """Correct, but one Python step per pair of a query and a key (and per feature)."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    *batch, L, E = q.shape
    S, Ev = k.shape[-2], v.shape[-1]
    allowed = None if mask is None else np.broadcast_to(_f64(mask) != 0, (*batch, L, S))
    out = np.zeros((*batch, L, Ev))
    for b in np.ndindex(*batch):
        for i in range(L):
            scores = []
            for j in range(S):
                s = 0.0
                for e in range(E):
                    s += q[b + (i, e)] * k[b + (j, e)]
                ok = allowed is None or allowed[b + (i, j)]
                scores.append(s / math.sqrt(E) if ok else -math.inf)
            top = max(scores)
            w = [math.exp(s - top) for s in scores]
            total = sum(w)
            for c in range(Ev):
                acc = 0.0
                for j in range(S):
                    acc += w[j] / total * v[b + (j, c)]
                out[b + (i, c)] = acc
    return out


def _attention_pair_loop(q, k, v, mask=None):
    """Correct, but a Python step per (query, key) pair: the doubly nested loop."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    *batch, L, E = q.shape
    S = k.shape[-2]
    allowed = np.ones((*batch, L, S), bool) if mask is None else np.broadcast_to(_f64(mask) != 0, (*batch, L, S))
    scores = np.empty((*batch, L, S))
    for b in np.ndindex(*batch):
        for i in range(L):
            for j in range(S):
                scores[b + (i, j)] = q[b + (i,)] @ k[b + (j,)] / math.sqrt(E) if allowed[b + (i, j)] else -np.inf
    return _stable_softmax(scores, axis=-1) @ v


def _attention_cases(rng):
    n = rng.standard_normal

    def qkv(batch, L, S, E, Ev, scale=1.0):
        return scale * n((*batch, L, E)), scale * n((*batch, S, E)), n((*batch, S, Ev))

    c = [
        Case(qkv((), 4, 4, 4, 3), label="square 2-D (L = S = E = 4, Ev = 3)"),
        Case(qkv((), 3, 6, 5, 2), label="2-D, L != S"),
        Case(qkv((), 1, 5, 3, 4), label="one query (L = 1)"),
        Case(qkv((2,), 4, 5, 3, 6), label="a batch of 2"),
        Case(qkv((3,), 2, 7, 6, 3), label="a batch of 3, L != S, E != Ev"),
        Case(qkv((2, 3), 4, 5, 2, 3), label="two batch axes (batch, heads)"),
    ]
    # large scores: query 0 points along key 0 with a scaled score near 1000 (exp overflows)
    q, k, v = qkv((), 3, 5, 4, 2, scale=40.0)
    q[0] = rng.uniform(950.0, 1050.0) * math.sqrt(4) * k[0] / (k[0] @ k[0])
    c.append(Case((q, k, v), label="large scores (exp overflows without the max trick)"))
    # large scores in a batch: the largest score of batch 1, query 1 is about 1000
    q, k, v = qkv((2,), 3, 4, 6, 5, scale=40.0)
    q[1, 1] = rng.uniform(950.0, 1050.0) * math.sqrt(6) * k[1, 2] / (k[1, 2] @ k[1, 2])
    c.append(Case((q, k, v), label="large scores in a batch"))
    return c


def _attention_perf_case():
    rng = np.random.default_rng(8)
    L, E = 2048, 16
    return Case((rng.standard_normal((L, E)), rng.standard_normal((L, E)), rng.standard_normal((L, E))),
                label="L = S = 2048, E = Ev = 16")


register(Exercise(
    name="attention",
    chapter="02_qkv",
    prompt="Return scaled dot-product attention softmax(q kᵀ / √E) v, for queries, keys and values "
           "with any number of batch axes.",
    stub='''def attention(q, k, v):
    """Scaled dot-product attention: softmax(q kᵀ / √E) v.

    Args:
        q: (..., L, E) queries; "..." is any number of batch axes, maybe none.
        k: (..., S, E) keys.
        v: (..., S, Ev) values.

    Returns:
        (..., L, Ev) array: row i is the average of the values weighted by
        softmax over j of q_i · k_j / √E (the attention scores, shape (..., L, S)).
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=attention_reference,
    cases=_attention_cases,
    mistakes=[
        Mistake("no_scaling", "The scores are not scaled",
                "You use q kᵀ directly. Its entries have variance E, which pushes the softmax towards "
                "one-hot weights (and tiny gradients) as E grows. Bring the scores back to unit "
                "variance by dividing them by their standard deviation, √E, before the softmax.",
                fn=lambda q, k, v, mask=None: _attend(q, k, v, mask, scale="one"),
                fix="scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(E) with E = q.shape[-1]."),
        Mistake("scaled_by_dk", "Divided by E instead of √E",
                "The dot product of two E-dimensional vectors with unit-variance entries has variance "
                "E, so its standard deviation is √E: dividing by E itself over-flattens the weights.",
                fn=lambda q, k, v, mask=None: _attend(q, k, v, mask, scale="E"),
                fix="Divide the scores by np.sqrt(E), not by E (and only once: not q and k separately "
                    "by √E each)."),
        Mistake("scaled_by_num_keys", "Divided by √S, the number of keys",
                "The scale undoes the spread of ONE dot product q·k, a sum of E products (E = the width "
                "of the queries and keys). The number of keys S does not change that spread.",
                fn=lambda q, k, v, mask=None: _attend(q, k, v, mask, scale="S"),
                fix="Divide by np.sqrt(q.shape[-1]), the width E, not by np.sqrt(k.shape[-2])."),
        Mistake("softmax_over_queries", "Softmax over the query axis",
                "Your weights sum to 1 down each column of the (L, S) score matrix, i.e. over the "
                "queries. Each query shares its attention among the keys, so every row must sum to 1. "
                "(The first axis is also wrong for batched inputs: it is the batch axis.)",
                fn=lambda q, k, v, mask=None: _attend(q, k, v, mask, axis=-2),
                variants=(lambda q, k, v, mask=None: _attend(q, k, v, mask, axis=0),),
                fix="Take the softmax along the last axis, axis=-1 (dim=-1 in torch)."),
        Mistake("no_softmax", "The scores are used as weights",
                "You multiply the values by the scaled scores themselves. Scores can be negative and do "
                "not sum to 1; attention averages the values with weights that are positive and sum to "
                "1 over the keys.",
                fn=lambda q, k, v, mask=None: _attend(q, k, v, None, softmax=False),
                fix="weights = softmax(scores, axis=-1) (with the row maximum subtracted), then "
                    "weights @ v."),
        Mistake("softmax_overflow", "The softmax overflows on large scores",
                "Right for small scores, NaN for large ones: exp of a score above ~709 is inf in "
                "float64, and inf / inf is NaN. Shift each row of scores down by its largest value "
                "before exp; the softmax does not change.",
                fn=lambda q, k, v, mask=None: _attend(q, k, v, mask, stable=False),
                fix="scores - scores.max(axis=-1, keepdims=True) before np.exp."),
        Mistake("k_not_transposed", "K is not transposed",
                "Multiplying q by k as it is pairs (L, E) with (S, E), which only runs when S = E and "
                "then computes the wrong thing. The scores pair every query with every key: (..., L, S).",
                fn=lambda q, k, v, mask=None: _attend(q, k, v, mask, kT="none"),
                fix="q @ np.swapaxes(k, -1, -2) (q @ k.mT in torch)."),
        Mistake("transpose_all_axes", ".T on a batched array",
                "Right for 2-D inputs, but for a batch .T reverses ALL axes: (B, S, E).T is "
                "(E, S, B), not (B, E, S). Swap only the last two axes.",
                fn=lambda q, k, v, mask=None: _attend(q, k, v, mask, kT="T"),
                fix="np.swapaxes(k, -1, -2) (k.mT or k.transpose(-2, -1) in PyTorch)."),
        Mistake("weights_transposed", "The attention weights are transposed",
                "You multiply the values by the transposed weights, (S, L) instead of (L, S): that "
                "fails when L != S and mixes up queries and keys when L = S. Row i of the weights "
                "belongs to query i.",
                fn=lambda q, k, v, mask=None: _attend(q, k, v, mask, wT="swap"),
                variants=(lambda q, k, v, mask=None: _attend(q, k, v, mask, wT="T"),),
                fix="The output is weights @ v: (..., L, S) @ (..., S, Ev)."),
        Mistake("python_loops", "Correct, but far too slow",
                "A Python loop over pairs of queries and keys (or over features) does one interpreted "
                "step per pair: millions here. Let NumPy compute whole matrices at once (a loop over "
                "query rows with vector operations is fine too).",
                fn=_attention_loops, kind="slow", variants=(_attention_pair_loop,),
                fix="scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(E), then the softmax along axis=-1, "
                    "then weights @ v."),
    ],
    hint="Follow the three stages and write the shape of each array: scores (..., L, S), one row per "
         "query; scaled by the standard deviation of a dot product of width E; each row of weights "
         "averages the values.",
    hints=("The scores are the queries times the keys with only their last two axes swapped, divided "
           "by √E; the softmax runs along the last axis with the row maximum subtracted; the output is "
           "the weights times the values.",
           "scores = q @ swapaxes(k, -1, -2) / sqrt(E); subtract the row max, exp, divide by the row sum; "
           "return weights @ v."),
    rtol=1e-4, atol=1e-6,   # float32 answers pass; every mistake differs by far more
    time_limit=3.0,
    perf_case=_attention_perf_case(),  # a (query, key) loop needs 4 M Python steps here: seconds
    slow_limit=1.0,                    # the reference takes ~0.15 s, a loop over query rows ~0.1 s
    forbidden=ATTENTION_SHORTCUTS,
))


# --------------------------------------------------------------------------- cross_attention

def cross_attention_reference(x, y, w_q, w_k, w_v):
    """One head of cross-attention: queries from ``x``, keys and values from ``y``.

    Args:
        x: ``(L, d_x)`` the sequence that asks (one row per query token).
        y: ``(S, d_y)`` the sequence that is read (one row per key/value token).
        w_q: ``(d_x, d_k)`` query projection.
        w_k: ``(d_y, d_k)`` key projection.
        w_v: ``(d_y, d_v)`` value projection.

    Returns:
        ``(L, d_v)``: ``softmax(Q Kᵀ / √d_k) V`` with ``Q = x w_q``, ``K = y w_k``, ``V = y w_v``.
    """
    x, y, w_q, w_k, w_v = map(_f64, (x, y, w_q, w_k, w_v))
    q = x @ w_q                                   # (L, d_x) @ (d_x, d_k) -> (L, d_k)
    k = y @ w_k                                   # (S, d_y) @ (d_y, d_k) -> (S, d_k)
    v = y @ w_v                                   # (S, d_y) @ (d_y, d_v) -> (S, d_v)
    scores = q @ k.T / math.sqrt(q.shape[-1])     # (L, d_k) @ (d_k, S) -> (L, S)
    return _stable_softmax(scores, axis=-1) @ v   # (L, S) @ (S, d_v) -> (L, d_v)


def _cross(x, y, w_q, w_k, w_v, *, qs="x", ks="y", vs="y", wk="k", wv="v", scale="k", axis=-1,
           wT=False):
    """The reference with one thing changed; each keyword is one misconception."""
    x, y, w_q, w_k, w_v = map(_f64, (x, y, w_q, w_k, w_v))
    src = {"x": x, "y": y}
    q = src[qs] @ w_q
    k = src[ks] @ (w_k if wk == "k" else w_v)
    v = src[vs] if wv == "none" else src[vs] @ (w_v if wv == "v" else w_k)
    d = {"k": q.shape[-1], "v": v.shape[-1], "model": x.shape[-1], "one": 1}[scale]
    weights = _stable_softmax(q @ k.T / math.sqrt(d), axis=axis)
    if wT:
        weights = weights.T
    return weights @ v


def _cross_overflow(x, y, w_q, w_k, w_v):
    x, y, w_q, w_k, w_v = map(_f64, (x, y, w_q, w_k, w_v))
    q, k, v = x @ w_q, y @ w_k, y @ w_v
    e = np.exp(q @ k.T / math.sqrt(q.shape[-1]))  # exp(1000) = inf -> inf / inf = NaN
    return e / e.sum(axis=-1, keepdims=True) @ v


def _cross_cases(rng):
    n = rng.standard_normal

    def case(L, S, d_x, d_y, d_k, d_v, label, big=1.0):
        x, y = big * n((L, d_x)), big * n((S, d_y))
        ws = [n((d_x, d_k)) / math.sqrt(d_x), n((d_y, d_k)) / math.sqrt(d_y), n((d_y, d_v)) / math.sqrt(d_y)]
        return Case((x, y, *ws), label=label)

    # large scores: x[0] is chosen so that query 0 points along key 0 with a score near 1000
    large = case(3, 5, 6, 6, 4, 3, "large scores (exp overflows without the max trick)")
    x, y, w_q, w_k, w_v = large.args
    k0 = y[0] @ w_k
    x[0] = (rng.uniform(950.0, 1050.0) * 2.0 * k0 / (k0 @ k0)) @ np.linalg.pinv(w_q)  # √d_k = 2
    return [
        case(3, 5, 6, 6, 4, 2, N_("L = 3 queries, S = 5 keys, d_x = d_y = 6, d_k = 4, d_v = 2")),
        case(4, 4, 5, 5, 3, 3, "L = S = 4, d_x = d_y = 5, d_k = d_v = 3"),
        case(2, 6, 4, 4, 4, 5, "L = 2, S = 6, d_x = d_y = d_k = 4, d_v = 5"),
        case(5, 3, 8, 8, 2, 6, "L = 5 > S = 3, d_x = d_y = 8, d_k = 2, d_v = 6"),
        case(3, 7, 4, 9, 5, 2, N_("L = 3, S = 7, query side d_x = 4, source side d_y = 9, d_k = 5, d_v = 2")),
        case(4, 4, 6, 6, 16, 16, N_("L = S = 4, d_x = d_y = 6, wide heads d_k = d_v = 16"), big=3.0),
        large,
    ]


register(Exercise(
    name="cross_attention",
    chapter="02_qkv",
    prompt="Project x to queries and y to keys and values with w_q, w_k, w_v, then attend: "
           "softmax(Q Kᵀ / √d_k) V, shape (L, d_v).",
    stub='''def cross_attention(x, y, w_q, w_k, w_v):
    """One head of cross-attention: x asks, y answers.

    Args:
        x: (L, d_x) array, the sequence whose tokens ask (queries).
        y: (S, d_y) array, the sequence that is read (keys and values).
        w_q: (d_x, d_k) query projection.
        w_k: (d_y, d_k) key projection.
        w_v: (d_y, d_v) value projection.

    Returns:
        (L, d_v) array: one output row per token of x.
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=cross_attention_reference,
    cases=_cross_cases,
    mistakes=[
        Mistake("keys_from_x", "Keys and values taken from the query sequence",
                "That is self-attention on x. In cross-attention the queries come from x, but the keys "
                "and values both come from the sequence being read, y.",
                lambda x, y, w_q, w_k, w_v: _cross(x, y, w_q, w_k, w_v, ks="x", vs="x"),
                fix="K = y @ w_k and V = y @ w_v (only Q = x @ w_q comes from x)."),
        Mistake("values_from_x", "Values taken from the query sequence",
                "Each weight belongs to one key, and a key and its value are the same token of y: the "
                "values must come from the sequence the keys come from (one value per key).",
                lambda x, y, w_q, w_k, w_v: _cross(x, y, w_q, w_k, w_v, vs="x"),
                fix="V = y @ w_v: the values come from y, like the keys."),
        Mistake("roles_swapped", "The roles of x and y are swapped",
                "Your queries come from y and your keys and values from x, so you get one output row per "
                "token of y. The sequence that asks (x) gives the queries.",
                lambda x, y, w_q, w_k, w_v: _cross(y, x, w_q, w_k, w_v),
                fix="Q = x @ w_q (the queries from x); K = y @ w_k and V = y @ w_v (keys and values from y)."),
        Mistake("keys_as_values", "The key projection used for the values",
                "Projecting the values with the key matrix delivers each token's matching label instead "
                "of its content (the chapter's 'her' received 'a female person', not 'Anna'). The values "
                "have their own projection.",
                lambda x, y, w_q, w_k, w_v: _cross(x, y, w_q, w_k, w_v, wv="k"),
                fix="V = y @ w_v, of width d_v."),
        Mistake("projections_swapped", "w_k and w_v swapped",
                "Your keys are projected with w_v and your values with w_k. The key projection is the one "
                "whose output is compared with the queries, so it must have the queries' width d_k. With "
                "d_v ≠ d_k the swap cannot even be multiplied; with d_v = d_k it silently matches on the "
                "content and delivers the labels.",
                lambda x, y, w_q, w_k, w_v: _cross(x, y, w_q, w_k, w_v, wk="v", wv="k"),
                fix="K = y @ w_k (d_k columns), V = y @ w_v (d_v columns)."),
        Mistake("values_not_projected", "The values are y itself",
                "You averaged the raw tokens of y, so the output has y's width d_y. Each token hands "
                "over its value, its content projected to width d_v.",
                lambda x, y, w_q, w_k, w_v: _cross(x, y, w_q, w_k, w_v, wv="none"),
                fix="V = y @ w_v, which makes the output (L, d_v)."),
        Mistake("scaled_by_d_v", "Scaled by √d_v instead of √d_k",
                "The scale undoes the spread of the dot products q·k, which sum d_k products: it is set "
                "by the width of the queries and keys, not by the width of the values.",
                lambda x, y, w_q, w_k, w_v: _cross(x, y, w_q, w_k, w_v, scale="v"),
                fix="Divide the scores by np.sqrt(d_k) with d_k = w_q.shape[1]."),
        Mistake("scaled_by_d_model", "Scaled by the input width instead of √d_k",
                "The scores are dot products of the projected vectors, which have d_k components, so "
                "their spread is about √d_k, whatever the width d_x of the input.",
                lambda x, y, w_q, w_k, w_v: _cross(x, y, w_q, w_k, w_v, scale="model"),
                fix="Divide by np.sqrt(d_k) with d_k = w_q.shape[1], not np.sqrt(x.shape[1])."),
        Mistake("no_scaling", "The scores are not scaled",
                "Q Kᵀ has entries whose variance grows with d_k; bring them back to unit variance before "
                "the softmax.",
                lambda x, y, w_q, w_k, w_v: _cross(x, y, w_q, w_k, w_v, scale="one"),
                fix="scores = q @ k.T / np.sqrt(d_k)."),
        Mistake("softmax_over_queries", "Softmax over the query axis",
                "Each query of x shares its attention among the S keys of y: the weights of one row of "
                "the (L, S) scores must sum to 1.",
                lambda x, y, w_q, w_k, w_v: _cross(x, y, w_q, w_k, w_v, axis=0),
                fix="Take the softmax along the last axis, axis=-1."),
        Mistake("weights_transposed", "The attention weights are transposed",
                "The weights are (L, S): row i belongs to query i of x. Transposed they are (S, L) and "
                "mix the queries instead of the values.",
                lambda x, y, w_q, w_k, w_v: _cross(x, y, w_q, w_k, w_v, wT=True),
                fix="The output is weights @ V, (L, S) @ (S, d_v)."),
        Mistake("softmax_overflow", "The softmax overflows on large scores",
                "Right for small scores, NaN for large ones: exp of a score above ~709 is inf, and "
                "inf / inf is NaN. Shift each row of scores down by its largest value before exp "
                "(chapter 2's stable softmax).",
                _cross_overflow,
                fix="scores - scores.max(axis=-1, keepdims=True) before np.exp."),
    ],
    hint="Write down the shape of every array before you compute it: which sequence do the queries "
         "come from, which do the keys and the values come from, and which width does the score of a "
         "query and a key have? The output has one row per token of x.",
    hints=("Queries (L, d_k) from x, keys (S, d_k) and values (S, d_v) from y; the scores (L, S) are "
           "divided by √d_k and turned into weights with a stable softmax over the keys; the weights "
           "average the values.",
           "Q = x @ w_q, K = y @ w_k, V = y @ w_v; then the attention of the previous exercise on Q, K, V."),
    rtol=1e-4, atol=1e-6,  # a float32 answer passes; every mistake differs by far more
))
