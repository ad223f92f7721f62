"""Exercises of chapter 04 (masking): ``masked_softmax`` and ``packed_causal_mask``.

Every mask here is a bool array with the convention of
``torch.nn.functional.scaled_dot_product_attention``: **True = may attend** (the key
takes part), False = blocked. The reference solutions are plain NumPy, independent of
:mod:`attnlib.softmax` and :mod:`attnlib.masks`, so the checker does not trust the code it
teaches.

* ``masked_softmax(scores, mask)`` needs the chapter's three ideas at once: the mask acts
  on the scores *before* the softmax, a blocked key must get an exact zero, and a row with
  nothing to attend to must give zeros (not NaN, not a uniform average).
* ``packed_causal_mask(doc_ids)`` combines three rules into one table (causal, same
  document, not padding), the way training on packed sequences needs it.
"""
from __future__ import annotations

import numpy as np

from ._core import Case, Exercise, Mistake, register

__all__ = []  # exercises register themselves; nothing to import from here


def _np(a, dtype=None) -> np.ndarray:
    """Learner-friendly: a NumPy copy of a list, a NumPy array or a torch tensor."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a, dtype=dtype)


# --------------------------------------------------------------------------- masked_softmax

def _stable_softmax(s):
    """Row softmax (last axis) with the row maximum subtracted; no guard of any kind."""
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


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
        e = np.exp(s) * m
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


def _masked_softmax_cases():
    rng = np.random.default_rng(41)
    causal4 = np.tril(np.ones((4, 4), dtype=bool))
    pad = np.arange(5)[None, None, :] < np.array([5, 2])[:, None, None]   # (2, 1, 5)
    empty_row = np.ones((3, 4), dtype=bool)
    empty_row[1] = False
    decoder = np.tril(np.ones((4, 4), dtype=bool))[None] & (np.arange(4) < np.array([[3], [0]]))[:, None, :]
    return [
        Case(args=(rng.standard_normal((4, 4)), causal4), label="causal mask, 4 x 4"),
        Case(args=(2 * rng.standard_normal((2, 3, 5)), pad), label="padding mask (2, 1, 5) broadcast over queries"),
        Case(args=(rng.standard_normal((3, 4)), empty_row), label="row 1 may attend to nothing"),
        Case(args=(np.array([[0.0, 800.0], [1.0, 2.0]]), np.tril(np.ones((2, 2), dtype=bool))),
             label="a blocked score of 800 beside an allowed 0"),
        Case(args=(rng.standard_normal((2, 4, 4)), decoder),
             label="causal & padding, lengths 3 and 0 (an empty sequence)"),
        Case(args=(np.array([[0.5]]), np.array([[False]])), label="one query, one blocked key"),
        Case(args=(np.array([[1000.0, 999.0, 0.0], [-1.0, 0.0, 1.0]]),
                   np.array([[True, True, False], [True, True, True]])),
             label="large allowed scores (1000 and 999) in row 0, small ones in row 1"),
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
                fn=_mask_after),
        Mistake("renormalised_after_softmax", "Masked after the softmax, then renormalised",
                "Dividing the zeroed weights by their row sum repairs the algebra, but not the numerics: "
                "the softmax subtracted the row maximum, which can belong to a blocked key (a blocked "
                "score of 800 underflows every allowed weight to 0), and a row with no allowed key "
                "divides 0 by 0. Both give NaN. Mask the scores before the softmax, and decide "
                "explicitly what an empty row returns (zeros).",
                fn=_renormalise_after),
        Mistake("minus_inf_without_guard", "−∞ fill without a guard for empty rows",
                "Setting the blocked scores to −∞ before the softmax is right, but a row in which every "
                "key is blocked has maximum −∞, and −∞ − (−∞) = NaN, so the whole row is NaN (and the NaN "
                "spreads to every later layer). Treat that row separately: its weights must be all "
                "zeros, e.g. replace a −∞ row maximum by 0 and divide by 1 where the row sum is 0.",
                fn=_fill(-np.inf)),
        Mistake("max_includes_blocked", "The row maximum includes the blocked keys",
                "Your weights are right except where a blocked score dwarfs the allowed ones: you "
                "subtracted the maximum over all keys (or took the full softmax and renormalised after "
                "masking), so beside a blocked score of 800 every allowed exp underflows to 0 and the row "
                "comes out as zeros instead of [1, 0]. Block the keys first, then take the maximum over "
                "the allowed scores only.",
                fn=_renormalise_after_guarded, variants=(_renormalise_after_eps,)),
        Mistake("global_max", "One maximum for the whole array instead of one per row",
                "Subtracting a constant cancels only inside a row. You subtracted the largest score of "
                "the whole array, so a row whose scores are far below another row's maximum (row 1 "
                "beside a score of 1000) underflows to exp = 0 everywhere. Subtract each row's own "
                "largest allowed score (keepdims=True on the last axis).",
                fn=_global_max),
        Mistake("finite_fill", "A finite fill (−1e9 or finfo.min) instead of −∞",
                "A finite stand-in such as −1e9 removes blocked keys only while some key of the row is "
                "allowed. In a row where every key is blocked all scores are equal, so the softmax "
                "returns a uniform average over the blocked keys instead of zeros: a padded query "
                "silently reads the padding. Use −∞ (exp gives an exact 0) and give an empty row zeros.",
                fn=_fill(-1e9),
                variants=(_fill(np.finfo(np.float64).min), _fill(-1e4))),
        Mistake("no_max_subtraction", "The row maximum is not subtracted before exp",
                "Blocking with −∞ is right, but exp(1000) overflows to inf and inf / inf is NaN. Subtract "
                "each row's largest allowed score before exp (it cancels in the ratio, chapter 2's stable "
                "softmax), and keep the empty-row case at zeros.",
                fn=_no_max_subtraction, variants=(_exp_times_mask,)),
        Mistake("true_means_blocked", "The mask is read the wrong way round (True = blocked)",
                "You blocked the keys where the mask is True. Here, as in PyTorch's "
                "scaled_dot_product_attention, True means 'may attend' (only nn.MultiheadAttention "
                "reads True as blocked): keep the scores where the mask is True and block the others.",
                fn=_inverted_guarded,
                variants=(_fill(-np.inf, inverted=True), _fill(-1e9, inverted=True))),
        Mistake("zero_fill", "Blocked scores set to 0 (or multiplied by the mask)",
                "A score of 0 is not 'nothing': e^0 = 1, so every blocked key still gets as much weight as "
                "an allowed key with score 0 (scores * mask does the same). A blocked key needs a score "
                "whose exponential is exactly 0.",
                fn=_fill(0.0)),
        Mistake("softmax_over_queries", "Softmax over the queries (axis -2)",
                "The weights of one query are a distribution over the keys: normalise along the last "
                "axis (axis=-1), so that each row, not each column, sums to 1.",
                fn=_softmax_over_queries),
    ],
    hint="Ask what score a blocked key must have so that its exponential is exactly 0, and apply that "
         "before the softmax. Then trace your code on a row in which every key is blocked: what is its "
         "maximum, what does exp give, what do you divide by? The answer for that row should be zeros. "
         "If every entry comes out NaN, look for a 0 × ∞: −∞ multiplied by a mask of zeros and ones.",
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


def _packed_cases():
    return [
        Case(args=(np.array([0, 0, 0, 1, 1, 2]),), label="three documents of lengths 3, 2, 1"),
        Case(args=(np.array([0, 0, 1, 1, 1, -1, -1]),), label="two documents, then two padding tokens"),
        Case(args=(np.array([[0, 0, 1, 1], [0, 1, 1, -1]]),), label="a batch of two packed rows"),
        Case(args=(np.array([5, 5, 5, 5]),), label="one document: the plain causal mask"),
        Case(args=(np.array([7, 3, 3, 9, 9, 9, -1]),), label="ids that are not sorted, a document of one token"),
        Case(args=(np.array([-1, -1]),), label="padding only"),
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
                "also require doc_ids of query and key to be equal, an (n, n) table built by comparing "
                "the ids along the rows with the ids along the columns.",
                fn=lambda d: _packed_wrong(d, docs_on=False)),
        Mistake("forgot_causal", "The future of each document is visible",
                "Your mask keeps tokens inside their own document but lets each one read the LATER "
                "tokens of that document, the very tokens a decoder is trained to predict. Combine it "
                "with the causal rule j <= i.",
                fn=lambda d: _packed_wrong(d, causal_on=False)),
        Mistake("padding_is_a_document", "Padding tokens form a document of their own",
                "With only 'causal and same document', the padding tokens (all id -1) attend to one "
                "another as if they were a document. A padding token is never a key: also require "
                "doc_ids[j] >= 0; a padding query then has an empty row, which the masked softmax "
                "turns into zeros.",
                fn=lambda d: _packed_wrong(d, pad_on=False)),
        Mistake("or_instead_of_and", "The rules are combined with OR",
                "A key must pass every test at once: past AND same document AND real. With OR, any one "
                "test suffices, so tokens see the future of their document and the whole past of the "
                "row. Combine bool masks with &.",
                fn=lambda d: _packed_wrong(d, op="or")),
        Mistake("causal_only", "Only the causal rule",
                "Your mask is the plain causal mask of the whole row: every token reads the earlier "
                "documents packed before it, and the padding. Each document must be attended as if it "
                "were alone: a key must also belong to the query's document, and must not be padding.",
                fn=lambda d: _packed_wrong(d, docs_on=False, pad_on=False)),
        Mistake("diagonal_blocked", "A token may not attend to itself (j < i)",
                "The causal rule is j <= i, not j < i: position i's output is computed from tokens "
                "0..i, itself included. With j < i the first token of every document has nothing to "
                "attend to, and every other token ignores its own value. Keep the diagonal.",
                fn=_packed_strict),
        Mistake("true_means_blocked", "True means blocked",
                "Your mask is exactly inverted: True where attention is NOT allowed (the "
                "nn.MultiheadAttention convention). Here True = may attend, as in PyTorch's "
                "scaled_dot_product_attention.",
                fn=lambda d: ~_packed_reference(d)),
        Mistake("rows_are_keys", "Rows and columns swapped",
                "Your mask lets query i see keys j >= i: rows are queries and columns are keys, and a "
                "query may look back, not ahead. Transpose the causal part (the lower triangle is "
                "allowed), and test padding on the key, the last axis.",
                fn=lambda d: np.swapaxes(_packed_reference(d), -1, -2)),
    ],
    hint="Write down the three conditions a key must meet, each as a bool table of queries (rows) "
         "against keys (columns) built from the ids by broadcasting, and think about how they must "
         "combine. Then check a padding query: what should its row be?",
    output_kind="bool",
))
