"""Chapter 8 exercises beyond the generic contract (tests/test_exercises_contract.py): the
references agree with torch and attnlib, the issue's mistakes are catalogued, correct
answers in other styles pass, independently written mistakes are named, and calling
attnlib's own function is caught."""
import numpy as np
import pytest
import torch
from torch.nn.attention.bias import causal_lower_right

import attnlib as al
from attnlib.exercises import EXERCISES, check


@pytest.mark.parametrize("name,required", [
    ("lower_right_causal_mask", {"upper_left", "missing_diagonal", "true_means_blocked"}),
    ("repeat_kv", {"tiled", "wrong_axis"}),
    ("apply_rope", {"interleaved_pairs", "reversed_rotation", "freq_i_over_d", "positions_from_one"}),
])
def test_catalogue_covers_the_issue_mistakes(name, required):
    assert required <= {m.key for m in EXERCISES[name].mistakes}


# --- the references agree with torch and attnlib ------------------------------------------

@pytest.mark.filterwarnings("ignore:Lower right causal bias")
@pytest.mark.parametrize("L,S", [(1, 7), (3, 5), (4, 4), (7, 97), (5, 3)])
def test_mask_reference_is_torchs_lower_right(L, S):
    ref = EXERCISES["lower_right_causal_mask"].reference(L, S)
    np.testing.assert_array_equal(ref, causal_lower_right(L, S)._materialize().numpy())
    np.testing.assert_array_equal(ref, al.causal_mask(L, S, align="lower_right"))


@pytest.mark.parametrize("shape,n", [((2, 3, 5, 4), 2), ((1, 1, 7, 2), 4), ((3, 2, 1, 3), 1)])
def test_repeat_reference_is_repeat_interleave(shape, n):
    x = np.random.default_rng(0).standard_normal(shape)
    np.testing.assert_array_equal(EXERCISES["repeat_kv"].reference(x, n),
                                  torch.repeat_interleave(torch.from_numpy(x), n, dim=1).numpy())


def test_rope_reference_is_attnlib_apply_rope():
    x = np.random.default_rng(0).standard_normal((2, 6, 10))
    pos = np.arange(4, 10)
    np.testing.assert_allclose(EXERCISES["apply_rope"].reference(x, pos, 500.0),
                               al.apply_rope(x, pos, base=500.0), atol=1e-12)


# --- correct answers written in other ways pass --------------------------------------------

def mask_loops(L, S):
    return np.array([[j <= i + S - L for j in range(S)] for i in range(L)], dtype=bool).reshape(L, S)


def mask_torch(L, S):
    return torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)


def mask_from_square(L, S):  # the last L rows of the S x S causal mask (uses the plain mask)
    full = al.causal_mask(S) if L <= S else np.tril(np.ones((L, S), bool), k=S - L)
    return full[S - L:] if L <= S else full


def repeat_torch(x, n_rep):
    return torch.as_tensor(x).repeat_interleave(n_rep, dim=1)


def repeat_broadcast(x, n_rep):
    N, h, S, d = x.shape
    return np.broadcast_to(x[:, :, None], (N, h, n_rep, S, d)).reshape(N, h * n_rep, S, d)


def rope_torch_float32(x, positions, base=10000.0):
    x = torch.as_tensor(x, dtype=torch.float32)
    d = x.shape[-1]
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.as_tensor(positions, dtype=torch.float64)[:, None] * inv
    cos, sin = torch.cat([ang, ang], -1).cos().float(), torch.cat([ang, ang], -1).sin().float()
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def rope_hf_float32_angles(x, positions, base=10000.0):
    """Hugging Face / Llama style: inv_freq and the angles in float32, x kept in its dtype."""
    x = torch.as_tensor(x)
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    freqs = torch.outer(torch.as_tensor(positions).float(), inv_freq)  # (L, d/2), float32
    emb = torch.cat([freqs, freqs], dim=-1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()


def rope_loops(x, positions, base=10000.0):
    x = np.asarray(x)
    out, d = x.copy(), x.shape[-1]
    for l, m in enumerate(positions):
        for i in range(d // 2):
            c, s = np.cos(m * base ** (-2 * i / d)), np.sin(m * base ** (-2 * i / d))
            a, b = x[..., l, i], x[..., l, i + d // 2]
            out[..., l, i], out[..., l, i + d // 2] = a * c - b * s, b * c + a * s
    return out


def rope_complex(x, positions, base=10000.0):  # z = x_i + i x_{i+d/2}, times e^{i m theta}
    d = x.shape[-1]
    z = x[..., : d // 2] + 1j * x[..., d // 2:]
    theta = base ** (-np.arange(d // 2) * 2.0 / d)
    z = z * np.exp(1j * np.asarray(positions)[:, None] * theta)
    return np.concatenate([z.real, z.imag], axis=-1)


@pytest.mark.parametrize("name,fn", [
    ("lower_right_causal_mask", mask_loops), ("lower_right_causal_mask", mask_torch),
    ("lower_right_causal_mask", mask_from_square),
    ("repeat_kv", repeat_torch), ("repeat_kv", repeat_broadcast),
    ("repeat_kv", lambda x, n: np.repeat(x, n, axis=-3)),
    ("apply_rope", rope_torch_float32), ("apply_rope", rope_complex),
    ("apply_rope", rope_hf_float32_angles), ("apply_rope", rope_loops),
])
def test_equivalent_correct_answers_pass(name, fn):
    res = check(name, fn)
    assert res.passed, res.message


# --- mistakes written independently of the catalogue are still recognised ------------------

def rope_interleaved_torch(x, positions, base=10000.0):
    x = torch.as_tensor(x)
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.as_tensor(positions, dtype=torch.float64)[:, None] * theta
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(ang), ang)).flatten(-2)


def rope_one_sign_flipped(x, positions, base=10000.0):  # (a cos - b sin, b cos - a sin)
    d = x.shape[-1]
    ang = np.asarray(positions)[:, None] * base ** (-np.arange(0, d, 2) / d)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) - a * np.sin(ang)], -1)


@pytest.mark.parametrize("name,fn,key", [
    ("lower_right_causal_mask", lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(), "upper_left"),
    ("lower_right_causal_mask", lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(S - L - 1), "missing_diagonal"),
    ("lower_right_causal_mask", lambda L, S: torch.ones(L, S, dtype=torch.bool).triu(S - L + 1), "true_means_blocked"),
    ("repeat_kv", lambda x, n: torch.as_tensor(x).repeat(1, n, 1, 1), "tiled"),
    ("repeat_kv", lambda x, n: torch.as_tensor(x).repeat_interleave(n, dim=2), "wrong_axis"),
    ("apply_rope", rope_interleaved_torch, "interleaved_pairs"),
    ("apply_rope", lambda x, p, base=10000.0: rope_complex(x, -np.asarray(p), base), "reversed_rotation"),
    ("apply_rope", lambda x, p, base=10000.0: rope_complex(x, np.asarray(p) + 1, base), "positions_from_one"),
    ("apply_rope", lambda x, p, base=10000.0: rope_complex(x, p, 1.0 / base), "freq_inverted"),
    ("apply_rope", rope_one_sign_flipped, "not_a_rotation"),
    ("lower_right_causal_mask", lambda L, S: torch.ones(S, S, dtype=torch.bool).tril()[S - L:], "square_rows"),
])
def test_independently_written_mistakes_are_recognised(name, fn, key):
    res = check(name, fn)
    assert res.mistake == key, res.message


@pytest.mark.parametrize("name,fn", [
    ("lower_right_causal_mask", lambda L, S: al.causal_mask(L, S, align="lower_right")),
    ("repeat_kv", lambda x, n: al.repeat_kv(x, n)),
    ("apply_rope", lambda x, p, base=10000.0: al.apply_rope(x, p, base=base)),
])
def test_calling_the_library_does_not_pass(name, fn):
    res = check(name, fn)
    # attnlib.repeat_kv / apply_rope are refused by the checker itself (Exercise.forbidden);
    # align="lower_right" of causal_mask by this exercise's own check
    expected = "calls_library" if name == "lower_right_causal_mask" else "library_shortcut"
    assert not res.passed and res.mistake == expected, res.message
    # and the library is left unpatched afterwards
    assert al.causal_mask.__name__ == "causal_mask" and al.repeat_kv.__name__ == "repeat_kv"
    assert al.apply_rope.__name__ == "apply_rope"


# --- cases that vary per check, the new mistakes, the ladder (issue 20) ---------------------

import torch.nn.functional as F  # noqa: E402

from attnlib.exercises.catalogue.ch02_qkv import attention_reference  # noqa: E402
from exercise_catalogue import asked_twice, catalogue_problems, passes_every_seed  # noqa: E402

NAMES = ["lower_right_causal_mask", "repeat_kv", "apply_rope", "decode_step"]


@pytest.mark.parametrize("name", NAMES)
def test_catalogue_holds_on_every_draw_of_the_cases(name):
    problems = catalogue_problems(EXERCISES[name])
    assert not problems, problems[:5]


@pytest.mark.parametrize("seed", range(10))
def test_every_draw_has_gaps_in_the_positions_and_more_queries_than_keys(seed):
    rope = EXERCISES["apply_rope"].all_cases(seed)
    assert any((np.diff(c.args[1]) > 1).any() for c in rope)
    assert any(c.args[1][0] > 0 for c in rope)
    masks = EXERCISES["lower_right_causal_mask"].all_cases(seed)
    assert any(L > S for L, S in (c.args for c in masks)) and any(L == 1 for L, S in (c.args for c in masks))


def test_positions_counted_from_the_first_one_fail_on_gaps():
    r, shown = asked_twice("apply_rope", lambda x, p, base=10000.0: rope_complex(x, p[0] + np.arange(len(p)), base))
    assert r.mistake == "positions_consecutive" and "positions)[:, None] * theta" in shown


@pytest.mark.parametrize("name,fn,key", [
    ("repeat_kv", lambda x, n: np.repeat(x, n), "flattened"),
    ("repeat_kv", lambda x, n: torch.as_tensor(x).repeat_interleave(n), "flattened"),
    ("repeat_kv", lambda x, n: np.broadcast_to(x[:, :, None], (x.shape[0], x.shape[1], n, *x.shape[2:])),
     "forgot_reshape"),
    ("repeat_kv", lambda x, n: np.stack([x] * n, axis=1).reshape(x.shape[0], -1, *x.shape[2:]), "tiled"),
    ("lower_right_causal_mask", lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(S - L + 1), "off_by_one_future"),
])
def test_more_independently_written_mistakes_are_named(name, fn, key):
    res = check(name, fn)
    assert res.mistake == key, res.message


def test_level_one_messages_hold_no_code_that_passes():
    """The issue's examples: the tiled heads, the upper-left mask and the interleaved RoPE
    messages no longer carry the fix; it comes when the learner asks."""
    tiled = EXERCISES["repeat_kv"].mistake("tiled")
    assert "np.repeat(x, n_rep, axis=1)" not in tiled.message and "np.repeat(x, n_rep, axis=1)" in tiled.fix
    upper = EXERCISES["lower_right_causal_mask"].mistake("upper_left")
    assert "k=S - L" not in upper.message and "k=S - L" in upper.fix
    inter = EXERCISES["apply_rope"].mistake("interleaved_pairs")
    assert "x2 cos + x1 sin" not in inter.message and "x2 * cos + x1 * sin" in inter.fix


def test_in_place_no_longer_names_the_order_of_the_heads():
    ex = EXERCISES["repeat_kv"]
    texts = [ex.prompt, ex.hint, *ex.hints] + [t for m in ex.mistakes for t in (m.title, m.message, m.fix)]
    assert not any("in place" in t for t in texts)


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


@pytest.mark.parametrize("name,fn", [("decode_step", decode_float32), ("apply_rope", rope_torch_float32),
                                     ("repeat_kv", repeat_broadcast)])
def test_other_correct_answers_pass_on_every_draw(name, fn):
    assert not passes_every_seed(EXERCISES[name], fn, seeds=range(10))


@pytest.mark.filterwarnings("ignore:Lower right causal bias")
def test_torchs_lower_right_bias_is_refused():
    res = check("lower_right_causal_mask", lambda L, S: causal_lower_right(L, S)._materialize())
    assert res.mistake == "library_shortcut", res.message


def test_the_hint_ladder_walks_from_the_fix_to_the_near_solution():
    """Level 1 with the failure, level 2 (the fix) on a second check or the first hint(),
    then the exercise's hints, then the end of the ladder."""
    from attnlib.exercises._hints import _LADDER, next_hint

    _LADDER.pop("repeat_kv", None)  # a fresh kernel: no earlier check of repeat_kv
    ex = EXERCISES["repeat_kv"]
    tiled = ex.mistake("tiled")
    r = check("repeat_kv", lambda x, n: np.tile(x, (1, n, 1, 1)))
    assert r.mistake == "tiled" and not r.fix and tiled.fix not in str(r)
    steps = [next_hint("repeat_kv") for _ in range(4)]
    assert steps[0].text == tiled.fix and [s.text for s in steps[1:3]] == list(ex.hints)
    assert steps[0].step == 1 and steps[2].step == steps[2].steps == 3
    assert "last hint" in steps[3].text


def test_a_failure_no_mistake_explains_starts_the_ladder_at_the_hints():
    from attnlib.exercises._hints import next_hint

    r = check("decode_step", lambda q, k, v, kc, vc: (q * 0, kc, vc))
    assert r.mistake is None and r.hint
    assert next_hint("decode_step").text == EXERCISES["decode_step"].hints[0]


def test_the_code_in_level_one_detector_is_not_vacuous():
    """The message issue 20 quotes ('like np.repeat(x, n_rep, axis=1)') is caught."""
    from dataclasses import replace

    from exercise_catalogue import passing_code_in_level_one
    ex = EXERCISES["repeat_kv"]
    old = replace(ex.mistake("tiled"), message="Repeat each head in place, like np.repeat(x, n_rep, axis=1).")
    assert passing_code_in_level_one(replace(ex, mistakes=[old])) == ["np.repeat(x, n_rep, axis=1)"]
    mask = EXERCISES["lower_right_causal_mask"]
    old = replace(mask.mistake("upper_left"), message="Use np.tril(np.ones((L, S), bool), k=S - L).")
    assert passing_code_in_level_one(replace(mask, mistakes=[old]))
