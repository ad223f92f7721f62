"""Exercises of chapter 11 (attention at inference): ``lower_right_causal_mask`` and
``decode_step``.

Conventions (those of the chapter and of attnlib): a bool mask is True where a query may
attend; keys and values are ``(N, h, S, d)`` with heads on dim -3. The reference solutions
are plain NumPy, independent of :mod:`attnlib.kernels.masks` and
:mod:`attnlib.kernels.attention`; a submission that simply calls those library functions is
told to write the idea itself.
"""
from __future__ import annotations

import math

import numpy as np

from ...i18n import N_
from ... import kernels
from .._model import ATTENTION_SHORTCUTS, Case, Exercise, Mistake, register
from ._ref import f64
from ._ref import stable_softmax as softmax

__all__ = []  # exercises register themselves; nothing to import from here


# --------------------------------------------------------------------------- lower_right_causal_mask

def _lower_right_reference(L, S):
    i = np.arange(L)[:, None]  # (L, 1) query index
    j = np.arange(S)[None, :]  # (1, S) key index
    return j <= i + (S - L)    # (L, S): the queries are the last L of the S positions


def _lr_cases(rng):
    r = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    L1, L3, S5 = r(2, 4), r(3, 6), r(2, 4)
    shapes = [(1, r(5, 12)),                  # one new token after a cache
              (L1, L1 + r(2, 5)),             # a chunk of new tokens after a cache
              (L3, L3),                       # no cache: the plain causal mask
              (2, r(8, 12)),
              (S5 + r(1, 3), S5),             # more queries than keys
              (r(5, 7), r(8, 10))]
    return [Case(args=(L, S), label=f"L = {L}, S = {S}") for L, S in shapes]


register(Exercise(
    name="lower_right_causal_mask",
    chapter="11_inference",
    prompt="Return the (L, S) bool causal mask aligned to the lower right: the L queries are the "
           "last L of S positions, and each may attend to every key up to and including its own "
           "position.",
    stub='''def lower_right_causal_mask(L, S):
    """(L, S) bool mask for L new queries after S - L cached keys: True where
    query i may attend to key j (key j is not in query i's future)."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_lower_right_reference,
    cases=_lr_cases,
    mistakes=[
        Mistake("upper_left", "Aligned to the upper left (is_causal=True's convention)",
                "Your mask lets query i see keys j <= i, the diagonal starting in the top-left corner. "
                "With a cache the queries are the LAST L positions: the newest token (the last row) "
                "must see all S keys, but yours sees only the first L. Ask at which of the S positions "
                "query i sits, and shift the diagonal accordingly.",
                fn=lambda L, S: np.tril(np.ones((L, S), dtype=bool)),
                fix="Query i sits at position i + S - L: allow j <= i + S - L "
                    "(np.tril(np.ones((L, S), bool), k=S - L))."),
        Mistake("missing_diagonal", "The diagonal is missing (a token cannot see itself)",
                "Each new query is blocked from its own key, so the first new token of a one-token cache "
                "step sees nothing of itself. A causal mask hides only the future: a key at the query's "
                "own position is allowed.",
                fn=lambda L, S: np.arange(S)[None, :] < np.arange(L)[:, None] + (S - L),
                fix="Use <= instead of <: j <= i + S - L."),
        Mistake("off_by_one_future", "Each query sees one future key",
                "Your boundary sits one key too late: query i also sees the key right after its own "
                "position, a token that does not exist yet when it is generated. Count positions from 0: "
                "the last query is at position S - 1.",
                fn=lambda L, S: np.arange(S)[None, :] <= np.arange(L)[:, None] + (S - L) + 1,
                fix="j <= i + S - L, not j <= i + S - L + 1."),
        Mistake("true_means_blocked", "Inverted: True means blocked",
                "Your mask is True exactly where attention is NOT allowed (the convention of "
                "nn.MultiheadAttention's attn_mask). Here True = may attend.",
                fn=lambda L, S: ~_lower_right_reference(L, S),
                fix="Invert yours with ~, or build the allowed condition j <= i + S - L directly."),
        Mistake("offset_sign", "The offset has the wrong sign",
                "You shifted the diagonal the wrong way, so the boundary sits 2(S - L) keys too early: "
                "every new query misses cached keys it should see. The queries come after the cached "
                "keys, so the shift moves the boundary to the right.",
                fn=lambda L, S: np.arange(S)[None, :] <= np.arange(L)[:, None] + (L - S),
                fix="Shift by S - L, not L - S: j <= i + S - L."),
        Mistake("square_rows", "The last L rows of the S x S causal mask: wrong when L > S",
                "Taking the last L rows of the (S, S) causal mask is right whenever L <= S, but with "
                "more queries than keys (L > S) there are only S rows to take and the shape comes out "
                "wrong (not (L, S)). Build the mask from the condition on (i, j) itself, which holds for "
                "every L and S (with L > S the first L - S queries see no key at all).",
                fn=lambda L, S: np.tril(np.ones((S, S), dtype=bool))[-L:],
                variants=(lambda L, S: np.tril(np.ones((S, S), dtype=bool))[S - L:],),
                fix="np.arange(S)[None, :] <= np.arange(L)[:, None] + (S - L), or "
                    "np.tril(np.ones((L, S), bool), k=S - L)."),
        Mistake("no_mask", "Nothing is masked",
                "Every entry is True. That is right only for one new query (L = 1); with several new "
                "tokens (chunked prefill) none of them may see the tokens after it.",
                fn=lambda L, S: np.ones((L, S), dtype=bool),
                fix="Allow key j for query i only when j <= i + S - L."),
        # the checker's watch of `calls` recognises it, whatever name reached the function
        Mistake("calls_library", "It calls attnlib's own al.causal_mask(align='lower_right')",
                "Your function returns the right values by calling attnlib's "
                "al.causal_mask(align='lower_right'), which is the answer this exercise asks you to "
                "write: compare the positions of the queries and the keys yourself.",
                fn=lambda L, S: kernels.causal_mask(L, S, align="lower_right"), kind="borrowed",
                calls=("attnlib.kernels.masks:causal_mask(align='lower_right')",),
                fix="Build it from np.arange(L)[:, None] and np.arange(S)[None, :] instead."),
    ],
    hint="Write the condition for query i and key j first: at which of the S positions does "
         "query i sit when the L queries are the last L? Then evaluate it for all pairs (i, j) at "
         "once.",
    hints=("The L queries occupy positions S - L ... S - 1, so query i sits at position i + S - L and "
           "may see every key at or before it. Build a column of query indices and a row of key "
           "indices and compare them by broadcasting.",
           "np.arange(S)[None, :] <= np.arange(L)[:, None] + (S - L)."),
    output_kind="bool",
    borrowed=("torch.nn.attention.bias:*",),  # torch's own lower-right mask: causal_lower_right(L, S)
))


# --------------------------------------------------------------------------- decode_step

def _decode(q, k, v, k_cache, v_cache, *, order="append", attend="all", scale="d", axis=-1,
            causal=False, stable=True, cache_q=False, returned="all", concat_axis=-2):
    """One cached decode step and, through the keywords, each catalogued mistake."""
    q, k, v, kc, vc = map(f64, (q, k, v, k_cache, v_cache))
    new_k = q if cache_q else k
    if order == "append":
        k_all = np.concatenate([kc, new_k], axis=concat_axis)  # (N, h, S0 + 1, d)
        v_all = np.concatenate([vc, v], axis=concat_axis)
    else:                                                   # the mistake: the new token first
        k_all, v_all = np.concatenate([new_k, kc], axis=-2), np.concatenate([v, vc], axis=-2)
    keys, values = {"all": (k_all, v_all), "old": (kc, vc), "new": (k, v)}[attend]
    d, S = q.shape[-1], k_all.shape[-2]
    scores = q @ np.swapaxes(keys, -1, -2)                  # (N, h, 1, d) @ (N, h, d, S) -> (N, h, 1, S)
    scores = scores / {"d": math.sqrt(d), "one": 1.0, "S": math.sqrt(S)}[scale]
    if causal:                                              # the mistake: the upper-left mask of a 1 x S step
        scores = np.where(np.arange(scores.shape[-1]) <= 0, scores, -np.inf)
    if attend == "old" and keys.shape[-2] == 0:
        raise ValueError("zero-size array to reduction operation maximum which has no identity")
    if stable:
        weights = softmax(scores, axis=axis)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(scores)                              # exp(1000) = inf, inf / inf = NaN
            weights = e / e.sum(axis=axis, keepdims=True)
    out = weights @ values                                  # (N, h, 1, S) @ (N, h, S, d) -> (N, h, 1, d)
    if returned == "out":
        return out
    if returned == "old_caches":
        return out, kc, vc
    return out, k_all, v_all


def _decode_reference(q, k, v, k_cache, v_cache):
    return _decode(q, k, v, k_cache, v_cache)


def _decode_old_or_zeros(q, k, v, k_cache, v_cache):
    """Attends to the old cache only; on an empty cache torch's softmax over nothing gives zeros."""
    if np.shape(k_cache)[-2] == 0:
        out = np.zeros(np.shape(q))
        return out, *_decode(q, k, v, k_cache, v_cache)[1:]
    return _decode(q, k, v, k_cache, v_cache, attend="old")


def _decode_cases(rng):
    n = rng.standard_normal

    def case(N, h, S0, d, label):
        return Case(args=(n((N, h, 1, d)), n((N, h, 1, d)), n((N, h, 1, d)), n((N, h, S0, d)), n((N, h, S0, d))),
                    label=label)

    large = case(1, 2, 4, 4, N_("large scores (exp overflows without the max trick)"))
    q, k, v, kc, vc = large.args
    j = int(rng.integers(0, 4))  # query 0 of head 0 points along cached key j: a score near 1000
    q[0, 0, 0] = rng.uniform(950.0, 1050.0) * 2.0 * kc[0, 0, j] / (kc[0, 0, j] @ kc[0, 0, j])  # √d = 2
    return [
        case(2, 3, 5, 4, N_("2 sequences, 3 heads, 5 cached tokens")),
        case(1, 2, 0, 4, N_("the first token: an empty cache")),
        case(1, 2, 1, 3, N_("one sequence, one cached token")),
        case(2, 1, 9, 8, N_("one head, 9 cached tokens")),
        case(3, 2, 2, 2, N_("3 sequences, 2 cached tokens")),
        large,
    ]


register(Exercise(
    name="decode_step",
    chapter="11_inference",
    prompt="One step of decoding with a key/value cache: append the new token's key and value to the "
           "cache, then attend its query to every cached position, its own included.",
    stub='''def decode_step(q, k, v, k_cache, v_cache):
    """One step of decoding with a key/value cache, for one new token.

    All inputs are NumPy arrays (to use torch, convert first: torch.as_tensor).
    q, k, v: (N, h, 1, d) the new token's query, key and value in every head.
    k_cache, v_cache: (N, h, S0, d) the keys and values of the S0 tokens
        processed before (S0 may be 0: the first token has an empty cache).
    Returns (out, k_cache, v_cache): out (N, h, 1, d) is the new token's
    attention output, its query attending to all S0 + 1 positions, its own
    included, with scores scaled by 1/sqrt(d); the caches come back with the
    new key and value after the old positions, (N, h, S0 + 1, d).
    The cache arrays passed in must be left unchanged.
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_decode_reference,
    cases=_decode_cases,
    mistakes=[
        Mistake("attend_before_append", "The query attends to the cache before its own key is added",
                "Your output leaves out the new token itself: the query only saw the S0 earlier keys. A "
                "causal decoder lets a token attend to its own position too, so the new key and value "
                "must be in the cache before the query reads it (on the first token the old cache is "
                "empty and there is nothing to attend to).",
                fn=_decode_old_or_zeros,
                variants=(lambda *a: _decode(*a, attend="old"),),
                fix="k_all = np.concatenate([k_cache, k], axis=-2) (and the same for v) first; then "
                    "attend q to k_all and v_all."),
        Mistake("attends_only_new", "The query attends only to the new token",
                "Your output is the new token's own value: its query saw one key, its own, and a softmax "
                "over one score is 1. The cache is there so that the query can read every earlier "
                "token: attend to all S0 + 1 cached positions.",
                fn=lambda *a: _decode(*a, attend="new"),
                fix="scores = q @ np.swapaxes(k_all, -1, -2) / np.sqrt(d) with k_all the extended cache."),
        Mistake("causal_mask_on_step", "The upper-left causal mask applied to the one new query",
                "With one new query against S0 + 1 keys, the upper-left causal mask (is_causal=True, or "
                "a lower triangle of shape (1, S0 + 1)) lets the query see only the FIRST key. The new "
                "token is the last position: it may see every cached key, so a single decode step needs "
                "no mask at all (a lower-right mask of one row is all True).",
                fn=lambda *a: _decode(*a, causal=True),
                fix="Drop the mask for a one-token step (or use np.arange(S)[None, :] <= np.arange(1)[:, None] + S - 1, "
                    "which is all True)."),
        Mistake("new_token_first", "The new key and value put in front of the cache",
                "Your output is right (attention does not care about the order of its keys), but the "
                "returned cache has the new token at position 0. The next steps, positions and masks "
                "assume that position t holds token t: append at the end.",
                fn=lambda *a: _decode(*a, order="prepend"),
                fix="np.concatenate([k_cache, k], axis=-2), the old positions first."),
        Mistake("concat_default_axis", "Concatenated along axis 0, the batch",
                "np.concatenate (and torch.cat) join along axis 0 unless told otherwise, and axis 0 of "
                "(N, h, S, d) is the batch: it only fits when S0 = 1 and then doubles the batch. The "
                "positions are the axis -2.",
                fn=lambda *a: _decode(*a, concat_axis=0),
                fix="np.concatenate([k_cache, k], axis=-2) (torch.cat([...], dim=-2))."),
        Mistake("scaled_by_cache_length", "Scores divided by √(number of cached keys)",
                "The scale undoes the spread of one dot product q·k, a sum of d products: it depends "
                "on the width d of the queries and keys, not on how many keys there are.",
                fn=lambda *a: _decode(*a, scale="S"),
                fix="Divide by np.sqrt(d) with d = q.shape[-1], not by np.sqrt(S0 + 1)."),
        Mistake("no_scale", "The scores are not scaled",
                "A decode step computes the same attention as the model's forward pass, with the same "
                "scale: divide the scores by the standard deviation of a dot product of width d.",
                fn=lambda *a: _decode(*a, scale="one"),
                fix="scores = q @ np.swapaxes(k_all, -1, -2) / np.sqrt(d)."),
        Mistake("softmax_over_queries", "Softmax over the query axis",
                "With one query the query axis has length 1, so a softmax along it makes every weight 1 "
                "and the output the sum of all values. The weights of the query are shared among the "
                "keys: normalise along the last axis.",
                fn=lambda *a: _decode(*a, axis=-2),
                fix="softmax along axis=-1 of the (N, h, 1, S0 + 1) scores."),
        Mistake("softmax_overflow", "The softmax overflows on large scores",
                "Right for small scores, NaN for large ones: exp of a score above ~709 is inf, and "
                "inf / inf is NaN. Shift the scores by their largest value before exp (chapter 2).",
                fn=lambda *a: _decode(*a, stable=False),
                fix="scores - scores.max(axis=-1, keepdims=True) before np.exp."),
        Mistake("caches_query", "The query is cached instead of the key",
                "You appended q to the key cache. Later tokens compare their queries with the KEYS of "
                "earlier tokens; a token's query is used once, in its own step, and never cached.",
                fn=lambda *a: _decode(*a, cache_q=True),
                fix="np.concatenate([k_cache, k], axis=-2), with k, not q."),
        Mistake("caches_not_returned", "The caches come back without the new token",
                "Your output is right, but you returned the caches you were given. The next step needs "
                "this token's key and value too: return the extended caches.",
                fn=lambda *a: _decode(*a, returned="old_caches"),
                fix="return out, k_all, v_all with the appended arrays."),
        Mistake("output_only", "Only the output is returned",
                "A decode step must hand back the extended caches with the output, (out, k_cache, "
                "v_cache), so that the next token can use them.",
                fn=lambda *a: _decode(*a, returned="out"),
                fix="return out, k_all, v_all."),
    ],
    hint="Two things happen in one step: the cache grows by the new token, and the new query reads "
         "the whole cache. In which order, along which axis does the cache grow, and does a single new "
         "query, the last position, need a mask?",
    hints=("Append first, along the positions (axis -2), old positions first: (N, h, S0 + 1, d). Then "
           "ordinary scaled dot-product attention of the (N, h, 1, d) query against all S0 + 1 keys, "
           "with a stable softmax over the last axis and no mask.",
           "k_all = concatenate([k_cache, k], axis=-2); v_all likewise; scores = q @ swapaxes(k_all, -1, -2) "
           "/ sqrt(d); out = softmax(scores, axis=-1) @ v_all; return out, k_all, v_all."),
    rtol=1e-4, atol=1e-6,  # a float32 answer passes; the caches are copies of the inputs
    forbidden=ATTENTION_SHORTCUTS,
))
