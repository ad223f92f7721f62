"""Exercises of chapter 04 (masking): ``causal_mask``, ``padding_mask``, ``combined_mask``.

Every mask here is a bool array with the convention of
``torch.nn.functional.scaled_dot_product_attention``: **True = may attend** (the key
takes part), False = blocked. The reference solutions are plain NumPy, independent of
:mod:`attnlib.masks`, so the checker does not trust the code it teaches.
"""
from __future__ import annotations

import numpy as np

from ._core import Case, Exercise, Mistake, register

__all__ = []  # exercises register themselves; nothing to import from here


def _lengths(lengths) -> np.ndarray:
    """Learner-friendly: accept a list, a NumPy array or a torch tensor of lengths."""
    if hasattr(lengths, "detach"):
        lengths = lengths.detach().cpu().numpy()
    return np.asarray(lengths, dtype=np.int64)


# --------------------------------------------------------------------------- causal_mask

def _causal_reference(n):
    i = np.arange(n)[:, None]  # query positions, (n, 1)
    j = np.arange(n)[None, :]  # key positions,   (1, n)
    return j <= i              # (n, n): a query sees itself and the past


register(Exercise(
    name="causal_mask",
    chapter="04_masking",
    prompt="Return the (n, n) bool causal mask: entry [i, j] is True when query i may attend to key j (j <= i).",
    stub='''def causal_mask(n):
    """Return an (n, n) bool array, True where query i may attend to
    key j, i.e. j <= i."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_causal_reference,
    cases=lambda: [Case(args=(n,), label=f"n = {n}") for n in (1, 2, 3, 5, 8)],
    mistakes=[
        Mistake("diagonal_masked", "The diagonal is masked out",
                "Your mask only allows keys strictly before the query (j < i), so a token cannot see "
                "itself and the first row is empty. A causal mask blocks the future only: use j <= i "
                "(np.tril(np.ones((n, n), bool)), i.e. k=0, not k=-1).",
                fn=lambda n: np.tril(np.ones((n, n), dtype=bool), k=-1)),
        Mistake("upper_triangle", "Upper instead of lower triangle",
                "Your mask lets each query see itself and the FUTURE (j >= i) and hides the past. Rows are "
                "queries and columns keys, so the allowed part is the lower triangle: np.tril, not np.triu.",
                fn=lambda n: np.triu(np.ones((n, n), dtype=bool))),
        Mistake("true_means_blocked", "True means blocked",
                "Your mask is True on the future (j > i): that is the 'blocked' convention of "
                "nn.MultiheadAttention's attn_mask. This course (and PyTorch SDPA) uses True = may "
                "attend; invert it with ~mask, or build j <= i directly.",
                fn=lambda n: ~_causal_reference(n)),
        Mistake("additive_float_mask", "An additive float mask instead of a bool mask",
                "You returned 0 / -inf scores to add before the softmax. That is a valid mask in another "
                "form, but this exercise asks for bool (True = may attend): return j <= i itself.",
                fn=lambda n: np.where(_causal_reference(n), 0.0, -np.inf)),
        Mistake("all_true", "Nothing is masked",
                "Every entry is True, which is the bidirectional (encoder) pattern. A decoder must hide "
                "the future: set entry [i, j] to j <= i.",
                fn=lambda n: np.ones((n, n), dtype=bool)),
    ],
    hint="Compare np.arange(n)[:, None] (the query index i) with np.arange(n)[None, :] (the key index j).",
    output_kind="bool",
))


# --------------------------------------------------------------------------- padding_mask

def _padding_reference(lengths, max_len):
    pos = np.arange(max_len)[None, :]        # (1, max_len)
    return pos < _lengths(lengths)[:, None]  # (batch, 1) -> (batch, max_len)


def _padding_cases():
    return [
        Case(args=(np.array([3, 1, 0, 5]), 5), label="mixed lengths incl. 0 and max_len"),
        Case(args=(np.array([2]), 4), label="one sequence with padding"),
        Case(args=(np.array([0, 4, 2]), 4), label="an empty sequence first"),
        Case(args=(np.array([1]), 1), label="max_len = 1"),
        Case(args=(np.array([6, 6]), 6), label="no padding at all"),
        Case(args=(np.array([2, 7, 3]), 9), label="batch != max_len"),
    ]


register(Exercise(
    name="padding_mask",
    chapter="04_masking",
    prompt="Return the (batch, max_len) bool mask that is True at the real tokens: position p of "
           "sequence b is real when p < lengths[b].",
    stub='''def padding_mask(lengths, max_len):
    """lengths: (batch,) ints. Return a (batch, max_len) bool array, True at the
    real tokens: entry [b, p] is True when position p < lengths[b]."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_padding_reference,
    cases=_padding_cases,
    mistakes=[
        Mistake("off_by_one_long", "Padding is off by one (one pad token too many kept)",
                "You used position <= length, so the first padding token counts as real and an empty "
                "sequence gets one real token. Positions run 0 .. length-1: use position < length.",
                fn=lambda lengths, max_len: np.arange(max_len)[None, :] <= _lengths(lengths)[:, None]),
        Mistake("off_by_one_short", "Padding is off by one (the last real token dropped)",
                "You used position < length - 1 (or position + 1 < length), which hides the last real "
                "token of every sequence. A sequence of length L has real positions 0 .. L-1: use "
                "position < length.",
                fn=lambda lengths, max_len: np.arange(max_len)[None, :] < _lengths(lengths)[:, None] - 1),
        Mistake("inverted", "The meaning is inverted (True = padding)",
                "Your mask is True at the padding and False at the real tokens: that is the convention "
                "of nn.MultiheadAttention's key_padding_mask. Here True means 'real token, may be "
                "attended to': use position < length (or invert with ~).",
                fn=lambda lengths, max_len: ~_padding_reference(lengths, max_len)),
        Mistake("transposed", "The axes are swapped",
                "Your mask has shape (max_len, batch). Put the batch first: compare "
                "np.arange(max_len)[None, :] with lengths[:, None] to get (batch, max_len).",
                fn=lambda lengths, max_len: _padding_reference(lengths, max_len).T),
        Mistake("kept_broadcast_axis", "An extra axis of size 1",
                "Your mask has shape (batch, 1, max_len), like al.padding_mask, whose middle axis "
                "broadcasts over the queries. This exercise asks for the plain (batch, max_len) "
                "table: drop the middle axis (compare positions[None, :] with lengths[:, None]).",
                fn=lambda lengths, max_len: _padding_reference(lengths, max_len)[:, None, :]),
        Mistake("max_len_ignored", "The mask is as wide as the longest sequence, not max_len",
                "You used np.arange(max(lengths)), so when the batch is padded beyond its longest "
                "sequence the mask has too few columns. The keys axis has max_len positions: use "
                "np.arange(max_len).",
                fn=lambda lengths, max_len: _padding_reference(lengths, int(_lengths(lengths).max()))),
    ],
    hint="Broadcast np.arange(max_len)[None, :] (positions) against lengths[:, None].",
    output_kind="bool",
))


# --------------------------------------------------------------------------- combined_mask

def _combined_reference(lengths, n):
    i = np.arange(n)[:, None]                      # (n, 1) query index
    j = np.arange(n)[None, :]                      # (1, n) key index
    causal = j <= i                                # (n, n)
    real_key = j < _lengths(lengths)[:, None, None]  # (batch, 1, 1) -> (batch, 1, n)
    return causal[None] & real_key                 # (batch, n, n)


def _combined_wrong(lengths, n, *, op="and", on="keys", causal=True, padding=True):
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    L = _lengths(lengths)[:, None, None]
    c = (j <= i)[None] if causal else np.ones((1, n, n), bool)
    if not padding:
        p = np.ones((len(L), 1, n), bool)
    elif on == "keys":
        p = j < L
    else:  # queries (with the causal mask this equals masking queries and keys)
        p = i < L
    out = (c | p) if op == "or" else (c & p)
    return np.broadcast_to(out, (len(L), n, n)).copy()


def _combined_cases():
    return [
        Case(args=(np.array([3, 0, 4]), 4), label="lengths 3, 0, 4 with n = 4"),
        Case(args=(np.array([2, 5]), 5), label="lengths 2, 5 with n = 5"),
        Case(args=(np.array([1]), 1), label="n = 1"),
        Case(args=(np.array([4, 1, 6]), 6), label="lengths 4, 1, 6 with n = 6"),
    ]


register(Exercise(
    name="combined_mask",
    chapter="04_masking",
    prompt="Return the (batch, n, n) bool mask of a padded decoder batch: entry [b, i, j] is True "
           "when j <= i (causal) AND key j is a real token of sequence b (j < lengths[b]).",
    stub='''def combined_mask(lengths, n):
    """lengths: (batch,) ints. Return a (batch, n, n) bool array, True
    where query i of sequence b may attend to key j: j <= i (causal) and
    j < lengths[b] (the key is a real token)."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_combined_reference,
    cases=_combined_cases,
    mistakes=[
        Mistake("or_instead_of_and", "The masks are combined with OR",
                "A key must pass BOTH tests: it is not in the future AND it is a real token. With OR, "
                "a query sees the future whenever it is real and sees padding whenever it is in the "
                "past. Combine bool masks with & (and add -inf masks, which is the same thing).",
                fn=lambda lengths, n: _combined_wrong(lengths, n, op="or")),
        Mistake("padding_on_queries", "The padding mask is applied to the queries (rows)",
                "Your padding test uses the query index i, so padded query rows are blanked (fully "
                "masked rows: NaN with a naive softmax) while what matters is that no query reads a "
                "padded KEY. Padding hides keys, the columns (axis -1): broadcast the (batch, n) "
                "padding mask as [:, None, :].",
                fn=lambda lengths, n: _combined_wrong(lengths, n, on="queries")),
        Mistake("forgot_padding", "The padding mask is missing",
                "Your mask is the causal mask for every sequence, so short sequences attend to their "
                "padding tokens. Combine it with j < lengths[b].",
                fn=lambda lengths, n: _combined_wrong(lengths, n, padding=False)),
        Mistake("forgot_causal", "The causal mask is missing",
                "Your mask only hides padding, so queries still see future real tokens. Combine it with "
                "j <= i.",
                fn=lambda lengths, n: _combined_wrong(lengths, n, causal=False)),
        Mistake("true_means_blocked", "True means blocked",
                "Your mask is exactly inverted: True where attention is NOT allowed (the "
                "nn.MultiheadAttention convention). Here True = may attend: return ~your_mask, or "
                "build it from j <= i and j < length.",
                fn=lambda lengths, n: ~_combined_reference(lengths, n)),
    ],
    hint="Build causal (n, n) and padding (batch, n); combine as causal[None, :, :] & padding[:, None, :].",
    output_kind="bool",
))
