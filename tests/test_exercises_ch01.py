"""Chapter 1 exercises beyond the generic contract (tests/test_exercises_contract.py):
the references agree with outside computations and other correct solutions pass."""
import math

import numpy as np
import pytest
import torch

from attnlib.exercises import check
from attnlib.exercises.catalogue.ch01_motivation import layers_needed_reference, soft_lookup_reference
from attnlib.instruments import motivation

NAMES = ["soft_lookup", "layers_needed"]


# --------------------------------------------------------------------------- soft_lookup

def test_soft_lookup_reference_matches_torch_sdpa_with_scale_one():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((5, 4)), rng.standard_normal((7, 4)), rng.standard_normal((7, 3))
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)), scale=1.0).numpy()
    np.testing.assert_allclose(soft_lookup_reference(q, k, v), want, rtol=1e-12, atol=1e-12)


def test_soft_lookup_accepts_a_loop_solution():
    def loops(query, keys, values):
        out = []
        for qi in query:
            s = [float(np.dot(qi, kj)) for kj in keys]
            m = max(s)
            e = [math.exp(x - m) for x in s]
            z = sum(e)
            out.append(sum((ei / z) * vj for ei, vj in zip(e, values)))
        return np.array(out)

    assert check("soft_lookup", loops).passed


def test_soft_lookup_accepts_a_torch_solution():
    def with_torch(query, keys, values):
        q, k, v = (torch.as_tensor(a) for a in (query, keys, values))
        return torch.softmax(q @ k.T, dim=-1) @ v

    assert check("soft_lookup", with_torch).passed


def test_soft_lookup_weights_rows_sum_to_one():
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((3, 4)), rng.standard_normal((6, 4))
    # with values = identity the output *is* the weight matrix
    w = soft_lookup_reference(q, k, np.eye(6))
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-12)
    assert (w > 0).all()


# --------------------------------------------------------------------------- layers_needed

@pytest.mark.parametrize("base", [1, 2, 3, 5])
@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("n", [1, 2, 9, 10, 27, 100, 125, 126, 400])
def test_layers_needed_reference_matches_measured_reach(n, k, base):
    # the fewest layers after which conv_reach (propagated, not a formula) links token 1 and n
    if base > k:
        pytest.skip("a base above the kernel size leaves gaps in the window (outside the exercise)")
    m = layers_needed_reference(n, k, base)
    assert motivation.conv_reach(n, m, k, dilation_base=base)[n - 1]
    if m > 0:
        assert not motivation.conv_reach(n, m - 1, k, dilation_base=base)[n - 1]


def test_layers_needed_agrees_with_the_chapters_closed_forms():
    for n in (2, 10, 101, 1000):
        for k in (2, 3, 5):
            assert layers_needed_reference(n, k) == math.ceil((n - 1) / (k - 1))
            assert k ** (layers_needed_reference(n, k, k) - 1) < n <= k ** layers_needed_reference(n, k, k)


def test_layers_needed_accepts_a_simulation_solution():
    def simulate(n, kernel_size, dilation_base=1):
        seen, m = {0}, 0
        while n - 1 not in seen:
            gap = dilation_base ** m
            seen = {s + t * gap for s in seen for t in range(kernel_size)}
            m += 1
        return m

    assert check("layers_needed", simulate).passed


def test_layers_needed_accepts_an_exact_integer_closed_form_returned_as_float():
    def closed_form(n, kernel_size, dilation_base=1):
        if dilation_base == 1:
            return float(-(-(n - 1) // (kernel_size - 1)))      # ceil in integers, returned as 25.0
        m = 0
        while 1 + (kernel_size - 1) * (dilation_base ** m - 1) // (dilation_base - 1) < n:
            m += 1
        return m

    assert check("layers_needed", closed_form).passed


def test_layers_needed_float_log_is_named_with_the_case_that_breaks_it():
    def with_log(n, kernel_size, dilation_base=1):
        if dilation_base == 1:
            return math.ceil((n - 1) / (kernel_size - 1))
        target = 1 + (n - 1) * (dilation_base - 1) / (kernel_size - 1)
        return math.ceil(math.log(target) / math.log(dilation_base))

    r = check("layers_needed", with_log)
    assert r.mistake == "float_log" and "math.log(125, 5)" in r.message


def test_copying_the_receptive_field_formula_for_k_only_is_named():
    def copied(n, kernel_size, dilation_base=1):
        m = 0
        while (kernel_size ** m if dilation_base > 1 else 1 + m * (kernel_size - 1)) < n:
            m += 1
        return m

    assert check("layers_needed", copied).mistake == "dilation_is_k"


def test_layers_needed_wrong_type_is_reported_not_raised():
    r = check("layers_needed", lambda n, k, dilation_base=1: "many")
    assert r.status == "failed"


# --------------------------------------------------------------------------- wrong answers a learner writes

def _stable(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_soft_lookup_divided_by_sqrt_E_like_the_apple_example_is_named():
    def scaled(query, keys, values):
        return _stable(query @ keys.T / np.sqrt(query.shape[1])) @ values

    r = check("soft_lookup", scaled)
    assert not r.passed and r.mistake == "scaled_by_sqrt_E" and "√E" in r.message


def test_soft_lookup_weights_transposed_is_named_although_it_raises_when_L_differs_from_S():
    def transposed(query, keys, values):
        return _stable(query @ keys.T).T @ values

    r = check("soft_lookup", transposed)
    assert not r.passed and r.mistake == "weights_transposed" and "one row per query" in r.message


def test_soft_lookup_one_max_for_all_queries_is_named():
    def global_max(query, keys, values):
        s = query @ keys.T
        e = np.exp(s - s.max())
        return e / e.sum(axis=1, keepdims=True) @ values

    r = check("soft_lookup", global_max)
    assert not r.passed and r.mistake == "global_max" and "own maximum" in r.message


def test_soft_lookup_normalised_over_the_whole_matrix_is_named():
    def whole(query, keys, values):
        s = query @ keys.T
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return e / e.sum() @ values

    assert check("soft_lookup", whole).mistake == "whole_array"


def test_soft_lookup_einsum_solution_passes():
    def with_einsum(query, keys, values):
        s = np.einsum("le,se->ls", query, keys)
        return np.einsum("ls,sv->lv", _stable(s), values)

    assert check("soft_lookup", with_einsum).passed


def test_layers_needed_closed_form_that_forgets_the_token_itself_is_named():
    def closed(n, kernel_size, dilation_base=1):
        if dilation_base == 1:
            return math.ceil(n / (kernel_size - 1))
        layers, field = 0, 1
        while field < n:
            field += (kernel_size - 1) * dilation_base ** layers
            layers += 1
        return layers

    r = check("layers_needed", closed)
    assert not r.passed and r.mistake == "strict" and "the token itself" in r.message


@pytest.mark.parametrize("rounding", ["floor_division", "int"])
def test_layers_needed_rounding_down_is_named(rounding):
    def rounded_down(n, kernel_size, dilation_base=1):
        if dilation_base == 1:
            if rounding == "int":
                return int((n - 1) / (kernel_size - 1))
            return (n - 1) // (kernel_size - 1)
        return layers_needed_reference(n, kernel_size, dilation_base)

    r = check("layers_needed", rounded_down)
    assert not r.passed and r.mistake == "rounds_down" and "round UP" in r.message


def test_layers_needed_dilation_counted_from_layer_one_is_named():
    def from_one(n, kernel_size, dilation_base=1):
        layers, field = 0, 1
        while field < n:
            layers += 1
            field += (kernel_size - 1) * dilation_base ** layers
        return layers

    r = check("layers_needed", from_one)
    assert not r.passed and r.mistake == "dilation_from_b" and "b**0 = 1" in r.message


def test_layers_needed_recursive_solution_passes():
    def recursive(n, kernel_size, dilation_base=1, layers=0, field=1):
        if field >= n:
            return layers
        return recursive(n, kernel_size, dilation_base, layers + 1,
                         field + (kernel_size - 1) * dilation_base ** layers)

    assert check("layers_needed", recursive).passed


def test_layers_needed_log_formula_for_plain_layers_is_named():
    def always_log(n, kernel_size, dilation_base=1):
        return math.ceil(math.log(n, kernel_size) - 1e-9) if n > 1 else 0

    r = check("layers_needed", always_log)
    assert not r.passed and r.mistake == "log_for_plain" and "k - 1 per layer" in r.message


# --------------------------------------------------------------------------- cases that vary per check (issue 20)

from attnlib.exercises import EXERCISES  # noqa: E402
from exercise_catalogue import asked_twice, catalogue_problems, passes_every_seed  # noqa: E402


@pytest.mark.parametrize("name", NAMES)
def test_catalogue_holds_on_every_draw_of_the_cases(name):
    problems = catalogue_problems(EXERCISES[name])
    assert not problems, problems[:5]


@pytest.mark.parametrize("seed", range(10))
def test_every_draw_keeps_the_float_log_trap_and_both_kinds_of_plain_case(seed):
    cases = EXERCISES["layers_needed"].all_cases(seed)
    plain = [(c.args[0], c.args[1]) for c in cases if not c.kwargs and c.args[0] > 2]
    assert any((n - 1) % (k - 1) == 0 and k > 2 for n, k in plain)   # the window covers exactly n
    assert any((n - 1) % (k - 1) != 0 for n, k in plain)             # a fraction of a layer
    trap = [c for c in cases if "logarithm" in c.label][0]
    n, k, b = *trap.args, trap.kwargs["dilation_base"]
    assert math.ceil(math.log(1 + (n - 1) * (b - 1) / (k - 1), b)) != layers_needed_reference(n, k, b)


@pytest.mark.parametrize("seed", range(10))
def test_the_large_score_case_breaks_a_naive_exp_and_a_global_max_on_every_draw(seed):
    ex = EXERCISES["soft_lookup"]
    big = [c for c in ex.all_cases(seed) if c.label.startswith("large scores")][0]
    with np.errstate(all="ignore"):
        for key in ("naive_exp", "global_max"):
            assert np.isnan(ex.mistake(key).fn(*big.args)).any(), key


def test_the_1d_textbook_softmax_on_the_score_matrix_is_whole_array():
    def textbook(query, keys, values):
        e = np.exp(query @ keys.T)
        return e / np.sum(e) @ values
    assert check("soft_lookup", textbook).mistake == "whole_array"


def test_a_floor_plus_one_ceiling_is_named_strict_and_the_fix_shows_the_ceiling_when_asked():
    def floor_plus_one(n, kernel_size, dilation_base=1):
        if dilation_base == 1:
            return (n - 1) // (kernel_size - 1) + 1
        return layers_needed_reference(n, kernel_size, dilation_base)
    r, shown = asked_twice("layers_needed", floor_plus_one)
    assert r.mistake == "strict" and "ceil((n - 1) / (k - 1))" in shown


def test_soft_lookup_float32_torch_passes_on_every_draw():
    def f32(query, keys, values):
        q, k, v = (torch.as_tensor(a, dtype=torch.float32) for a in (query, keys, values))
        s = q @ k.T
        return torch.softmax(s - s.amax(-1, keepdim=True), -1) @ v
    # torch.softmax is fine here: soft_lookup's answer is the whole lookup, not the softmax
    assert not passes_every_seed(EXERCISES["soft_lookup"], f32, seeds=range(10))


def test_layers_needed_mistakes_are_told_apart_on_every_seed():
    # the cases vary per check: on every seed, each catalogued mistake must be named as
    # itself (counting dilations from b once passed for "windows without overlap" on 4% of seeds)
    from attnlib.exercises import EXERCISES, _judge

    ex = EXERCISES["layers_needed"]
    for seed in range(300):
        cases = ex.all_cases(seed)
        for m in ex.mistakes:
            outcomes = [_judge._outcome(m.fn, c) for c in cases]  # as the worker sends them back
            named = next((x.key for x in ex.mistakes if _judge._reproduces(x, outcomes, cases, ex)), None)
            assert named == m.key, f"seed {seed}: {m.key} is named {named}"
