"""multi_head_attention: equal to torch.nn.MultiheadAttention(bias=False) with the same
weights, for several head counts, self and cross attention, padding/causal/per-head masks
and per-head weights; NumPy and torch; bad heads or weights fail with a clear message."""
import numpy as np
import pytest
import torch

import attnlib as al
from conftest import DEVICES, to_np

D_MODEL = 12


def weights(rng, d_k=D_MODEL, d_v=D_MODEL, d=D_MODEL):
    """w_q, w_k, w_v, w_o as float64 NumPy, used as x @ w."""
    shapes = [(d, d), (d_k, d), (d_v, d), (d, d)]
    return [rng.standard_normal(s) / np.sqrt(s[0]) for s in shapes]


def torch_mha(ws, num_heads, device="cpu"):
    """nn.MultiheadAttention with the same weights: it computes x @ W.T, so pass w.T."""
    w_q, w_k, w_v, w_o = (torch.from_numpy(w) for w in ws)
    d = w_q.shape[0]
    same = w_k.shape[0] == d and w_v.shape[0] == d
    mha = torch.nn.MultiheadAttention(d, num_heads, bias=False, batch_first=True,
                                      kdim=w_k.shape[0], vdim=w_v.shape[0], dtype=torch.float64)
    with torch.no_grad():
        if same:
            mha.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T]))  # stacked [W_q; W_k; W_v]
        else:
            mha.q_proj_weight.copy_(w_q.T)
            mha.k_proj_weight.copy_(w_k.T)
            mha.v_proj_weight.copy_(w_v.T)
        mha.out_proj.weight.copy_(w_o.T)
    return mha.to(device).eval()


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("num_heads", [1, 2, 3, 12])
@pytest.mark.parametrize("L,S", [(1, 1), (7, 7), (5, 9)])
@pytest.mark.parametrize("mask", [None, "padding", "causal", "is_causal", "padding+causal"])
def test_matches_nn_multihead_attention(rng, lib, num_heads, L, S, mask):
    N = 3
    query = rng.standard_normal((N, L, D_MODEL))
    key = query if L == S else rng.standard_normal((N, S, D_MODEL))  # self-attention when L == S
    value = key if L == S else rng.standard_normal((N, S, D_MODEL))
    ws = weights(rng)
    lengths = np.array([S, max(1, S - 2), 1])
    pad = al.padding_mask(lengths, S)  # (N, 1, S), True = may attend
    causal = al.causal_mask(L, S)  # (L, S)
    ours = {None: None, "padding": pad, "causal": causal, "is_causal": None,
            "padding+causal": pad & causal}[mask]
    # nn.MultiheadAttention: bool masks mean True = BLOCKED; key_padding_mask is (N, S)
    kw = {}
    if mask in ("padding", "padding+causal"):
        kw["key_padding_mask"] = torch.from_numpy(~pad[:, 0])
    if mask in ("causal", "is_causal", "padding+causal"):
        kw["attn_mask"] = torch.from_numpy(~causal)
    ref, ref_w = torch_mha(ws, num_heads)(*(torch.from_numpy(x) for x in (query, key, value)),
                                          need_weights=True, average_attn_weights=False, **kw)
    args = (query, key, value, num_heads, *ws)
    if lib == "torch":
        args = tuple(torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args)
        ours = None if ours is None else torch.from_numpy(ours)
    out, w = al.multi_head_attention(*args, attn_mask=ours, is_causal=mask == "is_causal",
                                     return_weights=True)
    out_fast = al.multi_head_attention(*args, attn_mask=ours, is_causal=mask == "is_causal")
    assert out.shape == (N, L, D_MODEL) and w.shape == (N, num_heads, L, S)
    assert type(out) is type(args[0]) and out.dtype == args[0].dtype
    np.testing.assert_allclose(to_np(out), ref.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(to_np(out_fast), ref.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(to_np(w), ref_w.detach().numpy(), atol=1e-12)


@pytest.mark.parametrize("num_heads", [2, 4])
def test_per_head_masks(rng, num_heads):
    N, L, S, d = 2, 5, 6, 8
    x, y = rng.standard_normal((N, L, d)), rng.standard_normal((N, S, d))
    ws = weights(rng, d=d, d_k=d, d_v=d)
    keep = rng.random((N, num_heads, L, S)) > 0.5
    keep[..., 0] = True
    ref = torch_mha(ws, num_heads)(*(torch.from_numpy(a) for a in (x, y, y)), need_weights=False,
                                   attn_mask=torch.from_numpy(~keep.reshape(N * num_heads, L, S)))[0]
    out = al.multi_head_attention(x, y, y, num_heads, *ws, attn_mask=keep)  # (N, h, L, S) mask
    np.testing.assert_allclose(out, ref.detach().numpy(), atol=1e-12)


def test_cross_attention_with_other_key_and_value_widths(rng):
    N, L, S, d_k, d_v = 2, 4, 6, 5, 7
    x, kx, vx = rng.standard_normal((N, L, D_MODEL)), rng.standard_normal((N, S, d_k)), rng.standard_normal((N, S, d_v))
    ws = weights(rng, d_k=d_k, d_v=d_v)
    ref = torch_mha(ws, 3)(*(torch.from_numpy(a) for a in (x, kx, vx)), need_weights=False)[0]
    np.testing.assert_allclose(al.multi_head_attention(x, kx, vx, 3, *ws), ref.detach().numpy(), atol=1e-12)


@pytest.mark.parametrize("batch", [(), (2, 3)], ids=str)
def test_batch_dims_none_or_several(rng, batch):
    L = 5
    x = rng.standard_normal(batch + (L, D_MODEL))
    ws = weights(rng)
    flat = torch.from_numpy(x.reshape(-1, L, D_MODEL))
    ref = torch_mha(ws, 4)(flat, flat, flat, need_weights=False,
                           attn_mask=torch.from_numpy(~al.causal_mask(L)))[0]
    out = al.multi_head_attention(x, x, x, 4, *ws, is_causal=True)
    assert out.shape == x.shape
    np.testing.assert_allclose(out.reshape(-1, L, D_MODEL), ref.detach().numpy(), atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_device_and_dtype_are_kept(rng, device):
    x = torch.from_numpy(rng.standard_normal((2, 5, D_MODEL))).float().to(device)
    ws = [torch.from_numpy(w).float().to(device) for w in weights(rng)]
    out, w = al.multi_head_attention(x, x, x, 3, *ws, return_weights=True)
    assert out.device == x.device and out.dtype == torch.float32 and w.shape == (2, 3, 5, 5)
    ref = torch_mha([w_.double().cpu().numpy() for w_ in ws], 3)(*(x.double().cpu(),) * 3, need_weights=False)[0]
    np.testing.assert_allclose(to_np(out), ref.detach().numpy(), atol=1e-5)


def test_head_split_is_reshape_then_transpose(rng):
    """Head i must use only columns i*d_head:(i+1)*d_head of w_q, w_k, w_v."""
    L, h = 6, 3
    x = rng.standard_normal((L, D_MODEL))
    ws = weights(rng)
    _, w = al.multi_head_attention(x, x, x, h, *ws, return_weights=True)
    d_head = D_MODEL // h
    for i in range(h):
        cols = slice(i * d_head, (i + 1) * d_head)
        _, wi = al.scaled_dot_product_attention(x @ ws[0][:, cols], x @ ws[1][:, cols],
                                                x @ ws[2][:, cols], return_weights=True)
        np.testing.assert_allclose(w[i], wi, atol=1e-12)


def _bad():
    r = np.random.default_rng(2)
    x = r.standard_normal((2, 4, D_MODEL))
    ws = weights(r)
    return {
        "heads_not_dividing": ((x, x, x, 5, *ws), {}, ValueError, ["num_heads=5", "d_model=12", "[1, 2, 3, 4, 6, 12]"]),
        "heads_zero": ((x, x, x, 0, *ws), {}, ValueError, ["num_heads", "positive", "got 0"]),
        "heads_float": ((x, x, x, 3.0, *ws), {}, TypeError, ["num_heads", "int", "float"]),
        "w_q_shape": ((x, x, x, 3, ws[0][:, :6], *ws[1:]), {}, ValueError, ["w_q", "(12, 6)", "(12, 12)"]),
        "w_o_shape": ((x, x, x, 3, *ws[:3], ws[3][:6]), {}, ValueError, ["w_o", "(6, 12)", "(12, 12)"]),
        "w_dtype": ((x, x, x, 3, ws[0].astype(np.float32), *ws[1:]), {}, TypeError, ["w_q", "float32", "float64"]),
        "w_torch": ((x, x, x, 3, torch.from_numpy(ws[0]), *ws[1:]), {}, TypeError, ["w_q", "torch", "NumPy"]),
        "key_value_length": ((x, x, x[:, :3], 3, *ws), {}, ValueError, ["key", "value", "(2, 4, 12)", "(2, 3, 12)"]),
        "mask_shape": ((x, x, x, 3, *ws), {"attn_mask": np.ones((4, 5), bool)}, ValueError, ["attn_mask", "(4, 5)", "(2, 4, 4)"]),
        "mask_int": ((x, x, x, 3, *ws), {"attn_mask": np.ones((4, 4), int)}, TypeError, ["attn_mask", "int64"]),
        "mask_and_causal": ((x, x, x, 3, *ws), {"attn_mask": np.ones((4, 4), bool), "is_causal": True}, ValueError, ["attn_mask", "is_causal"]),
        "batch": ((x, x[:1].repeat(3, 0), x[:1].repeat(3, 0), 3, *ws), {}, ValueError, ["query (2,)", "key (3,)"]),
    }


@pytest.mark.parametrize("case", list(_bad()))
def test_bad_input_raises_a_message_that_names_the_argument(case):
    args, kwargs, exc, words = _bad()[case]
    with pytest.raises(exc) as info:
        al.multi_head_attention(*args, **kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))
