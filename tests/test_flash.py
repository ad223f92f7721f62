"""flash_attention: equal to plain attention (attnlib and torch SDPA) on every mask kind,
batch shape and awkward size; memory that does not grow with L*S; the online-softmax merge."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib as al
from attnlib.instruments.complexity import fit_exponent, peak_memory

TOL = {np.float64: 1e-12, np.float32: 2e-5, torch.float64: 1e-12, torch.float32: 2e-5,
       torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _qkv(rng, batch, L, S, E, Ev, dtype=np.float64, scale=1.0):
    q = rng.standard_normal(batch + (L, E)) * scale
    k = rng.standard_normal(batch + (S, E)) * scale
    v = rng.standard_normal(batch + (S, Ev))
    return [x.astype(dtype) for x in (q, k, v)]


def _mask(rng, kind, batch, L, S):
    if kind is None:
        return None
    if kind == "bool":
        m = rng.random(batch + (L, S)) > 0.4
        m[..., 0, :] = False  # a fully masked row
        return m
    if kind == "bool_broadcast":  # (1, S) key padding, shared by every query
        m = np.ones((1, S), dtype=bool)
        m[:, S // 2:] = False
        return m
    if kind == "float":
        m = rng.standard_normal(batch + (L, S))
        m[rng.random(m.shape) < 0.3] = -np.inf
        return m
    if kind == "float_broadcast":
        return rng.standard_normal((L, 1))  # per-query offsets: cancel in the softmax
    raise AssertionError(kind)


SIZES = [(1, 1), (7, 7), (97, 97), (33, 130), (130, 33), (257, 64)]
MASKS = [None, "causal", "bool", "bool_broadcast", "float", "float_broadcast"]


@pytest.mark.parametrize("L,S", SIZES)
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("block_size", [1, 16, 128])
def test_flash_equals_plain_attention_numpy(L, S, mask, block_size):
    if block_size == 1 and L * S > 10_000:
        pytest.skip("block_size=1 on a large input is slow and adds nothing")
    rng = np.random.default_rng(L * 1000 + S)
    batch = (2,)
    q, k, v = _qkv(rng, batch, L, S, 8, 5)
    m = None if mask in (None, "causal") else _mask(rng, mask, batch, L, S)
    causal = mask == "causal"
    want = al.scaled_dot_product_attention(q, k, v, m, is_causal=causal)
    got = al.flash_attention(q, k, v, m, is_causal=causal, block_size=block_size)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("batch", [(), (3,), (2, 4)])
def test_flash_equals_torch_sdpa(dtype, mask, batch):
    rng = np.random.default_rng(7)
    L, S = 97, 75
    q, k, v = (torch.tensor(x, dtype=dtype) for x in _qkv(rng, batch, L, S, 16, 12))
    m = None if mask in (None, "causal") else _mask(rng, mask, batch, L, S)
    if m is not None:
        m = torch.tensor(m) if m.dtype == bool else torch.tensor(m, dtype=dtype)
    causal = mask == "causal"
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                          attn_mask=None if m is None else (m if m.dtype == torch.bool else m.double()),
                                          is_causal=causal)
    want = torch.nan_to_num(want, nan=0.0)  # (torch's own kernel, should a masked row give NaN)
    got = al.flash_attention(q, k, v, m, is_causal=causal, block_size=32)
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got.double(), want, rtol=TOL[dtype], atol=TOL[dtype])


def test_flash_broadcasts_batch_dims_like_sdpa():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 3, 20, 8))
    k = rng.standard_normal((1, 3, 30, 8))  # shared over the first batch dim
    v = rng.standard_normal((3, 30, 4))
    np.testing.assert_allclose(al.flash_attention(q, k, v, block_size=8),
                               al.scaled_dot_product_attention(q, k, v), atol=1e-12)


def test_flash_with_explicit_scale_and_large_scores_stays_finite():
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, (), 50, 60, 8, 3, scale=30.0)  # scores in the thousands: exp would overflow
    got = al.flash_attention(q, k, v, scale=0.9, block_size=7)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, al.scaled_dot_product_attention(q, k, v, scale=0.9), atol=1e-10)


def test_fully_masked_row_gives_zeros():
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, (), 9, 11, 4, 3)
    m = np.ones((9, 11), dtype=bool)
    m[4] = False
    out = al.flash_attention(q, k, v, m, block_size=4)
    assert np.all(out[4] == 0) and np.isfinite(out).all()
    f = np.zeros((9, 11))
    f[2] = -np.inf
    out = al.flash_attention(q, k, v, f, block_size=4)
    assert np.all(out[2] == 0) and np.isfinite(out).all()


def test_causal_with_fewer_keys_than_queries_matches_torch():
    rng = np.random.default_rng(4)
    q, k, v = (torch.tensor(x) for x in _qkv(rng, (2,), 40, 13, 8, 8))
    torch.testing.assert_close(al.flash_attention(q, k, v, is_causal=True, block_size=8),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_causal_skips_the_tiles_above_the_diagonal(monkeypatch):
    import attnlib.kernels.flash as fl

    calls = []
    real = fl.online_update
    monkeypatch.setattr(fl, "online_update", lambda xp, st, s, v: calls.append(1) or real(xp, st, s, v))
    rng = np.random.default_rng(5)
    q, k, v = _qkv(rng, (), 64, 64, 4, 4)
    fl.flash_attention(q, k, v, block_size=16)
    full = len(calls)
    calls.clear()
    fl.flash_attention(q, k, v, is_causal=True, block_size=16)
    assert full == 16 and len(calls) == 4 * 5 // 2  # the 10 tiles on or below the diagonal


@pytest.mark.slow  # peak memory of large inputs (~5 s)
def test_flash_peak_memory_does_not_grow_with_L_times_S():
    rng = np.random.default_rng(6)
    E = 16
    peaks_flash, peaks_plain = [], []
    ns = [512, 1024, 2048, 4096]
    for n in ns:
        q, k, v = _qkv(rng, (), n, n, E, E, dtype=np.float32)
        peaks_flash.append(peak_memory(lambda: al.flash_attention(q, k, v, block_size=64)))
        peaks_plain.append(peak_memory(lambda: al.scaled_dot_product_attention(q, k, v)))
    # The flash peak is a few 64 x 64 tiles (fixed) plus the (n, E) output: what grows from
    # one n to the next grows like n. Plain attention holds (n, n) arrays: its growth is n^2.
    growth_flash = fit_exponent(ns[1:], np.diff(peaks_flash))
    growth_plain = fit_exponent(ns[1:], np.diff(peaks_plain))
    assert 0.9 < growth_flash < 1.1, (peaks_flash, growth_flash)
    assert 1.8 < growth_plain < 2.2, (peaks_plain, growth_plain)
    assert np.all(np.diff(peaks_flash) <= 2 * np.diff(ns) * E * 4)  # at most ~ the output rows added
    assert peaks_flash[-1] * 20 < peaks_plain[-1]


def test_broadcast_mask_is_not_materialised():
    rng = np.random.default_rng(8)
    n = 1024
    q, k, v = _qkv(rng, (), n, n, 8, 8, dtype=np.float32)
    m = np.ones((1, n), dtype=bool)
    peak = peak_memory(lambda: al.flash_attention(q, k, v, m, block_size=64))
    assert peak < n * n  # an (L, S) bool copy alone would be n^2 bytes


def test_online_softmax_merge_of_two_halves_is_exact():
    rng = np.random.default_rng(9)
    q, k, v = _qkv(rng, (3,), 10, 24, 6, 4, scale=3.0)
    state = al.online_softmax_merge(*al.attention_state(q, k[..., :9, :], v[..., :9, :]),
                                    *al.attention_state(q, k[..., 9:, :], v[..., 9:, :]))
    m, l, acc = state
    np.testing.assert_allclose(acc / l[..., None], al.scaled_dot_product_attention(q, k, v), atol=1e-12)
    m_all, l_all, acc_all = al.attention_state(q, k, v)
    np.testing.assert_allclose(m, m_all)
    np.testing.assert_allclose(l, l_all, rtol=1e-12)


def test_online_softmax_merge_keeps_empty_states_empty():
    m = np.array([-np.inf, 0.5])
    l = np.array([0.0, 2.0])
    acc = np.array([[0.0, 0.0], [1.0, 3.0]])
    empty = (np.array([-np.inf, -np.inf]), np.zeros(2), np.zeros((2, 2)))
    m2, l2, acc2 = al.online_softmax_merge(m, l, acc, *empty)
    assert np.isfinite(l2).all() and np.isfinite(acc2).all()
    np.testing.assert_array_equal(l2, l)
    np.testing.assert_array_equal(acc2, acc)


@pytest.mark.parametrize("bad,match", [
    (dict(block_size=0), "block_size"),
    (dict(block_size=2.5), "block_size"),
    (dict(attn_mask=np.ones((3, 4), dtype=bool)), "attn_mask"),
    (dict(attn_mask=np.ones((5, 6), dtype=np.int64)), "attn_mask"),
    (dict(attn_mask=np.ones((5, 6), dtype=bool), is_causal=True), "is_causal"),
])
def test_bad_arguments_raise_errors_that_name_them(bad, match):
    rng = np.random.default_rng(10)
    q, k, v = _qkv(rng, (), 5, 6, 4, 4)
    mask = bad.pop("attn_mask", None)
    with pytest.raises((ValueError, TypeError), match=match):
        al.flash_attention(q, k, v, mask, **bad)


def test_mismatched_shapes_raise_like_sdpa():
    rng = np.random.default_rng(11)
    q, k, v = _qkv(rng, (), 5, 6, 4, 4)
    with pytest.raises(ValueError, match="last dims E"):
        al.flash_attention(q, k[:, :3], v)
    with pytest.raises(ValueError, match="same length S"):
        al.flash_attention(q, k, v[:4])


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 40), S=st.integers(1, 40), E=st.integers(1, 8), block=st.integers(1, 50),
       causal=st.booleans(), seed=st.integers(0, 2**16), mag=st.sampled_from([0.1, 1.0, 20.0]))
def test_property_flash_equals_plain_for_any_size_and_block(L, S, E, block, causal, seed, mag):
    rng = np.random.default_rng(seed)
    q, k, v = _qkv(rng, (), L, S, E, 3, scale=mag)
    want = al.scaled_dot_product_attention(q, k, v, is_causal=causal)
    np.testing.assert_allclose(al.flash_attention(q, k, v, is_causal=causal, block_size=block), want,
                               atol=1e-11, rtol=1e-9)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), perm_seed=st.integers(0, 2**16))
def test_property_permuting_keys_and_values_together_leaves_output_unchanged(seed, perm_seed):
    rng = np.random.default_rng(seed)
    q, k, v = _qkv(rng, (), 12, 23, 4, 3)
    perm = np.random.default_rng(perm_seed).permutation(23)
    np.testing.assert_allclose(al.flash_attention(q, k[perm], v[perm], block_size=5),
                               al.flash_attention(q, k, v, block_size=5), atol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("causal", [False, True])
def test_flash_on_cuda_matches_torch_sdpa(causal):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, 300, 64, device="cuda", generator=g) for _ in range(3))
    got = al.flash_attention(q, k, v, is_causal=causal)
    assert got.device.type == "cuda"
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                               rtol=2e-4, atol=2e-4)


def test_default_block_size_is_chosen_in_one_place_per_library_and_device():
    """block_size=None picks the measured default (benchmarks/RESULTS.md) from q's library
    and device; the result equals an explicit block of that size."""
    from attnlib.kernels.flash import default_block_size

    rng = np.random.default_rng(12)
    q, k, v = _qkv(rng, (2,), 700, 600, 8, 8)
    assert default_block_size(q) == default_block_size(torch.from_numpy(q)) == 512
    if torch.cuda.is_available():
        assert default_block_size(torch.from_numpy(q).cuda()) == 1024
    np.testing.assert_array_equal(al.flash_attention(q, k, v), al.flash_attention(q, k, v, block_size=512))


@pytest.mark.parametrize("bad,exc", [(np.int64(0), ValueError), (True, TypeError), ("64", TypeError)])
def test_block_size_errors_name_the_argument_and_the_value(bad, exc):
    q = np.ones((3, 2))
    with pytest.raises(exc, match=f"block_size must be a positive int.*{bad!r}" if exc is TypeError
                       else "block_size must be a positive int .>= 1., got 0"):
        al.flash_attention(q, q, q, block_size=bad)
