"""Chapter 11 exercises beyond the generic contract (tests/test_exercises_contract.py): the
references agree with torch and attnlib, the issue's mistakes are catalogued, correct
answers in other styles pass, independently written mistakes are named, and calling
attnlib's own function is caught. (Chapter 12's, repeat_kv and apply_rope, are in
tests/test_exercises_ch12.py.)"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

import attnlib as al
from attnlib.exercises import EXERCISES, check
from attnlib.exercises.catalogue.ch02_qkv import attention_reference
from exercise_catalogue import catalogue_problems, passes_every_seed


def test_catalogue_covers_the_issue_mistakes():
    required = {"upper_left", "missing_diagonal", "true_means_blocked"}
    assert required <= {m.key for m in EXERCISES["lower_right_causal_mask"].mistakes}


# --- the references agree with torch and attnlib ------------------------------------------

@pytest.mark.filterwarnings("ignore:Lower right causal bias")
@pytest.mark.parametrize("L,S", [(1, 7), (3, 5), (4, 4), (7, 97), (5, 3)])
def test_mask_reference_is_torchs_lower_right(L, S):
    ref = EXERCISES["lower_right_causal_mask"].reference(L, S)
    np.testing.assert_array_equal(ref, causal_lower_right(L, S)._materialize().numpy())
    np.testing.assert_array_equal(ref, al.causal_mask(L, S, align="lower_right"))



# --- correct answers written in other ways pass --------------------------------------------

def mask_loops(L, S):
    return np.array([[j <= i + S - L for j in range(S)] for i in range(L)], dtype=bool).reshape(L, S)


def mask_torch(L, S):
    return torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)


def mask_from_square(L, S):  # the last L rows of the S x S causal mask (uses the plain mask)
    full = al.causal_mask(S) if L <= S else np.tril(np.ones((L, S), bool), k=S - L)
    return full[S - L:] if L <= S else full


@pytest.mark.parametrize("fn", [mask_loops, mask_torch, mask_from_square])
def test_equivalent_correct_answers_pass(fn):
    res = check("lower_right_causal_mask", fn)
    assert res.passed, res.message


# --- mistakes written independently of the catalogue are still recognised ------------------

@pytest.mark.parametrize("fn,key", [
    (lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(), "upper_left"),
    (lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(S - L - 1), "missing_diagonal"),
    (lambda L, S: torch.ones(L, S, dtype=torch.bool).triu(S - L + 1), "true_means_blocked"),
    (lambda L, S: torch.ones(S, S, dtype=torch.bool).tril()[S - L:], "square_rows"),
    (lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(S - L + 1), "off_by_one_future"),
])
def test_independently_written_mistakes_are_recognised(fn, key):
    res = check("lower_right_causal_mask", fn)
    assert res.mistake == key, res.message


def test_calling_the_library_does_not_pass():
    res = check("lower_right_causal_mask", lambda L, S: al.causal_mask(L, S, align="lower_right"))
    # align="lower_right" of causal_mask is refused by this exercise's own check
    assert not res.passed and res.mistake == "calls_library", res.message
    assert al.causal_mask.__name__ == "causal_mask"  # and the library is left unpatched afterwards


# --- cases that vary per check, the new mistakes, the ladder (issue 20) ---------------------

@pytest.mark.parametrize("name", ["lower_right_causal_mask", "decode_step"])
def test_catalogue_holds_on_every_draw_of_the_cases(name):
    problems = catalogue_problems(EXERCISES[name])
    assert not problems, problems[:5]


@pytest.mark.parametrize("seed", range(10))
def test_every_draw_has_more_queries_than_keys_and_a_single_query(seed):
    masks = EXERCISES["lower_right_causal_mask"].all_cases(seed)
    assert any(L > S for L, S in (c.args for c in masks)) and any(L == 1 for L, S in (c.args for c in masks))


def test_level_one_messages_hold_no_code_that_passes():
    """The issue's example: the upper-left mask message no longer carries the fix; it comes
    when the learner asks."""
    upper = EXERCISES["lower_right_causal_mask"].mistake("upper_left")
    assert "k=S - L" not in upper.message and "k=S - L" in upper.fix


# --- decode_step: one cached decode step, written by the learner ---------------------------

def decode_torch(q, k, v, k_cache, v_cache):
    q, k, v, kc, vc = (torch.as_tensor(a) for a in (q, k, v, k_cache, v_cache))
    kc, vc = torch.cat([kc, k], dim=-2), torch.cat([vc, v], dim=-2)
    s = q @ kc.mT / q.shape[-1] ** 0.5
    return torch.softmax(s, dim=-1) @ vc, kc, vc


def decode_einsum(q, k, v, k_cache, v_cache):
    kc, vc = np.concatenate([k_cache, k], axis=2), np.concatenate([v_cache, v], axis=2)
    s = np.einsum("nhqd,nhsd->nhqs", q, kc) / np.sqrt(q.shape[-1])
    w = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("nhqs,nhsd->nhqd", w / w.sum(-1, keepdims=True), vc), kc, vc


def decode_with_the_learners_attention(q, k, v, k_cache, v_cache):
    kc, vc = np.concatenate([k_cache, k], axis=-2), np.concatenate([v_cache, v], axis=-2)
    mask = np.ones((1, kc.shape[-2]), dtype=bool)  # one query, the last position: sees every key
    return attention_reference(q, kc, vc, mask), kc, vc


def decode_float32(q, k, v, k_cache, v_cache):
    return decode_torch(*(np.asarray(a, dtype=np.float32) for a in (q, k, v, k_cache, v_cache)))


@pytest.mark.parametrize("fn", [decode_torch, decode_einsum, decode_with_the_learners_attention, decode_float32])
def test_decode_step_correct_answers_pass(fn):
    res = check("decode_step", fn)
    assert res.passed, res.message


def test_decode_step_reference_is_the_models_cached_step():
    """The reference computes what attnlib.models.gpt's attention does with past_kv."""
    from attnlib.models import GPT, GPTConfig

    torch.manual_seed(0)
    attn = GPT(GPTConfig(vocab_size=16, context_length=8, num_layers=1, num_heads=2, d_model=8)).double().blocks[0].attn
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    _, (k_cache, v_cache) = attn(x[:, :5])                # the cache after 5 tokens
    out, (k_all, v_all) = attn(x[:, 5:], past_kv=(k_cache, v_cache))
    q, k, v = attn.project(x[:, 5:])
    ref_out, ref_k, ref_v = EXERCISES["decode_step"].reference(*(t.detach().numpy() for t in (q, k, v, k_cache, v_cache)))
    np.testing.assert_allclose(ref_k, k_all.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(ref_v, v_all.detach().numpy(), atol=1e-12)
    N, h, L, dh = ref_out.shape
    joined = torch.as_tensor(ref_out).transpose(1, 2).reshape(N, L, h * dh) @ attn.w_o
    np.testing.assert_allclose(joined.detach().numpy(), out.detach().numpy(), atol=1e-12)


def decode_attend_first(q, k, v, k_cache, v_cache):
    s = q @ np.swapaxes(k_cache, -1, -2) / np.sqrt(q.shape[-1])    # the old cache only
    w = np.exp(s - s.max(-1, keepdims=True))
    out = w / w.sum(-1, keepdims=True) @ v_cache
    return out, np.concatenate([k_cache, k], axis=-2), np.concatenate([v_cache, v], axis=-2)


def decode_torch_attend_first(q, k, v, k_cache, v_cache):
    q, k, v, kc, vc = (torch.as_tensor(a) for a in (q, k, v, k_cache, v_cache))
    out = torch.softmax(q @ kc.mT / q.shape[-1] ** 0.5, -1) @ vc    # empty cache: an empty softmax, zeros
    return out, torch.cat([kc, k], -2), torch.cat([vc, v], -2)


def decode_causal(q, k, v, k_cache, v_cache):
    kc, vc = torch.cat([torch.as_tensor(k_cache), torch.as_tensor(k)], -2), torch.cat(
        [torch.as_tensor(v_cache), torch.as_tensor(v)], -2)
    q = torch.as_tensor(q)
    s = q @ kc.mT / q.shape[-1] ** 0.5
    s = s.masked_fill(~torch.ones(1, kc.shape[-2], dtype=torch.bool).tril(), float("-inf"))  # is_causal=True
    return torch.softmax(s, -1) @ vc, kc, vc


def decode_cat_default(q, k, v, k_cache, v_cache):
    kc, vc = np.concatenate([k_cache, k]), np.concatenate([v_cache, v])    # axis 0
    s = q @ np.swapaxes(kc, -1, -2) / np.sqrt(q.shape[-1])
    w = np.exp(s - s.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True) @ vc, kc, vc


def _attend_all(q, kc, vc, scale):
    s = q @ np.swapaxes(kc, -1, -2) / scale
    w = np.exp(s - s.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True) @ vc


def decode_scale_by_length(q, k, v, k_cache, v_cache):
    kc, vc = np.concatenate([k_cache, k], axis=-2), np.concatenate([v_cache, v], axis=-2)
    return _attend_all(q, kc, vc, np.sqrt(kc.shape[-2])), kc, vc   # sqrt(S0 + 1), not sqrt(d)


def decode_prepend(q, k, v, k_cache, v_cache):
    kc, vc = np.concatenate([k, k_cache], axis=-2), np.concatenate([v, v_cache], axis=-2)
    return _attend_all(q, kc, vc, np.sqrt(q.shape[-1])), kc, vc


def decode_only_new(q, k, v, k_cache, v_cache):
    return v, np.concatenate([k_cache, k], axis=-2), np.concatenate([v_cache, v], axis=-2)


def decode_caches_q(q, k, v, k_cache, v_cache):
    return decode_einsum(q, q, v, k_cache, v_cache)


def decode_naive_exp(q, k, v, k_cache, v_cache):
    kc, vc = np.concatenate([k_cache, k], axis=-2), np.concatenate([v_cache, v], axis=-2)
    e = np.exp(q @ np.swapaxes(kc, -1, -2) / np.sqrt(q.shape[-1]))
    return e / e.sum(-1, keepdims=True) @ vc, kc, vc


@pytest.mark.parametrize("fn,key", [
    (decode_attend_first, "attend_before_append"), (decode_torch_attend_first, "attend_before_append"),
    (decode_only_new, "attends_only_new"), (decode_causal, "causal_mask_on_step"),
    (decode_prepend, "new_token_first"), (decode_cat_default, "concat_default_axis"),
    (decode_scale_by_length, "scaled_by_cache_length"), (decode_caches_q, "caches_query"),
    (decode_naive_exp, "softmax_overflow"),
    (lambda q, k, v, kc, vc: decode_einsum(q, k, v, kc, vc)[0], "output_only"),
    (lambda q, k, v, kc, vc: (decode_einsum(q, k, v, kc, vc)[0], kc, vc), "caches_not_returned"),
], ids=lambda v: v if isinstance(v, str) else getattr(v, "__name__", "lambda"))
def test_decode_step_mistakes_written_independently_are_named(fn, key):
    res = check("decode_step", fn)
    assert res.mistake == key, res.message


def test_decode_step_refuses_the_library_attention():
    def with_sdpa(q, k, v, k_cache, v_cache):
        kc, vc = (torch.cat([torch.as_tensor(a), torch.as_tensor(b)], -2) for a, b in ((k_cache, k), (v_cache, v)))
        return F.scaled_dot_product_attention(torch.as_tensor(q), kc, vc), kc, vc
    res = check("decode_step", with_sdpa)
    assert res.mistake == "library_shortcut", res.message


def test_other_correct_answers_pass_on_every_draw():
    assert not passes_every_seed(EXERCISES["decode_step"], decode_float32, seeds=range(10))


@pytest.mark.filterwarnings("ignore:Lower right causal bias")
def test_torchs_lower_right_bias_is_refused():
    res = check("lower_right_causal_mask", lambda L, S: causal_lower_right(L, S)._materialize())
    assert res.mistake == "library_shortcut", res.message


def test_a_failure_no_mistake_explains_starts_the_ladder_at_the_hints():
    from attnlib.exercises._hints import next_hint

    r = check("decode_step", lambda q, k, v, kc, vc: (q * 0, kc, vc))
    assert r.mistake is None and r.hint
    assert next_hint("decode_step").text == EXERCISES["decode_step"].hints[0]


def test_the_code_in_level_one_detector_is_not_vacuous():
    """A message that carries code that passes is caught."""
    from dataclasses import replace

    from exercise_catalogue import passing_code_in_level_one
    mask = EXERCISES["lower_right_causal_mask"]
    old = replace(mask.mistake("upper_left"), message="Use np.tril(np.ones((L, S), bool), k=S - L).")
    assert passing_code_in_level_one(replace(mask, mistakes=[old]))
