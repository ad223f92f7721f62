"""Exercises of chapter 08 (attention at inference): ``lower_right_causal_mask``,
``repeat_kv``, ``apply_rope``.

Conventions (those of the chapter and of attnlib): a bool mask is True where a query may
attend; keys and values are ``(N, h_kv, S, d)`` with heads on dim -3; RoPE uses the
half-split ("rotate_half", GPT-NeoX / Llama) pairing ``(x_i, x_{i+d/2})`` rotated by
``position * base^(-2i/d)``. The reference solutions are plain NumPy, independent of
:mod:`attnlib.masks`, :mod:`attnlib.multihead` and :mod:`attnlib.rope`; a submission that
simply calls those library functions is told to write the idea itself.
"""
from __future__ import annotations

import numpy as np

from ._core import Case, Exercise, Mistake, register
from ..i18n import N_

__all__ = []  # exercises register themselves; nothing to import from here


def _library_mistake(key, what, fix, fn, calls):
    """The mistake of calling the library (recognised by the checker's watch of ``calls``,
    whatever name reached them); ``fn`` is such an answer."""
    return Mistake(key, f"It calls attnlib's own {what}",
                   f"Your function returns the right values by calling attnlib's {what}, which is the "
                   f"answer this exercise asks you to write. {fix}",
                   fn=fn, kind="borrowed", calls=calls)


def _al():
    import attnlib

    return attnlib


# --------------------------------------------------------------------------- lower_right_causal_mask

def _lower_right_reference(L, S):
    i = np.arange(L)[:, None]  # (L, 1) query index
    j = np.arange(S)[None, :]  # (1, S) key index
    return j <= i + (S - L)    # (L, S): the queries are the last L of the S positions


def _lr_cases():
    return [Case(args=(L, S), label=f"L = {L}, S = {S}")
            for L, S in [(1, 7), (3, 5), (4, 4), (2, 9), (5, 3), (6, 8)]]


register(Exercise(
    name="lower_right_causal_mask",
    chapter="08_inference",
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
                "must see all S keys, but yours sees only the first L. Shift the diagonal by S - L: "
                "j <= i + S - L (np.tril(..., k=S - L)).",
                fn=lambda L, S: np.tril(np.ones((L, S), dtype=bool))),
        Mistake("missing_diagonal", "The diagonal is missing (a token cannot see itself)",
                "You used j < i + S - L, so each new query is blocked from its own key and the first "
                "new token of a one-token cache step sees nothing of itself. A causal mask hides only "
                "the future: use j <= i + S - L.",
                fn=lambda L, S: np.arange(S)[None, :] < np.arange(L)[:, None] + (S - L)),
        Mistake("true_means_blocked", "Inverted: True means blocked",
                "Your mask is True exactly where attention is NOT allowed (the convention of "
                "nn.MultiheadAttention's attn_mask). Here True = may attend: return j <= i + S - L, "
                "or invert yours with ~.",
                fn=lambda L, S: ~_lower_right_reference(L, S)),
        Mistake("offset_sign", "The offset has the wrong sign",
                "You shifted the diagonal by L - S instead of S - L, so the boundary sits 2(S - L) keys "
                "too early: every new query misses cached keys it should see. Query i is at position "
                "i + (S - L) among the keys: use j <= i + S - L.",
                fn=lambda L, S: np.arange(S)[None, :] <= np.arange(L)[:, None] + (L - S)),
        Mistake("square_rows", "The last L rows of the S x S causal mask: wrong when L > S",
                "Taking the last L rows of the (S, S) causal mask is right whenever L <= S, but with "
                "more queries than keys (L > S) there are only S rows to take and the shape comes out "
                "wrong (not (L, S)). The condition j <= i + S - L holds for every L and S (with L > S the first "
                "L - S queries see no key at all): build the mask from it, or shift the diagonal of "
                "an (L, S) array by S - L.",
                fn=lambda L, S: np.tril(np.ones((S, S), dtype=bool))[-L:],
                variants=(lambda L, S: np.tril(np.ones((S, S), dtype=bool))[S - L:],)),
        Mistake("no_mask", "Nothing is masked",
                "Every entry is True. That is right only for one new query (L = 1); with several new "
                "tokens (chunked prefill) none of them may see the tokens after it: use "
                "j <= i + S - L.",
                fn=lambda L, S: np.ones((L, S), dtype=bool)),
        _library_mistake("calls_library", "causal_mask(..., align='lower_right')",
                         N_("Build it from np.arange(L)[:, None] and np.arange(S)[None, :] instead."),
                         fn=lambda L, S: _al().causal_mask(L, S, align="lower_right"),
                         calls=("attnlib.masks:causal_mask(align='lower_right')",)),
    ],
    hint="Write the condition for query i and key j first: at which of the S positions does "
         "query i sit when the L queries are the last L? Then evaluate it for all pairs (i, j) at "
         "once.",
    output_kind="bool",
    borrowed=("torch.nn.attention.bias:*",),  # causal_lower_right(L, S)._materialize()
))


# --------------------------------------------------------------------------- repeat_kv

def _repeat_reference(x, n_rep):
    x = np.asarray(x)
    N, h_kv, S, d = x.shape
    out = np.empty((N, h_kv * n_rep, S, d), dtype=x.dtype)
    for m in range(h_kv):  # key/value head m serves query heads m*n_rep ... (m+1)*n_rep - 1
        out[:, m * n_rep:(m + 1) * n_rep] = x[:, m:m + 1]
    return out


def _repeat_cases():
    rng = np.random.default_rng(8)
    return [
        Case(args=(rng.standard_normal((1, 2, 3, 4)), 2), label="2 kv heads, n_rep = 2"),
        Case(args=(rng.standard_normal((2, 3, 5, 2)), 3), label="batch 2, 3 kv heads, n_rep = 3"),
        Case(args=(rng.standard_normal((2, 4, 1, 3)), 2), label="one cached position"),
        Case(args=(rng.standard_normal((1, 1, 4, 4)), 4), label="multi-query: 1 kv head"),
        Case(args=(rng.standard_normal((3, 2, 2, 5)), 1), label="n_rep = 1 (plain multi-head)"),
    ]


register(Exercise(
    name="repeat_kv",
    chapter="08_inference",
    prompt="Repeat each of the h_kv key/value heads n_rep times in place: (N, h_kv, S, d) -> "
           "(N, h_kv * n_rep, S, d), head m becoming heads m*n_rep ... (m+1)*n_rep - 1.",
    stub='''def repeat_kv(x, n_rep):
    """x: (N, h_kv, S, d). Return (N, h_kv * n_rep, S, d) in which head m of x
    appears n_rep times in a row: [a, a, b, b], not [a, b, a, b]."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_repeat_reference,
    cases=_repeat_cases,
    mistakes=[
        Mistake("tiled", "The heads are tiled ([a, b, a, b]) instead of repeated in place",
                "np.tile / torch's .repeat copies the whole block of heads n_rep times, so query head 1 "
                "gets key/value head 1 instead of head 0. Grouped-query attention gives CONSECUTIVE "
                "query heads the same key/value head: repeat each head in place, like "
                "np.repeat(x, n_rep, axis=1) or torch.repeat_interleave(x, n_rep, dim=1).",
                fn=lambda x, n_rep: np.tile(np.asarray(x), (1, n_rep, 1, 1)),
                variants=(lambda x, n_rep: np.concatenate([np.asarray(x)] * n_rep, axis=1),)),
        Mistake("wrong_axis", "Repeated along the wrong axis",
                "Your output repeats positions (or features) instead of heads: it has shape "
                "(N, h_kv, S * n_rep, d) or similar. The heads are axis 1 (dim -3) of "
                "(N, h_kv, S, d): repeat along that axis.",
                fn=lambda x, n_rep: np.repeat(np.asarray(x), n_rep, axis=2),
                variants=(lambda x, n_rep: np.repeat(np.asarray(x), n_rep, axis=3),
                          lambda x, n_rep: np.repeat(np.asarray(x), n_rep, axis=0))),
    ],
    hint="Write out the order of the output heads for h_kv = 2, n_rep = 2, then find the "
         "operation that repeats each element of one axis in place (not the whole block) and "
         "apply it to the head axis.",
    rtol=0.0, atol=0.0,
))


# --------------------------------------------------------------------------- apply_rope

def _rope(x, positions, base=10000.0, *, pairing="half", sign=1.0, freq_exp=2.0, shift=0,
          second_sign=1.0):
    """Reference (defaults) and its catalogued variants (``freq_exp=-2``: base^(+2i/d);
    ``second_sign=-1``: the sine term of the second half only has the wrong sign)."""
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    i = np.arange(d // 2)
    theta = float(base) ** (-freq_exp * i / d)                       # (d/2,)
    ang = (np.asarray(positions, dtype=np.float64) + shift)[..., None] * theta  # (L, d/2)
    cos, sin = np.cos(ang), sign * np.sin(ang)
    if pairing == "half":
        x1, x2 = x[..., : d // 2], x[..., d // 2:]                 # pairs (x_i, x_{i+d/2})
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + second_sign * x1 * sin], axis=-1)
    out = np.empty_like(x)                                          # pairs (x_{2i}, x_{2i+1})
    xe, xo = x[..., 0::2], x[..., 1::2]
    out[..., 0::2] = xe * cos - xo * sin
    out[..., 1::2] = xo * cos + xe * sin
    return out


def _rope_reference(x, positions, base=10000.0):
    return _rope(x, positions, base)


def _rope_cases():
    rng = np.random.default_rng(13)
    return [
        Case(args=(rng.standard_normal((5, 8)), np.arange(5)), label="L = 5, d = 8, positions 0..4"),
        Case(args=(rng.standard_normal((2, 3, 4, 6)), np.arange(4)), label="batched (N, h, L, d), d = 6"),
        Case(args=(rng.standard_normal((3, 16)), np.arange(10, 13)),
             label="3 new tokens at positions 10..12 (after a cache)"),
        Case(args=(rng.standard_normal((4, 4)), np.arange(4)), kwargs={"base": 100.0}, label="base = 100"),
        Case(args=(rng.standard_normal((1, 32)), np.array([1000])), label="one token at position 1000"),
    ]


register(Exercise(
    name="apply_rope",
    chapter="08_inference",
    prompt="Rotary position embedding, half-split convention: for x of shape (..., L, d), rotate the "
           "pair (x_i, x_{i+d/2}) of row l by the angle positions[l] * base**(-2i/d).",
    stub='''def apply_rope(x, positions, base=10000.0):
    """x: (..., L, d) with d even; positions: (L,) ints. Rotate each pair
    (x[..., i], x[..., i + d/2]) of row l by the angle
    positions[l] * base ** (-2 * i / d), i = 0 .. d/2 - 1:
        (a, b) -> (a cos - b sin, b cos + a sin).
    Return an array of the shape of x."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_rope_reference,
    cases=_rope_cases,
    mistakes=[
        Mistake("interleaved_pairs", "Interleaved pairs (x_2i, x_2i+1) instead of half-split",
                "You rotated neighbouring features together, the pairing of the RoFormer paper and "
                "GPT-J. It is a valid RoPE, but a different one: the two differ by a permutation of "
                "the features, and weights trained with one are wrong with the other. This exercise "
                "(like Llama and GPT-NeoX) pairs x_i with x_{i + d/2}: split x into halves x1, x2 and "
                "return concat(x1 cos - x2 sin, x2 cos + x1 sin).",
                fn=lambda x, p, base=10000.0: _rope(x, p, base, pairing="interleaved")),
        Mistake("reversed_rotation", "The rotation goes the wrong way",
                "Your signs are swapped: (a cos + b sin, b cos - a sin) rotates by -angle. Scores still "
                "depend only on relative position, but with the opposite sign, so weights trained the "
                "usual way break. rotate_half(x) = concat(-x2, x1); the result is x cos + "
                "rotate_half(x) sin.",
                fn=lambda x, p, base=10000.0: _rope(x, p, base, sign=-1.0)),
        Mistake("freq_i_over_d", "Frequencies base^(-i/d) instead of base^(-2i/d)",
                "Your pair i turns at base**(-i/d), so the slowest pair only reaches base**(-1/2) and the "
                "long wavelengths that encode far-apart positions are lost. The exponent counts "
                "features two at a time: theta_i = base ** (-2 * i / d) for i = 0 .. d/2 - 1 (in "
                "numpy: base ** (-np.arange(0, d, 2) / d)).",
                fn=lambda x, p, base=10000.0: _rope(x, p, base, freq_exp=1.0)),
        Mistake("freq_inverted", "Frequencies base^(+2i/d): the exponent's sign is lost",
                "Your pair i turns at base**(2i/d) (or you divided the positions by theta instead of "
                "multiplying), so the angles GROW with i up to almost base radians per position "
                "instead of shrinking to base**(-(d-2)/d): no pair turns slowly enough to tell far-apart "
                "positions apart. theta_i is the inverse frequency, base ** (-2 * i / d), and the angle "
                "is positions[l] * theta_i.",
                fn=lambda x, p, base=10000.0: _rope(x, p, base, freq_exp=-2.0)),
        Mistake("not_a_rotation", "One sine term has the wrong sign: not a rotation",
                "Only one of your two sine terms has a flipped sign, so the map [[cos, -sin], [-sin, "
                "cos]] (or [[cos, sin], [sin, cos]]) is not a rotation: it changes the length of each "
                "pair, and q.k no longer depends on the offset only. A rotation by phi has a minus on "
                "one sine term and a plus on the other: (a cos - b sin, b cos + a sin).",
                fn=lambda x, p, base=10000.0: _rope(x, p, base, second_sign=-1.0),
                variants=(lambda x, p, base=10000.0: _rope(x, p, base, sign=-1.0, second_sign=-1.0),)),
        Mistake("positions_from_one", "Positions start at 1",
                "Your angles use position + 1 (or np.arange(1, L + 1)), so the first token is already "
                "rotated and every token is off by one from a cache built the usual way. Use the "
                "positions as given: the first token of a sequence has position 0 and is not rotated.",
                fn=lambda x, p, base=10000.0: _rope(x, p, base, shift=1),
                variants=(lambda x, p, base=10000.0: _rope(x, np.arange(1, np.shape(x)[-2] + 1), base),)),
        Mistake("positions_ignored", "The given positions are ignored",
                "You rotated row l by l (np.arange(L)) instead of positions[l]. That is right for a "
                "whole sequence but wrong for new tokens after a cache, whose positions start at the "
                "cache length. Use positions[:, None] * theta.",
                fn=lambda x, p, base=10000.0: _rope(x, np.arange(np.shape(x)[-2]), base)),
    ],
    hint="Which feature is the partner of feature i? Give each pair its own frequency and each "
         "(row, pair) its own angle, then write the 2 x 2 rotation of every pair with whole-array "
         "operations on the two halves of x.",
    # Llama and Hugging Face compute the angles in float32: at position 1000 the angle itself
    # is then off by up to ~6e-5 rad (one float32 ulp of 1000), a correct answer all the same.
    # Every catalogued mistake differs by more than 0.1 on the first case.
    rtol=1e-4, atol=2e-4,
))
