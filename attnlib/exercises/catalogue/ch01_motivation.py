"""Exercises of chapter 01 (why attention): ``soft_lookup`` and ``layers_needed``."""
from __future__ import annotations

import math

import numpy as np

from ...i18n import N_, _
from .._model import ATTENTION_SHORTCUTS, Case, Exercise, Mistake, register
from ._ref import f64
from ._ref import stable_softmax as softmax

# --------------------------------------------------------------------------- soft_lookup


def soft_lookup_reference(query, keys, values):
    """Soft lookup of ``L`` queries in a key-value store.

    Args:
        query: ``(L, E)`` the queries.
        keys: ``(S, E)`` the stored keys.
        values: ``(S, Ev)`` the stored values.

    Returns:
        ``(L, Ev)``: row ``i`` is ``Σ_j w_ij values[j]`` with ``w_i = softmax_j(query[i]·keys[j])``.
    """
    q, k, v = f64(query), f64(keys), f64(values)
    scores = q @ k.T                      # (L, E) @ (E, S) -> (L, S)
    weights = softmax(scores, axis=-1)    # normalise over the keys: each row sums to 1
    return weights @ v                    # (L, S) @ (S, Ev) -> (L, Ev)


def _lookup_unnormalised(query, keys, values):
    return np.exp(f64(query) @ f64(keys).T) @ f64(values)


def _lookup_raw_scores(query, keys, values):
    return (f64(query) @ f64(keys).T) @ f64(values)


def _lookup_sum_normalised(query, keys, values):
    s = f64(query) @ f64(keys).T
    return (s / s.sum(axis=-1, keepdims=True)) @ f64(values)


def _lookup_wrong_axis(query, keys, values):
    return softmax(f64(query) @ f64(keys).T, axis=0) @ f64(values)


def _lookup_hard(query, keys, values):
    return f64(values)[np.argmax(f64(query) @ f64(keys).T, axis=-1)]


def _lookup_naive_exp(query, keys, values):
    e = np.exp(f64(query) @ f64(keys).T)
    return (e / e.sum(axis=-1, keepdims=True)) @ f64(values)


def _lookup_keys_as_values(query, keys, values):
    return softmax(f64(query) @ f64(keys).T) @ f64(keys)


def _lookup_scaled(query, keys, values):
    q, k = f64(query), f64(keys)
    return softmax(q @ k.T / np.sqrt(q.shape[-1])) @ f64(values)


def _lookup_weights_transposed(query, keys, values):
    return softmax(f64(query) @ f64(keys).T).T @ f64(values)   # (S, L) @ (S, Ev): L = S only


def _lookup_global_max(query, keys, values):
    s = f64(query) @ f64(keys).T
    e = np.exp(s - s.max())                 # one maximum for all queries
    return (e / e.sum(axis=-1, keepdims=True)) @ f64(values)


def _lookup_whole_array(query, keys, values):
    s = f64(query) @ f64(keys).T
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum()) @ f64(values)     # normalised over all queries at once


def _lookup_whole_array_naive(query, keys, values):
    e = np.exp(f64(query) @ f64(keys).T)   # the 1-D textbook softmax applied to the matrix
    return (e / e.sum()) @ f64(values)


def _lookup_cases(rng):
    n = rng.standard_normal
    c = [Case((n((3, 4)), n((5, 4)), n((5, 2))), label="3 queries, 5 keys, values of width 2"),
         Case((n((4, 3)), n((4, 3)), n((4, 3))), label="square: 4 queries, 4 keys, E = Ev"),
         Case((n((1, 6)), n((7, 6)), n((7, 5))), label="a single query")]
    # query 0 points along key 0 with a score of about 900 (exp overflows without the max
    # trick); query 1 has small scores, all about 900 below that maximum (one maximum for
    # the whole matrix underflows its row to 0 / 0)
    k = n((6, 8))
    q = 0.3 * n((2, 8))
    q[0] = rng.uniform(880.0, 920.0) * k[0] / (k[0] @ k[0])
    c.append(Case((q, k, n((6, 3))), label="large scores (hundreds): exp overflows without the max trick"))
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
                "Turn each query's row of scores into such weights before averaging the values.",
                _lookup_raw_scores,
                fix="Pass the (L, S) scores through a softmax over the keys (the last axis), then "
                    "multiply: weights @ values."),
        Mistake("unnormalised", "The weights are not normalised",
                "You exponentiate the scores but never divide by their sum, so a row's weights do not "
                "add up to 1 and the output is not an average. Each row must be normalised by its own "
                "total.",
                _lookup_unnormalised,
                fix="Divide every row of exp(scores) by its sum over the keys, "
                    "e / e.sum(axis=-1, keepdims=True): that is the softmax."),
        Mistake("sum_normalised", "Normalised without the exponential",
                "Dividing the scores by their sum does not give weights: negative scores give negative "
                "weights (and a sum near 0 blows up). The weights must be positive before they are "
                "normalised.",
                _lookup_sum_normalised,
                fix="Exponentiate first, then normalise each row: the softmax, "
                    "e = np.exp(scores - scores.max(axis=-1, keepdims=True)); w = e / e.sum(axis=-1, keepdims=True)."),
        Mistake("wrong_axis", "Softmax over the wrong axis",
                "Your weights sum to 1 down each column, over the queries. Each query must share its "
                "attention among the keys: normalise along the axis of the (L, S) scores that runs "
                "over the keys.",
                _lookup_wrong_axis,
                fix="Take the softmax along the last axis, axis=-1 (dim=-1 in torch)."),
        Mistake("hard_argmax", "A hard lookup",
                "You return the value of the single best key (argmax). That is the dictionary lookup the "
                "chapter contrasts with: it has no gradient. Every value must contribute, weighted by "
                "how well its key matches.",
                _lookup_hard,
                fix="Replace the argmax by softmax weights over all keys and return weights @ values."),
        Mistake("keys_as_values", "Averaging the keys",
                "The weights must average the values, not the keys: the keys only decide the weights.",
                _lookup_keys_as_values,
                fix="Return weights @ values, not weights @ keys."),
        Mistake("scaled_by_sqrt_E", "Scores divided by √E",
                "This lookup uses the plain dot product q·k (inverse temperature β = 1), as in the "
                "chapter's soft-versus-hard experiment. Dividing by √E is the scaled attention of the "
                "apple example, a different function; chapter 3 explains when that scale is wanted. "
                "Leave the scores unscaled here.",
                _lookup_scaled,
                fix="Use scores = query @ keys.T without the division by np.sqrt(E)."),
        Mistake("weights_transposed", "The weights are transposed",
                "Your weights have one row per key instead of one row per query: (S, L) instead of "
                "(L, S). That raises an error when L ≠ S and silently mixes up queries and keys when "
                "L = S. Row i of the weights belongs to query i.",
                _lookup_weights_transposed,
                fix="Multiply the (L, S) weights, untransposed, by the (S, Ev) values: weights @ values."),
        Mistake("global_max", "One maximum for all queries",
                "Subtracting one maximum for the whole score matrix is exact in theory, but a query "
                "whose scores are all far below that maximum underflows to exp(...) = 0 for every key, "
                "and 0 / 0 is NaN. Each query needs its own maximum as the reference point.",
                _lookup_global_max,
                fix="Subtract each query's own maximum, the max over its row: "
                    "scores - scores.max(axis=-1, keepdims=True)."),
        Mistake("whole_array", "Normalised over all queries at once",
                "You divide by the sum of ALL the weights in the (L, S) matrix, so each query's weights "
                "sum to less than 1 (1/L on average). Each query has its own budget: normalise every "
                "row separately, over the keys.",
                _lookup_whole_array, variants=(_lookup_whole_array_naive,),
                fix="Sum along the keys only and keep the axis: e / e.sum(axis=-1, keepdims=True) "
                    "(and subtract the row maximum, scores.max(axis=-1, keepdims=True), before exp)."),
        Mistake("naive_exp", "Overflow in exp",
                "Correct on small scores but NaN on large ones: exp(800) overflows to inf and inf/inf is "
                "NaN. Shift each row of scores down by a constant before the exponential; the softmax "
                "does not change, because the constant cancels in the ratio.",
                _lookup_naive_exp,
                fix="Subtract each row's maximum before exp: "
                    "e = np.exp(scores - scores.max(axis=-1, keepdims=True))."),
    ],
    hint="Each query compares itself with every key (one score per key), turns its row of scores into "
         "positive weights that sum to 1, and averages the values with them. Which axis holds the keys?",
    hints=("Three steps, with their shapes: the scores of every query against every key, (L, S); a "
           "softmax along the axis of the keys, so that every row sums to 1; the weighted average of "
           "the values, (L, S) times (S, Ev).",
           "scores = query @ keys.T; subtract each row's maximum, exponentiate and divide by the row "
           "sum (keepdims=True); return weights @ values."),
    rtol=1e-4, atol=1e-6,  # a float32 answer (rounding ~1e-7) passes; every mistake differs by far more
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


_SEPARATES_DILATION_FROM_B = [n for n in range(10, 81)
                              if _ln_dilation_from_b(n, 3, 3) not in (layers_needed_reference(n, 3, 3),
                                                                      _ln_no_overlap_dilated_only(n, 3, 3))]


def _ln_cases(rng):
    """Plain cases of both kinds ((n - 1) a multiple of k - 1 or not), dilated ones with b = k
    and b != k, exact powers, and one of the three lengths where a float log rounds the
    wrong way (math.log(125, 5) = 3.0000000000000004)."""
    r = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    n_even = 2 * r(3, 30)                      # kernel 3: (n - 1) / 2 is never whole
    n_exact = 1 + 4 * r(10, 40)                # kernel 5: (n - 1) / 4 is whole
    m_pow = r(2, 4)
    float_trap = [(125, 5, 5), (156, 6, 5), (216, 6, 6)][r(0, 2)]
    p2 = r(5, 9)
    # a length where counting the dilations from b instead of 1 gives an answer of its own
    # (neither the right one nor that of windows added without overlap), so the two
    # mistakes are told apart on every seed (53 of the lengths 10..80)
    n_dilated = int(rng.choice(_SEPARATES_DILATION_FROM_B))
    grid = [((2, 3), N_("two tokens, kernel 3")),
            ((n_even, 3), _("n = {n}, kernel 3").format(n=n_even)),
            ((n_exact, 5), _("n = {n}, kernel 5: the window covers exactly n").format(n=n_exact)),
            ((r(20, 200), 2), N_("kernel 2, one more position per layer")),
            ((1, r(2, 5)), N_("a single token: no layer needed")),
            ((n_dilated, 3, 3), N_("kernel 3, dilations 1, 3, 9, …")),
            (float_trap, N_("a length where a float logarithm rounds up: the window of exactly 3 layers")),
            ((5 ** m_pow + 1, 5, 5), N_("one more than a power of 5, kernel 5, dilations 1, 5, 25, …")),
            ((r(300, 3000), 3, 3), N_("a long sequence, kernel 3, dilations 1, 3, 9, …")),
            ((r(50, 300), 3, 2), N_("kernel 3, dilations 1, 2, 4, … (base ≠ kernel)")),
            ((2 ** p2, 2, 2), N_("a power of 2, kernel 2, dilations 1, 2, 4, … (WaveNet)")),
            ((r(20, 100), 4, 2), N_("kernel 4, dilations 1, 2, 4, …"))]
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
                "one position, the output's own, so a layer adds one position fewer than it has taps "
                "(times its dilation), and the window starts from the token itself.",
                _ln_no_overlap, variants=(_ln_no_overlap_dilated_only,),
                fix="Start from 1 (the token itself) and add (k - 1)·b**l for layer l."),
        Mistake("strict", "One layer too many: the window must cover n positions, not more",
                "Token 1 and token n are n - 1 apart, so a window of exactly n positions links them: "
                "stop as soon as the receptive field reaches n, not when it exceeds n. In a closed "
                "form the same slip forgets that the window already holds the token itself before "
                "the first layer (and a floor plus one is not a ceiling when the division is exact).",
                _ln_strict, variants=(_ln_strict_plain_only,),
                fix="Loop while the receptive field is < n (stop at >= n); in closed form "
                    "1 + m·(k - 1) >= n, i.e. m = ceil((n - 1) / (k - 1))."),
        Mistake("distance", "One layer short: the window counts positions, not the distance",
                "A window that covers n - 1 positions reaches from token n back to token 2 only. "
                "The receptive field counts positions including the token itself; it must reach n.",
                _ln_distance,
                fix="Stop when the receptive field is at least n, not n - 1."),
        Mistake("rounds_down", "Rounded down: a fraction of a layer is still a layer",
                "When the number of positions to cover is not a whole number of layers' worth, the "
                "layers that fit fall short and one more is needed: round UP, not down (int() and // "
                "round down), or count layers until the window covers n.",
                _ln_rounds_down, variants=(_ln_rounds_down_log,),
                fix="Use the ceiling: math.ceil((n - 1) / (k - 1)), or -(-(n - 1) // (k - 1)) in integers."),
        Mistake("dilation_from_b", "The first layer's taps are already spread out",
                "Layer l counts from 0, so the first layer has dilation b**0 = 1: its taps are "
                "neighbours. Starting the spacing at b (b, b², …) skips the first layer's "
                "contribution and overestimates the reach.",
                _ln_dilation_from_b,
                fix="Layer l (l = 0, 1, 2, …) adds (k - 1)·b**l: add before you increment l."),
        Mistake("ignores_dilation", "The dilation is ignored",
                "With dilation_base b, layer l spaces its taps b**l apart, so it widens the window by "
                "b**l times as much as a plain layer. The depth then grows like a logarithm of n, not "
                "linearly.",
                _ln_ignores_dilation,
                fix="Add (k - 1)·dilation_base**l for layer l, not k - 1."),
        Mistake("dilation_is_k", "Dilations k**l used for every base",
                "The chapter's closed form k**m holds when the dilations are 1, k, k², … (b = k). For "
                "another base the layers add other amounts: add up what each layer contributes "
                "instead of copying k**m.",
                _ln_dilation_is_k,
                fix="Accumulate 1 + Σ_l (k - 1)·b**l layer by layer until it reaches n."),
        Mistake("log_for_plain", "The dilated formula used for plain layers",
                "⌈log_k n⌉ counts layers whose taps are k**l apart, so the window multiplies by k per "
                "layer. Plain layers (dilation_base = 1) have neighbouring taps and widen the window "
                "by only k - 1 per layer: the depth grows linearly with n.",
                _ln_log_for_plain,
                fix="For dilation_base = 1 use ceil((n - 1) / (k - 1)); or one loop that adds "
                    "(k - 1)·b**l per layer, which covers both."),
        Mistake("float_log", "Rounding error in a floating-point logarithm",
                "Your closed form is right, but a float logarithm is not exact: math.log(125, 5) is "
                "3.0000000000000004, and its ceiling 4 is one layer too many. Count in integers "
                "instead of taking a logarithm.",
                _ln_float_log, variants=(_ln_float_log_ratio,),
                fix="Add layers in a loop while the receptive field, an integer, is below n."),
    ],
    hint="Follow the window one layer at a time: with no layer an output sees 1 position (itself). "
         "How many new positions does layer l add when its k taps are b**l apart? Stop when the window "
         "covers token 1.",
    hints=("A layer with k taps spaced s apart widens the window by (k - 1)·s: the window's own "
           "position is shared. Layer l has spacing b**l, starting with 1 for l = 0. Keep everything "
           "in integers.",
           "field, layers = 1, 0; while field < n: add (k - 1)·b**layers to field, then layers += 1; "
           "return layers."),
))
