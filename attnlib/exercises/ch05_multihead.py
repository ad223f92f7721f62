"""Exercises of chapter 05 (multi-head attention): ``split_heads``, ``multi_head_attention``.

Conventions (those of the chapter and of :func:`attnlib.multi_head_attention`): ``x`` is
``(..., n, d_model)``; weights are ``(d_model, d_model)`` matrices used as ``x @ w``; head
``k`` owns the contiguous columns ``k * d_head : (k + 1) * d_head`` with
``d_head = d_model // num_heads``; a bool mask is True where a query may attend. The
reference solutions are plain NumPy, independent of :mod:`attnlib.multihead`.
"""
from __future__ import annotations

import numpy as np

from ._core import MULTIHEAD_SHORTCUTS, Case, Exercise, Mistake, register

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


def _split_no_transpose(x, num_heads):
    *batch, n, d_model = x.shape
    return x.reshape(*batch, n, num_heads, d_model // num_heads)  # (..., n, h, d_head)


def _split_cases():
    rng = np.random.default_rng(5)
    return [
        Case(args=(rng.standard_normal((5, 8)), 2), label="n = 5, d_model = 8, 2 heads"),
        Case(args=(rng.standard_normal((2, 3, 12)), 3), label="batched, 3 heads"),
        Case(args=(rng.standard_normal((4, 4)), 4), label="n = h = 4, d_head = 1"),
        Case(args=(rng.standard_normal((1, 6)), 2), label="one token"),
        Case(args=(rng.standard_normal((2, 7, 6)), 1), label="one head"),
        Case(args=(rng.standard_normal((3, 5, 16)), 4), label="batched, 4 heads"),
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
                "x.reshape(..., h, n, d_head) has the right shape but reads the numbers in memory order, "
                "so one 'token' row of a head is stitched from pieces of several tokens (the tokens get "
                "mixed). Reshape to (..., n, h, d_head) first, then swap the n and h axes "
                "(x.swapaxes(-2, -3) or .transpose(-2, -3) in torch).",
                fn=_split_reshape_only),
        Mistake("interleaved_columns", "Heads take interleaved columns",
                "Your head k takes columns k, k+h, k+2h, ... (you reshaped to (..., n, d_head, h)). The "
                "convention (the paper's Concat, nn.MultiheadAttention's weight layout) gives each head a "
                "contiguous block of d_head columns: reshape to (..., n, h, d_head).",
                fn=_split_interleaved),
        Mistake("forgot_transpose", "The head axis is not moved in front of the tokens",
                "You returned (..., n, h, d_head). Attention runs per head over the n axis, which must "
                "be the second-to-last: swap axes -2 and -3 to get (..., h, n, d_head).",
                fn=_split_no_transpose),
        Mistake("hardcoded_axes", "Axes counted from the front (breaks with a batch axis)",
                "Your split is right for a single (n, d_model) sequence, but you swapped axes 0 and 1 "
                "(e.g. x.transpose(1, 0, 2)), which for a batched (B, n, d_model) input swaps the batch "
                "and token axes instead. Count from the end: swap axes -2 and -3 "
                "(np.swapaxes(x, -2, -3)), so any number of leading batch axes works.",
                fn=_split_hardcoded_axes),
    ],
    hint="Two steps: x.reshape(*x.shape[:-1], num_heads, d_head), then swap the token and head axes.",
))


# --------------------------------------------------------------------------- multi_head_attention

def _softmax(s, axis=-1):
    s = s - s.max(axis=axis, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=axis, keepdims=True)


def _mha(x, w_q, w_k, w_v, w_o, num_heads, mask=None, *, split=_split_reference, merge="transpose",
         scale="head", use_w_o=True, axis=-1, use_mask=True, invert_mask=False):
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
    if mask is not None and use_mask:
        allowed = np.asarray(mask, dtype=bool)
        allowed = ~allowed if invert_mask else allowed
        scores = np.where(allowed, scores, -np.inf)  # (n, n) broadcasts over batch and heads
    with np.errstate(invalid="ignore"):    # an inverted mask can block a whole row: NaN
        weights = _softmax(scores, axis=axis)  # (..., h, n, n)
    out = weights @ v                      # (..., h, n, n) @ (..., h, n, d_head) -> (..., h, n, d_head)
    if merge == "transpose":
        out = np.swapaxes(out, -2, -3)     # (..., n, h, d_head)
    out = out.reshape(*batch, n, d_model)  # concatenate the heads -> (..., n, d_model)
    return out @ w_o if use_w_o else out


def _mha_reference(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    return _mha(x, w_q, w_k, w_v, w_o, num_heads, mask)


def _mha_cases():
    rng = np.random.default_rng(7)

    def weights(d):
        return tuple(rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(4))

    causal5 = np.tril(np.ones((5, 5), dtype=bool))
    band = np.abs(np.arange(7)[:, None] - np.arange(7)[None, :]) <= 2  # every row has a True
    band[:, 6] = False  # the last key is padding
    return [
        Case(args=(rng.standard_normal((5, 8)), *weights(8), 2), label="n = 5, d_model = 8, 2 heads"),
        Case(args=(rng.standard_normal((2, 6, 12)), *weights(12), 3), label="batched, 3 heads"),
        Case(args=(2 * rng.standard_normal((4, 8)), *weights(8), 4), label="4 heads of width 2"),
        Case(args=(rng.standard_normal((1, 3, 16)), *weights(16), 1), label="one head"),
        Case(args=(rng.standard_normal((5, 12)), *weights(12), 3), kwargs={"mask": causal5},
             label="causal mask, 3 heads"),
        Case(args=(rng.standard_normal((2, 7, 8)), *weights(8), 2), kwargs={"mask": band},
             label="band mask with a padded key, batched"),
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
                "head is made of pieces of several tokens. Reshape to (..., n, h, d_head) and swap axes "
                "-2 and -3 (and undo both steps when you concatenate the heads).",
                fn=lambda *a, **kw: _mha(*a, **kw, split=_split_reshape_only, merge="reshape")),
        Mistake("merge_without_transpose", "Heads concatenated with a reshape alone",
                "The split is right, but (..., h, n, d_head).reshape(..., n, d_model) glues heads "
                "together in memory order, so output row i holds pieces of several tokens. Swap axes -2 "
                "and -3 back to (..., n, h, d_head) before the reshape.",
                fn=lambda *a, **kw: _mha(*a, **kw, merge="reshape")),
        Mistake("scale_by_d_model", "Scores scaled by √d_model instead of √d_head",
                "Each head's dot product has d_head terms, so its variance is d_head and the scale is "
                "1/√d_head with d_head = d_model / num_heads. Dividing by √d_model makes every head's "
                "softmax too flat.",
                fn=lambda *a, **kw: _mha(*a, **kw, scale="model")),
        Mistake("no_scale", "The scores are not scaled",
                "Divide q @ kᵀ by √d_head before the softmax (chapter 3), otherwise the softmax "
                "saturates as the head width grows.",
                fn=lambda *a, **kw: _mha(*a, **kw, scale="none")),
        Mistake("forgot_w_o", "W_O forgotten",
                "You returned the concatenated heads. Multi-head attention ends with the output "
                "projection: return concat @ w_o, which lets the heads' results mix.",
                fn=lambda *a, **kw: _mha(*a, **kw, use_w_o=False)),
        Mistake("softmax_wrong_axis", "Softmax over the wrong axis",
                "The softmax must normalise over the keys (the last axis, axis=-1), so every query's "
                "weights sum to 1; you normalised over the queries (axis=-2).",
                fn=lambda *a, **kw: _mha(*a, **kw, axis=-2)),
        Mistake("mask_ignored", "The mask is ignored",
                "When a mask is given, set the blocked scores (mask False) to -inf before the softmax, "
                "e.g. np.where(mask, scores, -np.inf); the (n, n) mask broadcasts over batch and heads.",
                fn=lambda *a, **kw: _mha(*a, **kw, use_mask=False)),
        Mistake("mask_inverted", "The mask is used the wrong way round",
                "You blocked the scores where the mask is True. In this course (and in PyTorch's "
                "scaled_dot_product_attention) True means 'may attend': keep the score where mask "
                "is True and set it to -inf where it is False, np.where(mask, scores, -np.inf). "
                "(nn.MultiheadAttention is the API where True means blocked.)",
                fn=lambda *a, **kw: _mha(*a, **kw, invert_mask=True)),
    ],
    hint="q = x @ w_q, then (..., n, h, d_head) -> (..., h, n, d_head); scores / √d_head; softmax over "
         "keys; weights @ v; back to (..., n, d_model); @ w_o.",
    rtol=1e-5,
    atol=1e-6,
    forbidden=MULTIHEAD_SHORTCUTS,
))
