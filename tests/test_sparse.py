"""sliding_window_attention: equal to SDPA with its mask; cost linear in n; error against
full attention bounded by the attention mass it cuts away."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib as al
from attnlib.instruments.complexity import fit_exponent, peak_memory


def _qkv(rng, batch, L, S, E=8, Ev=5):
    return (rng.standard_normal(batch + (L, E)), rng.standard_normal(batch + (S, E)),
            rng.standard_normal(batch + (S, Ev)))


@pytest.mark.parametrize("L,S", [(1, 1), (7, 7), (97, 97), (40, 97), (97, 40), (257, 257)])
@pytest.mark.parametrize("window", [0, 3, 50])
@pytest.mark.parametrize("num_global", [0, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_sliding_window_equals_sdpa_with_its_mask(L, S, window, num_global, causal):
    rng = np.random.default_rng(L + 7 * S + window)
    q, k, v = _qkv(rng, (2,), L, S)
    mask = al.sliding_window_mask(L, S, window=window, num_global=num_global, is_causal=causal)
    want = al.scaled_dot_product_attention(q, k, v, mask)
    got = al.sliding_window_attention(q, k, v, window=window, num_global=num_global, is_causal=causal,
                                      block_size=32)
    np.testing.assert_allclose(got, want, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sliding_window_matches_torch_sdpa(dtype):
    rng = np.random.default_rng(1)
    q, k, v = (torch.tensor(x, dtype=dtype) for x in _qkv(rng, (2, 3), 100, 100))
    mask = al.sliding_window_mask(100, window=8, num_global=3, like=q)
    assert mask.dtype == torch.bool
    got = al.sliding_window_attention(q, k, v, window=8, num_global=3, block_size=16)
    assert got.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), rtol=tol, atol=tol)


def test_mask_shape_of_window_and_global_tokens():
    m = al.sliding_window_mask(6, window=1, num_global=1)
    want = np.array([[1, 1, 1, 1, 1, 1],
                     [1, 1, 1, 0, 0, 0],
                     [1, 1, 1, 1, 0, 0],
                     [1, 0, 1, 1, 1, 0],
                     [1, 0, 0, 1, 1, 1],
                     [1, 0, 0, 0, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(m, want)
    np.testing.assert_array_equal(al.sliding_window_mask(6, window=1, num_global=1, is_causal=True),
                                  want & np.tril(np.ones((6, 6), dtype=bool)))


def test_window_covering_everything_is_full_attention():
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, (), 30, 30)
    np.testing.assert_allclose(al.sliding_window_attention(q, k, v, window=29),
                               al.scaled_dot_product_attention(q, k, v), atol=1e-12)


def test_error_against_full_attention_is_bounded_by_the_mass_cut_away():
    rng = np.random.default_rng(3)
    n, w = 200, 10
    q, k, v = _qkv(rng, (), n, n)
    full, weights = al.scaled_dot_product_attention(q, k, v, return_weights=True)
    sparse = al.sliding_window_attention(q, k, v, window=w, num_global=2)
    mask = al.sliding_window_mask(n, window=w, num_global=2)
    eps = np.where(mask, 0.0, weights).sum(-1)  # (L,): the full-attention weight outside the window
    spread = v.max(0) - v.min(0)  # (Ev,)
    err = np.abs(full - sparse)  # (L, Ev)
    assert np.all(err <= eps[:, None] * spread[None, :] + 1e-12)
    assert err.max() > 1e-3  # and it is a real error, not zero


def test_error_is_small_when_attention_is_local():
    # keys close in position are similar to the query (a smooth sequence): the attention
    # that a window of 16 cuts away is tiny, and so is the error
    n, E = 256, 16
    t = np.arange(n)[:, None] / 8.0
    freqs = np.linspace(0.2, 1.0, E // 2)[None, :]
    x = np.concatenate([np.sin(t * freqs), np.cos(t * freqs)], axis=1) * 3.0  # (n, E)
    v = np.random.default_rng(4).standard_normal((n, 4))
    full = al.scaled_dot_product_attention(x, x, v, scale=1.0)
    err = np.abs(al.sliding_window_attention(x, x, v, window=16, scale=1.0) - full).max()
    assert err < 1e-2 * np.abs(v).max()


def test_peak_memory_grows_linearly_with_n():
    rng = np.random.default_rng(5)
    ns = [512, 1024, 2048, 4096]
    peaks = []
    for n in ns:
        q, k, v = (x.astype(np.float32) for x in _qkv(rng, (), n, n, 16, 16))
        peaks.append(peak_memory(lambda: al.sliding_window_attention(q, k, v, window=32, num_global=2,
                                                                     block_size=64)))
    growth = fit_exponent(ns[1:], np.diff(peaks))  # band tiles are fixed; the output grows like n
    assert 0.8 < growth < 1.2, (peaks, growth)
    assert peaks[-1] < 4096 * 4096  # far below one (n, n) float32 array (64 MiB)


def test_bad_window_raises():
    q = np.zeros((4, 2))
    with pytest.raises(ValueError, match="window"):
        al.sliding_window_attention(q, q, q, window=-1)
    with pytest.raises(ValueError, match="num_global"):
        al.sliding_window_attention(q, q, q, window=1, num_global=1.5)


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 30), S=st.integers(1, 30), w=st.integers(0, 12), g=st.integers(0, 4),
       block=st.integers(1, 20), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_property_sliding_window_equals_masked_attention(L, S, w, g, block, causal, seed):
    rng = np.random.default_rng(seed)
    q, k, v = _qkv(rng, (), L, S, 4, 3)
    mask = al.sliding_window_mask(L, S, window=w, num_global=g, is_causal=causal)
    np.testing.assert_allclose(
        al.sliding_window_attention(q, k, v, window=w, num_global=g, is_causal=causal, block_size=block),
        al.scaled_dot_product_attention(q, k, v, mask), atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(L=st.integers(0, 40), S=st.integers(0, 40), w=st.integers(0, 45), g=st.integers(0, 45), causal=st.booleans())
def test_property_pair_count_equals_mask_sum(L, S, w, g, causal):
    mask = al.sliding_window_mask(L, S, window=w, num_global=g, is_causal=causal)
    assert al.sliding_window_pairs(L, S, window=w, num_global=g, is_causal=causal) == int(mask.sum())


def test_pair_count_is_linear_in_n():
    counts = [al.sliding_window_pairs(n, window=64, num_global=2) for n in (4096, 8192, 16384)]
    assert counts[2] - counts[1] == 2 * (counts[1] - counts[0])  # exactly linear once n >> window


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sliding_window_on_cuda_matches_masked_sdpa():
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, 300, 32, device="cuda", generator=g) for _ in range(3))
    mask = al.sliding_window_mask(300, window=16, num_global=2, is_causal=True, like=q)
    got = al.sliding_window_attention(q, k, v, window=16, num_global=2, is_causal=True)
    assert got.device.type == "cuda"
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), rtol=2e-4, atol=2e-4)
