"""Exercises of chapter 07 (watch attention learn): ``prev_token_score``,
``induction_score``, ``repeat_loss`` and ``ablate_head``.

Conventions (those of the chapter and of :mod:`attnlib.instruments.train`): attention weights are
``(..., L, L)`` NumPy arrays with rows as queries; a repeated sequence has a block of
``period`` tokens that repeats, so the token after position ``i`` (``i >= period - 1``)
equals the token after position ``i - period``. Per-head outputs are ``(N, h, L, d_head)``
and ``W_O`` is ``(h * d_head, d_model)``, as in :class:`attnlib.models.gpt.CausalSelfAttention`.
The references are plain NumPy, independent of :mod:`attnlib.instruments.train` and :mod:`attnlib.models.gpt`.
"""
from __future__ import annotations

import numpy as np

from ...i18n import N_
from .._model import Case, Exercise, Mistake, register
from ._ref import as_np, f64
from ._ref import stable_log_softmax as log_softmax

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
    chapter="07_learning",
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
    chapter="07_learning",
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


# --------------------------------------------------------------------------- repeat_loss

def _repeat_loss(logits, seq, period, *, shift=1, start=None, log="stable", reduce="mean", mix=False):
    logits, seq = f64(logits), as_np(seq)
    n_pos = logits.shape[-2]
    targets = seq[..., shift:shift + n_pos]                       # (N, L - 1) next tokens
    if log == "stable":
        logp = log_softmax(logits)
    elif log == "naive":                                          # log(exp(l) / sum exp(l)): NaN at 1000
        with np.errstate(all="ignore"):
            e = np.exp(logits)
            logp = np.log(e / e.sum(-1, keepdims=True))
    elif log == "raw":
        logp = logits                                             # the logits taken as log-probabilities
    else:
        logp = np.exp(log_softmax(logits))                        # probabilities
    if mix:  # logp[:, t, targets]: every sequence's logits against every sequence's targets
        picked = logp[:, np.arange(n_pos), targets]               # (N, N, L - 1)
    else:
        picked = np.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]  # (N, L - 1)
    first = period - 1 if start is None else start
    picked = picked[..., first:]
    out = 1.0 - picked if log == "prob" else -picked
    return float(out.sum() if reduce == "sum" else out.mean())


def _repeat_reference(logits, seq, period):
    return _repeat_loss(logits, seq, period)


def _repeat_cases(rng):
    def case(N, period, L, V, label, level=0.0):
        block = np.stack([rng.permutation(V)[:period] for _ in range(N)])  # (N, period) distinct ids
        seq = np.tile(block, (1, -(-L // period)))[:, :L]                  # (N, L)
        logits = level + rng.standard_normal((N, L - 1, V))
        logits[np.arange(N)[:, None], np.arange(L - 1), seq[:, 1:]] += rng.uniform(0, 3, (N, L - 1))
        return Case(args=(logits, seq, period), label=label)

    return [case(2, 4, 8, 6, N_("N = 2, period 4, L = 8, V = 6")),
            case(3, 5, 12, 9, N_("N = 3, period 5, L = 12 (more than two copies), V = 9")),
            case(1, 3, 6, 4, N_("one sequence, period 3, L = 6, V = 4")),
            case(4, 6, 12, 10, N_("N = 4, period 6, L = 12, V = 10")),
            case(2, 3, 7, 5, N_("logits near 1000 (exp overflows without the max trick)"), level=1000.0)]


register(Exercise(
    name="repeat_loss",
    chapter="07_learning",
    prompt="Given next-token logits (N, L - 1, V) for the inputs seq[:, :-1] of repeated sequences seq (N, L) "
           "with block length `period`, return the mean cross-entropy (nats) over the predictions of "
           "tokens that already appeared one period earlier.",
    stub='''def repeat_loss(logits, seq, period):
    """logits: (N, L - 1, V) NumPy array, the model's next-token logits at positions
    t = 0 ... L - 2 (at position t it has read seq[:, :t + 1]); seq: (N, L) int ids
    whose first `period` ids repeat (to use torch, convert first: torch.as_tensor).
    Returns a float: the mean cross-entropy -log p(next token) over the predictions of
    tokens that already appeared one period earlier."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_repeat_reference,
    cases=_repeat_cases,
    mistakes=[
        Mistake("unshifted_targets", "Targets not shifted",
                "The logits at position t predict the *next* token; you scored them against the token "
                "the model has just read, seq[:, t].",
                fn=lambda lg, s, p: _repeat_loss(lg, s, p, shift=0),
                fix="targets = seq[:, 1:] (position t is scored against seq[:, t + 1])."),
        Mistake("off_by_one_start", "The first repeated target skipped",
                "The first token of the second copy, seq[:, period], is already predictable (it equals "
                "seq[:, 0]); it is predicted at the position just before it. You started one position "
                "later.",
                fn=lambda lg, s, p: _repeat_loss(lg, s, p, start=p),
                fix="Keep the positions t = period - 1 ... L - 2: loss[:, period - 1:]."),
        Mistake("includes_first_copy", "The first copy included",
                "You averaged over every position. The targets of the first copy are random, so no "
                "model can predict them; only the predictions of tokens seen one period earlier count.",
                fn=lambda lg, s, p: _repeat_loss(lg, s, p, start=0),
                fix="Drop the first period - 1 positions: loss[:, period - 1:].mean()."),
        Mistake("no_log_softmax", "The logits used as log-probabilities (a negative loss)",
                "Your loss is minus the target's logit itself. Logits are not log-probabilities: they "
                "are not normalised, so your 'loss' can be negative (here it is about -1000 when the "
                "logits lie near 1000), which a cross-entropy never is. Normalise first: a "
                "log-softmax over the vocabulary.",
                fn=lambda lg, s, p: _repeat_loss(lg, s, p, log="raw"),
                fix="log_p = logits - logsumexp(logits, axis=-1), with logsumexp = m + "
                    "np.log(np.exp(logits - m).sum(-1, keepdims=True)) and m the max over the vocabulary."),
        Mistake("log_softmax_overflow", "The softmax overflows before the log",
                "Right for small logits, NaN for logits near 1000: exp(1000) is inf, inf / inf is NaN, "
                "and so is its log (chapter 2's trap). Compute the log-probabilities in a form that "
                "never exponentiates a large number.",
                fn=lambda lg, s, p: _repeat_loss(lg, s, p, log="naive"),
                fix="log_p = z - np.log(np.exp(z).sum(-1, keepdims=True)) with "
                    "z = logits - logits.max(-1, keepdims=True)."),
        Mistake("no_log", "Probabilities instead of log-probabilities",
                "Cross-entropy is the mean of -log p(target); you used 1 - p (or p itself).",
                fn=lambda lg, s, p: _repeat_loss(lg, s, p, log="prob"),
                fix="Take the log of the softmax, stably: the log-softmax logits - logsumexp(logits)."),
        Mistake("batch_index_mixed", "Every sequence's logits scored against every sequence's targets",
                "Indexing the log-probabilities with a slice for the sequences and the (N, L - 1) targets "
                "pairs every sequence with every other sequence's targets: an (N, N, L - 1) array "
                "whose mean mixes up the batch. Each sequence must be scored against its own targets.",
                fn=lambda lg, s, p: _repeat_loss(lg, s, p, mix=True),
                fix="np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0], or "
                    "log_p[np.arange(N)[:, None], np.arange(L - 1), targets]."),
        Mistake("sum", "A sum instead of a mean",
                "You added the losses of all positions and sequences; the loss is their mean, so it does "
                "not depend on the batch size or the sequence length.",
                fn=lambda lg, s, p: _repeat_loss(lg, s, p, reduce="sum"),
                fix="Use .mean() over the kept positions of all sequences."),
    ],
    hint="Which token does the prediction at position t target, and from which position on has the "
         "target already appeared one period earlier? The loss is the mean of -log p(target), with p a "
         "softmax over the vocabulary: compute its logarithm without overflowing.",
    hints=("The targets are the inputs shifted by one. Token seq[:, period] is the first that repeats, "
           "and it is predicted at position period - 1. The log-probabilities are the logits minus "
           "their log-sum-exp over the vocabulary, with the maximum subtracted inside the exponential.",
           "log_p = log_softmax(logits); pick each position's target entry with np.take_along_axis and "
           "targets = seq[:, 1:]; keep positions period - 1 onwards; return minus their mean."),
    rtol=1e-4,
    atol=1e-6,  # a loss of order 1: a float32 answer passes
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
    chapter="07_learning",
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
