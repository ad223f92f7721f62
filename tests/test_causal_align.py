"""causal_mask(L, S, align=...): upper-left stays the default (SDPA's is_causal=True);
lower-right equals torch.nn.attention.bias.causal_lower_right, for awkward sizes, on NumPy
and torch, and attention with it equals torch SDPA given the same lower-right bias."""
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

import attnlib as al
from conftest import DEVICES

SIZES = [(1, 1), (1, 7), (7, 7), (3, 97), (97, 97), (7, 3), (6, 1), (0, 4), (4, 0)]


def torch_bias(kind, L, S):
    with warnings.catch_warnings():  # torch warns that L > S gives empty rows (NaN in its SDPA)
        warnings.simplefilter("ignore")
        return (causal_lower_right if kind == "lower_right" else causal_upper_left)(L, S)._materialize()


@pytest.mark.parametrize("L,S", SIZES)
@pytest.mark.parametrize("align", ["upper_left", "lower_right"])
def test_mask_equals_torch_causal_bias(L, S, align):
    ref = torch_bias(align, L, S).numpy()
    np.testing.assert_array_equal(al.causal_mask(L, S, align=align), ref)
    np.testing.assert_array_equal(al.causal_mask(L, S, align=align, like=torch.zeros(1)).numpy(), ref)


@pytest.mark.parametrize("L,S", SIZES)
def test_default_is_upper_left_like_is_causal(L, S):
    np.testing.assert_array_equal(al.causal_mask(L, S), al.causal_mask(L, S, align="upper_left"))
    np.testing.assert_array_equal(al.causal_mask(L, S), np.tril(np.ones((L, S), dtype=bool)))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40))
def test_lower_right_query_i_sees_exactly_keys_up_to_i_plus_s_minus_l(L, S):
    m = al.causal_mask(L, S, align="lower_right")
    i, j = np.nonzero(m)
    assert np.all(j <= i + S - L)
    assert m.sum() == sum(max(0, min(S, i + S - L + 1)) for i in range(L))
    if L <= S and L:
        assert m[-1].all(), "the newest query sees every key"


def test_one_query_against_six_cached_keys():
    # the classic decoding bug: upper-left lets the new token see key 0 only
    np.testing.assert_array_equal(al.causal_mask(1, 7).astype(int), [[1, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(al.causal_mask(1, 7, align="lower_right"), np.ones((1, 7), bool))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("L,S", [(1, 7), (5, 97), (7, 7), (3, 4)])
def test_attention_with_lower_right_mask_equals_torch_sdpa(device, dtype, L, S):
    g = torch.Generator().manual_seed(L * 100 + S)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g, dtype=dtype).to(device) for n in (L, S, S))
    mask = al.causal_mask(L, S, align="lower_right", like=q)
    assert mask.device == q.device
    ours = al.scaled_dot_product_attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(L, S))
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(ours, ref, atol=tol, rtol=tol)


def test_lower_right_on_l_greater_than_s_gives_zero_rows_not_nan():
    q, k, v = torch.randn(5, 4), torch.randn(3, 4), torch.randn(3, 4)
    out = al.scaled_dot_product_attention(q, k, v, al.causal_mask(5, 3, align="lower_right", like=q))
    assert torch.isfinite(out).all() and (out[:2] == 0).all()


@pytest.mark.parametrize("bad", ["lower-right", "upper", None, 1])
def test_unknown_alignment_is_refused_with_both_options_named(bad):
    with pytest.raises(ValueError, match="upper_left.*lower_right"):
        al.causal_mask(2, 3, align=bad)


def test_bad_sizes_name_the_argument():
    with pytest.raises(ValueError, match="S must be >= 0"):
        al.causal_mask(2, -1, align="lower_right")
    with pytest.raises(TypeError, match="L must be an int"):
        al.causal_mask(2.0, align="lower_right")
