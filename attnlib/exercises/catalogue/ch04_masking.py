"""Exercises of chapter 04 (masking): ``masked_softmax`` and ``packed_causal_mask``.

Every mask here is a bool array with the convention of
``torch.nn.functional.scaled_dot_product_attention``: **True = may attend** (the key
takes part), False = blocked. The reference solutions are plain NumPy, independent of
:mod:`attnlib.kernels.softmax` and :mod:`attnlib.kernels.masks`, so the checker does not trust the code it
teaches.

* ``masked_softmax(scores, mask)`` needs the chapter's three ideas at once: the mask acts
  on the scores *before* the softmax, a blocked key must get an exact zero, and a row with
  nothing to attend to must give zeros (not NaN, not a uniform average).
* ``packed_causal_mask(doc_ids)`` combines three rules into one table (causal, same
  document, not padding), the way training on packed sequences needs it.
"""
from __future__ import annotations

import numpy as np

from .._model import ATTENTION_SHORTCUTS, Case, Exercise, Mistake, register
from ._ref import as_np as _np
from ._ref import stable_softmax as softmax

__all__ = []  # exercises register themselves; nothing to import from here


# --------------------------------------------------------------------------- masked_softmax

def _stable_softmax(s):
    """Row softmax (last axis) with the row maximum subtracted; no guard of any kind."""
    return softmax(s, axis=-1)


def _masked_softmax_reference(scores, mask):
    s, m = _np(scores, np.float64), _np(mask, bool)
    s, m = np.broadcast_arrays(s, m)
    blocked = np.where(m, s, -np.inf)                      # (..., L, S): blocked keys -> -inf
    top = blocked.max(axis=-1, keepdims=True)              # (..., L, 1)
    top = np.where(np.isfinite(top), top, 0.0)             # a row with nothing allowed: 0
    e = np.where(m, np.exp(blocked - top), 0.0)            # exp(-inf) = 0 exactly
    total = e.sum(axis=-1, keepdims=True)                  # (..., L, 1)
    return e / np.where(total > 0, total, 1.0)             # an empty row: 0 / 1 = 0


def _mask_after(scores, mask):  # the mask multiplies the weights
    s, m = _np(scores, np.float64), _np(mask, bool)
    return _stable_softmax(s) * m


def _renormalise_after(scores, mask):
    w = _mask_after(scores, mask)
    with np.errstate(invalid="ignore"):
        return w / w.sum(axis=-1, keepdims=True)  # 0 / 0 on an empty row


def _fill(value, *, inverted=False):
    def fill(scores, mask):
        s, m = _np(scores, np.float64), _np(mask, bool)
        with np.errstate(invalid="ignore"):
            return _stable_softmax(np.where(~m if inverted else m, s, value))
    return fill


def _no_max_subtraction(scores, mask):
    s, m = _np(scores, np.float64), _np(mask, bool)
    with np.errstate(all="ignore"):  # exp(1000) = inf, inf / inf = NaN
        e = np.exp(np.where(m, s, -np.inf))
        total = e.sum(axis=-1, keepdims=True)
        return e / np.where(total > 0, total, 1.0)


def _exp_times_mask(scores, mask):
    s, m = _np(scores, np.float64), _np(mask, bool)
    with np.errstate(all="ignore"):
        e = np.exp(s) * m  # a blocked exp(900) = inf times 0 is NaN
        return e / e.sum(axis=-1, keepdims=True)


def _exp_allowed_max_times_mask(scores, mask):
    """The maximum over the allowed scores (a -1e9 fill), but the exponential of every score."""
    s, m = _np(scores, np.float64), _np(mask, bool)
    with np.errstate(all="ignore"):
        top = np.where(m, s, -1e9).max(axis=-1, keepdims=True)
        e = np.exp(s - top) * m  # exp(725) = inf, times 0: NaN
        return e / e.sum(axis=-1, keepdims=True)


def _renormalise_after_guarded(scores, mask):  # also: exp(s - max over ALL keys) * mask, normalised
    w = _mask_after(scores, mask)
    total = w.sum(axis=-1, keepdims=True)
    return w / np.where(total > 0, total, 1.0)  # guarded, but the allowed weights already underflowed


def _renormalise_after_eps(scores, mask):
    w = _mask_after(scores, mask)
    return w / (w.sum(axis=-1, keepdims=True) + 1e-9)


def _global_max(scores, mask):  # one maximum for the whole array instead of one per row
    s, m = np.broadcast_arrays(_np(scores, np.float64), _np(mask, bool))
    blocked = np.where(m, s, -np.inf)
    top = blocked.max() if m.any() else 0.0
    e = np.exp(blocked - top)
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total > 0, total, 1.0)


def _inverted_guarded(scores, mask):
    return _masked_softmax_reference(scores, ~_np(mask, bool))


def _softmax_over_queries(scores, mask):
    s, m = np.broadcast_arrays(_np(scores, np.float64), _np(mask, bool))
    w = _masked_softmax_reference(np.swapaxes(s, -1, -2), np.swapaxes(m, -1, -2))
    return np.swapaxes(w, -1, -2)  # each column (a key) sums to 1 instead of each row


def _masked_softmax_cases(rng):
    n = rng.standard_normal
    causal4 = np.tril(np.ones((4, 4), dtype=bool))
    pad = np.arange(5)[None, None, :] < np.array([5, rng.integers(1, 4)])[:, None, None]   # (2, 1, 5)
    empty_row = np.ones((3, 4), dtype=bool)
    empty_row[1] = False
    decoder = np.tril(np.ones((4, 4), dtype=bool))[None] & (np.arange(4) < np.array([[3], [0]]))[:, None, :]
    # exp(725) overflows, exp(-725) does not underflow (it is a subnormal > 0)
    blocked_high = np.array([[n(), 0.0], n(2)])
    blocked_high[0, 1] = blocked_high[0, 0] + rng.uniform(715.0, 735.0)
    big = np.array([[1000.0, 999.0, 0.0], [-1.0, 0.0, 1.0]]) + rng.uniform(-0.5, 0.5, (2, 3))
    # large scores everywhere: row 0 has a blocked score far above its allowed ones, row 1
    # may attend to nothing, row 2 sits ~1000 below the others
    trap = np.vstack([1000.0 + n((2, 4)), n((1, 4))])
    trap[0, 3] += 900.0
    trap_mask = np.array([[True, True, False, False], [False] * 4, [True] * 4])
    return [
        Case(args=(n((4, 4)), causal4), label="causal mask, 4 x 4"),
        Case(args=(2 * n((2, 3, 5)), pad), label="padding mask (2, 1, 5) broadcast over queries"),
        Case(args=(n((3, 4)), empty_row), label="row 1 may attend to nothing"),
        Case(args=(blocked_high, np.tril(np.ones((2, 2), dtype=bool))),
             label="a blocked score about 725 above the allowed one"),
        Case(args=(n((2, 4, 4)), decoder),
             label="causal & padding, lengths 3 and 0 (an empty sequence)"),
        Case(args=(np.array([[n()]]), np.array([[False]])), label="one query, one blocked key"),
        Case(args=(big, np.array([[True, True, False], [True, True, True]])),
             label="large allowed scores (near 1000) in row 0, small ones in row 1"),
        Case(args=(trap, trap_mask),
             label="large scores: a dominant blocked key, a fully masked row, and a row 1000 lower"),
    ]


register(Exercise(
    name="masked_softmax",
    chapter="04_masking",
    prompt="Return the attention weights softmax(scores) over the allowed keys only: mask is bool, "
           "broadcastable to scores (..., L, S), True = may attend; blocked keys get weight 0, each "
           "row with an allowed key sums to 1, and a row with no allowed key is all zeros.",
    stub='''def masked_softmax(scores, mask):
    """scores: (..., L, S) floats; mask: bool, broadcastable to scores,
    True where query i may attend to key j.
    Return the weights (..., L, S): blocked keys get exactly 0, every row
    that has an allowed key sums to 1, and a row with no allowed key is
    all zeros (no NaN)."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_masked_softmax_reference,
    cases=_masked_softmax_cases,
    mistakes=[
        Mistake("mask_after_softmax", "The mask is applied after the softmax",
                "You took the softmax over every key and then zeroed the blocked weights, so the rows no "
                "longer sum to 1 and the blocked scores still sit in the normaliser (a future token "
                "changes the past's weights). Apply the mask to the scores before the softmax: give the "
                "blocked keys a score whose exponential is exactly 0, then normalise.",
                fn=_mask_after,
                fix="s = np.where(mask, scores, -np.inf) first; then the stable softmax of s, with the "
                    "empty rows guarded."),
        Mistake("renormalised_after_softmax", "Masked after the softmax, then renormalised",
                "Dividing the zeroed weights by their row sum repairs the algebra, but not the numerics: "
                "the softmax subtracted the row maximum, which can belong to a blocked key (a blocked "
                "score 900 above the allowed ones underflows every allowed weight to 0), and a row with "
                "no allowed key divides 0 by 0. Both give NaN. Mask the scores before the softmax, and decide "
                "explicitly what an empty row returns (zeros).",
                fn=_renormalise_after,
                fix="s = np.where(mask, scores, -np.inf); subtract the row maximum of s (0 where it is "
                    "-inf); exponentiate; divide by the row sum where it is > 0."),
        Mistake("minus_inf_without_guard", "−∞ fill without a guard for empty rows",
                "Setting the blocked scores to −∞ before the softmax is right, but a row in which every "
                "key is blocked has maximum −∞, and −∞ − (−∞) = NaN, so the whole row is NaN (and the NaN "
                "spreads to every later layer). NaN comes from ∞ − ∞, 0 × ∞, ∞ / ∞ and 0 / 0. Treat "
                "that row separately: its weights must be all zeros.",
                fn=_fill(-np.inf),
                fix="top = s.max(axis=-1, keepdims=True); top = np.where(np.isfinite(top), top, 0.0); "
                    "e = np.exp(s - top); divide by np.where(total > 0, total, 1.0)."),
        Mistake("max_includes_blocked", "The row maximum includes the blocked keys",
                "Your weights are right except where a blocked score dwarfs the allowed ones: you "
                "subtracted the maximum over all keys (or took the full softmax and renormalised after "
                "masking), so beside a blocked score 900 above the allowed ones every allowed exp "
                "underflows to 0 and the row comes out as zeros instead of weights that sum to 1. Block "
                "the keys first, then take the maximum over the allowed scores only.",
                fn=_renormalise_after_guarded, variants=(_renormalise_after_eps,),
                fix="top = np.where(mask, scores, -np.inf).max(axis=-1, keepdims=True), with 0 where "
                    "a row has no allowed key."),
        Mistake("global_max", "One maximum for the whole array instead of one per row",
                "Subtracting a constant cancels only inside a row. You subtracted the largest score of "
                "the whole array, so a row whose scores are far below another row's maximum (a row "
                "beside a score of 1000) underflows to exp = 0 everywhere. Subtract each row's own "
                "largest allowed score.",
                fn=_global_max,
                fix="Reduce along the last axis with keepdims=True: "
                    "np.where(mask, scores, -np.inf).max(axis=-1, keepdims=True)."),
        Mistake("finite_fill", "A finite fill (−1e9 or finfo.min) instead of −∞",
                "A finite stand-in such as −1e9 removes blocked keys only while some key of the row is "
                "allowed. In a row where every key is blocked all scores are equal, so the softmax "
                "returns a uniform average over the blocked keys instead of zeros: a padded query "
                "silently reads the padding. Either block with −∞ and give an empty row zeros, or zero "
                "the blocked weights once more after the softmax.",
                fn=_fill(-1e9),
                variants=(_fill(np.finfo(np.float64).min), _fill(-1e4)),
                fix="Multiply the weights by the mask after the softmax of the filled scores "
                    "(w * mask), or use np.where(mask, scores, -np.inf) with the empty-row guard."),
        Mistake("exp_times_mask", "Exponentials of blocked scores multiplied by the mask",
                "You exponentiate every score, blocked ones included, and then multiply by the mask. A "
                "blocked score 725 above the others gives exp = inf, and inf × 0 is NaN, not 0 (NaN comes "
                "from 0 × ∞, ∞ − ∞, ∞ / ∞ and 0 / 0). Block before the exponential, by choosing the "
                "blocked scores, so that their exponential is exactly 0 and nothing is ever multiplied "
                "by 0.",
                fn=_exp_times_mask, variants=(_exp_allowed_max_times_mask,),
                fix="e = np.exp(np.where(mask, scores, -np.inf) - top) with top the row maximum of the "
                    "allowed scores (0 for an empty row); never np.exp(scores) * mask."),
        Mistake("no_max_subtraction", "The row maximum is not subtracted before exp",
                "Blocking with −∞ is right, but exp(1000) overflows to inf and inf / inf is NaN. Shift "
                "each row by its largest allowed score before exp (it cancels in the ratio, chapter 2's "
                "stable softmax), and keep the empty-row case at zeros.",
                fn=_no_max_subtraction,
                fix="top = np.where(mask, scores, -np.inf).max(axis=-1, keepdims=True) (0 where it is "
                    "-inf); e = np.exp(s - top)."),
        Mistake("true_means_blocked", "The mask is read the wrong way round (True = blocked)",
                "You blocked the keys where the mask is True. Here, as in PyTorch's "
                "scaled_dot_product_attention, True means 'may attend' (only nn.MultiheadAttention "
                "reads True as blocked): keep the scores where the mask is True and block the others.",
                fn=_inverted_guarded,
                variants=(_fill(-np.inf, inverted=True), _fill(-1e9, inverted=True)),
                fix="np.where(mask, scores, -np.inf), not np.where(mask, -np.inf, scores); "
                    "masked_fill(~mask, ...) in torch."),
        Mistake("zero_fill", "Blocked scores set to 0 (or multiplied by the mask)",
                "A score of 0 is not 'nothing': e^0 = 1, so every blocked key still gets as much weight as "
                "an allowed key with score 0 (multiplying the scores by the mask does the same). A blocked "
                "key needs a score whose exponential is exactly 0.",
                fn=_fill(0.0),
                fix="np.where(mask, scores, -np.inf) instead of np.where(mask, scores, 0) or scores * mask."),
        Mistake("softmax_over_queries", "Softmax over the queries (axis -2)",
                "The weights of one query are a distribution over the keys: normalise along the axis of "
                "the keys, so that each row, not each column, sums to 1.",
                fn=_softmax_over_queries,
                fix="Reduce the maximum and the sum along axis=-1 (keepdims=True)."),
    ],
    hint="Ask what score a blocked key must have so that its exponential is exactly 0, and apply that "
         "before the softmax. Then trace your code on a row in which every key is blocked: what is its "
         "maximum, what does exp give, what do you divide by? The answer for that row should be zeros. "
         "If every entry comes out NaN, look for a 0 × ∞: −∞ multiplied by a mask of zeros and ones.",
    hints=("Three steps: replace the blocked scores by −∞ (choose, do not multiply); subtract each row's "
           "largest remaining score, using 0 instead where the whole row is −∞; exponentiate and divide "
           "by the row sum, dividing by 1 instead where that sum is 0.",
           "s = where(mask, scores, -inf); top = row max of s, 0 where not finite; e = exp(s - top); "
           "return e / where(sum > 0, sum, 1)."),
    rtol=1e-4, atol=1e-6,  # weights in [0, 1]: a float32 answer (rounding ~1e-7) passes
    # attention with q = scores and k = v = I computes the masked softmax: the library's answer
    forbidden=ATTENTION_SHORTCUTS,
))


# --------------------------------------------------------------------------- packed_causal_mask

def _packed_parts(doc_ids):
    d = _np(doc_ids, np.int64)
    n = d.shape[-1]
    causal = np.arange(n)[None, :] <= np.arange(n)[:, None]  # (n, n): key j <= query i
    same = d[..., :, None] == d[..., None, :]                  # (..., n, n): same document
    real_key = d[..., None, :] >= 0                            # (..., 1, n): the key is not padding
    return causal, same, real_key


def _packed_reference(doc_ids):
    causal, same, real_key = _packed_parts(doc_ids)
    return causal & same & real_key  # (..., n, n)


def _packed_wrong(doc_ids, *, causal_on=True, docs_on=True, pad_on=True, op="and"):
    causal, same, real_key = _packed_parts(doc_ids)
    c = causal if causal_on else np.ones_like(causal)
    s = same if docs_on else np.ones_like(same)
    r = real_key if pad_on else np.ones_like(real_key)
    out = ((c | s) & r) if op == "or" else (c & s & r)
    return np.broadcast_to(out, same.shape).copy()


def _packed_strict(doc_ids):  # j < i: the diagonal blocked
    causal, same, real_key = _packed_parts(doc_ids)
    n = causal.shape[-1]
    return np.broadcast_to(causal & ~np.eye(n, dtype=bool) & same & real_key, same.shape).copy()


def _packed_one_row_only(doc_ids):
    """Right for one row of ids; raises on a batch (axes counted from the front, or n = len(ids))."""
    d = _np(doc_ids, np.int64)
    if d.ndim > 1:
        raise ValueError(f"operands could not be broadcast together with shapes {(d.shape[0],) * 2} "
                         f"{d.shape + d.shape[-1:]}")
    return _packed_reference(d)


def _packed_cases(rng):
    r = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731

    def row(lengths, pad=0, ids=None):
        ids = range(len(lengths)) if ids is None else ids
        return np.concatenate([np.full(L, i) for i, L in zip(ids, lengths)] + [np.full(pad, -1)]).astype(np.int64)

    a, b = row([r(1, 3), r(2, 3)]), row([1, r(1, 2)], pad=1)
    w = max(len(a), len(b))
    batch = np.stack([np.concatenate([a, np.full(w - len(a), -1)]), np.concatenate([b, np.full(w - len(b), -1)])])
    unsorted = rng.choice(np.arange(2, 20), size=3, replace=False)
    return [
        Case(args=(row([r(2, 3), r(2, 3), 1]),), label="three documents, the last of one token"),
        Case(args=(row([r(2, 3), r(2, 4)], pad=r(1, 3)),), label="two documents, then padding tokens"),
        Case(args=(batch,), label="a batch of two packed rows"),
        Case(args=(np.full(r(3, 6), r(0, 9)),), label="one document: the plain causal mask"),
        Case(args=(row([1, r(2, 3), r(2, 3)], pad=1, ids=unsorted),),
             label="ids that are not sorted, a document of one token"),
        Case(args=(np.full(r(1, 3), -1),), label="padding only"),
    ]


register(Exercise(
    name="packed_causal_mask",
    chapter="04_masking",
    prompt="Several documents are packed into one row of tokens; doc_ids[..., p] is the document of "
           "token p (-1 = padding). Return the (..., n, n) bool mask, True where query i may attend to "
           "key j, so that each document is attended as if it were alone in a causal decoder and no "
           "query attends to padding.",
    stub='''def packed_causal_mask(doc_ids):
    """doc_ids: (..., n) ints, the document of each token; -1 marks padding.
    Return a (..., n, n) bool array, True where query i may attend to key j,
    such that every document is attended exactly as if it were alone in a
    causal decoder, and no query attends to padding."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_packed_reference,
    cases=_packed_cases,
    mistakes=[
        Mistake("documents_leak", "Documents can see each other",
                "Your mask is causal and hides padding, but a token still reads the earlier documents "
                "of its row. Packing is only honest if each document is attended as if it were alone: "
                "a key must also belong to the query's document.",
                fn=lambda d: _packed_wrong(d, docs_on=False),
                fix="Also require equal ids: same = d[..., :, None] == d[..., None, :], an (n, n) table "
                    "of queries (rows) against keys (columns)."),
        Mistake("forgot_causal", "The future of each document is visible",
                "Your mask keeps tokens inside their own document but lets each one read the LATER "
                "tokens of that document, the very tokens a decoder is trained to predict. A key must "
                "also lie at or before the query.",
                fn=lambda d: _packed_wrong(d, causal_on=False),
                fix="Combine with the causal rule j <= i: np.arange(n)[None, :] <= np.arange(n)[:, None]."),
        Mistake("padding_is_a_document", "Padding tokens form a document of their own",
                "With only 'causal and same document', the padding tokens (all id -1) attend to one "
                "another as if they were a document. A padding token is never a key; a padding query "
                "then has an empty row, which the masked softmax turns into zeros.",
                fn=lambda d: _packed_wrong(d, pad_on=False),
                fix="Also require the key to be real: (d >= 0)[..., None, :]."),
        Mistake("or_instead_of_and", "The rules are combined with OR",
                "A key must pass every test at once: past AND same document AND real. With OR, any one "
                "test suffices, so tokens see the future of their document and the whole past of the "
                "row.",
                fn=lambda d: _packed_wrong(d, op="or"),
                fix="Combine the bool tables with &, not |."),
        Mistake("causal_only", "Only the causal rule",
                "Your mask is the plain causal mask of the whole row: every token reads the earlier "
                "documents packed before it, and the padding. Each document must be attended as if it "
                "were alone: a key must also belong to the query's document, and must not be padding.",
                fn=lambda d: _packed_wrong(d, docs_on=False, pad_on=False),
                fix="causal & (d[..., :, None] == d[..., None, :]) & (d >= 0)[..., None, :]."),
        Mistake("diagonal_blocked", "A token may not attend to itself (j < i)",
                "The causal rule includes the diagonal: position i's output is computed from tokens "
                "0..i, itself included. Without it the first token of every document has nothing to "
                "attend to, and every other token ignores its own value.",
                fn=_packed_strict,
                fix="Use j <= i, not j < i (np.tril with k=0, not k=-1)."),
        Mistake("true_means_blocked", "True means blocked",
                "Your mask is exactly inverted: True where attention is NOT allowed (the "
                "nn.MultiheadAttention convention). Here True = may attend, as in PyTorch's "
                "scaled_dot_product_attention.",
                fn=lambda d: ~_packed_reference(d),
                fix="Return the allowed table itself, not its negation (~)."),
        Mistake("rows_are_keys", "Rows and columns swapped",
                "Your mask lets query i see keys j >= i: rows are queries and columns are keys, and a "
                "query may look back, not ahead. The lower triangle is allowed, and padding is tested on "
                "the key, the last axis.",
                fn=lambda d: np.swapaxes(_packed_reference(d), -1, -2),
                fix="Transpose the result (np.swapaxes(mask, -1, -2)), or build it with "
                    "d[..., :, None] for the queries and d[..., None, :] for the keys."),
        Mistake("one_row_only", "Right for one row, not for a batch",
                "Your mask is right for a single row of ids but fails on a batch (..., n): the length "
                "or the axes are taken from the front of the shape, which is the batch axis there. Take "
                "n from the last axis and add the new axes at the end.",
                fn=_packed_one_row_only,
                fix="n = doc_ids.shape[-1]; same = d[..., :, None] == d[..., None, :]; "
                    "real = (d >= 0)[..., None, :]."),
    ],
    hint="Write down the three conditions a key must meet, each as a bool table of queries (rows) "
         "against keys (columns) built from the ids by broadcasting, and think about how they must "
         "combine. Then check a padding query: what should its row be?",
    hints=("The three tables: key j at or before query i (n, n); the same document id for query and key "
           "(..., n, n), from the ids along a new last axis compared with the ids along a new "
           "second-to-last axis; and a key id that is not -1 (..., 1, n). All three must hold.",
           "causal (j <= i) & (ids[..., :, None] == ids[..., None, :]) & (ids >= 0)[..., None, :]."),
    output_kind="bool",
))
