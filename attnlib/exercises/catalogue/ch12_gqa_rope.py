"""Exercises of chapter 12 (fewer key/value heads and rotated positions): ``repeat_kv`` and
``apply_rope``.

Conventions (those of the chapter and of attnlib): keys and values are ``(N, h_kv, S, d)``
with heads on dim -3; RoPE uses the half-split ("rotate_half", GPT-NeoX / Llama) pairing
``(x_i, x_{i+d/2})`` rotated by ``position * base^(-2i/d)``. The reference solutions are plain
NumPy, independent of :mod:`attnlib.kernels.multihead` and :mod:`attnlib.kernels.rope`; a
submission that simply calls those library functions is told to write the idea itself.
"""
from __future__ import annotations

import numpy as np

from ... import kernels
from .._model import Case, Exercise, Mistake, register

__all__ = []  # exercises register themselves; nothing to import from here


# --------------------------------------------------------------------------- repeat_kv

def _repeat_reference(x, n_rep):
    x = np.asarray(x)
    N, h_kv, S, d = x.shape
    out = np.empty((N, h_kv * n_rep, S, d), dtype=x.dtype)
    for m in range(h_kv):  # key/value head m serves query heads m*n_rep ... (m+1)*n_rep - 1
        out[:, m * n_rep:(m + 1) * n_rep] = x[:, m:m + 1]
    return out


def _repeat_cases(rng):
    n = rng.standard_normal
    return [
        Case(args=(n((1, 2, 3, 4)), 2), label="2 kv heads, n_rep = 2"),
        Case(args=(n((2, 3, 5, 2)), 3), label="batch 2, 3 kv heads, n_rep = 3"),
        Case(args=(n((2, 4, 1, 3)), 2), label="one cached position"),
        Case(args=(n((1, 1, 4, 4)), 4), label="multi-query: 1 kv head"),
        Case(args=(n((3, 2, 2, 5)), 1), label="n_rep = 1 (plain multi-head)"),
    ]


register(Exercise(
    name="repeat_kv",
    chapter="12_gqa_rope",
    prompt="Repeat each of the h_kv key/value heads n_rep times, the copies of a head next to each "
           "other: (N, h_kv, S, d) -> (N, h_kv * n_rep, S, d), head m becoming heads "
           "m*n_rep ... (m+1)*n_rep - 1.",
    stub='''def repeat_kv(x, n_rep):
    """x: (N, h_kv, S, d). Return (N, h_kv * n_rep, S, d) in which head m of x
    appears n_rep times in a row: [a, a, b, b], not [a, b, a, b]."""
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_repeat_reference,
    cases=_repeat_cases,
    mistakes=[
        Mistake("tiled", "The heads are tiled ([a, b, a, b]) instead of each repeated next to itself",
                "Copying the whole block of heads n_rep times gives query head 1 key/value head 1 "
                "instead of head 0. Grouped-query attention gives CONSECUTIVE query heads the same "
                "key/value head: repeat each element of the head axis, not the whole axis.",
                fn=lambda x, n_rep: np.tile(np.asarray(x), (1, n_rep, 1, 1)),
                variants=(lambda x, n_rep: np.concatenate([np.asarray(x)] * n_rep, axis=1),),
                fix="np.repeat(x, n_rep, axis=1) (torch: x.repeat_interleave(n_rep, dim=1)), not "
                    "np.tile or torch's .repeat."),
        Mistake("wrong_axis", "Repeated along the wrong axis",
                "Your output repeats positions (or features, or sequences) instead of heads: the shape "
                "comes out as (N, h_kv, S * n_rep, d) or similar. The heads are axis 1 (dim -3) of "
                "(N, h_kv, S, d).",
                fn=lambda x, n_rep: np.repeat(np.asarray(x), n_rep, axis=2),
                variants=(lambda x, n_rep: np.repeat(np.asarray(x), n_rep, axis=3),
                          lambda x, n_rep: np.repeat(np.asarray(x), n_rep, axis=0)),
                fix="Repeat along axis=1 (dim=1)."),
        Mistake("flattened", "The array is flattened",
                "np.repeat without an axis (and torch's repeat_interleave without dim) first flattens "
                "its input to one long vector, so the result has no heads at all. Name the axis to "
                "repeat along.",
                fn=lambda x, n_rep: np.repeat(np.asarray(x), n_rep),
                fix="np.repeat(x, n_rep, axis=1)."),
        Mistake("forgot_reshape", "The new axis is never merged into the heads",
                "You returned (N, h_kv, n_rep, S, d): the copies sit on a new axis of their own. Merge "
                "it with the head axis so that the copies of head m become consecutive heads.",
                fn=lambda x, n_rep: np.broadcast_to(np.asarray(x)[:, :, None],
                                                    (x.shape[0], x.shape[1], n_rep, *x.shape[2:])).copy(),
                fix=".reshape(N, h_kv * n_rep, S, d) after the broadcast."),
    ],
    hint="Write out the order of the output heads for h_kv = 2, n_rep = 2, then find the "
         "operation that repeats each element of one axis (not the whole block) and "
         "apply it to the head axis.",
    hints=("The output heads are [a, a, b, b]: each key/value head followed by its copies. NumPy's "
           "repeat does exactly that to the elements of one axis; alternatively add a new axis after "
           "the heads, broadcast it to n_rep and merge it with the heads.",
           "np.repeat(x, n_rep, axis=1)."),
    rtol=0.0, atol=0.0,  # copies of the input: exact
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


def _rope_cases(rng):
    n = rng.standard_normal
    start = int(rng.integers(5, 50))
    gaps = np.sort(rng.choice(np.arange(1, 60), size=4, replace=False))  # not consecutive
    while np.all(np.diff(gaps) == 1):
        gaps = np.sort(rng.choice(np.arange(1, 60), size=4, replace=False))
    return [
        Case(args=(n((5, 8)), np.arange(5)), label="L = 5, d = 8, positions 0..4"),
        Case(args=(n((2, 3, 4, 6)), np.arange(4)), label="batched (N, h, L, d), d = 6"),
        Case(args=(n((3, 16)), np.arange(start, start + 3)),
             label="3 new tokens after a cache (positions start above 0)"),
        Case(args=(n((4, 4)), np.arange(4)), kwargs={"base": 100.0}, label="base = 100"),
        Case(args=(n((1, 32)), np.array([int(rng.integers(500, 1001))])), label="one token at a position near 1000"),
        Case(args=(n((2, 4, 8)), gaps), label="positions with gaps (not consecutive)"),
    ]


register(Exercise(
    name="apply_rope",
    chapter="12_gqa_rope",
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
                "(like Llama and GPT-NeoX) pairs feature i with feature i + d/2: the first half of the "
                "features with the second half.",
                fn=lambda x, p, base=10000.0: _rope(x, p, base, pairing="interleaved"),
                fix="x1, x2 = x[..., :d // 2], x[..., d // 2:]; return "
                    "np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)."),
        Mistake("reversed_rotation", "The rotation goes the wrong way",
                "Your signs are swapped: you rotate by -angle. Scores still depend only on relative "
                "position, but with the opposite sign, so weights trained the usual way break. The "
                "first component loses the sine term, the second gains it.",
                fn=lambda x, p, base=10000.0: _rope(x, p, base, sign=-1.0),
                fix="(a, b) -> (a cos - b sin, b cos + a sin); equivalently x cos + rotate_half(x) sin "
                    "with rotate_half(x) = concat(-x2, x1)."),
        Mistake("freq_i_over_d", "Frequencies base^(-i/d) instead of base^(-2i/d)",
                "Your pair i turns at base**(-i/d), so the slowest pair only reaches base**(-1/2) and the "
                "long wavelengths that encode far-apart positions are lost. The exponent counts "
                "features two at a time, one pair per step.",
                fn=lambda x, p, base=10000.0: _rope(x, p, base, freq_exp=1.0),
                fix="theta_i = base ** (-2 * i / d) for i = 0 .. d/2 - 1 "
                    "(base ** (-np.arange(0, d, 2) / d))."),
        Mistake("freq_inverted", "Frequencies base^(+2i/d): the exponent's sign is lost",
                "Your pair i turns at base**(2i/d) (or you divided the positions by theta instead of "
                "multiplying), so the angles GROW with i up to almost base radians per position "
                "instead of shrinking: no pair turns slowly enough to tell far-apart positions apart. "
                "theta_i is an inverse frequency, below 1 for i > 0.",
                fn=lambda x, p, base=10000.0: _rope(x, p, base, freq_exp=-2.0),
                fix="theta_i = base ** (-2 * i / d) and angle = positions[l] * theta_i."),
        Mistake("not_a_rotation", "One sine term has the wrong sign: not a rotation",
                "Only one of your two sine terms has a flipped sign, so the map [[cos, -sin], [-sin, "
                "cos]] (or [[cos, sin], [sin, cos]]) is not a rotation: it changes the length of each "
                "pair, and q.k no longer depends on the offset only. A rotation has a minus on one "
                "sine term and a plus on the other.",
                fn=lambda x, p, base=10000.0: _rope(x, p, base, second_sign=-1.0),
                variants=(lambda x, p, base=10000.0: _rope(x, p, base, sign=-1.0, second_sign=-1.0),),
                fix="(a cos - b sin, b cos + a sin)."),
        Mistake("positions_from_one", "Positions start at 1",
                "Your angles use position + 1, so the first token is already rotated and every token is "
                "off by one from a cache built the usual way. Use the positions as given: the first "
                "token of a sequence has position 0 and is not rotated.",
                fn=lambda x, p, base=10000.0: _rope(x, p, base, shift=1),
                variants=(lambda x, p, base=10000.0: _rope(x, np.arange(1, np.shape(x)[-2] + 1), base),),
                fix="angle = np.asarray(positions)[:, None] * theta, without + 1."),
        Mistake("positions_ignored", "The given positions are ignored",
                "You rotated row l by l instead of positions[l]. That is right for a whole sequence but "
                "wrong for new tokens after a cache, whose positions start at the cache length.",
                fn=lambda x, p, base=10000.0: _rope(x, np.arange(np.shape(x)[-2]), base),
                fix="Use positions[:, None] * theta, not np.arange(L)[:, None] * theta."),
        Mistake("positions_consecutive", "Only the first position is used",
                "You took positions[0] and counted up from it, assuming the positions are consecutive. "
                "They need not be (tokens dropped, sequences packed, speculative decoding): each row "
                "has its own position.",
                fn=lambda x, p, base=10000.0: _rope(x, np.asarray(p)[0] + np.arange(np.shape(x)[-2]), base),
                fix="Use every entry: np.asarray(positions)[:, None] * theta."),
    ],
    hint="Which feature is the partner of feature i? Give each pair its own frequency and each "
         "(row, pair) its own angle, then write the 2 x 2 rotation of every pair with whole-array "
         "operations on the two halves of x.",
    hints=("Feature i pairs with feature i + d/2. The frequencies form a vector of d/2 numbers, "
           "base to the power -2i/d; the angles are the outer product of the positions (L) with it, "
           "(L, d/2). The first half becomes a cos - b sin, the second b cos + a sin.",
           "theta = base ** (-arange(0, d, 2) / d); angle = positions[:, None] * theta; x1, x2 = the two "
           "halves; concatenate(x1 cos - x2 sin, x2 cos + x1 sin) along the last axis."),
    # Llama and Hugging Face compute the angles in float32: at position 1000 the angle itself
    # is then off by up to ~6e-5 rad (one float32 ulp of 1000), a correct answer all the same.
    # Every catalogued mistake differs by more than 0.1 on some case.
    rtol=1e-4, atol=2e-4,
))
