"""Chapter 3 exercises beyond the generic contract (tests/test_exercises_contract.py):
the Jacobian reference agrees with torch autograd and other correct solutions pass."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attnlib.exercises import EXERCISES, check
from attnlib.exercises.catalogue.ch03_scaling import dot_product_variance_reference, softmax_jacobian_reference

NAMES = ["dot_product_variance", "softmax_jacobian"]


# --------------------------------------------------------------------------- dot_product_variance

@pytest.mark.parametrize("args", [(16, 0.0, 1.0, 0.0, 1.0), (8, 1.0, 1.0, 1.0, 1.0), (4, 2.0, 0.5, -1.0, 1.5),
                                  (32, 0.3, 2.0, 0.0, 1.0)])
def test_dot_product_variance_reference_matches_monte_carlo(args):
    d_k, mq, sq, mk, sk = args
    rng = np.random.default_rng(d_k)
    n = 200_000
    q = mq + sq * rng.standard_normal((n, d_k))
    k = mk + sk * rng.standard_normal((n, d_k))
    dots = np.einsum("ne,ne->n", q, k)
    # sampling error of a variance estimate: well inside 3 % at n = 200,000 for these shapes
    assert dots.var() == pytest.approx(dot_product_variance_reference(*args), rel=0.03)
    assert dots.mean() == pytest.approx(d_k * mq * mk, abs=0.05 * np.sqrt(dots.var()) + 1e-9)


def test_dot_product_variance_accepts_the_expanded_and_the_factored_forms():
    def expanded(d_k, mu_q, sigma_q, mu_k, sigma_k):
        return d_k * (sigma_q**2 * sigma_k**2 + sigma_q**2 * mu_k**2 + mu_q**2 * sigma_k**2)

    def factored(d_k, mu_q, sigma_q, mu_k, sigma_k):
        return d_k * ((sigma_q**2 + mu_q**2) * (sigma_k**2 + mu_k**2) - (mu_q * mu_k) ** 2)

    assert check("dot_product_variance", expanded).passed
    assert check("dot_product_variance", factored).passed


def test_believing_the_mean_grows_into_the_variance_is_named():
    # E[(q·k)^2] instead of Var(q·k): counts the mean d_k mu_q mu_k, which grows with d_k, as spread
    def second_moment_of_the_sum(d_k, mu_q, sigma_q, mu_k, sigma_k):
        var_one = (sigma_q**2 + mu_q**2) * (sigma_k**2 + mu_k**2) - (mu_q * mu_k) ** 2
        return d_k * var_one + (d_k * mu_q * mu_k) ** 2

    r = check("dot_product_variance", second_moment_of_the_sum)
    assert r.mistake == "with_squared_mean" and "mean" in r.message.lower()


def test_a_monte_carlo_estimate_is_not_an_exact_prediction():
    def sampled(d_k, mu_q, sigma_q, mu_k, sigma_k):
        rng = np.random.default_rng(0)
        q = mu_q + sigma_q * rng.standard_normal((2000, int(d_k)))
        k = mu_k + sigma_k * rng.standard_normal((2000, int(d_k)))
        return float(np.einsum("ne,ne->n", q, k).var())

    assert not check("dot_product_variance", sampled).passed


def test_dot_product_variance_catalogue_is_not_the_reference():
    # every mistake differs from the reference on at least one case (honest catalogue)
    ex = EXERCISES["dot_product_variance"]
    for m in ex.mistakes:
        assert any(not np.isclose(m.fn(*c.args), ex.reference(*c.args), rtol=ex.rtol) for c in ex.all_cases()), m.key


# --------------------------------------------------------------------------- softmax_jacobian

def _autograd_jacobian(x):
    t = torch.as_tensor(x, dtype=torch.float64)
    flat = t.reshape(-1, t.shape[-1])
    jacs = [torch.autograd.functional.jacobian(lambda z: torch.softmax(z, -1), row) for row in flat]
    return torch.stack(jacs).reshape(*t.shape, t.shape[-1]).numpy()


@pytest.mark.parametrize("shape", [(1,), (4,), (3, 5), (2, 3, 4), (1, 1, 7)])
def test_softmax_jacobian_reference_matches_autograd(shape):
    x = np.random.default_rng(sum(shape)).standard_normal(shape) * 3
    np.testing.assert_allclose(softmax_jacobian_reference(x), _autograd_jacobian(x), rtol=1e-10, atol=1e-12)


def test_softmax_jacobian_every_case_matches_autograd():
    for c in EXERCISES["softmax_jacobian"].all_cases():
        np.testing.assert_allclose(softmax_jacobian_reference(*c.args), _autograd_jacobian(*c.args),
                                   rtol=1e-9, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 6)),
              elements=st.floats(-50, 50, allow_nan=False)))
def test_softmax_jacobian_is_symmetric_psd_with_zero_row_sums(x):
    J = softmax_jacobian_reference(x)
    np.testing.assert_allclose(J, np.swapaxes(J, -1, -2), atol=1e-15)
    np.testing.assert_allclose(J.sum(-1), 0.0, atol=1e-12)
    assert (np.linalg.eigvalsh(J) > -1e-12).all()


def test_softmax_jacobian_accepts_an_autograd_solution():
    assert check("softmax_jacobian", _autograd_jacobian).passed


def test_softmax_jacobian_accepts_a_loop_solution():
    def loops(x):
        x = np.asarray(x, dtype=float)
        out = np.empty(x.shape + (x.shape[-1],))
        for idx in np.ndindex(*x.shape[:-1]):
            e = np.exp(x[idx] - x[idx].max())
            p = e / e.sum()
            for i in range(len(p)):
                for j in range(len(p)):
                    out[idx + (i, j)] = p[i] * ((i == j) - p[j])
        return out

    assert check("softmax_jacobian", loops).passed


def test_variance_growing_like_sqrt_d_k_is_named():
    def sqrt_law(d_k, mu_q, sigma_q, mu_k, sigma_k):
        return math.sqrt(d_k) * (sigma_q**2 * sigma_k**2 + sigma_q**2 * mu_k**2 + mu_q**2 * sigma_k**2)

    r = check("dot_product_variance", sqrt_law)
    assert not r.passed and r.mistake == "sqrt_d_k" and "STANDARD DEVIATION" in r.message


def test_variances_added_instead_of_multiplied_is_named():
    r = check("dot_product_variance", lambda d_k, mu_q, sigma_q, mu_k, sigma_k: d_k * (sigma_q**2 + sigma_k**2))
    assert not r.passed and r.mistake == "variances_added" and "product" in r.message


def test_dot_product_variance_returned_as_a_torch_scalar_passes():
    def with_torch(d_k, mu_q, sigma_q, mu_k, sigma_k):
        t = torch.tensor([mu_q, sigma_q, mu_k, sigma_k], dtype=torch.float64)
        mq, sq, mk, sk = t
        return d_k * (sq**2 * sk**2 + sq**2 * mk**2 + mq**2 * sk**2)

    assert check("dot_product_variance", with_torch).passed


def test_softmax_jacobian_for_one_vector_only_is_named_on_batches():
    def one_vector(x):
        e = np.exp(x - x.max())
        p = e / e.sum()
        return np.diag(p) - np.outer(p, p)

    r = check("softmax_jacobian", one_vector)
    assert not r.passed and r.mistake == "one_vector_only" and "broadcasting" in r.message


def test_softmax_jacobian_einsum_solution_passes():
    def with_einsum(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
        return np.einsum("...i,ij->...ij", p, np.eye(p.shape[-1])) - np.einsum("...i,...j->...ij", p, p)

    assert check("softmax_jacobian", with_einsum).passed


def test_standard_deviation_instead_of_variance_is_named():
    def std(d_k, mu_q, sigma_q, mu_k, sigma_k):
        return math.sqrt(d_k * (sigma_q**2 * sigma_k**2 + sigma_q**2 * mu_k**2 + mu_q**2 * sigma_k**2))

    r = check("dot_product_variance", std)
    assert not r.passed and r.mistake == "std_not_variance" and "square root" in r.message


def test_softmax_jacobian_with_every_sign_flipped_is_named():
    def flipped(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
        return p[..., :, None] * p[..., None, :] - p[..., :, None] * np.eye(p.shape[-1])

    r = check("softmax_jacobian", flipped)
    assert not r.passed and r.mistake == "negated" and "positive" in r.message


# --------------------------------------------------------------------------- cases that vary per check (issue 20)

from exercise_catalogue import asked_twice, catalogue_problems, passes_every_seed  # noqa: E402


@pytest.mark.parametrize("name", NAMES)
def test_catalogue_holds_on_every_draw_of_the_cases(name):
    problems = catalogue_problems(EXERCISES[name])
    assert not problems, problems[:5]


@pytest.mark.parametrize("seed", range(5))
def test_softmax_jacobian_matches_autograd_on_other_draws(seed):
    for c in EXERCISES["softmax_jacobian"].all_cases(seed):
        np.testing.assert_allclose(softmax_jacobian_reference(*c.args), _autograd_jacobian(*c.args),
                                   rtol=1e-9, atol=1e-12)


def test_a_constant_q_and_k_have_variance_exactly_zero():
    # the expanded formula cannot round below 0 (the factored one gives -1e-15, and sqrt of that is complex)
    for seed in range(20):
        c = [c for c in EXERCISES["dot_product_variance"].all_cases(seed) if c.args[2] == c.args[4] == 0][0]
        assert dot_product_variance_reference(*c.args) == 0.0


def test_sigma_product_without_squares_is_sigma_as_variance():
    r, shown = asked_twice("dot_product_variance", lambda d_k, mu_q, sigma_q, mu_k, sigma_k: d_k * sigma_q * sigma_k)
    assert r.mistake == "sigma_as_variance" and "sigma_q**2" in shown


def test_softmax_jacobian_as_a_vector_of_p_one_minus_p_is_elementwise():
    def vector(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
        return p * (1 - p)
    assert check("softmax_jacobian", vector).mistake == "elementwise"


def test_float32_answers_pass_on_every_draw():
    def jac32(x):
        p = torch.softmax(torch.as_tensor(x, dtype=torch.float32), -1)
        return torch.diag_embed(p) - p[..., :, None] * p[..., None, :]

    def var32(d_k, mu_q, sigma_q, mu_k, sigma_k):
        t = torch.tensor([mu_q, sigma_q, mu_k, sigma_k], dtype=torch.float32)
        mq, sq, mk, sk = t
        return d_k * ((sq**2 + mq**2) * (sk**2 + mk**2) - (mq * mk) ** 2)

    assert not passes_every_seed(EXERCISES["softmax_jacobian"], jac32, seeds=range(10))
    assert not passes_every_seed(EXERCISES["dot_product_variance"], var32, seeds=range(10))
