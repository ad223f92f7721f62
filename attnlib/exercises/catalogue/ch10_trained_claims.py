"""Exercises of chapter 10 (the course's claims, trained): ``repeat_loss``, the loss on the
repeat of a repeated sequence, by which the chapter compares its trained models.

Conventions (those of chapter 9 and of :mod:`attnlib.instruments.train`): a repeated sequence has
a block of ``period`` tokens that repeats; the logits at position ``t`` predict token ``t + 1``.
The reference is plain NumPy, independent of :mod:`attnlib.instruments.train`.
"""
from __future__ import annotations

import numpy as np

from ...i18n import N_
from .._model import Case, Exercise, Mistake, register
from ._ref import as_np, f64
from ._ref import stable_log_softmax as log_softmax

__all__ = []  # exercises register themselves; nothing to import from here


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
    chapter="10_trained_claims",
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
