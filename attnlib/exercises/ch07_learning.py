"""Exercises of chapter 07 (watch attention learn): ``prev_token_score``,
``induction_score`` and ``repeat_loss``.

Conventions (those of the chapter and of :mod:`attnlib.train`): attention weights are
``(..., L, L)`` with rows as queries; a repeated sequence has a block of ``period`` tokens
that repeats, so the token after position ``i`` (``i >= period - 1``) equals the token after
position ``i - period``. The references are plain NumPy, independent of :mod:`attnlib.train`.
"""
from __future__ import annotations

import numpy as np

from ._core import Case, Exercise, Mistake, register

__all__ = []  # exercises register themselves; nothing to import from here


def _diag_mean(w, offset, first, *, reduce="mean", transpose=False):
    w = np.asarray(w, dtype=float)
    if transpose:
        w = np.swapaxes(w, -1, -2)
    L = w.shape[-1]
    i = np.arange(first, L)
    j = i + offset
    ok = (j >= 0) & (j < L)
    vals = w[..., i[ok], j[ok]]
    return vals.sum(-1) if reduce == "sum" else vals.mean(-1)


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


# --------------------------------------------------------------------------- prev_token_score

def _prev_reference(weights):
    return _diag_mean(weights, -1, 1)


def _prev_cases():
    rng = np.random.default_rng(70)
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
           "head looks at the previous token. weights is (..., L, L), rows are queries; return (...).",
    stub='''def prev_token_score(weights):
    """weights: (..., L, L) attention weights of one or more heads, row i = query i.
    Returns (...): the mean of weights[..., i, i - 1] over i = 1 ... L - 1."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_prev_reference,
    cases=_prev_cases,
    mistakes=[
        Mistake("diagonal", "The diagonal itself",
                "You averaged weights[..., i, i], how much each token looks at itself. The previous token "
                "of query i is key i - 1: take the diagonal one below the main one, e.g. "
                "np.diagonal(weights, offset=-1, axis1=-2, axis2=-1).",
                fn=lambda w: _diag_mean(w, 0, 0)),
        Mistake("future", "The diagonal above (the future), or rows and columns swapped",
                "You read weights[..., i, i + 1], the key after the query (or weights[..., i - 1, i], which "
                "averages to the same numbers); under a causal mask these weights are always 0. Rows are "
                "queries and columns keys: the previous-token weight of query i is weights[..., i, i - 1], "
                "one column to the left of the diagonal.",
                fn=lambda w: _diag_mean(w, 1, 0),
                variants=(lambda w: _diag_mean(w, -1, 1, transpose=True),)),
        Mistake("sum", "A sum instead of a mean",
                "You added the L - 1 weights instead of averaging them, so the score grows with the "
                "sequence length and a perfect previous-token head scores L - 1 instead of 1. Divide by "
                "the number of queries scored (L - 1), or use .mean(-1).",
                fn=lambda w: _diag_mean(w, -1, 1, reduce="sum")),
        Mistake("includes_first", "The first query counted as a zero",
                "Query 0 has no previous token, so it is not scored: average over i = 1 ... L - 1 only. "
                "You divided by L (or padded query 0 with a 0), which pulls every score down.",
                fn=lambda w: _diag_mean(w, -1, 1, reduce="sum") / np.asarray(w).shape[-1]),
    ],
    hint="np.diagonal(weights, offset=-1, axis1=-2, axis2=-1) holds weights[..., i, i - 1] for i = 1 ... L - 1.",
))


# --------------------------------------------------------------------------- induction_score

def _ind_reference(weights, period):
    return _diag_mean(weights, 1 - period, period)


def _ind_cases():
    rng = np.random.default_rng(71)
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
           "i = period ... L - 1. weights is (..., L, L); return (...).",
    stub='''def induction_score(weights, period):
    """weights: (..., L, L) attention weights on a sequence whose block of `period` tokens
    repeats, row i = query i. Returns (...): the mean of weights[..., i, i - period + 1]
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
                "copy, because that is what comes next: key i - period + 1.",
                fn=lambda w, p: _diag_mean(w, -p, p)),
        Mistake("includes_first_copy", "Queries of the first copy included",
                "Queries i < period have no earlier copy to look back to (their key i - period + 1 is the "
                "first token or lies before the sequence). Score only the queries of the repeats, "
                "i = period ... L - 1.",
                fn=lambda w, p: _diag_mean(w, 1 - p, p - 1)),
        Mistake("diagonal", "The diagonal itself",
                "You averaged weights[..., i, i] (each token looking at itself). The induction offset is "
                "period - 1 keys back: weights[..., i, i - period + 1].",
                fn=lambda w, p: _diag_mean(w, 0, p)),
        Mistake("future", "The diagonal above (the future)",
                "You read keys after the query (offset + period - 1 instead of - period + 1), which a "
                "causal mask sets to 0. The induction key lies behind the query: i - period + 1.",
                fn=lambda w, p: _diag_mean(w, p - 1, p)),
        Mistake("sum", "A sum instead of a mean",
                "You added the weights instead of averaging them, so the score grows with the number of "
                "repeated positions. Divide by the number of queries scored, L - period.",
                fn=lambda w, p: _diag_mean(w, 1 - p, p, reduce="sum")),
        Mistake("transposed", "Rows and columns swapped",
                "You read weights[..., i - period + 1, i], a query looking *forward*, which the causal "
                "mask blocks. Rows are queries, columns keys: use weights[..., i, i - period + 1].",
                fn=lambda w, p: _diag_mean(w, 1 - p, p, transpose=True)),
    ],
    hint="The keys i - period + 1 for queries i = period ... L - 1 form one diagonal: "
         "np.diagonal(weights, offset=1 - period, axis1=-2, axis2=-1) starts at query period - 1; drop its first entry.",
))


# --------------------------------------------------------------------------- repeat_loss

def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _repeat_loss(logits, seq, period, *, shift=1, start=None, log=True, reduce="mean"):
    logits, seq = np.asarray(logits, dtype=float), np.asarray(seq)
    n_pos = logits.shape[-2]
    targets = seq[..., shift:shift + n_pos]                       # (N, L - 1) next tokens
    logp = _log_softmax(logits) if log else np.exp(_log_softmax(logits))
    picked = np.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]  # (N, L - 1)
    first = period - 1 if start is None else start
    picked = picked[..., first:]
    out = -picked if log else 1.0 - picked
    return float(out.sum() if reduce == "sum" else out.mean())


def _repeat_reference(logits, seq, period):
    return _repeat_loss(logits, seq, period)


def _repeat_cases():
    rng = np.random.default_rng(72)

    def case(N, period, L, V, label):
        block = np.stack([rng.permutation(V)[:period] for _ in range(N)])  # (N, period) distinct ids
        seq = np.tile(block, (1, -(-L // period)))[:, :L]                  # (N, L)
        logits = rng.standard_normal((N, L - 1, V))
        logits[np.arange(N)[:, None], np.arange(L - 1), seq[:, 1:]] += rng.uniform(0, 3, (N, L - 1))
        return Case(args=(logits, seq, period), label=label)

    return [case(2, 4, 8, 6, "N = 2, period 4, L = 8, V = 6"),
            case(3, 5, 12, 9, "N = 3, period 5, L = 12 (more than two copies), V = 9"),
            case(1, 3, 6, 4, "one sequence, period 3, L = 6, V = 4"),
            case(4, 6, 12, 10, "N = 4, period 6, L = 12, V = 10")]


register(Exercise(
    name="repeat_loss",
    chapter="07_learning",
    prompt="Given next-token logits (N, L - 1, V) for the inputs seq[:, :-1] of repeated sequences seq (N, L) "
           "with block length `period`, return the mean cross-entropy (nats) over the targets that repeat an "
           "earlier token: targets seq[:, t + 1] for t = period - 1 ... L - 2.",
    stub='''def repeat_loss(logits, seq, period):
    """logits: (N, L - 1, V), the model's next-token logits at positions t = 0 ... L - 2
    (it read seq[:, :t + 1]); seq: (N, L) int ids whose first `period` ids repeat.
    Returns a float: the mean cross-entropy -log p(seq[:, t + 1]) over t = period - 1 ... L - 2,
    the predictions of tokens that already appeared one period earlier."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_repeat_reference,
    cases=_repeat_cases,
    mistakes=[
        Mistake("unshifted_targets", "Targets not shifted",
                "The logits at position t predict the *next* token, seq[:, t + 1]; you scored them "
                "against seq[:, t], the token the model has just read. Use targets = seq[:, 1:].",
                fn=lambda lg, s, p: _repeat_loss(lg, s, p, shift=0)),
        Mistake("off_by_one_start", "The first repeated target skipped",
                "The first token of the second copy is seq[:, period], predicted at position "
                "t = period - 1, and it is already predictable (it equals seq[:, 0]). Start at "
                "t = period - 1, not t = period.",
                fn=lambda lg, s, p: _repeat_loss(lg, s, p, start=p)),
        Mistake("includes_first_copy", "The first copy included",
                "You averaged over every position. The targets of the first copy are random, so no "
                "model can predict them; the loss on the repeats starts at t = period - 1.",
                fn=lambda lg, s, p: _repeat_loss(lg, s, p, start=0)),
        Mistake("no_log", "Probabilities instead of log-probabilities",
                "Cross-entropy is the mean of -log p(target) with p = softmax(logits); you used 1 - p "
                "(or p itself). Take the log of the softmax (log-softmax: logits - logsumexp(logits)).",
                fn=lambda lg, s, p: _repeat_loss(lg, s, p, log=False)),
        Mistake("sum", "A sum instead of a mean",
                "You added the losses of all positions and sequences; the loss is their mean, so it does "
                "not depend on the batch size or the sequence length.",
                fn=lambda lg, s, p: _repeat_loss(lg, s, p, reduce="sum")),
    ],
    hint="targets = seq[:, 1:]; log-probabilities = logits - logsumexp(logits, -1); pick each target's entry "
         "with np.take_along_axis, keep positions period - 1 onwards, and average the negatives.",
    rtol=1e-6,
    atol=1e-8,
))
