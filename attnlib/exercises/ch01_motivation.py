"""Exercises of chapter 01 (why attention): ``soft_lookup`` and ``layers_needed``."""
from __future__ import annotations

import math

import numpy as np

from ._core import ATTENTION_SHORTCUTS, Case, Exercise, Mistake, register

# --------------------------------------------------------------------------- soft_lookup


def _np(x):
    return np.asarray(x, dtype=np.float64)


def _softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def soft_lookup_reference(query, keys, values):
    """Soft lookup of ``L`` queries in a key-value store.

    Args:
        query: ``(L, E)`` the queries.
        keys: ``(S, E)`` the stored keys.
        values: ``(S, Ev)`` the stored values.

    Returns:
        ``(L, Ev)``: row ``i`` is ``Σ_j w_ij values[j]`` with ``w_i = softmax_j(query[i]·keys[j])``.
    """
    q, k, v = _np(query), _np(keys), _np(values)
    scores = q @ k.T                      # (L, E) @ (E, S) -> (L, S)
    weights = _softmax(scores, axis=-1)   # normalise over the keys: each row sums to 1
    return weights @ v                    # (L, S) @ (S, Ev) -> (L, Ev)


def _lookup_unnormalised(query, keys, values):
    return np.exp(_np(query) @ _np(keys).T) @ _np(values)


def _lookup_raw_scores(query, keys, values):
    return (_np(query) @ _np(keys).T) @ _np(values)


def _lookup_sum_normalised(query, keys, values):
    s = _np(query) @ _np(keys).T
    return (s / s.sum(axis=-1, keepdims=True)) @ _np(values)


def _lookup_wrong_axis(query, keys, values):
    return _softmax(_np(query) @ _np(keys).T, axis=0) @ _np(values)


def _lookup_hard(query, keys, values):
    return _np(values)[np.argmax(_np(query) @ _np(keys).T, axis=-1)]


def _lookup_naive_exp(query, keys, values):
    e = np.exp(_np(query) @ _np(keys).T)
    return (e / e.sum(axis=-1, keepdims=True)) @ _np(values)


def _lookup_keys_as_values(query, keys, values):
    return _softmax(_np(query) @ _np(keys).T) @ _np(keys)


def _lookup_scaled(query, keys, values):
    q, k = _np(query), _np(keys)
    return _softmax(q @ k.T / np.sqrt(q.shape[-1])) @ _np(values)


def _lookup_weights_transposed(query, keys, values):
    return _softmax(_np(query) @ _np(keys).T).T @ _np(values)   # (S, L) @ (S, Ev): L = S only


def _lookup_global_max(query, keys, values):
    s = _np(query) @ _np(keys).T
    e = np.exp(s - s.max())                 # one maximum for all queries
    return (e / e.sum(axis=-1, keepdims=True)) @ _np(values)


def _lookup_whole_array(query, keys, values):
    s = _np(query) @ _np(keys).T
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum()) @ _np(values)     # normalised over all queries at once


def _lookup_cases():
    rng = np.random.default_rng(101)
    c = []
    q, k, v = rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 2))
    c.append(Case((q, k, v), label="3 queries, 5 keys, values of width 2"))
    q, k, v = rng.standard_normal((4, 3)), rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    c.append(Case((q, k, v), label="square: 4 queries, 4 keys, E = Ev"))
    q, k, v = rng.standard_normal((1, 6)), rng.standard_normal((7, 6)), rng.standard_normal((7, 5))
    c.append(Case((q, k, v), label="a single query"))
    q, k, v = 30 * rng.standard_normal((2, 8)), 30 * rng.standard_normal((6, 8)), rng.standard_normal((6, 3))
    c.append(Case((q, k, v), label="large scores (hundreds): exp overflows without the max trick"))
    return c


register(Exercise(
    name="soft_lookup",
    chapter="01_motivation",
    prompt="Return softmax(query·keysᵀ) @ values: every query reads a weighted average of all values.",
    stub='''def soft_lookup(query, keys, values):
    """Soft (differentiable) lookup in a key-value store.

    Args:
        query: (L, E) array, one query per row.
        keys: (S, E) array, one key per row.
        values: (S, Ev) array, the value stored under each key.

    Returns:
        (L, Ev) array: row i is the average of the values weighted by
        softmax over j of query[i] · keys[j].
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=soft_lookup_reference,
    cases=_lookup_cases,
    mistakes=[
        Mistake("raw_scores", "The scores are used as weights",
                "Weights must be positive and sum to 1 over the keys; raw dot products are neither. "
                "Pass the scores through a softmax over the keys before averaging the values.",
                _lookup_raw_scores),
        Mistake("unnormalised", "The weights are not normalised",
                "You take exp(scores) but never divide by their sum, so a row's weights do not add "
                "up to 1 and the output is not an average. Divide by the row sum (that is the softmax).",
                _lookup_unnormalised),
        Mistake("sum_normalised", "Normalised without the exponential",
                "Dividing the scores by their sum does not give weights: negative scores give negative "
                "weights (and a sum near 0 blows up). Exponentiate first, then normalise: softmax.",
                _lookup_sum_normalised),
        Mistake("wrong_axis", "Softmax over the wrong axis",
                "Your weights sum to 1 down each column (over the queries). Each query must share its "
                "attention among the keys, so normalise along the last axis of the (L, S) scores: axis=-1.",
                _lookup_wrong_axis),
        Mistake("hard_argmax", "A hard lookup",
                "You return the value of the single best key (argmax). That is the dictionary lookup the "
                "chapter contrasts with: it has no gradient. Weight all values by the softmax instead.",
                _lookup_hard),
        Mistake("keys_as_values", "Averaging the keys",
                "The weights must average the values, not the keys: return weights @ values.",
                _lookup_keys_as_values),
        Mistake("scaled_by_sqrt_E", "Scores divided by √E",
                "This lookup uses the plain dot product q·k (inverse temperature β = 1), as in the "
                "chapter's soft-versus-hard experiment. Dividing by √E is the scaled attention of the "
                "apple example, a different function; chapter 3 explains when that scale is wanted. "
                "Leave the scores unscaled here.",
                _lookup_scaled),
        Mistake("weights_transposed", "The weights are transposed",
                "Your weights have one row per key instead of one row per query: (S, L) instead of "
                "(L, S). That raises an error when L ≠ S and silently mixes up queries and keys when "
                "L = S. Row i of the weights belongs to query i; multiply the (L, S) weights by the "
                "(S, Ev) values.",
                _lookup_weights_transposed),
        Mistake("global_max", "One maximum for all queries",
                "Subtracting one maximum for the whole score matrix is exact in theory, but a query "
                "whose scores are all far below that maximum underflows to exp(...) = 0 for every key, "
                "and 0 / 0 is NaN. Subtract each query's own maximum (the max over its row of scores).",
                _lookup_global_max),
        Mistake("whole_array", "Normalised over all queries at once",
                "You divide by the sum of ALL the weights in the (L, S) matrix, so each query's weights "
                "sum to less than 1 (1/L on average). Each query has its own budget: normalise every "
                "row separately, over the keys.",
                _lookup_whole_array),
        Mistake("naive_exp", "Overflow in exp",
                "Correct on small scores but NaN on large ones: exp(800) overflows to inf and inf/inf is "
                "NaN. Subtract each row's maximum score before exp; the softmax does not change.",
                _lookup_naive_exp),
    ],
    hint="Each query compares itself with every key (one score per key), turns its row of scores into "
         "positive weights that sum to 1, and averages the values with them. Which axis holds the keys?",
    forbidden=ATTENTION_SHORTCUTS,  # the library's attention is the answer
))

# --------------------------------------------------------------------------- layers_needed


def _layers(n, kernel_size, dilation_base=1, *, start=1, gain=None, enough=lambda r, n: r >= n):
    """Count layers until the window is wide enough; ``gain(l)`` is what layer ``l`` adds."""
    n, k, b = int(n), int(kernel_size), int(dilation_base)
    gain = gain or (lambda layer: (k - 1) * b ** layer)
    m, r = 0, start
    while not enough(r, n):
        r += gain(m)
        m += 1
    return m


def layers_needed_reference(n, kernel_size, dilation_base=1):
    """Fewest stacked causal 1-D convolutions after which output ``n`` depends on input 1.

    Args:
        n: sequence length (token 1 and token ``n`` must interact), ``n >= 1``.
        kernel_size: taps per layer ``k >= 2``.
        dilation_base: layer ``l`` (from 0) spaces its taps ``dilation_base**l`` apart;
            1 means no dilation. At most ``kernel_size``: with a larger base the window
            has gaps (kernel 2, base 3 never reads an input 8 steps back). Default: ``1``.

    Returns:
        int: the smallest ``m`` whose receptive field ``1 + (k-1)(1 + b + … + b^(m-1))``
        covers ``n`` positions (``0`` when ``n == 1``).
    """
    return _layers(n, kernel_size, dilation_base)


def _ln_no_overlap(n, kernel_size, dilation_base=1):
    k, b = int(kernel_size), int(dilation_base)
    return _layers(n, k, b, start=0, gain=lambda layer: k * b ** layer)


def _ln_strict(n, kernel_size, dilation_base=1):
    return _layers(n, kernel_size, dilation_base, enough=lambda r, n: r > n)


def _ln_distance(n, kernel_size, dilation_base=1):
    return _layers(n, kernel_size, dilation_base, enough=lambda r, n: r >= n - 1)


def _ln_ignores_dilation(n, kernel_size, dilation_base=1):
    return _layers(n, kernel_size, 1)


def _ln_dilation_is_k(n, kernel_size, dilation_base=1):
    b = 1 if int(dilation_base) == 1 else int(kernel_size)
    return _layers(n, kernel_size, b)


def _ln_float_log(n, kernel_size, dilation_base=1):
    n, k, b = int(n), int(kernel_size), int(dilation_base)
    if b == 1:
        return math.ceil((n - 1) / (k - 1))
    # 1 + (k-1)(b^m - 1)/(b-1) >= n  <=>  b^m >= 1 + (n-1)(b-1)/(k-1), solved with a float log
    return max(0, math.ceil(math.log(1 + (n - 1) * (b - 1) / (k - 1), b)))


def _ln_float_log_ratio(n, kernel_size, dilation_base=1):
    n, k, b = int(n), int(kernel_size), int(dilation_base)
    if b == 1:
        return math.ceil((n - 1) / (k - 1))
    return max(0, math.ceil(np.log(1 + (n - 1) * (b - 1) / (k - 1)) / np.log(b)))


def _ln_dilation_from_b(n, kernel_size, dilation_base=1):
    k, b = int(kernel_size), int(dilation_base)
    return _layers(n, k, b, gain=lambda layer: (k - 1) * b ** (layer + 1))


def _ln_no_overlap_dilated_only(n, kernel_size, dilation_base=1):
    k, b = int(kernel_size), int(dilation_base)
    if b == 1:
        return layers_needed_reference(n, k, b)
    return _layers(n, k, b, start=0, gain=lambda layer: k * b ** layer)


def _ln_strict_plain_only(n, kernel_size, dilation_base=1):
    k, b = int(kernel_size), int(dilation_base)
    if b == 1:
        return math.ceil(int(n) / (k - 1))          # m(k - 1) >= n: one layer too many
    return layers_needed_reference(n, k, b)


def _ln_rounds_down(n, kernel_size, dilation_base=1):
    n, k, b = int(n), int(kernel_size), int(dilation_base)
    if b == 1:
        return (n - 1) // (k - 1)
    return layers_needed_reference(n, k, b)


def _ln_rounds_down_log(n, kernel_size, dilation_base=1):
    n, k, b = int(n), int(kernel_size), int(dilation_base)
    if b == 1:
        return int((n - 1) / (k - 1))
    return int(math.log(1 + (n - 1) * (b - 1) / (k - 1), b) + 1e-9)


def _ln_log_for_plain(n, kernel_size, dilation_base=1):
    n, k = int(n), int(kernel_size)
    layers, reach = 0, 1
    while reach < n:                       # ceil(log_k n), counted in integers
        reach *= k
        layers += 1
    return layers


def _ln_cases():
    grid = [((2, 3), "two tokens, kernel 3"),
            ((10, 3), "n = 10, kernel 3"),
            ((101, 5), "n = 101, kernel 5"),
            ((100, 2), "n = 100, kernel 2"),
            ((1, 3), "a single token: no layer needed"),
            ((27, 3, 3), "n = 27 = 3³, kernel 3, dilations 1, 3, 9, …"),
            ((125, 5, 5), "n = 125 = 5³, kernel 5, dilations 1, 5, 25, … (an exact power)"),
            ((126, 5, 5), "n = 126, kernel 5, dilations 1, 5, 25, …"),
            ((1000, 3, 3), "n = 1000, kernel 3, dilations 1, 3, 9, …"),
            ((100, 3, 2), "n = 100, kernel 3, dilations 1, 2, 4, … (base ≠ kernel)"),
            ((64, 2, 2), "n = 64, kernel 2, dilations 1, 2, 4, … (WaveNet)"),
            ((50, 4, 2), "n = 50, kernel 4, dilations 1, 2, 4, …")]
    return [Case(args[:2], {"dilation_base": args[2]} if len(args) > 2 else {}, label=label)
            for args, label in grid]


register(Exercise(
    name="layers_needed",
    chapter="01_motivation",
    prompt="Return the fewest stacked causal convolutions (kernel k, dilations b**l) that let token 1 "
           "reach output n.",
    stub='''def layers_needed(n, kernel_size, dilation_base=1):
    """How deep must a causal CNN be before token 1 and token n interact?

    Args:
        n: sequence length (n >= 1).
        kernel_size: taps per layer k (k >= 2).
        dilation_base: layer l (counting from 0) spaces its k taps
            dilation_base**l apart; 1 means no dilation, and at most k
            (then the window has no gaps). Default: 1.

    Returns:
        int: the fewest layers m after which output n depends on input 1.
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=layers_needed_reference,
    cases=_ln_cases,
    output_kind="int",
    mistakes=[
        Mistake("no_overlap", "Windows added without their overlap",
                "You let each layer add k new positions (m layers see m·k). Consecutive windows share "
                "one position, the output's own, so a layer adds only k - 1 taps' worth: (k - 1)·b**l "
                "for layer l. Start from 1 (the token itself) and add (k - 1)·b**l per layer.",
                _ln_no_overlap, variants=(_ln_no_overlap_dilated_only,)),
        Mistake("strict", "One layer too many: the window must cover n positions, not more",
                "Token 1 and token n are n - 1 apart, so a window of exactly n positions links them. "
                "Stop as soon as the receptive field is at least n (>=), not greater than n. In a "
                "closed form the same slip is solving m·(k - 1) >= n, which forgets that the window "
                "already holds the token itself: 1 + m·(k - 1) >= n.",
                _ln_strict, variants=(_ln_strict_plain_only,)),
        Mistake("distance", "One layer short: the window counts positions, not the distance",
                "A window that covers n - 1 positions reaches from token n back to token 2 only. "
                "The receptive field counts positions including the token itself; it must reach n.",
                _ln_distance),
        Mistake("rounds_down", "Rounded down: a fraction of a layer is still a layer",
                "When (n - 1)/(k - 1) is not a whole number, m layers fall short and the window needs "
                "one more: round UP (the ceiling), or count layers until the window covers n. "
                "int() and // round down.",
                _ln_rounds_down, variants=(_ln_rounds_down_log,)),
        Mistake("dilation_from_b", "The first layer's taps are already spread out",
                "Layer l counts from 0, so the first layer has dilation b**0 = 1: its taps are "
                "neighbours. Starting the spacing at b (b, b², …) skips the first layer's "
                "contribution and overestimates the reach.",
                _ln_dilation_from_b),
        Mistake("ignores_dilation", "The dilation is ignored",
                "With dilation_base b, layer l spaces its taps b**l apart, so it widens the window by "
                "(k - 1)·b**l, not by k - 1. The depth then grows like a logarithm of n, not linearly.",
                _ln_ignores_dilation),
        Mistake("dilation_is_k", "Dilations k**l used for every base",
                "The chapter's closed form k**m holds when the dilations are 1, k, k², … (b = k). For "
                "another base add up what each layer contributes, (k - 1)·b**l, instead of copying k**m.",
                _ln_dilation_is_k),
        Mistake("log_for_plain", "The dilated formula used for plain layers",
                "⌈log_k n⌉ counts layers whose taps are k**l apart, so the window multiplies by k per "
                "layer. Plain layers (dilation_base = 1) have neighbouring taps and widen the window "
                "by only k - 1 per layer: the depth grows linearly with n.",
                _ln_log_for_plain),
        Mistake("float_log", "Rounding error in a floating-point logarithm",
                "Your closed form is right, but a float logarithm is not exact: math.log(125, 5) is "
                "3.0000000000000004, and its ceiling 4 is one layer too many. Count in integers: add "
                "layers while the receptive field is below n.",
                _ln_float_log, variants=(_ln_float_log_ratio,)),
    ],
    hint="Follow the window one layer at a time: with no layer an output sees 1 position (itself). "
         "How many new positions does layer l add when its k taps are b**l apart? Stop when the window "
         "covers token 1.",
))
