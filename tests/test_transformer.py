"""attnlib.models.transformer: LayerNorm, FFN, sinusoidal positions and the post-/pre-LN block,
checked against torch.nn and against the properties chapter 5 teaches."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib as al
from attnlib.models.transformer import (feed_forward, init_block_params, layer_norm, self_attention,
                                 sinusoidal_positional_encoding, torch_encoder_layer,
                                 torch_multihead_attention, transformer_block)


def _torch_layer(p, norm_first):
    """nn.TransformerEncoderLayer with the weights of ``p`` (attention without biases)."""
    d, d_ff = p.w1.shape
    layer = torch.nn.TransformerEncoderLayer(d, p.num_heads, dim_feedforward=d_ff, dropout=0.0,
                                             batch_first=True, norm_first=norm_first, dtype=torch.float64)
    t = lambda a: torch.as_tensor(np.ascontiguousarray(a))  # noqa: E731
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(t(np.concatenate([p.w_q.T, p.w_k.T, p.w_v.T])))  # x @ W.T in torch
        layer.self_attn.in_proj_bias.zero_()
        layer.self_attn.out_proj.weight.copy_(t(p.w_o.T))
        layer.self_attn.out_proj.bias.zero_()
        layer.linear1.weight.copy_(t(p.w1.T)); layer.linear1.bias.copy_(t(p.b1))  # noqa: E702
        layer.linear2.weight.copy_(t(p.w2.T)); layer.linear2.bias.copy_(t(p.b2))  # noqa: E702
        layer.norm1.weight.copy_(t(p.ln1_weight)); layer.norm1.bias.copy_(t(p.ln1_bias))  # noqa: E702
        layer.norm2.weight.copy_(t(p.ln2_weight)); layer.norm2.bias.copy_(t(p.ln2_bias))  # noqa: E702
    return layer.eval()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("n,d_model,h,causal", [(1, 8, 2, False), (7, 16, 4, True), (97, 12, 3, False),
                                                (5, 8, 1, True)])
def test_block_matches_torch_transformer_encoder_layer(norm_first, n, d_model, h, causal):
    p = init_block_params(d_model, h, seed=n)
    x = np.random.default_rng(1).standard_normal((2, n, d_model))
    ours = transformer_block(x, p, norm="pre" if norm_first else "post", is_causal=causal)
    layer = _torch_layer(p, norm_first)
    blocked = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None  # True = blocked in torch.nn
    with torch.no_grad():
        theirs = layer(torch.as_tensor(x), src_mask=blocked)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_block_on_torch_tensors_matches_numpy_and_keeps_type(dtype, tol):
    p = init_block_params(16, 4, seed=3)
    x = np.random.default_rng(2).standard_normal((3, 6, 16))
    ref = transformer_block(x, p, norm="pre")
    out = transformer_block(torch.as_tensor(x, dtype=dtype), p, norm="pre")
    assert isinstance(out, torch.Tensor) and out.dtype == dtype
    np.testing.assert_allclose(out.double().numpy(), ref, rtol=tol, atol=tol)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_block_runs_on_cuda_and_stays_there():
    p = init_block_params(16, 4, seed=3)
    x = np.random.default_rng(2).standard_normal((3, 6, 16))
    out = transformer_block(torch.as_tensor(x, device="cuda"), p, is_causal=True)
    assert out.device.type == "cuda"
    np.testing.assert_allclose(out.cpu().numpy(), transformer_block(x, p, is_causal=True), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("shape", [(1, 1, 5), (4, 7), (2, 3, 16)])
def test_layer_norm_matches_torch(shape):
    rng = np.random.default_rng(0)
    x, w, b = 3 + 5 * rng.standard_normal(shape), rng.standard_normal(shape[-1]), rng.standard_normal(shape[-1])
    theirs = torch.nn.functional.layer_norm(torch.as_tensor(x), shape[-1:], torch.as_tensor(w), torch.as_tensor(b))
    np.testing.assert_allclose(layer_norm(x, w, b), theirs.numpy(), rtol=1e-10, atol=1e-12)
    plain = layer_norm(x)
    if shape[-1] > 1:
        np.testing.assert_allclose(plain.mean(-1), 0, atol=1e-12)
        np.testing.assert_allclose(plain.var(-1), 1, rtol=1e-3)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 9), st.integers(0, 8))
def test_feed_forward_works_within_each_token(n, i):
    i = i % n
    rng = np.random.default_rng(n)
    p = init_block_params(8, 2, seed=n)
    x = rng.standard_normal((n, 8))
    x2 = x.copy()
    x2[i] += rng.standard_normal(8)  # change token i only
    changed = np.abs(feed_forward(x2, p.w1, p.b1, p.w2, p.b2) - feed_forward(x, p.w1, p.b1, p.w2, p.b2)).max(-1)
    assert changed[i] > 0
    assert np.all(np.delete(changed, i) == 0)


def test_attention_mixes_tokens():
    p = init_block_params(8, 2, seed=0)
    x = np.random.default_rng(0).standard_normal((6, 8))
    x2 = x.copy()
    x2[2] += 1.0
    changed = np.abs(self_attention(x2, p) - self_attention(x, p)).max(-1)
    assert np.all(changed > 1e-6)  # every token's output moved


def test_pre_ln_block_with_zero_sublayers_is_the_identity_and_post_ln_is_not():
    p = init_block_params(16, 4, seed=0)
    p.w_o[:] = 0
    p.w2[:] = 0
    p.b2[:] = 0
    x = np.random.default_rng(0).standard_normal((5, 16)) * 3 + 1
    np.testing.assert_array_equal(transformer_block(x, p, norm="pre"), x)
    assert not np.allclose(transformer_block(x, p, norm="post"), x)


def test_post_ln_output_is_normalised_per_token():
    p = init_block_params(16, 4, seed=0)
    p.ln2_weight[:] = 1
    p.ln2_bias[:] = 0
    out = transformer_block(10 * np.random.default_rng(0).standard_normal((2, 9, 16)), p)
    np.testing.assert_allclose(out.mean(-1), 0, atol=1e-12)
    np.testing.assert_allclose(out.std(-1), 1, rtol=1e-3)


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 9), st.randoms(use_true_random=False))
def test_block_is_permutation_equivariant_without_positions(n, r):
    perm = np.array(r.sample(range(n), n))
    p = init_block_params(8, 2, seed=n)
    x = np.random.default_rng(n).standard_normal((n, 8))
    np.testing.assert_allclose(transformer_block(x[perm], p), transformer_block(x, p)[perm], rtol=1e-9, atol=1e-12)


def test_positional_encoding_breaks_the_permutation_symmetry():
    n, d = 6, 8
    p = init_block_params(d, 2, seed=0)
    x = np.random.default_rng(0).standard_normal((n, d))
    perm = np.array([1, 0, 2, 3, 5, 4])
    pe = sinusoidal_positional_encoding(n, d)
    assert not np.allclose(transformer_block(x[perm] + pe, p), transformer_block(x + pe, p)[perm], atol=1e-3)


def test_sinusoidal_positional_encoding_values():
    pe = sinusoidal_positional_encoding(50, 16)
    assert pe.shape == (50, 16)
    np.testing.assert_array_equal(pe[0], np.tile([0.0, 1.0], 8))  # sin 0, cos 0
    np.testing.assert_allclose(pe[:, 0], np.sin(np.arange(50)))   # fastest clock: wavelength 2π
    np.testing.assert_allclose(pe[:, 14], np.sin(np.arange(50) / 10000 ** (14 / 16)))
    np.testing.assert_allclose(pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2, 1)  # each pair lies on the unit circle
    dist = np.linalg.norm(pe[:, None] - pe[None], axis=-1)
    assert dist[~np.eye(50, dtype=bool)].min() > 0.1  # every position has its own code


def test_positional_encoding_follows_like():
    pe = sinusoidal_positional_encoding(3, 4, like=torch.zeros(1, dtype=torch.float32))
    assert isinstance(pe, torch.Tensor) and pe.dtype == torch.float32


def test_bad_sizes_raise_errors_that_name_the_argument():
    with pytest.raises(ValueError, match="d_model must be even"):
        sinusoidal_positional_encoding(4, 5)
    with pytest.raises(ValueError, match="num_heads"):
        init_block_params(10, 3)
    with pytest.raises(ValueError, match=r"x has shape \(4, 6\).*d_model = 8"):
        transformer_block(np.zeros((4, 6)), init_block_params(8, 2))
    with pytest.raises(ValueError, match="num_heads must be a positive int"):
        init_block_params(8, 0)
    p = init_block_params(8, 2)
    with pytest.raises(ValueError, match=r"w1 must be \(d_model, d_ff\)"):
        feed_forward(np.zeros((3, 6)), p.w1, p.b1, p.w2, p.b2)


def test_parameter_counts():
    counts = init_block_params(16, 4).num_parameters()
    assert counts == {"attention": 4 * 16 * 16, "layer_norms": 4 * 16,
                      "ffn": 16 * 64 + 64 + 64 * 16 + 16, "total": 1024 + 64 + 2128}


@pytest.mark.parametrize("n,d_model,h", [(1, 8, 2), (7, 12, 3), (5, 8, 8)])
def test_torch_multihead_attention_loader_matches_attnlib_with_inverted_mask(n, d_model, h):
    rng = np.random.default_rng(n + h)
    ws = [rng.standard_normal((d_model, d_model)) / np.sqrt(d_model) for _ in range(4)]
    x = torch.as_tensor(rng.standard_normal((2, n, d_model)))
    allowed = torch.as_tensor(al.causal_mask(n))  # attnlib: True = may attend
    mha = torch_multihead_attention(*ws, h)
    assert not mha.training and mha.in_proj_bias is None
    with torch.no_grad():
        theirs, _ = mha(x, x, x, attn_mask=~allowed)  # torch.nn: True = blocked
    ours = al.multi_head_attention(x, x, x, h, *[torch.as_tensor(w) for w in ws], attn_mask=allowed)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


def test_torch_multihead_attention_loader_rejects_non_square_weights():
    with pytest.raises(ValueError, match=r"must be \(d_model, d_model\)"):
        torch_multihead_attention(np.eye(8), np.eye(8), np.ones((8, 4)), np.eye(8), 2)


@pytest.mark.parametrize("norm_first", [False, True])
def test_torch_encoder_layer_loader_equals_an_independent_loader(norm_first):
    p = init_block_params(12, 3, seed=4)
    x = torch.as_tensor(np.random.default_rng(4).standard_normal((2, 5, 12)))
    with torch.no_grad():
        a = torch_encoder_layer(p, norm="pre" if norm_first else "post")(x)
        b = _torch_layer(p, norm_first)(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    np.testing.assert_allclose(a.numpy(), transformer_block(x.numpy(), p, norm="pre" if norm_first else "post"),
                               rtol=1e-9, atol=1e-10)


def test_one_head_loader_with_identity_w_o_is_plain_attention():
    """Chapter 4 uses nn.MultiheadAttention(num_heads=1, W_O = I) as single-head attention."""
    rng = np.random.default_rng(4)
    n, d = 5, 8
    w_q, w_k, w_v = (rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(3))
    x = rng.standard_normal((2, n, d))
    allowed = al.causal_mask(n) & al.padding_mask(np.array([5, 3]), n)
    ours = al.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, allowed)
    mha = torch_multihead_attention(w_q, w_k, w_v, np.eye(d), num_heads=1)
    with torch.no_grad():
        xt = torch.as_tensor(x)  # a 3-D mask is (N * num_heads, L, S) = (2, n, n) here
        theirs, _ = mha(xt, xt, xt, attn_mask=~torch.as_tensor(allowed))
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12, atol=1e-12)


def test_attention_on_one_token_is_linear_and_the_ffn_is_not():
    """Chapter 5's reason for the FFN: with one token, attention is x @ W_V @ W_O."""
    p = init_block_params(16, 4, seed=3)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((2, 1, 16))
    attn = lambda t: self_attention(t, p)  # noqa: E731
    ffn = lambda t: feed_forward(t, p.w1, p.b1, p.w2, p.b2)  # noqa: E731
    np.testing.assert_allclose(attn(a + b), attn(a) + attn(b), atol=1e-12)
    np.testing.assert_allclose(attn(a), a @ p.w_v @ p.w_o, atol=1e-12)
    assert np.abs(ffn(a + b) - ffn(a) - ffn(b)).max() > 0.1


def test_post_ln_gradients_grow_toward_the_output_at_initialisation():
    """Chapter 5's measurement: per-block gradient norms of a 12-block stack at init."""
    d, n, depth = 16, 6, 12
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.standard_normal((4, n, d)))
    target = torch.as_tensor(rng.standard_normal((4, n, d)))
    norms = {}
    for norm_first in (False, True):
        layers = [torch_encoder_layer(init_block_params(d, 4, seed=s), norm="pre" if norm_first else "post")
                  for s in range(depth)]
        out = x
        for layer in layers:
            out = layer(out)
        if norm_first:
            out = torch.nn.functional.layer_norm(out, (d,))
        ((out - target) ** 2).mean().backward()
        norms[norm_first] = [torch.cat([q.grad.flatten() for q in layer.parameters()]).norm().item()
                             for layer in layers]
    post, pre = norms[False], norms[True]
    assert post[-1] > 1.5 * post[0] and pre[-1] < pre[0] and post[-1] > 3 * pre[-1]


@pytest.mark.parametrize("norm", ["first", True, None])
def test_block_refuses_an_unknown_norm_naming_the_argument(norm):
    p = init_block_params(8, 2)
    with pytest.raises(ValueError, match=r"norm=.*norm='post'.*norm='pre'"):
        transformer_block(np.zeros((3, 8)), p, norm=norm)
    with pytest.raises(ValueError, match="norm="):
        torch_encoder_layer(p, norm=norm)
