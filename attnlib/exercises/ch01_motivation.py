"""Exercises of chapter 01 (why attention): ``soft_lookup`` and ``receptive_field``."""
from __future__ import annotations

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
        Mistake("naive_exp", "Overflow in exp",
                "Correct on small scores but NaN on large ones: exp(800) overflows to inf and inf/inf is "
                "NaN. Subtract each row's maximum score before exp; the softmax does not change.",
                _lookup_naive_exp),
    ],
    hint="scores = query @ keys.T has shape (L, S); softmax each row; then weights @ values.",
    forbidden=ATTENTION_SHORTCUTS,  # the library's attention is the answer
))

# --------------------------------------------------------------------------- receptive_field


def receptive_field_reference(num_layers, kernel_size, dilated=False):
    """How many input positions one output of a stack of causal 1-D convolutions sees.

    Args:
        num_layers: number of stacked conv layers ``m`` (0 means no layer: the token itself).
        kernel_size: taps per layer ``k``.
        dilated: if True, layer ``l`` (from 0) spaces its taps ``k**l`` apart. Default: ``False``.

    Returns:
        int: ``1 + m (k - 1)``, or ``k**m`` when dilated.
    """
    m, k = int(num_layers), int(kernel_size)
    if dilated:
        return k ** m
    return 1 + m * (k - 1)


def _rf_times(num_layers, kernel_size, dilated=False):
    m, k = int(num_layers), int(kernel_size)
    return k ** m if dilated else m * k


def _rf_no_self(num_layers, kernel_size, dilated=False):
    m, k = int(num_layers), int(kernel_size)
    return k ** m - 1 if dilated else m * (k - 1)


def _rf_power_always(num_layers, kernel_size, dilated=False):
    return int(kernel_size) ** int(num_layers)


def _rf_ignores_dilation(num_layers, kernel_size, dilated=False):
    return 1 + int(num_layers) * (int(kernel_size) - 1)


def _rf_dilation_base2(num_layers, kernel_size, dilated=False):
    m, k = int(num_layers), int(kernel_size)
    if dilated:
        return 1 + (k - 1) * (2 ** m - 1)
    return 1 + m * (k - 1)


def _rf_one_layer_short(num_layers, kernel_size, dilated=False):
    m, k = int(num_layers), int(kernel_size)
    if dilated:
        return k ** max(m - 1, 0)
    return 1 + max(m - 1, 0) * (k - 1)


def _rf_cases():
    grid = [(1, 3), (2, 3), (5, 3), (4, 2), (3, 5), (0, 3), (6, 7)]
    c = [Case((m, k), label=f"{m} layers, kernel {k}") for m, k in grid]
    c += [Case((m, k), {"dilated": True}, label=f"{m} dilated layers, kernel {k}")
          for m, k in [(3, 3), (4, 2), (2, 5), (0, 4)]]
    return c


register(Exercise(
    name="receptive_field",
    chapter="01_motivation",
    prompt="Return how many input positions one output of m stacked convolutions of width k can see.",
    stub='''def receptive_field(num_layers, kernel_size, dilated=False):
    """Receptive field of a stack of causal 1-D convolutions.

    Args:
        num_layers: number of layers m (0 = no layer: a token sees itself).
        kernel_size: taps per layer k.
        dilated: if True, layer l (counting from 0) spaces its k taps
            k**l apart. Default: False.

    Returns:
        int: how many input positions one output depends on.
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=receptive_field_reference,
    cases=_rf_cases,
    output_kind="int",
    mistakes=[
        Mistake("times", "Windows added without their overlap",
                "m layers of width k do not see m·k positions: consecutive windows share one position "
                "(the token itself), so each layer adds only k - 1 new ones. Use 1 + m·(k - 1).",
                _rf_times),
        Mistake("no_self", "Off by one: the token itself is missing",
                "Each layer adds k - 1 positions, but you forgot the one position every output sees "
                "with no layer at all, itself. Start from 1: 1 + m·(k - 1) (and k**m, not k**m - 1).",
                _rf_no_self),
        Mistake("power_always", "Windows multiplied without dilation",
                "Plain stacked convolutions grow the window linearly, by k - 1 per layer, not by a "
                "factor of k. Only dilated layers (taps k**l apart) reach k**m.",
                _rf_power_always),
        Mistake("ignores_dilation", "Dilation ignored",
                "With dilation k**l the taps of layer l are k**l apart, so layer l adds (k-1)·k**l "
                "positions and the total is k**m, exponential in m.",
                _rf_ignores_dilation),
        Mistake("dilation_base2", "Dilations 1, 2, 4, … regardless of k",
                "Here layer l is dilated by k**l (WaveNet's 1, 2, 4, … is the case k = 2). Summing "
                "(k-1)·k**l over l = 0..m-1 gives k**m - 1, plus the token itself.",
                _rf_dilation_base2),
        Mistake("one_layer_short", "Off by one in the layer count",
                "You count one layer too few (as if the first layer did not widen the window). "
                "After one layer of width k an output sees k positions.",
                _rf_one_layer_short),
    ],
    hint="Draw it: one layer of width 3 sees 3 positions; a second layer sees 3 outputs of the first, "
         "which together cover 5 inputs.",
))
