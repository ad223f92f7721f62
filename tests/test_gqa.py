"""Grouped-query attention: multi_head_attention(..., num_kv_heads=g) equals torch SDPA
with enable_gqa=True on the same projections; repeat_kv has torch.repeat_interleave
semantics on dim -3; g = h is ordinary multi-head attention; bad input is refused."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnlib as al
from attnlib.instruments.inference import grouped_attention
from conftest import DEVICES


def gqa_weights(g, d_model, h, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    d_head = d_model // h
    shapes = [(d_model, d_model), (d_model, g * d_head), (d_model, g * d_head), (d_model, d_model)]
    return [torch.randn(s, generator=gen, dtype=dtype) / s[0] ** 0.5 for s in shapes]


def torch_gqa(query, key, value, h, g, w_q, w_k, w_v, w_o, **kw):
    """The outside reference: split heads by hand, SDPA with enable_gqa=True."""
    N, L, d_model = query.shape
    S, d_head = key.shape[1], d_model // h
    q = (query @ w_q).view(N, L, h, d_head).transpose(1, 2)  # (N, h, L, d_head)
    k = (key @ w_k).view(N, S, g, d_head).transpose(1, 2)  # (N, g, S, d_head)
    v = (value @ w_v).view(N, S, g, d_head).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)  # (N, h, L, d_head)
    return out.transpose(1, 2).reshape(N, L, d_model) @ w_o


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("h,g", [(1, 1), (4, 1), (4, 2), (4, 4), (8, 2), (12, 3)])
@pytest.mark.parametrize("L,S", [(1, 1), (1, 7), (7, 7), (5, 97)])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa_enable_gqa(device, h, g, L, S, causal):
    d_model = 2 * h * 4
    gen = torch.Generator().manual_seed(L + 10 * S + h)
    query = torch.randn(2, L, d_model, generator=gen, dtype=torch.float64)
    key = torch.randn(2, S, d_model, generator=gen, dtype=torch.float64)
    ws = gqa_weights(g, d_model, h)
    query, key, *ws = (t.to(device) for t in (query, key, *ws))
    mask = al.causal_mask(L, S, align="lower_right", like=query) if causal else None
    ours = al.multi_head_attention(query, key, key, h, *ws, num_kv_heads=g, attn_mask=mask)
    ref = torch_gqa(query, key, key, h, g, *ws, attn_mask=mask)
    torch.testing.assert_close(ours, ref, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_numpy_equals_torch(dtype, tol):
    h, g, d_model = 6, 2, 24
    ws = [w.numpy().astype(dtype) for w in gqa_weights(g, d_model, h)]
    x = np.random.default_rng(0).standard_normal((3, 7, d_model)).astype(dtype)
    ours = al.multi_head_attention(x, x, x, h, *ws, num_kv_heads=g, is_causal=True)
    assert isinstance(ours, np.ndarray) and ours.dtype == dtype
    ref = torch_gqa(*(torch.from_numpy(t) for t in (x, x, x)), h, g,
                    *(torch.from_numpy(w) for w in ws), is_causal=True).numpy()
    np.testing.assert_allclose(ours, ref, atol=tol, rtol=tol)


def test_num_kv_heads_equal_to_heads_is_multi_head_attention():
    h, d_model = 4, 16
    ws = gqa_weights(h, d_model, h)
    x = torch.randn(2, 5, d_model, dtype=torch.float64)
    torch.testing.assert_close(al.multi_head_attention(x, x, x, h, *ws, num_kv_heads=h),
                               al.multi_head_attention(x, x, x, h, *ws))


def test_gqa_is_mha_with_each_kv_head_shared_by_its_group():
    # repeating the columns of w_k / w_v per head turns GQA into ordinary MHA
    h, g, d_model = 8, 2, 32
    w_q, w_k, w_v, w_o = gqa_weights(g, d_model, h)
    d_head = d_model // h

    def widen(w):  # (d_model, g*d_head) -> (d_model, h*d_head), head m copied h/g times
        return al.repeat_kv(w.view(d_model, g, 1, d_head).transpose(1, 2), h // g).transpose(1, 2).reshape(d_model, -1)

    x = torch.randn(1, 6, d_model, dtype=torch.float64)
    torch.testing.assert_close(al.multi_head_attention(x, x, x, h, w_q, w_k, w_v, w_o, num_kv_heads=g),
                               al.multi_head_attention(x, x, x, h, w_q, widen(w_k), widen(w_v), w_o))


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (3, 1, 4), (2, 2, 1, 7, 3)])
@pytest.mark.parametrize("n_rep", [1, 2, 3])
def test_repeat_kv_is_repeat_interleave_on_dim_minus_3(shape, n_rep):
    x = torch.randn(shape)
    ref = torch.repeat_interleave(x, n_rep, dim=-3)
    torch.testing.assert_close(al.repeat_kv(x, n_rep), ref, rtol=0, atol=0)
    np.testing.assert_array_equal(al.repeat_kv(x.numpy(), n_rep), ref.numpy())


def test_repeat_kv_repeats_in_place_not_tiled():
    x = torch.arange(2.0).view(2, 1, 1)  # heads a=0, b=1
    assert al.repeat_kv(x, 2).flatten().tolist() == [0.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("h,g,L", [(8, 2, 1), (8, 8, 3), (6, 1, 5), (4, 2, 7)])
def test_grouped_attention_equals_repeated_heads(h, g, L):
    S = 97
    q = torch.randn(2, h, L, 8, dtype=torch.float64)
    k, v = torch.randn(2, g, S, 8, dtype=torch.float64), torch.randn(2, g, S, 8, dtype=torch.float64)
    mask = al.causal_mask(L, S, align="lower_right", like=q)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(grouped_attention(q, k, v, mask), ref)
    torch.testing.assert_close(grouped_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, enable_gqa=True))


def test_bad_num_kv_heads_is_refused_with_the_fix():
    h, d_model = 8, 32
    ws = gqa_weights(2, d_model, h)
    x = torch.randn(1, 3, d_model, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"num_kv_heads=3 does not divide num_heads=8.*\[1, 2, 4, 8\]"):
        al.multi_head_attention(x, x, x, h, *ws, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_kv_heads must be >= 1"):
        al.multi_head_attention(x, x, x, h, *ws, num_kv_heads=0)
    with pytest.raises(TypeError, match="num_kv_heads must be a positive int"):
        al.multi_head_attention(x, x, x, h, *ws, num_kv_heads=2.0)
    with pytest.raises(ValueError, match=r"w_k has shape \(32, 8\) but must be \(32, 32\).*pass num_kv_heads=2"):
        al.multi_head_attention(x, x, x, h, *ws)  # GQA weights, num_kv_heads forgotten
    with pytest.raises(ValueError, match=r"w_k has shape \(32, 8\) but must be \(32, 16\).*num_kv_heads=4"):
        al.multi_head_attention(x, x, x, h, *ws, num_kv_heads=4)


def test_bad_repeat_kv_input_is_refused():
    with pytest.raises(ValueError, match="n_rep must be a positive int"):
        al.repeat_kv(torch.zeros(1, 2, 3, 4), 0)
    with pytest.raises(TypeError, match="n_rep must be a positive int"):
        al.repeat_kv(torch.zeros(1, 2, 3, 4), 1.5)
    with pytest.raises(ValueError, match=r"x has shape \(3, 4\).*\(N\.\.\., h_kv, S, E\)"):
        al.repeat_kv(torch.zeros(3, 4), 2)
    with pytest.raises(ValueError, match="heads must divide"):
        grouped_attention(torch.zeros(1, 6, 1, 4), torch.zeros(1, 4, 3, 4), torch.zeros(1, 4, 3, 4))
