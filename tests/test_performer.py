"""Positive random features (Performer / FAVOR+): an unbiased estimate of the softmax
kernel whose attention output converges to softmax attention as the features grow."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib as al


def _qkv(rng, L, S, E=8, Ev=5, batch=(), mag=0.5):
    return (rng.standard_normal(batch + (L, E)) * mag, rng.standard_normal(batch + (S, E)) * mag,
            rng.standard_normal(batch + (S, Ev)))


def _rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.parametrize("orthogonal", [True, False])
def test_feature_dot_product_is_an_unbiased_estimate_of_exp(orthogonal):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 6)) * 0.4, rng.standard_normal((4, 6)) * 0.4
    ests = []
    for seed in range(400):
        W = al.random_projection(12, 6, seed=seed, orthogonal=orthogonal)
        ests.append(al.performer_feature_map(x, W) @ al.performer_feature_map(y, W).T)
    ests = np.array(ests)  # (400, 3, 4)
    want = np.exp(x @ y.T)
    # the mean of 400 independent estimates is within 4 standard errors of exp(x . y)
    se = ests.std(0) / np.sqrt(len(ests))
    assert np.all(np.abs(ests.mean(0) - want) < 4 * se + 1e-12)
    assert np.all(ests > 0)


def test_orthogonal_rows_are_orthogonal_within_a_block_and_reproducible():
    W = al.random_projection(20, 8, seed=3)
    block = W[:8] / np.linalg.norm(W[:8], axis=1, keepdims=True)
    np.testing.assert_allclose(block @ block.T, np.eye(8), atol=1e-12)
    np.testing.assert_array_equal(W, al.random_projection(20, 8, seed=3))
    assert not np.allclose(W, al.random_projection(20, 8, seed=4))


def test_error_against_softmax_falls_as_the_features_grow_and_elu_does_not():
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng, 128, 128, E=16)
    soft = al.scaled_dot_product_attention(q, k, v)
    err = {m: np.mean([_rel(al.random_feature_attention(q, k, v, m, seed=s), soft) for s in range(3)])
           for m in (16, 256, 4096)}
    assert err[4096] < 0.5 * err[256] < 0.5 * err[16]
    assert err[4096] < 0.5 * _rel(al.linear_attention(q, k, v), soft)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L,S", [(1, 1), (7, 7), (40, 97), (97, 40)])
def test_equals_its_explicit_quadratic_form(causal, L, S):
    rng = np.random.default_rng(L * 100 + S)
    q, k, v = _qkv(rng, L, S, batch=(2,))
    W = al.random_projection(32, 8, seed=5)
    r = 8 ** -0.25
    sim = al.performer_feature_map(q * r, W) @ np.swapaxes(al.performer_feature_map(k * r, W), -1, -2)
    if causal:
        sim = sim * al.causal_mask(L, S)
    want = (sim / sim.sum(-1, keepdims=True)) @ v
    got = al.random_feature_attention(q, k, v, 32, seed=5, is_causal=causal, chunk_size=3)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_torch_gives_the_numpy_answer_with_the_same_seed(dtype):
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, 20, 20)
    want = al.random_feature_attention(q, k, v, 64, seed=7, is_causal=True)
    got = al.random_feature_attention(*(torch.tensor(x, dtype=dtype) for x in (q, k, v)), 64, seed=7,
                                      is_causal=True)
    assert isinstance(got, torch.Tensor) and got.dtype == dtype
    tol = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 5e-2}[dtype]
    np.testing.assert_allclose(got.double().numpy(), want, atol=tol)


def test_large_inputs_do_not_overflow_to_nan():
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, 16, 16, mag=30.0)
    for x in (al.random_feature_attention(q, k, v, 32),
              al.random_feature_attention(*(torch.tensor(a, dtype=torch.float32) for a in (q, k, v)), 32)):
        assert not np.isnan(np.asarray(x)).any()


def test_a_negative_scale_estimates_softmax_of_negated_scores():
    rng = np.random.default_rng(4)
    q, k, v = _qkv(rng, 30, 30, E=4)
    soft = al.scaled_dot_product_attention(q, k, v, scale=-0.5)
    assert _rel(al.random_feature_attention(q, k, v, 4096, scale=-0.5), soft) < 0.1


def test_bad_arguments_are_clear_errors():
    q = np.zeros((3, 2))
    with pytest.raises(ValueError, match="num_features must be a positive int"):
        al.random_feature_attention(q, q, q, 0)
    with pytest.raises(TypeError, match="is_causal"):
        al.random_feature_attention(q, q, q, 4, is_causal="yes")
    with pytest.raises(ValueError, match="S = 0"):
        al.random_feature_attention(q, np.zeros((0, 2)), np.zeros((0, 2)), 4)


@settings(max_examples=30, deadline=None)
@given(L=st.integers(1, 20), m=st.integers(1, 40), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_property_outputs_are_convex_combinations_of_values(L, m, causal, seed):
    rng = np.random.default_rng(seed)
    q, k, v = _qkv(rng, L, L, E=4, Ev=3)
    out = al.random_feature_attention(q, k, v, m, seed=seed, is_causal=causal)
    assert np.all(out <= v.max(0) + 1e-9) and np.all(out >= v.min(0) - 1e-9)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_gives_the_cpu_answer():
    q, k, v = (torch.randn(2, 50, 8, dtype=torch.float64) * 0.5 for _ in range(3))
    want = al.random_feature_attention(q, k, v, 64, is_causal=True)
    got = al.random_feature_attention(*(x.cuda() for x in (q, k, v)), 64, is_causal=True)
    assert got.device.type == "cuda"
    torch.testing.assert_close(got.cpu(), want)
