"""attnlib.instruments.inference: cached greedy decoding equals decoding without a cache token for token
(whole prompt or chunked prefill); chunked prefill gives the full pass's logits; the cache
holds exactly kv_cache_bytes; kv_cache_bytes reproduces published figures; bad input is
refused."""
import pytest
import torch

from attnlib.instruments import inference as inf
from attnlib.models import gpt as model_mod


@pytest.fixture(autouse=True)
def one_thread():
    """A tiny model decodes fastest on one thread; two threads on a busy 2-core machine can
    stall for seconds at every synchronisation."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def small_model(**kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=17, context_length=96, num_layers=2, num_heads=4, d_model=32, mlp=True)
    cfg.update(kw)
    if cfg.get("pos") == "rope":
        return inf.rope_gpt(model_mod.GPTConfig(**{**cfg, "pos": "none"})).eval()
    return model_mod.GPT(model_mod.GPTConfig(**cfg)).eval()


@pytest.mark.parametrize("n_new", [1, 7, 40])
@pytest.mark.parametrize("chunk", [None, 1, 3])
@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope"])
def test_cached_decoding_equals_the_full_causal_pass(n_new, chunk, pos):
    model = small_model(pos=pos)
    prompt = torch.randint(17, (3, 9), generator=torch.Generator().manual_seed(n_new))
    ours = inf.generate(model, prompt, n_new, chunk_size=chunk)
    ref = inf.generate(model, prompt, n_new, use_cache=False)
    assert ours.shape == (3, 9 + n_new)
    assert torch.equal(ours, ref)


@pytest.mark.parametrize("chunk", [1, 2, 5, 7, 97])
def test_chunked_prefill_gives_the_logits_of_one_pass(chunk):
    model = small_model()
    prompt = torch.randint(17, (2, 23))
    cache = inf.KVCache()
    logits = inf.prefill(model, prompt, cache, chunk_size=chunk)
    with torch.no_grad():
        torch.testing.assert_close(logits, model(prompt), atol=1e-5, rtol=1e-5)
    assert cache.length == 23 and len(cache) == 23


def test_rope_model_caches_keys_rotated_by_their_absolute_positions():
    import attnlib as al
    from attnlib.models import CausalSelfAttention

    model = small_model(pos="rope")
    seq = torch.randint(17, (2, 12))
    cache = inf.KVCache()
    inf.prefill(model, seq, cache, chunk_size=5)  # chunks start at positions 0, 5, 10
    attn = model.blocks[0].attn
    with torch.no_grad():
        x = model.blocks[0].ln1(model.tok_emb[seq])  # layer 0's input (pos="none": no table)
        _, k_plain, _ = CausalSelfAttention.project(attn, x)  # unrotated keys (N, h, 12, d_head)
    expected = al.apply_rope(k_plain, torch.arange(12))
    torch.testing.assert_close(cache.layers[0][0], expected, atol=1e-6, rtol=1e-6)


def test_cache_bytes_equal_kv_cache_bytes():
    model = small_model()
    cache = inf.KVCache()
    inf.prefill(model, torch.randint(17, (3, 11)), cache)
    cfg = model.cfg
    assert cache.nbytes == inf.kv_cache_bytes(cfg.num_layers, cfg.num_heads, cfg.d_head, dtype=torch.float32,
                                              tokens=11, batch=3)


def test_upper_left_mask_with_a_cache_changes_the_result():
    # the decoding bug: one query against the cache with is_causal-style alignment
    model = small_model()
    prompt = torch.randint(17, (1, 8))
    cache = inf.KVCache()
    inf.prefill(model, prompt[:, :-3], cache)
    past = cache.past()
    with torch.no_grad():
        good = model(prompt[:, -3:], past_kv=past, attn_mask=inf.causal_mask(3, 8, align="lower_right", like=prompt),
                     return_kv=True)[0]
        bad = model(prompt[:, -3:], past_kv=past, attn_mask=inf.causal_mask(3, 8, like=prompt), return_kv=True)[0]
        full = model(prompt)[:, -3:]
    torch.testing.assert_close(good, full, atol=1e-5, rtol=1e-5)
    assert (bad - full).abs().max() > 1e-2


def test_generate_refuses_bad_input():
    model = small_model()
    with pytest.raises(ValueError, match="n_new must be >= 0"):
        inf.generate(model, torch.zeros(1, 3, dtype=torch.long), -1)
    with pytest.raises(ValueError, match=r"tokens has shape \(3,\)"):
        inf.extend(model, torch.zeros(3, dtype=torch.long), inf.KVCache())
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        inf.prefill(model, torch.zeros(1, 3, dtype=torch.long), inf.KVCache(), chunk_size=0)


# --- kv_cache_bytes against published figures (no model needed) ----------------------

def test_opt_13b_matches_the_vllm_paper():
    # Kwon et al. (2023), section 3: "the KV cache of a single token demands 800 KB of space,
    # calculated as 2 x 5120 (hidden state size) x 40 (number of layers) x 2 (bytes per FP16)"
    # and "as much as 1.6 GB" for OPT's 2048 tokens. OPT-13B: 40 layers, 40 heads of 128.
    per_token = inf.kv_cache_bytes(40, 40, 128, dtype="float16")
    assert per_token == 2 * 5120 * 40 * 2 and round(per_token / 1024) == 800
    assert round(inf.kv_cache_bytes(40, 40, 128, tokens=2048) / 1e9, 1) == 1.7  # 1.68 GB = 1.6 GiB
    assert round(inf.kv_cache_bytes(40, 40, 128, tokens=2048) / 2**30, 1) == 1.6


def test_mistral_rolling_buffer_saves_8x_at_32k():
    # Jiang et al. (2023): window 4096; "on a sequence length of 32k tokens, this reduces the
    # cache memory usage by 8x". Table 1: 32 layers, 8 kv heads of 128.
    full = inf.kv_cache_bytes(32, 8, 128, tokens=32 * 1024)
    window = inf.kv_cache_bytes(32, 8, 128, tokens=4096)
    assert full / window == 8


def test_gqa_shrinks_the_cache_by_heads_over_kv_heads():
    llama2_7b = inf.kv_cache_bytes(32, 32, 128)  # multi-head: 32 kv heads
    mistral_7b = inf.kv_cache_bytes(32, 8, 128)  # GQA: 8 kv heads
    assert llama2_7b == 512 * 1024 and llama2_7b / mistral_7b == 4
    assert inf.kv_cache_bytes(80, 8, 128) == 320 * 1024  # Llama 2 70B, GQA with 8 kv heads


@pytest.mark.parametrize("dtype,b", [("float32", 4), ("bfloat16", 2), (torch.float16, 2), ("int8", 1),
                                     (1.5, 1.5), ("int4", 0.5)])
def test_dtypes(dtype, b):
    assert inf.kv_cache_bytes(2, 3, 4, dtype=dtype, tokens=5, batch=2) == 2 * 2 * 3 * 4 * 5 * 2 * b


def test_kv_cache_bytes_refuses_bad_input():
    with pytest.raises(ValueError, match="unknown dtype 'half'"):
        inf.kv_cache_bytes(2, 2, 2, dtype="half")
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        inf.kv_cache_bytes(2, 2, 2, tokens=-1)
    with pytest.raises(TypeError, match="num_layers must be an int"):
        inf.kv_cache_bytes(2.5, 2, 2)


def test_bad_tokens_and_batches_are_refused_with_the_fix():
    model = small_model()
    with pytest.raises(TypeError, match=r"prompt has dtype torch.float32.*prompt.long\(\)"):
        inf.generate(model, torch.zeros(1, 3), 2)
    cache = inf.KVCache()
    inf.extend(model, torch.zeros(2, 3, dtype=torch.long), cache)
    with pytest.raises(ValueError, match=r"N = 3 sequences\) but the cache holds N = 2"):
        inf.extend(model, torch.zeros(3, 1, dtype=torch.long), cache)
    with pytest.raises(ValueError, match=r"= 105 positions, but the model takes at most context_length = 96"):
        inf.generate(model, torch.zeros(1, 10, dtype=torch.long), 96)
    assert inf.generate(model, torch.zeros(1, 10, dtype=torch.long), 87).shape == (1, 97)


def test_grouped_attention_refuses_bad_shapes_with_the_fix():
    q, k = torch.randn(1, 8, 2, 16), torch.randn(1, 2, 5, 16)
    with pytest.raises(ValueError, match=r"q is \(8, 2, 16\).*\(N, h, L, E\)"):
        inf.grouped_attention(q[0], k, k)
    with pytest.raises(ValueError, match=r"attn_mask is \(1, 1, 2, 5\).*\(L, S\) = \(2, 5\).*repeat_kv"):
        inf.grouped_attention(q, k, k, torch.ones(1, 1, 2, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="torch.as_tensor"):
        inf.grouped_attention(q.numpy(), k.numpy(), k.numpy())


def test_kv_cache_bytes_accepts_numpy_dtypes():
    import numpy as np

    assert inf.kv_cache_bytes(2, 3, 4, dtype=np.float16) == inf.kv_cache_bytes(2, 3, 4, dtype=torch.float16) == 96
    assert inf.kv_cache_bytes(2, 3, 4, dtype=np.dtype("float32")) == 192
