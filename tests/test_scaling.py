"""Chapter 3 helpers: the Monte Carlo agrees with Var(q·k) = σ_q² σ_k² d_k and mean 0,
the Jacobian agrees with autograd, and the saturation metrics have the right limits."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attnlib.instruments import scaling as sc


def test_monte_carlo_variance_grows_like_d_k_and_mean_stays_zero():
    d = 2 ** np.arange(0, 11)
    n = 5000
    means, variances = sc.dot_product_moments(d, n=n, seed=0)
    np.testing.assert_allclose(variances / d, 1.0, rtol=0.1)
    # mean 0 within 4 standard errors (std of the mean = sqrt(d_k / n))
    assert (np.abs(means) < 4 * np.sqrt(d / n)).all()


@pytest.mark.parametrize("sq,sk,d_k", [(2.0, 0.5, 32), (3.0, 1.0, 8), (0.1, 0.2, 512)])
def test_monte_carlo_variance_scales_with_sigmas(sq, sk, d_k):
    _, v = sc.dot_product_moments([d_k], n=20000, seed=1, sigma_q=sq, sigma_k=sk)
    assert v[0] == pytest.approx(sq**2 * sk**2 * d_k, rel=0.05)


def test_dot_products_chunking_does_not_change_the_distribution_size():
    rng = np.random.default_rng(0)
    assert sc.dot_products(1000, 2500, rng, chunk=10_000).shape == (2500,)


def test_softmax_np_matches_torch_and_survives_large_logits():
    x = np.random.default_rng(0).standard_normal((3, 7)) * 500
    np.testing.assert_allclose(sc.softmax_np(x), torch.softmax(torch.from_numpy(x), -1).numpy(), atol=1e-12)


def test_softmax_jacobian_np_matches_autograd():
    x = torch.randn(7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    J = torch.autograd.functional.jacobian(lambda z: torch.softmax(z, -1), x).numpy()
    np.testing.assert_allclose(sc.softmax_jacobian_np(sc.softmax_np(x.numpy())), J, atol=1e-14)


@settings(max_examples=30, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(2, 9)),
              elements=st.floats(-30, 30, allow_nan=False)))
def test_saturation_metrics_stay_in_their_ranges(x):
    m = sc.saturation(x)
    S = x.shape[-1]
    assert 1 / S - 1e-12 <= m["max_weight"] <= 1 + 1e-12
    assert -1e-12 <= m["entropy"] <= math.log(S) + 1e-12
    assert 0 <= m["jacobian_norm"] <= 1
    assert 0 <= m["jacobian_norm_median"] <= 1


def test_saturation_limits_uniform_and_one_hot():
    S = 8
    uni = sc.saturation(np.zeros((1, S)))
    assert uni["max_weight"] == pytest.approx(1 / S)
    assert uni["entropy"] == pytest.approx(math.log(S))
    hot = sc.saturation(np.array([[1000.0] + [0.0] * (S - 1)]))
    assert hot["max_weight"] == pytest.approx(1.0)
    assert hot["entropy"] == pytest.approx(0.0, abs=1e-12)
    assert hot["jacobian_norm"] == pytest.approx(0.0, abs=1e-12)


def test_unscaled_logits_saturate_and_scaled_ones_do_not():
    rng = np.random.default_rng(0)
    big_raw = sc.saturation(sc.random_logits(1024, 16, 300, rng, scaled=False))
    big_scaled = sc.saturation(sc.random_logits(1024, 16, 300, rng, scaled=True))
    small_scaled = sc.saturation(sc.random_logits(4, 16, 300, rng, scaled=True))
    assert big_raw["max_weight"] > 0.9 and big_scaled["max_weight"] < 0.4
    assert big_raw["jacobian_norm"] < 0.3 * big_scaled["jacobian_norm"]
    # the typical unscaled row is frozen, far more than the mean (a few rows are not)
    assert big_raw["jacobian_norm_median"] < 0.01 * big_scaled["jacobian_norm_median"]
    assert big_scaled["entropy"] == pytest.approx(small_scaled["entropy"], rel=0.1)


def test_selectivity_is_zero_for_uniform_and_one_for_one_hot():
    S = 8
    assert sc.saturation(np.zeros((1, S)))["selectivity"] == pytest.approx(0.0, abs=1e-12)
    assert sc.saturation(np.array([[1000.0] + [0.0] * (S - 1)]))["selectivity"] == pytest.approx(1.0)


def test_query_grad_norms_match_the_chain_rule_formula():
    # ‖c Kᵀ J V g‖ written out by hand for the same draws (same generator, same order)
    d_k, S, d_v, n = 8, 5, 3, 7
    got = sc.query_grad_norms(d_k, S=S, n=n, d_v=d_v, scaled=True, seed=3, chunk=n)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(n, d_k, 1, generator=g, dtype=torch.float32)
    K = torch.randn(n, S, d_k, generator=g)
    V = torch.randn(n, S, d_v, generator=g)
    up = torch.randn(n, d_v, generator=g)
    c = 1 / math.sqrt(d_k)
    p = torch.softmax((K @ q)[..., 0] * c, dim=-1)                          # (n, S)
    J = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]                  # (n, S, S)
    want = (c * K.transpose(1, 2) @ J @ V @ up[:, :, None])[..., 0].norm(dim=-1)
    np.testing.assert_allclose(got, want.double().numpy(), rtol=1e-4)


def test_unscaled_query_gradients_are_heavy_tailed_and_scaled_ones_are_not():
    narrow_u = sc.grad_summary(sc.query_grad_norms(16, n=600, scaled=False))
    wide_u = sc.grad_summary(sc.query_grad_norms(1024, n=600, scaled=False))
    narrow_s = sc.grad_summary(sc.query_grad_norms(16, n=600, scaled=True))
    wide_s = sc.grad_summary(sc.query_grad_norms(1024, n=600, scaled=True))
    assert wide_u["mean"] > narrow_u["mean"] and wide_u["median"] < 0.01 * narrow_u["median"]
    assert wide_u["small"] > 0.3 and wide_s["small"] == 0
    assert wide_s["median"] == pytest.approx(narrow_s["median"], rel=0.15)


def test_grad_summary_counts_the_small_ones():
    s = sc.grad_summary(np.array([1e-5, 1e-4, 2.0, 3.0]))
    assert s["small"] == 0.5 and s["median"] == pytest.approx(1.00005) and s["mean"] == pytest.approx(1.2500275)


def test_linear_default_init_gives_components_of_variance_one_third():
    m = sc.linear_init_scores(256, 32, n=4096, seed=1)
    # nn.Linear: weights and biases U(-1/√fan_in, 1/√fan_in), variance 1/(3 fan_in) each
    assert m["var_q"] == pytest.approx(1 / 3 + 1 / (3 * 256), rel=0.1)
    assert m["var_scaled"] == pytest.approx(m["var_q"] * m["var_k"], rel=0.2)
    assert m["var_score"] == pytest.approx(32 * m["var_scaled"], rel=1e-6)


def test_query_grad_norms_can_return_each_rows_largest_weight_without_changing_the_draws():
    plain = sc.query_grad_norms(64, n=300, scaled=False, seed=2)
    norms, top = sc.query_grad_norms(64, n=300, scaled=False, seed=2, with_max_weight=True)
    np.testing.assert_array_equal(plain, norms)
    assert top.shape == (300,) and ((1 / 16 <= top) & (top <= 1 + 1e-6)).all()


@pytest.mark.parametrize("S", [2, 8, 16, 64])
def test_softmax_jacobian_norm_of_uniform_weights_is_sqrt_S_minus_1_over_S(S):
    # chapter 3: a too-hot softmax keeps a large Jacobian, so gradient size cannot detect it
    uniform = sc.saturation(np.zeros((1, S)))["jacobian_norm"]
    assert uniform == pytest.approx(math.sqrt(S - 1) / S, rel=1e-12)
    rng = np.random.default_rng(S)
    hot = sc.saturation(rng.standard_normal((200, S)) / 100)["jacobian_norm"]   # τ = 100
    assert hot == pytest.approx(uniform, rel=0.01)


def test_query_grad_norms_both_reuses_each_draw_for_both_scales():
    both = sc.query_grad_norms_both(64, n=300, seed=2, chunk=100)
    u, top = sc.query_grad_norms(64, n=300, scaled=False, seed=2, chunk=100, with_max_weight=True)
    s = sc.query_grad_norms(64, n=300, scaled=True, seed=2, chunk=100)
    np.testing.assert_allclose(both["unscaled"], u, rtol=1e-5)
    np.testing.assert_allclose(both["scaled"], s, rtol=1e-5)
    np.testing.assert_allclose(both["max_weight_unscaled"], top, rtol=1e-6)
    assert (both["max_weight_scaled"] <= both["max_weight_unscaled"] + 1e-6).all()  # hotter: flatter


@pytest.mark.parametrize("bad", [dict(n=0), dict(S=2.5), dict(chunk=-1)])
def test_query_grad_norms_both_refuses_bad_sizes(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        sc.query_grad_norms_both(16, **bad)
