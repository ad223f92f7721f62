"""Exercises of chapter 05 (multi-head attention): ``split_heads``, ``head_scores``,
``multi_head_attention``.

Conventions (those of the chapter and of :func:`attnlib.multi_head_attention`): ``x`` is
``(..., n, d_model)``; weights are ``(d_model, d_model)`` matrices used as ``x @ w``; head
``k`` owns the contiguous columns ``k * d_head : (k + 1) * d_head`` with
``d_head = d_model // num_heads``; a bool mask is True where a query may attend. The
reference solutions are plain NumPy, independent of :mod:`attnlib.kernels.multihead`.
"""
from __future__ import annotations

import numpy as np

from .._model import MULTIHEAD_SHORTCUTS, Case, Exercise, Mistake, register
from ._ref import stable_softmax as _softmax

__all__ = []  # exercises register themselves; nothing to import from here


# --------------------------------------------------------------------------- split_heads

def _split_reference(x, num_heads):
    *batch, n, d_model = x.shape
    d_head = d_model // num_heads
    x = x.reshape(*batch, n, num_heads, d_head)  # (..., n, d_model) -> (..., n, h, d_head)
    return np.swapaxes(x, -2, -3)                # (..., n, h, d_head) -> (..., h, n, d_head)


def _split_reshape_only(x, num_heads):
    *batch, n, d_model = x.shape
    return x.reshape(*batch, num_heads, n, d_model // num_heads)  # mixes tokens


def _split_interleaved(x, num_heads):
    *batch, n, d_model = x.shape
    x = x.reshape(*batch, n, d_model // num_heads, num_heads)  # column c -> head c % h
    return np.moveaxis(x, -1, -3)                               # (..., h, n, d_head)


def _split_hardcoded_axes(x, num_heads):
    *batch, n, d_model = x.shape
    x = x.reshape(*batch, n, num_heads, d_model // num_heads)  # (..., n, h, d_head)
    return np.swapaxes(x, 0, 1)  # right only without batch axes


def _split_heads_first(x, num_heads):
    *batch, n, d_model = x.shape
    x = x.reshape(*batch, n, num_heads, d_model // num_heads)  # (..., n, h, d_head)
    return np.moveaxis(x, -2, 0)  # (h, ..., n, d_head): e.g. np.stack(np.split(x, h, -1), axis=0)


def _split_no_transpose(x, num_heads):
    *batch, n, d_model = x.shape
    return x.reshape(*batch, n, num_heads, d_model // num_heads)  # (..., n, h, d_head)


def _split_cases(rng):
    n = rng.standard_normal
    return [
        Case(args=(n((5, 8)), 2), label="n = 5, d_model = 8, 2 heads"),
        Case(args=(n((2, 3, 12)), 3), label="batched, 3 heads"),
        Case(args=(n((4, 4)), 4), label="n = h = 4, d_head = 1"),
        Case(args=(n((1, 6)), 2), label="one token"),
        Case(args=(n((2, 7, 6)), 1), label="one head"),
        Case(args=(n((3, 5, 16)), 4), label="batched, 4 heads"),
    ]


register(Exercise(
    name="split_heads",
    chapter="05_multihead",
    prompt="Split x of shape (..., n, d_model) into num_heads heads of width d_model // num_heads: "
           "return (..., num_heads, n, d_head), head k taking columns k*d_head to (k+1)*d_head.",
    stub='''def split_heads(x, num_heads):
    """(..., n, d_model) -> (..., num_heads, n, d_head); head k owns the columns
    k * d_head : (k + 1) * d_head, with d_head = d_model // num_heads."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_split_reference,
    cases=_split_cases,
    mistakes=[
        Mistake("reshape_without_transpose", "Reshape without transpose",
                "A single reshape to (..., h, n, d_head) has the right shape but reads the numbers in "
                "memory order, so one 'token' row of a head is stitched from pieces of several tokens "
                "(the tokens get mixed). Cut each token's row into its heads first, while the token "
                "axis stays where it is; then move the head axis in front of the tokens.",
                fn=_split_reshape_only,
                fix="Reshape to (..., n, h, d_head) first, then swap the n and h axes "
                    "(x.swapaxes(-2, -3), or .transpose(-2, -3) in torch)."),
        Mistake("interleaved_columns", "Heads take interleaved columns",
                "Your head k takes columns k, k+h, k+2h, ... The convention (the paper's Concat, "
                "nn.MultiheadAttention's weight layout) gives each head a contiguous block of d_head "
                "columns.",
                fn=_split_interleaved,
                fix="Reshape to (..., n, h, d_head), not (..., n, d_head, h)."),
        Mistake("forgot_transpose", "The head axis is not moved in front of the tokens",
                "You returned (..., n, h, d_head). Attention runs per head over the tokens, so the token "
                "axis must be the second-to-last and the head axis just before it.",
                fn=_split_no_transpose,
                fix="Swap axes -2 and -3 to get (..., h, n, d_head)."),
        Mistake("hardcoded_axes", "Axes counted from the front (breaks with a batch axis)",
                "Your split is right for a single (n, d_model) sequence, but you counted the axes from "
                "the front: swapping axes 0 and 1 swaps the batch and token axes of a batched "
                "(B, n, d_model) input, and stacking the heads on axis 0 puts them in front of the "
                "batch axis. Count the axes from the end, so any number of leading batch axes works.",
                fn=_split_hardcoded_axes, variants=(_split_heads_first,),
                fix="x.reshape(*x.shape[:-1], h, d_head).swapaxes(-2, -3): the heads go to axis -3."),
    ],
    hint="Picture each token's row of d_model numbers as num_heads pieces side by side. First cut every "
         "row into its pieces while the token axis stays where it is; then bring the head axis in front "
         "of the token axis. Count the axes from the end so that batch axes do not matter.",
    hints=("Cutting the last axis into (num_heads, d_head) is a reshape of the last axis only: "
           "(..., n, d_model) becomes (..., n, h, d_head). Bringing the heads in front of the tokens "
           "swaps the axes -3 and -2.",
           "x.reshape(*batch, n, h, d_head), then swap axes -2 and -3."),
    rtol=0.0, atol=0.0,  # a reshape moves numbers, it does not change them: exact
))


# --------------------------------------------------------------------------- multi_head_attention

def _mha(x, w_q, w_k, w_v, w_o, num_heads, mask=None, *, split=_split_reference, merge="transpose",
         scale="head", use_w_o=True, axis=-1, use_mask=True, invert_mask=False, mask_after=False,
         add_mask=False, transpose_weights=False, zero_fill=False, renormalise=False, stable=True):
    """Multi-head self-attention and, through the keywords, each catalogued mistake."""
    *batch, n, d_model = x.shape
    h, d_head = num_heads, d_model // num_heads
    q = split(x @ w_q, h)  # (..., n, d_model) @ (d_model, d_model) -> split -> (..., h, n, d_head)
    k = split(x @ w_k, h)
    v = split(x @ w_v, h)
    scores = q @ np.swapaxes(k, -1, -2)  # (..., h, n, d_head) @ (..., h, d_head, n) -> (..., h, n, n)
    if scale == "head":
        scores = scores / np.sqrt(d_head)
    elif scale == "model":
        scores = scores / np.sqrt(d_model)
    allowed = None
    if mask is not None and use_mask:
        allowed = np.asarray(mask, dtype=bool)
        allowed = ~allowed if invert_mask else allowed
        if add_mask:
            scores = scores + allowed              # the mistake: True counts as +1, nothing is blocked
        elif zero_fill:
            scores = np.where(allowed, scores, 0.0)  # the mistake: e^0 = 1, nothing is blocked
        elif not mask_after:
            scores = np.where(allowed, scores, -np.inf)  # (n, n) broadcasts over batch and heads
    with np.errstate(invalid="ignore", over="ignore"):  # an inverted mask can block a whole row: NaN
        if stable:
            weights = _softmax(scores, axis=axis)  # (..., h, n, n)
        else:
            e = np.exp(scores)                     # the mistake: exp(2000) = inf, inf / inf = NaN
            weights = e / e.sum(axis=axis, keepdims=True)
    if mask_after and allowed is not None:
        weights = weights * allowed        # the mistake: zeroed after the softmax
        if renormalise:                    # ... and divided by the row sum: 0 / 0 when it underflowed
            with np.errstate(invalid="ignore"):
                weights = weights / weights.sum(axis=-1, keepdims=True)
    if transpose_weights:
        weights = np.swapaxes(weights, -1, -2)  # the mistake: weights.T @ v (fits only because L = S)
    out = weights @ v                      # (..., h, n, n) @ (..., h, n, d_head) -> (..., h, n, d_head)
    if merge == "transpose":
        out = np.swapaxes(out, -2, -3)     # (..., n, h, d_head)
    elif merge == "interleaved":
        out = np.moveaxis(out, -3, -1)     # (..., n, d_head, h): the inverse of the interleaved split
    out = out.reshape(*batch, n, d_model)  # concatenate the heads -> (..., n, d_model)
    return out @ w_o if use_w_o else out


def _mha_reference(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    return _mha(x, w_q, w_k, w_v, w_o, num_heads, mask)


def _mha_cases(rng):
    n = rng.standard_normal

    def weights(d):
        return tuple(n((d, d)) / np.sqrt(d) for _ in range(4))

    causal5 = np.tril(np.ones((5, 5), dtype=bool))
    band = np.abs(np.arange(7)[:, None] - np.arange(7)[None, :]) <= 2  # every row has a True
    band[:, 6] = False  # the last key is padding
    # token 0 may see only itself (score ~30 * 30 / sqrt(2) = 636) but token 3's key scores
    # ~30 * 100 / sqrt(2) = 2121 against it: a softmax before the mask underflows row 0 to 0,
    # and exp(2121) overflows
    far_future = np.zeros((4, 4))
    far_future[:, 0] = [30.0, 1.0, -2.0, 100.0] + rng.uniform(-0.5, 0.5, 4)
    far_future[:, 2] = 2 * n(4)
    return [
        Case(args=(n((5, 8)), *weights(8), 2), label="n = 5, d_model = 8, 2 heads"),
        Case(args=(n((2, 6, 12)), *weights(12), 3), label="batched, 3 heads"),
        Case(args=(2 * n((4, 8)), *weights(8), 4), label="4 heads of width 2"),
        Case(args=(n((1, 3, 16)), *weights(16), 1), label="one head"),
        Case(args=(n((5, 12)), *weights(12), 3), kwargs={"mask": causal5},
             label="causal mask, 3 heads"),
        Case(args=(n((2, 7, 8)), *weights(8), 2), kwargs={"mask": band},
             label="band mask with a padded key, batched"),
        Case(args=(far_future, *(np.eye(4),) * 4, 2), kwargs={"mask": np.tril(np.ones((4, 4), dtype=bool))},
             label="causal mask, a future token with a very large score"),
    ]


register(Exercise(
    name="multi_head_attention",
    chapter="05_multihead",
    prompt="Multi-head self-attention: project x with w_q, w_k, w_v (as x @ w), split into num_heads heads, "
           "attend per head with scale 1/√d_head (mask: bool (n, n), True = may attend), concatenate, "
           "then project with w_o.",
    stub='''def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    """Multi-head self-attention.

    x: (..., n, d_model); w_q, w_k, w_v, w_o: (d_model, d_model), used as x @ w;
    mask: None or an (n, n) bool array, True where query i may attend to key j
    (every row has at least one True). Returns (..., n, d_model).
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_mha_reference,
    cases=_mha_cases,
    mistakes=[
        Mistake("reshape_without_transpose", "Heads split with a reshape alone",
                "Reshaping (..., n, d_model) straight to (..., h, n, d_head) mixes tokens: a 'token' of a "
                "head is made of pieces of several tokens. Cut each token's row into heads while the "
                "token axis stays where it is, then move the head axis in front of the tokens (and undo "
                "both steps when you concatenate the heads).",
                fn=lambda *a, **kw: _mha(*a, **kw, split=_split_reshape_only, merge="reshape"),
                fix="Reshape to (..., n, h, d_head) and swap axes -2 and -3; to merge, swap them back "
                    "and reshape to (..., n, d_model)."),
        Mistake("merge_without_transpose", "Heads concatenated with a reshape alone",
                "The split is right, but reshaping (..., h, n, d_head) straight to (..., n, d_model) "
                "glues heads together in memory order, so output row i holds pieces of several tokens. "
                "Put the token axis back in front of the heads before joining them.",
                fn=lambda *a, **kw: _mha(*a, **kw, merge="reshape"),
                fix="np.swapaxes(out, -2, -3).reshape(*batch, n, d_model)."),
        Mistake("interleaved_columns", "Heads take interleaved columns",
                "Your head k takes columns k, k+h, k+2h, ... of the projections. Each head owns a "
                "contiguous block of d_head columns (the paper's Concat, nn.MultiheadAttention's weight "
                "layout), so the same weights give different heads.",
                fn=lambda *a, **kw: _mha(*a, **kw, split=_split_interleaved, merge="interleaved"),
                fix="Split with reshape(..., n, h, d_head), not reshape(..., n, d_head, h)."),
        Mistake("scale_by_d_model", "Scores scaled by √d_model instead of √d_head",
                "Each head's dot product has d_head terms, so its variance is d_head and the scale is "
                "set by the head's width, d_head = d_model / num_heads. Dividing by √d_model makes every "
                "head's softmax too flat.",
                fn=lambda *a, **kw: _mha(*a, **kw, scale="model"),
                fix="Divide the scores by np.sqrt(d_model // num_heads)."),
        Mistake("no_scale", "The scores are not scaled",
                "A head's scores have variance d_head; without the scale (chapter 3) the softmax "
                "saturates as the head width grows.",
                fn=lambda *a, **kw: _mha(*a, **kw, scale="none"),
                fix="Divide q @ kᵀ by np.sqrt(d_head) before the softmax."),
        Mistake("forgot_w_o", "W_O forgotten",
                "You returned the concatenated heads. Multi-head attention ends with the output "
                "projection, which lets the heads' results mix.",
                fn=lambda *a, **kw: _mha(*a, **kw, use_w_o=False),
                fix="Return concat @ w_o."),
        Mistake("softmax_wrong_axis", "Softmax over the wrong axis",
                "The softmax must normalise over the keys, so every query's weights sum to 1; you "
                "normalised over the queries.",
                fn=lambda *a, **kw: _mha(*a, **kw, axis=-2),
                fix="Softmax along the last axis, axis=-1."),
        Mistake("softmax_overflow", "The softmax overflows on large scores",
                "Right for small scores, NaN for large ones: exp of a score above ~709 is inf, and "
                "inf / inf is NaN. Shift each row of scores by its largest value before exp (chapter 2's "
                "stable softmax).",
                fn=lambda *a, **kw: _mha(*a, **kw, stable=False),
                fix="scores - scores.max(axis=-1, keepdims=True) before np.exp (after the mask: the "
                    "blocked -inf scores do not count)."),
        Mistake("mask_ignored", "The mask is ignored",
                "When a mask is given, the blocked keys must get a score whose exponential is exactly "
                "0, before the softmax; the (n, n) mask broadcasts over batch and heads.",
                fn=lambda *a, **kw: _mha(*a, **kw, use_mask=False),
                fix="scores = np.where(mask, scores, -np.inf) before the softmax."),
        Mistake("mask_inverted", "The mask is used the wrong way round",
                "You blocked the scores where the mask is True. In this course (and in PyTorch's "
                "scaled_dot_product_attention) True means 'may attend': keep the score where the mask is "
                "True and block it where it is False. (nn.MultiheadAttention is the API where True "
                "means blocked.)",
                fn=lambda *a, **kw: _mha(*a, **kw, invert_mask=True),
                fix="np.where(mask, scores, -np.inf), not np.where(mask, -np.inf, scores)."),
        Mistake("weights_transposed", "The values are multiplied by the transposed weights",
                "Output row i must be Σ_j w_ij v_j, the weights of query i over the keys j; you used the "
                "transposed weights. The transpose only has the right shape because self-attention has "
                "as many keys as queries.",
                fn=lambda *a, **kw: _mha(*a, **kw, transpose_weights=True),
                fix="weights @ v, not np.swapaxes(weights, -1, -2) @ v."),
        Mistake("bool_mask_added", "The bool mask is added to the scores",
                "You added the bool mask to the scores: True counts as +1 and False as 0, so nothing "
                "is blocked; the allowed scores are merely raised by 1. A bool mask selects: keep the "
                "allowed scores and replace the blocked ones (an additive mask would hold 0 and −∞, "
                "not 1 and 0).",
                fn=lambda *a, **kw: _mha(*a, **kw, add_mask=True),
                fix="np.where(mask, scores, -np.inf)."),
        Mistake("mask_zero_fill", "Blocked scores set to 0",
                "A score of 0 does not block a key: e^0 = 1, so a blocked key still gets as much weight "
                "as an allowed key with score 0. The blocked scores need a value whose exponential is "
                "exactly 0 (chapter 4).",
                fn=lambda *a, **kw: _mha(*a, **kw, zero_fill=True),
                fix="np.where(mask, scores, -np.inf), not np.where(mask, scores, 0) or scores * mask."),
        Mistake("renormalised_after_softmax", "Masked after the softmax, then renormalised",
                "Zeroing the blocked weights and dividing by the row sum repairs the algebra but not the "
                "numerics: the softmax subtracted the row maximum, which can belong to a blocked key. "
                "Beside a blocked score far above the allowed ones every allowed weight underflows to 0 "
                "and the row becomes 0 / 0 = NaN. Block the scores before the softmax (chapter 4).",
                fn=lambda *a, **kw: _mha(*a, **kw, mask_after=True, renormalise=True),
                fix="scores = np.where(mask, scores, -np.inf), then the softmax; no division afterwards."),
        Mistake("mask_after_softmax", "The mask is applied after the softmax",
                "You zeroed the blocked weights after the softmax, so each row of weights sums to less "
                "than 1 and the blocked keys still sit in the softmax's normaliser (a future token "
                "changes the past). Block the scores before the softmax, then normalise (chapter 4).",
                fn=lambda *a, **kw: _mha(*a, **kw, mask_after=True),
                fix="scores = np.where(mask, scores, -np.inf) before the softmax."),
    ],
    hint="Follow the chapter's shape table one row at a time: project, split each projection into "
         "heads, attend inside every head (which width sets the scale?), put the heads back side by side "
         "in token order, and let w_o mix them. Print the shape after every step.",
    hints=("Shapes: x @ w is (..., n, d_model); split into (..., h, n, d_head); scores (..., h, n, n) "
           "scaled by √d_head, blocked with −∞ before a stable softmax over the keys; weights times "
           "values (..., h, n, d_head); heads moved back behind the tokens and joined to (..., n, d_model); "
           "then w_o.",
           "q, k, v = split_heads(x @ w, h) for each w; attention per head with scale 1/sqrt(d_head) and "
           "the mask; swap axes -2 and -3 back, reshape to (..., n, d_model), multiply by w_o."),
    rtol=1e-4,
    atol=1e-5,  # outputs of order 1: a float32 answer (rounding ~1e-6) passes
    forbidden=MULTIHEAD_SHORTCUTS,
))


# --------------------------------------------------------------------------- head_scores

def _head_scores(x, w_q, w_k, num_heads, *, scale="sqrt_head", split=_split_reference, transpose=False,
                 softmax=False):
    """Every head's scaled scores and, through the keywords, each catalogued mistake."""
    d_model = x.shape[-1]
    d_head = d_model // num_heads
    q = split(x @ w_q, num_heads)            # (..., h, n, d_head)
    k = split(x @ w_k, num_heads)            # (..., h, n, d_head)
    scores = q @ np.swapaxes(k, -1, -2)      # (..., h, n, d_head) @ (..., h, d_head, n) -> (..., h, n, n)
    divisor = {"sqrt_head": np.sqrt(d_head), "sqrt_model": np.sqrt(d_model), "none": 1.0,
               "head": d_head, "sqrt_heads": np.sqrt(num_heads)}[scale]
    scores = scores / divisor
    if transpose:                            # the mistake: k @ qᵀ, keys along the rows
        scores = np.swapaxes(scores, -1, -2)
    return _softmax(scores) if softmax else scores


def _head_scores_reference(x, w_q, w_k, num_heads):
    return _head_scores(x, w_q, w_k, num_heads)


def _head_scores_cases(rng):
    n = rng.standard_normal

    def w(d):
        return n((d, d)) / np.sqrt(d)

    return [
        Case(args=(n((5, 8)), w(8), w(8), 2), label="d_model = 8, 2 heads of width 4"),
        Case(args=(n((2, 4, 18)), w(18), w(18), 2), label="batched, 2 heads of width 9"),
        Case(args=(n((3, 12)), w(12), w(12), 3), label="3 heads of width 4"),
        Case(args=(n((6, 32)), w(32), w(32), 8), label="8 heads of width 4"),
        Case(args=(n((4, 6)), w(6), w(6), 1), label="one head of width 6"),
    ]


register(Exercise(
    name="head_scores",
    chapter="05_multihead",
    prompt="Return every head's scaled attention scores, (..., num_heads, n, n), with the scale that "
           "gives each score variance 1 when the components of each head's queries and keys are "
           "independent with variance 1.",
    stub='''def head_scores(x, w_q, w_k, num_heads):
    """x: (..., n, d_model); w_q, w_k: (d_model, d_model), used as x @ w.
    Split the queries and keys into num_heads heads (head k owns the columns
    k*d_head : (k+1)*d_head) and return each head's scaled scores,
    (..., num_heads, n, n). Choose the scale so that a score has variance 1
    when the components of the head's q and k are independent with variance 1."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_head_scores_reference,
    cases=_head_scores_cases,
    mistakes=[
        Mistake("scale_by_d_model", "Scaled by √d_model instead of √d_head",
                "The variance of a dot product grows with the number of terms it sums, and a head's "
                "q · k sums d_head = d_model / num_heads terms, not d_model. Dividing by √d_model makes "
                "the scores of every head too small (their variance is 1/num_heads) and each softmax "
                "too flat. Divide by the square root of the head's own width.",
                fn=lambda *a: _head_scores(*a, scale="sqrt_model"),
                fix="Divide by np.sqrt(d_model // num_heads)."),
        Mistake("no_scale", "The scores are not scaled",
                "Unscaled, a head's score has variance d_head, not 1 (chapter 3), and the softmax "
                "saturates as heads get wider. Divide by the square root of the number of terms in "
                "one head's dot product.",
                fn=lambda *a: _head_scores(*a, scale="none"),
                fix="q @ np.swapaxes(k, -1, -2) / np.sqrt(d_head)."),
        Mistake("scale_by_d_head", "Divided by d_head instead of √d_head",
                "Dividing by d_head shrinks the standard deviation from √d_head to 1/√d_head. The "
                "variance of the score is d_head, so to bring it to 1 divide by its standard "
                "deviation.",
                fn=lambda *a: _head_scores(*a, scale="head"),
                fix="Divide by np.sqrt(d_head), not by d_head."),
        Mistake("scale_by_num_heads", "Scaled by √num_heads",
                "The number of heads does not enter one head's dot product; the number of terms in it "
                "does, d_head = d_model / num_heads. (In 'd_model = 512, 8 heads' √64 = 8 equals the "
                "number of heads only by coincidence.)",
                fn=lambda *a: _head_scores(*a, scale="sqrt_heads"),
                fix="Divide by np.sqrt(d_model // num_heads), not np.sqrt(num_heads)."),
        Mistake("reshape_without_transpose", "Heads split with a reshape alone",
                "Reshaping (..., n, d_model) straight to (..., h, n, d_head) has the right shape but "
                "mixes tokens: a row of a head is stitched from pieces of several tokens, so score "
                "[i, j] no longer compares token i with token j. Cut each token's row into heads while "
                "the token axis stays where it is, then move the head axis in front.",
                fn=lambda *a: _head_scores(*a, split=_split_reshape_only),
                fix="Reshape to (..., n, h, d_head), then swap axes -2 and -3."),
        Mistake("interleaved_columns", "Heads take interleaved columns",
                "Your head k takes columns k, k+h, k+2h, ... of the queries and keys. Each head owns a "
                "contiguous block of d_head columns.",
                fn=lambda *a: _head_scores(*a, split=_split_interleaved),
                fix="Split with reshape(..., n, h, d_head), not reshape(..., n, d_head, h)."),
        Mistake("scores_transposed", "The scores are transposed (keys along the rows)",
                "Score [i, j] compares query i with key j: queries along the rows and keys along the "
                "columns. You computed the transpose, so the softmax over the last axis would "
                "normalise over the queries instead of the keys.",
                fn=lambda *a: _head_scores(*a, transpose=True),
                fix="q @ np.swapaxes(k, -1, -2), not k @ np.swapaxes(q, -1, -2)."),
        Mistake("returned_weights", "The softmax is already applied",
                "You returned the attention weights. This function stops one step earlier: return the "
                "scaled scores themselves; the softmax comes next in attention, not here.",
                fn=lambda *a: _head_scores(*a, softmax=True),
                fix="Return q @ np.swapaxes(k, -1, -2) / np.sqrt(d_head), without the softmax."),
    ],
    hint="Chapter 3 found the variance of a dot product of unit-variance components: what is it for the "
         "dot products inside one head here, and which divisor brings it back to 1?",
    hints=("One head's dot product sums d_head = d_model / num_heads products, so its variance is d_head "
           "and its standard deviation √d_head. Split the queries and the keys into heads as in the "
           "previous exercise, then multiply every head's queries by its transposed keys.",
           "q = split_heads(x @ w_q, h), k = split_heads(x @ w_k, h); "
           "return q @ swapaxes(k, -1, -2) / sqrt(d_head)."),
    rtol=1e-4, atol=1e-5,  # scores of order 1: a float32 answer passes
))
