"""Exercises of chapter 09 (watch attention learn): ``prev_token_score``,
``induction_score``, ``ablate_head`` and ``train_loop`` (the training loop: next-token
targets, the loss, the gradient, the step). ``repeat_loss`` is chapter 10's
(:mod:`attnlib.exercises.catalogue.ch10_trained_claims`).

Conventions (those of the chapter and of :mod:`attnlib.instruments.train`): attention weights are
``(..., L, L)`` NumPy arrays with rows as queries; a repeated sequence has a block of
``period`` tokens that repeats, so the token after position ``i`` (``i >= period - 1``)
equals the token after position ``i - period``. Per-head outputs are ``(N, h, L, d_head)``
and ``W_O`` is ``(h * d_head, d_model)``, as in :class:`attnlib.models.gpt.CausalSelfAttention`.
The references are plain NumPy, independent of :mod:`attnlib.instruments.train` and :mod:`attnlib.models.gpt`,
except ``train_loop``'s, which trains the chapter's model (built by
:func:`attnlib.instruments.train.model_from_weights`, as the learner's is) with torch's autograd
and its own loss and step.
"""
from __future__ import annotations

import numpy as np

from ...i18n import N_
from .._model import Case, Exercise, Mistake, register
from ._ref import as_np, f64

__all__ = []  # exercises register themselves; nothing to import from here


def _diag_mean(w, offset, first, *, reduce="mean", transpose=False):
    w = f64(w)
    if transpose:
        w = np.swapaxes(w, -1, -2)
    L = w.shape[-1]
    i = np.arange(first, L)
    j = i + offset
    ok = (j >= 0) & (j < L)
    vals = w[..., i[ok], j[ok]]
    return vals.sum(-1) if reduce == "sum" else _mean_last(vals)


def _mean_last(vals):
    """The mean over the last axis; NaN (without a warning) where that axis is empty."""
    return vals.mean(-1) if vals.shape[-1] else np.full(vals.shape[:-1], np.nan)


def _causal_weights(rng, shape, sharp=None, causal=True):
    """Random attention weights ``shape + (L, L)``, rows summing to 1, causal unless
    ``causal=False`` (an encoder's heads); ``sharp = (offset, first)`` puts extra weight on
    that diagonal so that the scores differ."""
    *batch, L, _ = shape
    s = rng.standard_normal(shape)
    if sharp is not None:
        offset, first = sharp
        i = np.arange(first, L)
        s[..., i, i + offset] += 3.0
    if causal:
        s = np.where(np.tril(np.ones((L, L), dtype=bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _default_axes(offset, drop=0):
    """np.diagonal(w, offset) with its default axes 0 and 1: right for one (L, L) head, but
    for (..., L, L) it takes the diagonal of the first two (batch or head) axes."""
    def fn(w, *_):
        d = np.diagonal(f64(w), offset if not callable(offset) else offset(*_))
        return _mean_last(d[..., drop:])
    return fn


# --------------------------------------------------------------------------- prev_token_score

def _prev_reference(weights):
    return _diag_mean(weights, -1, 1)


def _prev_wraps(weights):
    w = f64(weights)
    i = np.arange(w.shape[-1])
    return w[..., i, i - 1].mean(-1)  # i = 0 reads w[0, -1], the LAST key


def _prev_cases(rng):
    return [
        Case(args=(_causal_weights(rng, (6, 6), sharp=(-1, 1)),), label="one head, L = 6, a previous-token head"),
        Case(args=(_causal_weights(rng, (4, 9, 9)),), label="4 heads, L = 9"),
        Case(args=(_causal_weights(rng, (2, 3, 7, 7), sharp=(-1, 1)),), label="batch of 2, 3 heads, L = 7"),
        Case(args=(np.tril(np.ones((5, 5))) / np.arange(1, 6)[:, None],), label="uniform causal weights, L = 5"),
        Case(args=(_causal_weights(rng, (2, 12, 12), sharp=(0, 0)),), label="2 heads that look at themselves"),
        Case(args=(_causal_weights(rng, (3, 8, 8), causal=False),), label="3 heads without a causal mask"),
    ]


register(Exercise(
    name="prev_token_score",
    chapter="09_learning",
    prompt="Return the mean attention weight from query i to key i - 1 over i = 1 ... L - 1: how much a "
           "head looks at the previous token. weights is a NumPy array (..., L, L), rows are queries; "
           "return (...).",
    stub='''def prev_token_score(weights):
    """weights: (..., L, L) NumPy array, the attention weights of one or more heads,
    row i = query i (to use torch, convert first: torch.as_tensor(weights)).
    Returns (...): the mean of weights[..., i, i - 1] over i = 1 ... L - 1."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_prev_reference,
    cases=_prev_cases,
    mistakes=[
        Mistake("diagonal", "The diagonal itself",
                "You averaged weights[..., i, i], how much each token looks at itself. The previous token "
                "of query i is key i - 1: the diagonal one step below the main one.",
                fn=lambda w: _diag_mean(w, 0, 0),
                fix="np.diagonal(weights, offset=-1, axis1=-2, axis2=-1).mean(-1)."),
        Mistake("future", "The diagonal above (the future), or rows and columns swapped",
                "You read weights[..., i, i + 1], the key after the query (or weights[..., i - 1, i], which "
                "averages to the same numbers); under a causal mask these weights are always 0. Rows are "
                "queries and columns keys: the previous-token weight of query i lies one column to the "
                "left of the diagonal.",
                fn=lambda w: _diag_mean(w, 1, 0),
                variants=(lambda w: _diag_mean(w, -1, 1, transpose=True),),
                fix="Use offset=-1 (below the diagonal) with axis1=-2 (queries) and axis2=-1 (keys)."),
        Mistake("diagonal_default_axes", "np.diagonal with its default axes",
                "Your answer is right for one (L, L) head but has the wrong shape for a batch: "
                "np.diagonal (and the array method .diagonal) takes the diagonal of the FIRST two axes "
                "unless told otherwise, and for (heads, L, L) those are the head axis and the query axis. "
                "Name the last two axes, the queries and the keys.",
                fn=_default_axes(-1),
                fix="np.diagonal(weights, offset=-1, axis1=-2, axis2=-1) (in torch: "
                    "torch.diagonal(t, offset=-1, dim1=-2, dim2=-1))."),
        Mistake("sum", "A sum instead of a mean",
                "You added the L - 1 weights instead of averaging them, so the score grows with the "
                "sequence length and a perfect previous-token head scores L - 1 instead of 1. Divide by "
                "the number of queries scored.",
                fn=lambda w: _diag_mean(w, -1, 1, reduce="sum"),
                fix="Divide by L - 1, or use .mean(-1) on the L - 1 diagonal entries."),
        Mistake("includes_first", "The first query counted as a zero",
                "Query 0 has no previous token, so it is not scored: average over i = 1 ... L - 1 only. "
                "You divided by L (or padded query 0 with a 0), which pulls every score down.",
                fn=lambda w: _diag_mean(w, -1, 1, reduce="sum") / np.asarray(w).shape[-1],
                fix="The diagonal below the main one has L - 1 entries: take their mean."),
        Mistake("wraps_around", "Query 0 wraps around to the last key",
                "For i = 0, the index i - 1 = -1 is the LAST key in Python, not 'no key': you averaged "
                "weights[..., 0, -1] with the real previous-token weights. Under a causal mask it is 0 "
                "and only pulls the score down; without a mask it adds a weight that has nothing to do "
                "with the previous token. Query 0 has no previous token: leave it out.",
                fn=_prev_wraps,
                fix="Start at i = 1: i = np.arange(1, L); weights[..., i, i - 1].mean(-1)."),
    ],
    hint="Which entries of the (L, L) matrix hold 'query i looks at key i - 1'? They lie on one line "
         "parallel to the main diagonal. How many queries have a previous token, and which axes are "
         "the queries and the keys when there are batch and head axes in front?",
    hints=("The entries weights[..., i, i - 1] for i = 1 ... L - 1 form the diagonal one step below the "
           "main one, of the last two axes: L - 1 numbers per head. The score is their mean.",
           "np.diagonal with offset -1 over the axes -2 and -1, then the mean over the last axis."),
    rtol=1e-4, atol=1e-6,  # weights in [0, 1]: a float32 answer passes
    forbidden=("attnlib.instruments.train.prev_token_score", "attnlib.instruments.train.prev_token_weight",  # the chapter's instruments
               "attnlib.instruments.train._diagonal"),
))


# --------------------------------------------------------------------------- induction_score

def _ind_reference(weights, period):
    return _diag_mean(weights, 1 - period, period)


def _ind_cases(rng):
    return [
        Case(args=(_causal_weights(rng, (8, 8), sharp=(-3, 4)), 4), label="one head, L = 8, period 4, an induction head"),
        Case(args=(_causal_weights(rng, (3, 12, 12), sharp=(-4, 5)), 5), label="3 heads, L = 12, period 5"),
        Case(args=(_causal_weights(rng, (2, 2, 10, 10)), 3), label="batch of 2, 2 heads, L = 10, period 3"),
        Case(args=(_causal_weights(rng, (2, 9, 9), sharp=(-4, 4)), 4), label="2 heads that look at the previous copy of the token itself"),
        Case(args=(_causal_weights(rng, (11, 11), sharp=(-1, 1)), 6), label="a previous-token head, period 6"),
        Case(args=(_causal_weights(rng, (2, 10, 10), causal=False), 4), label="2 heads without a causal mask, period 4"),
    ]


register(Exercise(
    name="induction_score",
    chapter="09_learning",
    prompt="On a sequence whose block of `period` tokens repeats, return the mean weight from query i to key "
           "i - period + 1 (the token after the previous occurrence of the current token) over "
           "i = period ... L - 1. weights is a NumPy array (..., L, L); return (...).",
    stub='''def induction_score(weights, period):
    """weights: (..., L, L) NumPy array, the attention weights on a sequence whose block
    of `period` tokens repeats, row i = query i (to use torch, convert first:
    torch.as_tensor(weights)). Returns (...): the mean of weights[..., i, i - period + 1]
    over i = period ... L - 1."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_ind_reference,
    cases=_ind_cases,
    mistakes=[
        Mistake("duplicate_token", "The previous occurrence itself (key i - period)",
                "You measured attention to the earlier copy of the *current* token, a 'duplicate-token' "
                "head. An induction head looks one step further, at the token that came *after* that "
                "copy, because that is what comes next.",
                fn=lambda w, p: _diag_mean(w, -p, p),
                fix="Read key i - period + 1: offset 1 - period, not -period."),
        Mistake("includes_first_copy", "Queries of the first copy included",
                "Queries i < period have no earlier copy to look back to (their key i - period + 1 is the "
                "first token or lies before the sequence). Score only the queries of the repeats.",
                fn=lambda w, p: _diag_mean(w, 1 - p, p - 1),
                fix="Average over i = period ... L - 1: the diagonal with offset 1 - period starts at "
                    "query period - 1, so drop its first entry."),
        Mistake("diagonal", "The diagonal itself",
                "You averaged weights[..., i, i] (each token looking at itself). The induction key lies "
                "period - 1 keys behind the query.",
                fn=lambda w, p: _diag_mean(w, 0, p),
                fix="weights[..., i, i - period + 1] for i = period ... L - 1."),
        Mistake("future", "The diagonal above (the future)",
                "You read keys after the query, which a causal mask sets to 0. The induction key lies "
                "behind the query.",
                fn=lambda w, p: _diag_mean(w, p - 1, p),
                fix="Use offset 1 - period (below the diagonal), not period - 1."),
        Mistake("sum", "A sum instead of a mean",
                "You added the weights instead of averaging them, so the score grows with the number of "
                "repeated positions. Divide by the number of queries scored.",
                fn=lambda w, p: _diag_mean(w, 1 - p, p, reduce="sum"),
                fix="Divide by L - period, or take .mean(-1)."),
        Mistake("transposed", "Rows and columns swapped",
                "You read weights[..., i - period + 1, i], a query looking *forward*, which the causal "
                "mask blocks. Rows are queries, columns keys.",
                fn=lambda w, p: _diag_mean(w, 1 - p, p, transpose=True),
                fix="weights[..., i, i - period + 1]: the query index first."),
        Mistake("diagonal_default_axes", "np.diagonal with its default axes",
                "Your answer is right for one (L, L) head but has the wrong shape for a batch: "
                "np.diagonal takes the diagonal of the FIRST two axes unless told otherwise, and for "
                "(heads, L, L) those are the head axis and the query axis. Name the last two axes.",
                fn=_default_axes(lambda p: 1 - p, drop=1),
                fix="np.diagonal(weights, offset=1 - period, axis1=-2, axis2=-1)[..., 1:].mean(-1)."),
    ],
    hint="For each query of the repeat, find the key of the token that followed the previous copy of "
         "the current token: how far behind the query is it? Those keys form one diagonal of the last "
         "two axes; which queries have such a key?",
    hints=("The keys i - period + 1 for queries i = period ... L - 1 lie on the diagonal with offset "
           "1 - period of the axes -2 and -1. That diagonal starts one query too early, at "
           "i = period - 1.",
           "np.diagonal with offset 1 - period over the axes -2 and -1, drop its first entry, then take "
           "the mean over the last axis."),
    rtol=1e-4, atol=1e-6,  # weights in [0, 1]: a float32 answer passes
    forbidden=("attnlib.instruments.train.induction_score", "attnlib.instruments.train._diagonal"),  # the chapter's instrument
))


# --------------------------------------------------------------------------- ablate_head

def _ablate(heads, w_o, head, *, zero="head", merge="transpose", use_w_o=True, rescale=False,
            delete=False, mean=False):
    """The ablated layer output and, through the keywords, each catalogued mistake."""
    heads, w_o = f64(heads), f64(w_o)
    N, h, L, dh = heads.shape
    if delete:                                   # the head removed, W_O's first rows kept
        kept = np.delete(heads, head, axis=1)    # (N, h - 1, L, d_head)
        concat = np.swapaxes(kept, 1, 2).reshape(N, L, (h - 1) * dh)
        return concat @ w_o[: (h - 1) * dh]
    heads = heads.copy()
    if zero == "head":
        heads[:, head] = heads[:, head].mean(axis=1, keepdims=True) if mean else 0.0
    elif zero == "position":
        heads[:, :, head] = 0.0                  # the mistake: token `head` of every head
    elif zero == "batch":
        heads[head] = 0.0                        # the mistake: sequence `head` of the batch
    if rescale:
        heads = heads * h / (h - 1)              # the mistake: dropout's rescaling
    if merge == "transpose":
        concat = np.swapaxes(heads, 1, 2).reshape(N, L, h * dh)   # (N, L, h * d_head)
    else:
        concat = heads.reshape(N, L, h * dh)     # the mistake: tokens mixed
    if zero == "interleaved":
        concat[..., head::h] = 0.0               # the mistake: columns head, head + h, ...
    if not use_w_o:
        return concat
    out = concat @ w_o                           # (N, L, h * d_head) @ (h * d_head, d_model)
    if zero == "output":
        out[..., head * dh:(head + 1) * dh] = 0.0  # the mistake: columns of the OUTPUT zeroed
    return out


def _ablate_reference(heads, w_o, head):
    heads, w_o = f64(heads), f64(w_o)
    N, h, L, dh = heads.shape
    keep = np.ones((h, 1, 1))
    keep[head] = 0.0
    heads = heads * keep                                   # (N, h, L, d_head) * (h, 1, 1): head `head` -> 0
    concat = np.swapaxes(heads, 1, 2).reshape(N, L, h * dh)  # (N, L, h, d_head) -> (N, L, h * d_head)
    return concat @ w_o                                    # (N, L, h * d_head) @ (h * d_head, d_model)


def _ablate_in_place(heads, w_o, head):
    heads[:, head] = 0                                     # changes the caller's array
    N, h, L, dh = heads.shape
    return np.swapaxes(heads, 1, 2).reshape(N, L, h * dh) @ w_o


def _ablate_cases(rng):
    n = rng.standard_normal

    def case(N, h, L, dh, head, label):
        return Case(args=(n((N, h, L, dh)), n((h * dh, h * dh)) / np.sqrt(h * dh), head), label=label)

    return [
        case(2, 4, 5, 3, int(rng.integers(1, 3)), N_("N = 2, 4 heads of width 3, L = 5, a middle head")),
        case(1, 2, 3, 4, 0, N_("one sequence, 2 heads, the first one switched off")),
        case(3, 3, 4, 2, 2, N_("N = 3, 3 heads, the last one switched off")),
        case(2, 6, 7, 2, int(rng.integers(1, 5)), N_("N = 2, 6 heads of width 2, L = 7")),
        case(2, 3, 1, 5, int(rng.integers(0, 2)), N_("a single token, 3 heads")),
    ]


register(Exercise(
    name="ablate_head",
    chapter="09_learning",
    prompt="Return the output of a multi-head attention layer with one head switched off (its output "
           "replaced by zeros before the heads are joined and multiplied by W_O), from the per-head "
           "outputs heads (N, h, L, d_head) and w_o (h * d_head, d_model).",
    stub='''def ablate_head(heads, w_o, head):
    """The output of a multi-head attention layer with head `head` switched off
    (an ablation: that head's output is replaced by zeros, the other heads are
    unchanged), to measure what the model loses without it.

    heads: (N, h, L, d_head) NumPy array, every head's output (its attention
        weights times its values) before the heads are joined.
    w_o: (h * d_head, d_model) NumPy array, the output projection W_O.
    head: int, the head to switch off (0 <= head < h).
    Returns (N, L, d_model): for every token the heads side by side (head k in
    columns k * d_head : (k + 1) * d_head), head `head` as zeros, times w_o.
    heads itself must be left unchanged. (To use torch, convert first:
    torch.as_tensor(heads).)
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_ablate_reference,
    cases=_ablate_cases,
    mistakes=[
        Mistake("not_ablated", "Nothing is switched off",
                "Your output is the layer's normal output: every head still contributes. The head "
                "given by `head` must contribute nothing, so its output is replaced by zeros before "
                "the heads are joined.",
                fn=lambda hd, w, k: _ablate(hd, w, k, zero="none"),
                fix="Multiply heads by a (h, 1, 1) array of ones with a 0 at `head`, or set "
                    "out[:, head] = 0 on a copy, before joining."),
        Mistake("zeroed_token", "A token is zeroed instead of a head",
                "You zeroed position `head` of every head (the third axis of (N, h, L, d_head)) instead "
                "of head `head` (the second axis). The heads are axis 1.",
                fn=lambda hd, w, k: _ablate(hd, w, k, zero="position"),
                fix="Zero heads[:, head] (all sequences, all tokens of that head), not heads[:, :, head]."),
        Mistake("zeroed_sequence", "A sequence of the batch is zeroed instead of a head",
                "You zeroed the first axis, the batch: sequence `head` lost every head. The heads are "
                "axis 1 of (N, h, L, d_head).",
                fn=lambda hd, w, k: _ablate(hd, w, k, zero="batch"),
                fix="Zero heads[:, head], not heads[head]."),
        Mistake("zeroed_output_columns", "Columns of the output zeroed after W_O",
                "You zeroed columns head * d_head ... of the layer's OUTPUT, after W_O. But W_O mixes the "
                "heads: every output column receives a share of every head, so the head still "
                "contributes everywhere else. Switch the head off before W_O, where its columns are its "
                "own.",
                fn=lambda hd, w, k: _ablate(hd, w, k, zero="output"),
                fix="Zero the head in heads (or in the joined array, columns head * d_head : "
                    "(head + 1) * d_head) and only then multiply by w_o."),
        Mistake("interleaved_columns", "Columns head, head + h, ... zeroed",
                "You zeroed every h-th column of the joined heads. Head k owns a contiguous block of "
                "d_head columns, k * d_head to (k + 1) * d_head (the layout the heads were joined in).",
                fn=lambda hd, w, k: _ablate(hd, w, k, zero="interleaved"),
                fix="concat[..., head * d_head:(head + 1) * d_head] = 0, or zero heads[:, head] before "
                    "joining."),
        Mistake("merge_without_transpose", "Heads joined with a reshape alone",
                "Reshaping (N, h, L, d_head) straight to (N, L, h * d_head) glues the heads together in "
                "memory order, so output row i holds pieces of several tokens. Put the token axis in "
                "front of the heads before joining them (chapter 5).",
                fn=lambda hd, w, k: _ablate(hd, w, k, merge="reshape"),
                fix="np.swapaxes(heads, 1, 2).reshape(N, L, h * d_head) @ w_o."),
        Mistake("rescaled", "The other heads are scaled up",
                "You multiplied the remaining heads by h / (h - 1), as dropout does during training. An "
                "ablation asks what the unchanged model does without one head: the other heads must "
                "stay exactly as they were.",
                fn=lambda hd, w, k: _ablate(hd, w, k, rescale=True),
                fix="Only zero the head; leave the others untouched."),
        Mistake("deleted_head", "The head deleted instead of zeroed",
                "You removed the head and multiplied the remaining h - 1 heads by the first rows of W_O. "
                "Row block k of W_O belongs to head k, so every head after the removed one is now "
                "multiplied by its neighbour's rows. Keep the layout: a head of zeros in its place.",
                fn=lambda hd, w, k: _ablate(hd, w, k, delete=True),
                fix="Zero heads[:, head] and keep all h heads; or drop rows head * d_head : "
                    "(head + 1) * d_head of w_o together with the head."),
        Mistake("mean_ablation", "The head replaced by its mean, not by zeros",
                "Replacing a head's output by its average over the tokens is another kind of ablation "
                "(mean ablation). This exercise, like model.ablated in the chapter, switches the head "
                "off: its output becomes zeros.",
                fn=lambda hd, w, k: _ablate(hd, w, k, mean=True),
                fix="Set the head's output to 0, not to its mean."),
        Mistake("forgot_w_o", "W_O forgotten",
                "You returned the joined heads. The layer's output is the joined heads multiplied by the "
                "output projection W_O.",
                fn=lambda hd, w, k: _ablate(hd, w, k, use_w_o=False),
                fix="Return concat @ w_o."),
        Mistake("mutates", "The caller's heads are changed",
                "Setting the head to zero inside the array you were given (heads[:, head] = 0) also "
                "switches it off for the caller, for every later use of that array: the next "
                "measurement would run with the head still ablated. Work on a copy, or multiply.",
                fn=_ablate_in_place, kind="mutates",
                fix="heads = heads.copy() before heads[:, head] = 0, or heads * keep with a (h, 1, 1) mask."),
    ],
    hint="Which axis of (N, h, L, d_head) holds the heads? Switch the chosen head off before anything "
         "mixes the heads, then join the heads token by token as in chapter 5 and apply W_O. Leave the "
         "caller's array as it was.",
    hints=("Make a copy (or multiply by a (h, 1, 1) array of ones with a single 0); zero the head along "
           "axis 1; move the token axis in front of the heads, (N, L, h, d_head), and merge the last "
           "two axes into h * d_head; then multiply by w_o.",
           "keep = ones((h, 1, 1)); keep[head] = 0; concat = swapaxes(heads * keep, 1, 2).reshape(N, L, "
           "h * d_head); return concat @ w_o."),
    rtol=1e-4, atol=1e-5,  # outputs of order 1: a float32 answer passes
))


# --------------------------------------------------------------------------- train_loop

def _train(weights, batches, lr, *, targets="next", loss="mean", zero_grad=True, step="descent",
           in_place=False):
    """``train_loop``'s reference and, through the keywords, each catalogued mistake: the
    mean next-token cross-entropy of every batch before its plain gradient-descent step."""
    import torch  # (here, not at the top: attnlib imports without torch, an optional extra)

    from ...instruments.train import model_from_weights

    model = model_from_weights(weights)                       # float64, a copy of the weights
    params = list(model.parameters())
    losses = []
    for batch in as_np(batches):
        b = torch.as_tensor(np.asarray(batch, dtype=np.int64))  # (N, L)
        if targets == "next":
            x, y = b[:, :-1], b[:, 1:]                        # read tokens 0 ... L - 2, predict 1 ... L - 1
        elif targets == "same":
            x, y = b, b                                       # the mistake: each position predicts itself
        elif targets == "rolled":
            x, y = b, torch.roll(b, -1, dims=1)               # the mistake: the last position predicts token 0
        else:
            x, y = b[:, 1:], b[:, :-1]                        # the mistake: each position predicts the one before
        logits = model(x)                                     # (N, L', V)
        if loss == "positions":                               # the mistake: classes on dim 1, the positions
            value = torch.nn.functional.cross_entropy(logits, y)
        else:
            logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)   # (N, L', V) log-probabilities
            nll = -logp.gather(-1, y[..., None])[..., 0]                     # (N, L')
            value = nll.sum() if loss == "sum" else nll.mean()
        losses.append(value.item())
        if zero_grad:
            for p in params:
                p.grad = None
        value.backward()
        with torch.no_grad():
            for p in params:
                if step == "descent":
                    p -= lr * p.grad
                elif step == "ascent":
                    p += lr * p.grad                          # the mistake: up the gradient
    if in_place:                                              # the mistake: the caller's weights trained
        for name, p in model.state_dict().items():
            weights[name][...] = p.numpy()
    return np.array(losses)


def _train_reference(weights, batches, lr):
    return _train(weights, batches, lr)


def _gpt_weights(rng, cfg):
    """Random weights ``{name: float64 array}`` of a GPT with config ``cfg``, drawn from ``rng``
    (never from torch's global generator, which the learner's notebook owns)."""
    import torch

    from ...models.gpt import GPT

    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in GPT(cfg).state_dict().items()}
    out = {}
    for name, shape in shapes.items():
        if name.endswith(".weight") and len(shape) == 1:      # a LayerNorm's gain
            out[name] = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            out[name] = 0.1 * rng.standard_normal(shape)
        elif name in ("tok_emb", "pos_emb"):
            out[name] = rng.standard_normal(shape)
        else:                                                 # (fan_in, fan_out), used as x @ w
            out[name] = rng.standard_normal(shape) / np.sqrt(shape[0])
    return out


def _train_cases(rng):
    from ...models.gpt import GPTConfig

    def case(K, N, L, V, layers, lr, label):
        cfg = GPTConfig(vocab_size=V, context_length=L, num_layers=layers, num_heads=2, d_model=8)
        batches = rng.integers(0, V, (K, N, L))
        return Case(args=(_gpt_weights(rng, cfg), batches, lr), label=label)

    return [
        case(3, 4, 8, 7, 1, 0.5, N_("3 batches of 4 sequences of 8 tokens, V = 7, one layer")),
        case(4, 3, 10, 11, 2, float(rng.choice([0.2, 0.3])),
             N_("4 batches of 3 sequences of 10 tokens, V = 11, two layers")),
        case(3, 5, 6, 5, 1, 1.0, N_("3 batches of 5 sequences of 6 tokens, V = 5, learning rate 1")),
        case(5, 1, 5, 9, 1, float(rng.choice([0.4, 0.6])), N_("5 batches of one sequence of 5 tokens, V = 9")),
    ]


register(Exercise(
    name="train_loop",
    chapter="09_learning",
    prompt="Train the model given by its weights on K batches of token sequences by plain gradient descent "
           "(w <- w - lr * dloss/dw after each batch) and return the K losses, each the mean next-token "
           "cross-entropy of its batch before its step.",
    stub='''def train_loop(weights, batches, lr):
    """Train a small GPT by plain gradient descent; return its training losses.

    weights: {name: NumPy array}, the model's initial weights, named as
        model.state_dict() names them; train.model_from_weights(weights) builds
        the model (a GPT holding a copy of them, float64).
    batches: (K, N, L) int NumPy array: K batches of N token sequences of L tokens
        (to use torch, convert first: torch.as_tensor(batches)).
    lr: float, the learning rate.
    Returns (K,): for each batch in turn, the mean next-token cross-entropy of the
    model on it, before its update; after each batch every weight w becomes
    w - lr * dloss/dw (torch.optim.SGD without momentum). weights must be left
    unchanged.
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_train_reference,
    cases=_train_cases,
    mistakes=[
        Mistake("unshifted_targets", "The targets are the inputs themselves",
                "You scored the logits at position t against token t, the token the model has just read: "
                "with the causal mask it can see it, so the task is to copy, not to predict. A language "
                "model's target at position t is the NEXT token, t + 1: shift the targets by one "
                "against the inputs, and drop the last position, which has no next token.",
                fn=lambda w, b, lr: _train(w, b, lr, targets="same"),
                fix="x = batch[:, :-1] (the inputs), y = batch[:, 1:] (the targets): the logits at "
                    "position t are scored against token t + 1."),
        Mistake("rolled_targets", "The targets rolled around: the last position predicts the first token",
                "Rolling the sequence by one makes the target of the last position the FIRST token, which "
                "does not follow it: a target that no model can learn enters the loss. The last token has "
                "no next token: leave that position out instead of wrapping around.",
                fn=lambda w, b, lr: _train(w, b, lr, targets="rolled"),
                fix="Slice instead of rolling: inputs batch[:, :-1], targets batch[:, 1:]."),
        Mistake("shifted_backwards", "The targets shifted the wrong way (the previous token)",
                "Your position t is scored against token t - 1, a token the model has already read: it "
                "learns to look back, not to predict. The target of position t is token t + 1, the one "
                "after it.",
                fn=lambda w, b, lr: _train(w, b, lr, targets="back"),
                fix="Inputs are the first L - 1 tokens, batch[:, :-1]; targets the last L - 1, batch[:, 1:]."),
        Mistake("loss_over_positions", "The cross-entropy taken over the positions, not the vocabulary",
                "torch's cross_entropy wants the classes on dimension 1; with logits of shape (N, L - 1, V) "
                "it took the L - 1 positions as the classes and normalised over them (when L - 1 happens to "
                "equal V it runs; otherwise it raises). The softmax of a next-token prediction is over the "
                "V tokens of the vocabulary, at each position on its own.",
                fn=lambda w, b, lr: _train(w, b, lr, loss="positions"),
                fix="Flatten the positions into the batch: F.cross_entropy(logits.reshape(-1, V), "
                    "y.reshape(-1)), or move the vocabulary to dim 1 with logits.transpose(1, 2)."),
        Mistake("summed_loss", "The loss summed over the tokens, not averaged",
                "You added the cross-entropies of all N (L - 1) predictions. The loss asked for is their "
                "mean, and the sum also makes every step N (L - 1) times longer: the learning rate would "
                "have to change with the batch size and the sequence length.",
                fn=lambda w, b, lr: _train(w, b, lr, loss="sum"),
                fix="Use the mean: F.cross_entropy's default reduction='mean', or nll.mean()."),
        Mistake("gradients_accumulate", "The gradients are never zeroed: they accumulate",
                "Your first two losses are right, then they drift: backward() ADDS to each weight's .grad, "
                "so without clearing it every step also applies the gradients of all earlier batches. "
                "Clear the gradients once per step, before backward().",
                fn=lambda w, b, lr: _train(w, b, lr, zero_grad=False),
                fix="optimizer.zero_grad() (or p.grad = None for every weight) before loss.backward()."),
        Mistake("no_step", "The weights never change",
                "Your first loss is right, but every later batch is scored by the initial model: the "
                "gradient is computed and never applied (or cleared between backward() and the step). "
                "After each backward(), move every weight against its gradient.",
                fn=lambda w, b, lr: _train(w, b, lr, step="none"),
                fix="Call optimizer.step() after loss.backward() (and zero_grad() before backward(), not "
                    "between the two); by hand: with torch.no_grad(): p -= lr * p.grad."),
        Mistake("gradient_ascent", "A step up the gradient",
                "Your losses rise: each weight moved along its gradient, the direction in which the loss "
                "grows fastest. Gradient descent moves against it.",
                fn=lambda w, b, lr: _train(w, b, lr, step="ascent"),
                fix="w <- w - lr * grad: subtract, as torch.optim.SGD does."),
        Mistake("mutates", "The caller's weights are trained in place",
                "Your losses are right, but the weights you were given changed: torch.from_numpy and "
                "torch.as_tensor share the NumPy array's memory, so updating the tensor in place also "
                "updated the caller's initial weights, and a second run would start from trained ones. "
                "Train a copy.",
                fn=lambda w, b, lr: _train(w, b, lr, in_place=True), kind="mutates",
                fix="Build the model with train.model_from_weights(weights) (it copies), or use "
                    "torch.tensor(w, requires_grad=True), which copies."),
    ],
    hint="A language model at position t predicts token t + 1: which slices of a batch are the inputs and "
         "which the targets? The loss is the mean cross-entropy over the vocabulary at every position; each "
         "step clears the old gradients, back-propagates this batch's loss, then moves every weight a small "
         "step against its gradient.",
    hints=("Per batch: inputs are the first L - 1 tokens and targets the last L - 1; the logits are "
           "(N, L - 1, V) and the cross-entropy is taken over V; record the loss, clear the gradients, "
           "backward, step.",
           "model = train.model_from_weights(weights); opt = torch.optim.SGD(model.parameters(), lr=lr); "
           "per batch b: logits = model(b[:, :-1]); loss = F.cross_entropy(logits.reshape(-1, V), "
           "b[:, 1:].reshape(-1)); opt.zero_grad(); loss.backward(); opt.step()."),
    rtol=1e-4, atol=1e-6,  # losses of order 1 after a few steps: a float32 model passes
    time_limit=10.0,
    borrowed=("attnlib.instruments.train.train_seeds", "attnlib.instruments.train.lm_pair"),
))
