"""linear_attention: equal to its explicit quadratic form (non-causal and causal running
sums), linear cost, and its error against softmax attention in the two regimes."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib as al
from attnlib.instruments.complexity import fit_exponent, peak_memory


def _qkv(rng, batch, L, S, E=8, Ev=5, scale=1.0):
    return (rng.standard_normal(batch + (L, E)) * scale, rng.standard_normal(batch + (S, E)) * scale,
            rng.standard_normal(batch + (S, Ev)))


def _quadratic(q, k, v, causal):
    """The same kernel written the slow way: an explicit (L, S) weight matrix."""
    a = al.elu_feature_map(q) @ np.swapaxes(al.elu_feature_map(k), -1, -2)  # (..., L, S)
    if causal:
        a = a * al.causal_mask(q.shape[-2], k.shape[-2])
    return (a / a.sum(-1, keepdims=True)) @ v


def test_feature_map_is_elu_plus_one_and_positive():
    x = np.array([-30.0, -1.0, 0.0, 0.5, 2.0])
    np.testing.assert_allclose(al.elu_feature_map(x), [np.exp(-30.0), np.exp(-1.0), 1.0, 1.5, 3.0])
    t = torch.linspace(-5, 5, 11)
    torch.testing.assert_close(al.elu_feature_map(t), torch.nn.functional.elu(t) + 1)


@pytest.mark.parametrize("L,S", [(1, 1), (7, 7), (97, 97), (40, 97), (97, 40), (257, 130)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunk", [1, 16, 64])
def test_linear_attention_equals_its_quadratic_form(L, S, causal, chunk):
    rng = np.random.default_rng(L * 3 + S)
    q, k, v = _qkv(rng, (2,), L, S)
    np.testing.assert_allclose(al.linear_attention(q, k, v, is_causal=causal, chunk_size=chunk),
                               _quadratic(q, k, v, causal), atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_linear_attention_on_torch_keeps_dtype(dtype):
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng, (3,), 50, 50)
    got = al.linear_attention(*(torch.tensor(x, dtype=dtype) for x in (q, k, v)), is_causal=True)
    assert got.dtype == dtype
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 3e-2}[dtype]
    np.testing.assert_allclose(got.double().numpy(), _quadratic(q, k, v, True), atol=tol, rtol=tol)


def test_causal_output_does_not_see_the_future():
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, (), 40, 40)
    out = al.linear_attention(q, k, v, is_causal=True, chunk_size=8)
    k2, v2 = k.copy(), v.copy()
    k2[25:] += 5.0
    v2[25:] -= 3.0
    out2 = al.linear_attention(q, k2, v2, is_causal=True, chunk_size=8)
    np.testing.assert_allclose(out[:25], out2[:25], atol=1e-12)
    assert np.abs(out[25:] - out2[25:]).max() > 0.1


def _rel_err(q, k, v):
    soft = al.scaled_dot_product_attention(q, k, v, scale=1.0)
    lin = al.linear_attention(q, k, v)
    return np.linalg.norm(lin - soft) / np.linalg.norm(soft)


def test_error_against_softmax_is_small_only_when_softmax_is_nearly_uniform():
    rng = np.random.default_rng(3)
    errs = {s: _rel_err(*_qkv(rng, (), 256, 256, 16, 8, scale=s)) for s in (0.05, 0.5, 2.0)}
    # stated in the module docstring: both tend to the mean of the values as scores -> 0,
    # and drift apart as softmax gets peaked
    assert errs[0.05] < 0.05
    assert errs[0.05] < errs[0.5] < errs[2.0]
    assert errs[2.0] > 0.5


@pytest.mark.slow  # peak memory of large inputs (~5 s)
def test_peak_memory_is_linear_in_n():
    rng = np.random.default_rng(4)
    ns = [1024, 2048, 4096, 8192]
    for causal in (False, True):
        peaks = []
        for n in ns:
            q, k, v = (x.astype(np.float32) for x in _qkv(rng, (), n, n, 16, 16))
            peaks.append(peak_memory(lambda: al.linear_attention(q, k, v, is_causal=causal)))
        growth = fit_exponent(ns[1:], np.diff(peaks))
        assert 0.8 < growth < 1.2, (causal, peaks, growth)
        assert peaks[-1] < 100 * 8192 * 16 * 4  # a few (n, E) arrays, nothing of size n^2


def test_linear_attention_rejects_empty_keys():
    with pytest.raises(ValueError, match="S = 0"):
        al.linear_attention(np.zeros((3, 2)), np.zeros((0, 2)), np.zeros((0, 2)))


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 30), S=st.integers(1, 30), chunk=st.integers(1, 12), causal=st.booleans(),
       seed=st.integers(0, 2**16))
def test_property_outputs_are_convex_combinations_of_values(L, S, chunk, causal, seed):
    rng = np.random.default_rng(seed)
    q, k, v = _qkv(rng, (), L, S, 4, 3, scale=2.0)
    out = al.linear_attention(q, k, v, is_causal=causal, chunk_size=chunk)
    np.testing.assert_allclose(out, _quadratic(q, k, v, causal), atol=1e-11)
    assert np.all(out <= v.max(0) + 1e-12) and np.all(out >= v.min(0) - 1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_on_cuda_matches_cpu(causal):
    q, k, v = (torch.randn(2, 300, 16, dtype=torch.float64) for _ in range(3))
    want = al.linear_attention(q, k, v, is_causal=causal)
    got = al.linear_attention(q.cuda(), k.cuda(), v.cuda(), is_causal=causal)
    assert got.device.type == "cuda"
    torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("is_causal", [False, True])
def test_very_negative_inputs_do_not_underflow_to_nan_in_float32(is_causal):
    # every entry below -103 makes exp (the elu+1 feature) underflow to 0 in float32;
    # attnlib rescales exactly first, so float32 matches the float64 result
    rng = np.random.default_rng(3)
    q, k = (rng.standard_normal((2, 9, 4)) - 300 for _ in range(2))
    v = rng.standard_normal((2, 9, 3))
    want = al.linear_attention(q, k, v, is_causal=is_causal)
    got = al.linear_attention(*(a.astype(np.float32) for a in (q, k, v)), is_causal=is_causal)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_causal_query_whose_visible_keys_all_underflow_gets_zeros_not_nan():
    q, k = np.zeros((5, 3), np.float32), np.zeros((5, 3), np.float32)
    k[0] = -1e4  # query 0 sees only key 0, some e^-10000 times smaller than the others
    out = al.linear_attention(q, k, np.ones((5, 2), np.float32), is_causal=True)
    np.testing.assert_array_equal(out, [[0, 0]] + [[1, 1]] * 4)
