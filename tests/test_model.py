"""attnlib.models.gpt: the small GPT of chapter 7 (shapes, causality, equality with attnlib's and
torch's attention, ablation, key/value cache, training)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnlib as al
from attnlib.models import transformer
from attnlib.models import GPT, CausalSelfAttention, GPTConfig

from conftest import DEVICES


def small(**kw):
    base = dict(vocab_size=11, context_length=16, num_layers=2, num_heads=4, d_model=32)
    base.update(kw)
    torch.manual_seed(0)
    return GPT(GPTConfig(**base)).double()


VARIANTS = [dict(), dict(mlp=True), dict(pos="sinusoidal", norm="post"), dict(pos="none", norm="none"),
            dict(scaled=False, mlp=True, num_layers=3), dict(num_heads=1)]


@pytest.mark.parametrize("kw", VARIANTS, ids=str)
@pytest.mark.parametrize("L", [1, 7, 16])
def test_logits_shape(kw, L):
    model = small(**kw)
    idx = torch.randint(11, (3, L))
    assert model(idx).shape == (3, L, 11)
    logits, weights = model(idx, return_weights=True)
    assert len(weights) == model.cfg.num_layers
    assert all(w.shape == (3, model.cfg.num_heads, L, L) for w in weights)


@pytest.mark.parametrize("kw", VARIANTS, ids=str)
def test_changing_future_tokens_leaves_past_logits_unchanged(kw):
    model = small(**kw)
    idx = torch.randint(11, (2, 12))
    other = idx.clone()
    other[:, 7:] = (other[:, 7:] + 1 + torch.randint(9, (2, 5))) % 11  # every future token differs
    a, b = model(idx), model(other)
    torch.testing.assert_close(a[:, :7], b[:, :7], rtol=0, atol=0)
    assert not torch.allclose(a[:, 7:], b[:, 7:])


@pytest.mark.parametrize("kw", VARIANTS, ids=str)
def test_weights_are_causal_rows_summing_to_one(kw):
    _, weights = small(**kw)(torch.randint(11, (2, 9)), return_weights=True)
    for w in weights:
        assert torch.all(w.triu(1) == 0)
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1], dtype=w.dtype))


def test_attention_equals_al_multi_head_attention():
    attn = small().blocks[0].attn
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    ours, _ = attn(x)
    ref = al.multi_head_attention(x, x, x, 4, attn.w_q, attn.w_k, attn.w_v, attn.w_o, is_causal=True)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("scaled", [True, False])
def test_attention_equals_torch_sdpa(scaled):
    attn = small(scaled=scaled).blocks[1].attn
    x = torch.randn(3, 10, 32, dtype=torch.float64)
    q, k, v = ((x @ w).view(3, 10, 4, 8).transpose(1, 2) for w in (attn.w_q, attn.w_k, attn.w_v))
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=None if scaled else 1.0)
    ref = heads.transpose(1, 2).reshape(3, 10, 32) @ attn.w_o
    ours, _ = attn(x)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("scaled", [True, False])
def test_plain_path_with_weights_equals_fused_path(scaled):
    model = small(scaled=scaled, mlp=True)
    idx = torch.randint(11, (2, 13))
    fused = model(idx)
    plain, _ = model(idx, return_weights=True)
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)


def test_unscaled_scores_are_sqrt_d_head_times_sharper():
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    a = small(scaled=True, num_heads=2).blocks[0].attn
    b = small(scaled=False, num_heads=2).blocks[0].attn  # same seed: same matrices
    q, k, _ = a.project(x)
    _, wa = a(x, return_weights=True)[0]
    _, wb = b(x, return_weights=True)[0]
    scores = q @ k.mT
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    torch.testing.assert_close(wa, torch.softmax(scores.masked_fill(~causal, -torch.inf) / 4.0, -1))
    torch.testing.assert_close(wb, torch.softmax(scores.masked_fill(~causal, -torch.inf), -1))


def test_ablation_zeroes_exactly_that_head():
    attn = small().blocks[0].attn
    x = torch.randn(2, 8, 32, dtype=torch.float64)
    q, k, v = attn.project(x)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (N, h, L, d_head)
    heads[:, 2] = 0.0
    expected = heads.transpose(1, 2).reshape(2, 8, 32) @ attn.w_o
    attn.ablated = {2}
    out, _ = attn(x)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_ablated_context_restores_the_model_and_checks_heads():
    model = small()
    idx = torch.randint(11, (2, 10))
    before = model(idx)
    with model.ablated([(1, 3), (0, 0)]):
        during = model(idx)
        assert model.blocks[1].attn.ablated == {3} and model.blocks[0].attn.ablated == {0}
    assert not torch.allclose(before, during)
    torch.testing.assert_close(model(idx), before, rtol=0, atol=0)
    with pytest.raises(ValueError, match="no head"):
        with model.ablated([(2, 0)]):
            pass


def test_ablating_every_head_of_an_attention_only_model_leaves_the_bigram_path():
    model = small(norm="none", pos="none")
    idx = torch.randint(11, (2, 6))
    with model.ablated([(layer, h) for layer in range(2) for h in range(4)]):
        out = model(idx)
    torch.testing.assert_close(out, model.tok_emb[idx] @ model.unembed)


def test_kv_cache_decoding_equals_the_full_forward_pass():
    model = small(mlp=True)
    idx = torch.randint(11, (2, 12))
    full = model(idx)
    logits, kv = model(idx[:, :5], return_kv=True)  # prefill 5 tokens
    steps = [logits]
    for t in range(5, 12):  # then one token at a time against the cache
        logits, kv = model(idx[:, t:t + 1], past_kv=kv, return_kv=True)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-10, atol=1e-10)
    assert kv[0][0].shape == (2, 4, 12, 8)


def test_cache_with_several_new_tokens_needs_an_aligned_mask():
    model = small()
    idx = torch.randint(11, (1, 9))
    _, kv = model(idx[:, :6], return_kv=True)
    with pytest.raises(ValueError, match="lower right"):
        model(idx[:, 6:], past_kv=kv)
    lower_right = torch.ones(3, 9, dtype=torch.bool).tril(diagonal=6)
    out = model(idx[:, 6:], past_kv=kv, attn_mask=lower_right)
    torch.testing.assert_close(out, model(idx)[:, 6:], rtol=1e-10, atol=1e-10)


def test_sinusoidal_table_matches_chapter_5():
    model = GPT(GPTConfig(vocab_size=11, context_length=20, num_layers=1, num_heads=4, d_model=16,
                          pos="sinusoidal"))
    np.testing.assert_allclose(model.pos_emb.numpy(), transformer.sinusoidal_positional_encoding(20, 16),
                               atol=1e-6)
    assert model.pos_emb.dtype == torch.float32
    assert "pos_emb" not in dict(small(pos="sinusoidal").named_parameters())  # fixed, not trained


def test_no_positions_model_is_blind_to_order_in_one_layer():
    model = small(pos="none", num_layers=1)
    idx = torch.tensor([[1, 2, 3, 4, 5]])
    perm = torch.tensor([[3, 1, 2, 4, 5]])  # same prefix multiset before the last token
    torch.testing.assert_close(model(idx)[:, -1], model(perm)[:, -1])


@pytest.mark.parametrize("kw, match", [(dict(pos="rope"), "pos="), (dict(norm="mid"), "norm="),
                                       (dict(d_model=30, num_heads=4), "divide"),
                                       (dict(pos="sinusoidal", d_model=9, num_heads=3), "even")])
def test_bad_config_is_refused_clearly(kw, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(**kw)


def test_too_long_input_is_refused():
    with pytest.raises(ValueError, match="context_length"):
        small()(torch.zeros(1, 17, dtype=torch.long))


def test_seeded_model_is_deterministic():
    idx = torch.randint(11, (2, 8))
    torch.testing.assert_close(small(mlp=True)(idx), small(mlp=True)(idx), rtol=0, atol=0)


@pytest.mark.slow  # ~10 s of training
def test_short_training_run_reduces_the_loss():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, context_length=16, num_layers=2, num_heads=2, d_model=32))
    g = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(60):
        block = torch.randint(16, (32, 8), generator=g)
        seq = block.repeat(1, 2)
        loss = model.loss(seq[:, :-1], seq[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-10:]) < np.mean(losses[:5]) - 0.3


def test_loss_is_the_mean_cross_entropy_over_the_targets_not_ignored():
    # one loss for the model and the trainer (attnlib.instruments.train re-exports it as its default)
    from attnlib.instruments import train
    from attnlib.models import next_token_loss

    assert train.next_token_loss is next_token_loss
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=7, context_length=8, num_layers=1, num_heads=1, d_model=8))
    idx = torch.randint(7, (3, 6))
    targets = torch.randint(7, (3, 6))
    targets[0, :4] = targets[2, 5] = -100
    logp = torch.log_softmax(model(idx).double(), -1)                       # (3, 6, 7)
    keep = targets != -100
    expected = -logp[keep, targets[keep]].mean()                             # an outside computation
    assert torch.allclose(model.loss(idx, targets).double(), expected, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_runs_and_backpropagates_on_device(device):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, context_length=16, mlp=True)).to(device)
    idx = torch.randint(11, (2, 9), device=device)
    loss = model.loss(idx[:, :-1], idx[:, 1:])
    loss.backward()
    assert loss.device.type == torch.device(device).type
    assert all(p.grad is not None for p in model.parameters())


def test_attention_module_rejects_nothing_it_should_accept():
    attn = CausalSelfAttention(GPTConfig(d_model=8, num_heads=2))
    out, (k, v) = attn(torch.randn(1, 1, 8))
    assert out.shape == (1, 1, 8) and k.shape == (1, 2, 1, 4)


@pytest.mark.parametrize("kw", VARIANTS, ids=str)
def test_models_stacked_under_vmap_equal_each_model_alone(kw):
    """attnlib.instruments.train.train_seeds runs the model under torch.func.vmap, one weight set per seed."""
    models = []
    for seed in range(3):
        torch.manual_seed(seed)
        models.append(GPT(GPTConfig(**{**dict(vocab_size=11, context_length=16, num_layers=2, num_heads=4,
                                                d_model=32), **kw})).double())
    params, buffers = torch.func.stack_module_state(models)
    base = GPT(models[0].cfg).double().to("meta")
    idx = torch.randint(11, (3, 2, 9))                              # (seeds, N, L): one batch per seed
    logits = torch.func.vmap(lambda p, b, x: torch.func.functional_call(base, (p, b), (x,)))(params, buffers, idx)
    for s, m in enumerate(models):
        torch.testing.assert_close(logits[s], m(idx[s]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mask", ["causal", "bool", "float", "weights"])
def test_attention_under_vmap_equals_the_unbatched_call(mask):
    q, k, v = (torch.randn(4, 2, 3, 6, 8, dtype=torch.float64) for _ in range(3))  # (vmap dim, N, h, L, E)
    keep = torch.rand(6, 6, generator=torch.Generator().manual_seed(0)) > 0.3
    keep[:, 0] = True
    kwargs = {"causal": dict(is_causal=True), "bool": dict(attn_mask=keep),
              "float": dict(attn_mask=torch.zeros(6, 6, dtype=torch.float64).masked_fill(~keep, -torch.inf)),
              "weights": dict(is_causal=True, return_weights=True)}[mask]
    batched = torch.func.vmap(lambda q, k, v: al.scaled_dot_product_attention(q, k, v, **kwargs))(q, k, v)
    alone = al.scaled_dot_product_attention(q, k, v, **kwargs)
    for a, b in zip(batched if mask == "weights" else [batched], alone if mask == "weights" else [alone]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
