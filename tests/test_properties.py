"""Properties the course teaches, checked on random inputs (hypothesis):
weights are a probability distribution per query (or all zero when nothing is visible),
self-attention without positions is permutation *equivariant*, causal attention does not
peek at the future, padded keys change nothing."""
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib as al

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)

dims = st.integers(1, 9)
seeds = st.integers(0, 2**32 - 1)
libs = st.sampled_from(["numpy", "torch"])


def _qkv(seed, batch, L, S, E, Ev, lib="numpy"):
    r = np.random.default_rng(seed)
    xs = [r.standard_normal(batch + shape) * 3 for shape in ((L, E), (S, E), (S, Ev))]
    return [torch.from_numpy(x) for x in xs] if lib == "torch" else xs


def _np(x):
    return x.numpy() if isinstance(x, torch.Tensor) else x


@SETTINGS
@given(seed=seeds, L=dims, S=dims, E=dims, p=st.floats(0.0, 1.0), lib=libs)
def test_weight_rows_sum_to_one_or_zero(seed, L, S, E, p, lib):
    q, k, v = _qkv(seed, (2,), L, S, E, 3, lib)
    keep = np.random.default_rng(seed + 1).random((2, L, S)) >= p  # some rows may be empty
    m = torch.from_numpy(keep) if lib == "torch" else keep
    out, w = al.scaled_dot_product_attention(q, k, v, m, return_weights=True)
    sums = _np(w).sum(-1)
    expected = keep.any(-1).astype(float)
    np.testing.assert_allclose(sums, expected, atol=1e-12)
    assert (_np(w) >= 0).all() and (_np(w)[~keep] == 0).all()
    assert np.isfinite(_np(out)).all()


@SETTINGS
@given(seed=seeds, L=st.integers(2, 9), E=dims, lib=libs, heads=st.sampled_from([1, 2, 4]))
def test_self_attention_is_permutation_equivariant(seed, L, E, lib, heads):
    x, _, _ = _qkv(seed, (), L, 1, 4 * E, 1, lib)
    perm = np.random.default_rng(seed).permutation(L)
    out = _np(al.scaled_dot_product_attention(x, x, x))
    np.testing.assert_allclose(_np(al.scaled_dot_product_attention(x[perm], x[perm], x[perm])),
                               out[perm], atol=1e-12)
    r = np.random.default_rng(seed + 2)
    ws = [r.standard_normal((4 * E, 4 * E)) for _ in range(4)]
    if lib == "torch":
        ws = [torch.from_numpy(w) for w in ws]
    mh = _np(al.multi_head_attention(x, x, x, heads, *ws))
    np.testing.assert_allclose(_np(al.multi_head_attention(x[perm], x[perm], x[perm], heads, *ws)),
                               mh[perm], atol=1e-9)


@SETTINGS
@given(seed=seeds, L=st.integers(2, 9), E=dims, t=st.integers(0, 8), lib=libs)
def test_causal_outputs_do_not_depend_on_future_tokens(seed, L, E, t, lib):
    t = t % (L - 1)  # positions 0..t are the past, t+1.. the future
    q, k, v = _qkv(seed, (2,), L, L, E, 3, lib)
    out = _np(al.scaled_dot_product_attention(q, k, v, is_causal=True))
    q2, k2, v2 = (x.copy() if lib == "numpy" else x.clone() for x in (q, k, v))
    for x in (q2, k2, v2):
        x[..., t + 1:, :] = x[..., t + 1:, :] * -5 + 7  # rewrite the future
    out2 = _np(al.scaled_dot_product_attention(q2, k2, v2, is_causal=True))
    np.testing.assert_allclose(out2[..., : t + 1, :], out[..., : t + 1, :], atol=1e-12)
    assert not np.allclose(out2[..., t + 1:, :], out[..., t + 1:, :])


@SETTINGS
@given(seed=seeds, L=dims, S=dims, E=dims, extra=st.integers(1, 5), lib=libs)
def test_padded_keys_have_no_effect(seed, L, S, E, extra, lib):
    q, k, v = _qkv(seed, (), L, S + extra, E, 4, lib)
    pad = al.padding_mask(np.array([S]), S + extra)[0]  # (1, S + extra)
    if lib == "torch":
        pad = torch.from_numpy(pad)
    out = _np(al.scaled_dot_product_attention(q, k, v, pad))
    alone = _np(al.scaled_dot_product_attention(q, k[:S], v[:S]))  # no padding at all
    np.testing.assert_allclose(out, alone, atol=1e-12)
    k[S:] = 1e3  # whatever sits in the padding changes nothing
    v[S:] = 1e9
    np.testing.assert_allclose(_np(al.scaled_dot_product_attention(q, k, v, pad)), alone, atol=1e-12)


@SETTINGS
@given(seed=seeds, n=st.integers(1, 30), c=st.floats(-1e3, 1e3))
def test_softmax_is_shift_invariant(seed, n, c):
    x = np.random.default_rng(seed).standard_normal(n) * 10
    np.testing.assert_allclose(al.softmax(x + c), al.softmax(x), atol=1e-12)
