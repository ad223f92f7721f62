"""Chapter 2 exercises: any correct implementation passes (loops, einsum, torch,
log-sum-exp, np.where masks, ...) and realistic wrong answers, written the way learners
write them, get the message of their misconception."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlib.exercises import EXERCISES, check
from attnlib.exercises.catalogue.ch02_qkv import attention_reference, cross_attention_reference, softmax_reference
from exercise_catalogue import asked_twice, catalogue_problems, passes_every_seed


# --------------------------------------------------------------------------- softmax: correct styles

def softmax_row_loop(x, axis=-1):
    x = np.moveaxis(np.asarray(x, dtype=float), axis, -1)  # normalise along the last axis
    rows = x.reshape(-1, x.shape[-1])
    out = np.empty_like(rows)
    for r, row in enumerate(rows):
        e = [math.exp(v - max(row)) for v in row]
        out[r] = [v / sum(e) for v in e]
    return np.moveaxis(out.reshape(x.shape), -1, axis)


def softmax_logsumexp(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    lse = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))  # log Σ exp x, computed stably
    return np.exp(x - lse)


def softmax_torch_out(x, axis=-1):
    t = torch.as_tensor(x)  # (torch.softmax itself is the library's answer: refused)
    e = (t - t.amax(dim=axis, keepdim=True)).exp()
    return e / e.sum(dim=axis, keepdim=True)  # a float64 tensor comes back


def softmax_torch_manual(x, axis=-1):
    t = torch.from_numpy(np.asarray(x))
    t = t - t.amax(dim=axis, keepdim=True)
    return (t.exp() / t.exp().sum(dim=axis, keepdim=True)).numpy()


def softmax_copy_then_in_place(x, axis=-1):
    y = np.array(x, dtype=float)  # a private copy may be changed freely
    y -= y.max(axis=axis, keepdims=True)
    np.exp(y, out=y)
    y /= y.sum(axis=axis, keepdims=True)
    return y


def softmax_float32_torch(x, axis=-1):
    return softmax_torch_out(torch.as_tensor(x, dtype=torch.float32), axis)


@pytest.mark.parametrize("fn", [softmax_row_loop, softmax_logsumexp, softmax_torch_out, softmax_torch_manual,
                                softmax_copy_then_in_place, softmax_float32_torch, softmax_reference])
def test_correct_softmax_in_any_style_passes(fn):
    r = check("softmax", fn)
    assert r.passed, str(r)


# --------------------------------------------------------------------------- softmax: learners' mistakes

def test_textbook_1d_softmax_on_arrays_is_whole_array():
    r = check("softmax", lambda x, axis=-1: np.exp(x - np.max(x)) / np.sum(np.exp(x - np.max(x))))
    assert r.mistake == "whole_array", r.message


def test_torch_naive_softmax_is_no_max_subtraction():
    def softmax(x, axis=-1):
        t = torch.as_tensor(x)
        return t.exp() / t.exp().sum(dim=axis, keepdim=True)
    assert check("softmax", softmax).mistake == "no_max_subtraction"


def test_missing_keepdims_is_named_even_though_it_raises_on_non_square_input():
    def softmax(x, axis=-1):
        e = np.exp(x - np.max(x, axis=axis))
        return e / np.sum(e, axis=axis)
    r, shown = asked_twice("softmax", softmax)
    assert r.mistake == "forgot_keepdims" and "keepdims=True" in shown
    assert "keepdims=True" not in r.message  # level 1 names the idea; the code comes when asked


def test_global_max_message_explains_the_underflow():
    def softmax(x, axis=-1):
        e = np.exp(x - x.max())
        return e / e.sum(axis=axis, keepdims=True)
    r = check("softmax", softmax)
    assert r.mistake == "global_max" and "0 / 0" in r.message


def test_in_place_softmax_is_caught_even_though_its_values_are_right():
    def softmax(x, axis=-1):
        x -= x.max(axis=axis, keepdims=True)
        return np.exp(x) / np.exp(x).sum(axis=axis, keepdims=True)
    assert check("softmax", softmax).mistake == "mutates"


# --------------------------------------------------------------------------- attention: correct styles

def attention_row_loop(q, k, v, mask=None):
    """One query row at a time with vector operations: fine, and fast enough."""
    q, k, v = (np.asarray(a, dtype=float) for a in (q, k, v))
    *batch, L, E = q.shape
    S = k.shape[-2]
    allowed = np.ones((*batch, L, S), bool) if mask is None else np.broadcast_to(mask, (*batch, L, S))
    out = np.empty((*batch, L, v.shape[-1]))
    for b in np.ndindex(*batch):
        for i in range(L):
            s = k[b] @ q[b][i] / math.sqrt(E)           # (S, E) @ (E,) -> (S,)
            s = np.where(allowed[b][i], s, -np.inf)
            w = np.exp(s - s.max())
            out[b][i] = (w / w.sum()) @ v[b]            # (S,) @ (S, Ev) -> (Ev,)
    return out


def attention_einsum(q, k, v, mask=None):
    scores = np.einsum("...le,...se->...ls", q, k) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -1e9)           # a large negative number works as well as -inf
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return np.einsum("...ls,...sv->...lv", w, v)


def attention_torch_sdpa(q, k, v, mask=None):  # torch's SDPA is the library's answer: refused
    q, k, v = (torch.as_tensor(a) for a in (q, k, v))
    m = None if mask is None else torch.as_tensor(mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # same bool convention


def test_torch_sdpa_is_refused_as_the_library_answer():
    r = check("attention", attention_torch_sdpa)
    assert r.status == "failed" and r.mistake == "library_shortcut" and "scaled_dot_product_attention" in r.message


def attention_torch_manual(q, k, v, mask=None):
    q, k, v = (torch.as_tensor(a) for a in (q, k, v))
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~torch.as_tensor(mask), float("-inf"))
    return (scores.softmax(dim=-1) @ v).numpy()


@pytest.mark.parametrize("fn", [attention_row_loop, attention_einsum, attention_torch_manual,
                                attention_reference])
def test_correct_attention_in_any_style_passes(fn):
    r = check("attention", fn)
    assert r.passed, str(r)
    assert "fast enough" in r.message


# --------------------------------------------------------------------------- attention: learners' mistakes

def _sdpa(scale=None, is_causal=False):
    """SDPA written out in torch (calling F.scaled_dot_product_attention is refused)."""
    def attention(q, k, v, mask=None):
        q, k, v = (torch.as_tensor(a) for a in (q, k, v))
        s = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
        if is_causal:
            if mask is not None:
                raise RuntimeError("attn_mask and is_causal cannot both be set")
            s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
        elif mask is not None:
            s = s.masked_fill(~torch.as_tensor(mask), float("-inf"))
        return s.softmax(-1) @ v
    return attention


def test_torch_with_scale_one_is_no_scaling():
    assert check("attention", _sdpa(scale=1.0)).mistake == "no_scaling"


def test_causal_flag_instead_of_the_mask_is_not_a_known_mistake_but_a_clear_failure():
    r = check("attention", _sdpa(is_causal=True))
    assert r.status == "failed" and r.mistake is None
    assert "case 1 of" in r.message and "largest difference" in r.message and r.hint


def test_softmax_axis_0_on_batches_is_softmax_over_queries():
    def attention(q, k, v, mask=None):
        scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
        if mask is not None:
            scores = np.where(mask, scores, -1e9)
        return softmax_reference(scores, axis=0) @ v
    assert check("attention", attention).mistake == "softmax_over_queries"


def test_two_d_only_code_with_dot_T_is_transpose_all_axes():
    def attention(q, k, v, mask=None):
        scores = np.dot(q, k.T) / np.sqrt(k.shape[1])
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        return softmax_reference(scores) @ v
    r, shown = asked_twice("attention", attention)
    assert r.mistake == "transpose_all_axes" and "swapaxes" in shown


def test_triple_loop_is_too_slow_but_row_loop_is_not():
    slow = check("attention", EXERCISES["attention"].mistake("python_loops").fn)
    assert slow.mistake == "python_loops" and "1 s" in slow.message
    assert check("attention", attention_row_loop).passed


def test_every_catalogued_attention_mistake_differs_from_the_reference_on_some_case():
    ex = EXERCISES["attention"]
    for m in ex.mistakes:
        if m.kind != "output":
            continue
        differs = []
        for c in ex.all_cases():
            want = ex.reference(*c.args, **c.kwargs)
            try:
                with np.errstate(all="ignore"):  # the overflow mistake makes NaN on purpose
                    got = m.fn(*c.args, **c.kwargs)
            except (ValueError, IndexError):  # shape errors: matmul (ValueError), boolean index (IndexError)
                differs.append(True)
                continue
            differs.append(got.shape != want.shape or not np.allclose(got, want, equal_nan=True))
        assert any(differs), m.key


def test_reference_matches_torch_sdpa_on_every_case():
    for c in EXERCISES["attention"].all_cases():
        q, k, v = (torch.as_tensor(a) for a in c.args)
        mask = c.kwargs.get("mask")
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else torch.as_tensor(mask))
        np.testing.assert_allclose(attention_reference(*c.args, **c.kwargs), want.numpy(), rtol=1e-10, atol=1e-12)


def test_softmax_reference_matches_torch_on_every_case():
    for c in EXERCISES["softmax"].all_cases():
        want = torch.softmax(torch.as_tensor(c.args[0]), dim=c.kwargs.get("axis", -1))
        np.testing.assert_allclose(softmax_reference(*c.args, **c.kwargs), want.numpy(), rtol=1e-12, atol=1e-300)


def test_stub_shows_the_shapes_the_checker_uses():
    stub = EXERCISES["attention"].stub
    for shape in ("(..., L, E)", "(..., S, E)", "(..., S, Ev)", "(..., L, S)", "(..., L, Ev)"):
        assert shape in stub
    assert EXERCISES["softmax"].signature() == "def softmax(x, axis=-1):"
    assert EXERCISES["attention"].signature() == "def attention(q, k, v):"


# --------------------------------------------------------------------------- cross_attention

def test_cross_attention_reference_matches_torch_sdpa_on_every_case():
    for c in EXERCISES["cross_attention"].all_cases():
        x, y, w_q, w_k, w_v = (torch.from_numpy(a) for a in c.args)
        want = F.scaled_dot_product_attention(x @ w_q, y @ w_k, y @ w_v).numpy()
        np.testing.assert_allclose(cross_attention_reference(*c.args), want, rtol=1e-10, atol=1e-12)


def test_cross_attention_cases_have_L_not_S_and_d_v_not_d_k():
    cases = EXERCISES["cross_attention"].all_cases()
    assert any(c.args[0].shape[0] != c.args[1].shape[0] for c in cases)
    assert any(c.args[3].shape[1] != c.args[4].shape[1] for c in cases)
    assert any(c.args[0].shape[1] != c.args[1].shape[1] for c in cases)


def cross_torch(x, y, w_q, w_k, w_v):
    x, y, w_q, w_k, w_v = (torch.as_tensor(a, dtype=torch.float32) for a in (x, y, w_q, w_k, w_v))
    return F.scaled_dot_product_attention((x @ w_q)[None], (y @ w_k)[None], (y @ w_v)[None])[0]


def cross_einsum(x, y, w_q, w_k, w_v):
    q, k, v = np.einsum("ld,de->le", x, w_q), np.einsum("sd,de->se", y, w_k), y @ w_v
    s = np.einsum("le,se->ls", q, k) / np.sqrt(q.shape[1])
    w = np.exp(s - s.max(1, keepdims=True))
    return (w / w.sum(1, keepdims=True)) @ v


@pytest.mark.parametrize("fn", [cross_torch, cross_einsum], ids=["torch-float32", "einsum"])
def test_correct_cross_attention_in_any_style_passes(fn):
    r = check("cross_attention", fn)
    assert r.passed, r.message


def test_cross_attention_via_the_learners_attention_passes():
    def via_attention(x, y, w_q, w_k, w_v):
        return attention_reference(x @ w_q, y @ w_k, y @ w_v)

    assert check("cross_attention", via_attention).passed


def test_self_attention_on_x_is_named_keys_from_x():
    def self_attention(x, y, w_q, w_k, w_v):
        return attention_reference(x @ w_q, x @ w_k, x @ w_v)

    r = check("cross_attention", self_attention)
    assert r.mistake == "keys_from_x" and "self-attention" in r.message


def test_weights_transposed_in_the_learners_own_words_is_named():
    # weights.T @ v: runs when L = S (and mixes queries up), fails when L != S
    def attention_weights_T(q, k, v, mask=None):
        E = q.shape[-1]
        scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(E)
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        weights = softmax_reference(scores, axis=-1)
        return weights.T @ v

    r, shown = asked_twice("attention", attention_weights_T)
    assert r.mistake == "weights_transposed" and "weights @ v" in shown


@pytest.mark.parametrize("name", ["soft_lookup", "layers_needed", "softmax", "attention", "cross_attention",
                                  "dot_product_variance", "softmax_jacobian"])
def test_hint_leads_to_the_idea_without_handing_over_code(name):
    hint = EXERCISES[name].hint
    assert len(hint) > 60
    for code in ("return ", "np.", " = x.", "@ v", "keepdims=True", ".sum(", "exp(x - "):
        assert code not in hint, f"{name}: the hint contains {code!r}: {hint}"


def test_attention_divided_by_the_number_of_keys_is_named():
    def by_num_keys(q, k, v, mask=None):
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(k.shape[-2])
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        w = np.exp(s - s.max(-1, keepdims=True))
        return w / w.sum(-1, keepdims=True) @ v

    r = check("attention", by_num_keys)
    assert not r.passed and r.mistake == "scaled_by_num_keys" and "√S" in r.message


def test_cross_attention_with_w_k_and_w_v_swapped_is_named_although_it_mostly_raises():
    def swapped(x, y, w_q, w_k, w_v):
        return attention_reference(x @ w_q, y @ w_v, y @ w_k)

    r, shown = asked_twice("cross_attention", swapped)
    assert not r.passed and r.mistake == "projections_swapped" and "K = y @ w_k" in shown


def test_cross_attention_with_unprojected_values_is_named():
    def raw_values(x, y, w_q, w_k, w_v):
        return attention_reference(x @ w_q, y @ w_k, y)

    r, shown = asked_twice("cross_attention", raw_values)
    assert not r.passed and r.mistake == "values_not_projected" and "V = y @ w_v" in shown


# --------------------------------------------------------------------------- cases that vary per check (issue 20)

@pytest.mark.parametrize("name", ["softmax", "attention", "cross_attention"])
def test_catalogue_holds_on_every_draw_of_the_cases(name):
    """Each mistake differs from the reference, and is recognised as itself, on 20 draws."""
    problems = catalogue_problems(EXERCISES[name])
    assert not problems, problems[:5]


@pytest.mark.parametrize("seed", [1, 7, 123])
def test_references_match_torch_on_other_draws(seed):
    for c in EXERCISES["attention"].all_cases(seed):
        q, k, v = (torch.as_tensor(a) for a in c.args)
        mask = c.kwargs.get("mask")
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else torch.as_tensor(mask))
        np.testing.assert_allclose(attention_reference(*c.args, **c.kwargs), want.numpy(), rtol=1e-10, atol=1e-12)
    for c in EXERCISES["softmax"].all_cases(seed):
        want = torch.softmax(torch.as_tensor(c.args[0]), dim=c.kwargs.get("axis", -1))
        np.testing.assert_allclose(softmax_reference(*c.args, **c.kwargs), want.numpy(), rtol=1e-12, atol=1e-300)


def test_the_cases_change_from_one_check_to_the_next_but_keep_their_structure():
    a, b = EXERCISES["attention"].all_cases(1), EXERCISES["attention"].all_cases(2)
    assert [c.label for c in a] == [c.label for c in b]
    assert [np.shape(x) for c in a for x in c.args] == [np.shape(x) for c in b for x in c.args]
    assert not np.array_equal(a[0].args[0], b[0].args[0])


@pytest.mark.parametrize("seed", range(10))
def test_the_large_score_cases_overflow_a_naive_exp_on_every_draw(seed):
    for name in ("attention", "cross_attention"):
        big = [c for c in EXERCISES[name].all_cases(seed) if c.label.startswith("large scores")]
        assert big
        for c in big:
            with np.errstate(all="ignore"):
                naive = EXERCISES[name].mistake("softmax_overflow").fn(*c.args, **c.kwargs)
            assert np.isnan(naive).any(), (name, c.label)
    rows = [c for c in EXERCISES["softmax"].all_cases(seed) if "1000" in c.label]
    with np.errstate(all="ignore"):
        assert all(np.isnan(EXERCISES["softmax"].mistake("no_max_subtraction").fn(*c.args, **c.kwargs)).any()
                   for c in rows)


# --------------------------------------------------------------------------- whole-array operations (issue 20)

def attention_pair_loop(q, k, v, mask=None):
    """A loop over (query, key) pairs with vector dot products: correct, but 4 M Python steps."""
    q, k, v = (np.asarray(a, dtype=float) for a in (q, k, v))
    *batch, L, E = q.shape
    S = k.shape[-2]
    allowed = np.ones((*batch, L, S), bool) if mask is None else np.broadcast_to(mask, (*batch, L, S))
    scores = np.full((*batch, L, S), -np.inf)
    for b in np.ndindex(*batch):
        for i in range(L):
            for j in range(S):
                if allowed[b][i, j]:
                    scores[b][i, j] = q[b][i] @ k[b][j] / math.sqrt(E)
    return softmax_reference(scores) @ v


def test_a_doubly_nested_loop_is_too_slow_for_attention():
    r = check("attention", attention_pair_loop)
    assert r.status == "failed" and r.mistake == "python_loops", str(r)
    assert "query rows" in r.message  # the way out that is fine


def test_the_perf_case_is_millions_of_pairs():
    L, S = (EXERCISES["attention"].perf_case.args[i].shape[0] for i in (0, 1))
    assert L * S >= 4_000_000


# --------------------------------------------------------------------------- more wrong answers, written independently

def test_scores_used_as_weights_are_named():
    def no_softmax(q, k, v, mask=None):
        s = torch.as_tensor(q) @ torch.as_tensor(k).mT / q.shape[-1] ** 0.5
        return s @ torch.as_tensor(v)
    assert check("attention", no_softmax).mistake == "no_softmax"


def test_the_textbook_softmax_without_max_on_arrays_is_whole_array():
    r = check("softmax", lambda x, axis=-1: np.exp(x) / np.sum(np.exp(x)))
    assert r.mistake == "whole_array", r.message


def test_cross_attention_with_a_naive_softmax_is_named_on_large_scores():
    def naive(x, y, w_q, w_k, w_v):
        s = torch.as_tensor(x @ w_q) @ torch.as_tensor(y @ w_k).T / w_q.shape[1] ** 0.5
        e = s.exp()
        return (e / e.sum(-1, keepdim=True)) @ torch.as_tensor(y @ w_v)
    r = check("cross_attention", naive)
    assert r.mistake == "softmax_overflow", r.message


def attention_float32_torch(q, k, v, mask=None):
    return attention_torch_manual(*(torch.as_tensor(a, dtype=torch.float32) for a in (q, k, v)), mask)


@pytest.mark.parametrize("name,fn", [("attention", attention_float32_torch), ("softmax", softmax_float32_torch),
                                     ("cross_attention", cross_torch)])
def test_float32_answers_pass_on_every_draw(name, fn):
    assert not passes_every_seed(EXERCISES[name], fn, seeds=range(10))


def test_the_chapter_2_exercise_needs_no_mask():
    """Masks are taught in chapter 4: chapter 2's attention exercise neither asks for one nor
    passes one (issue 31); the mask mistakes are named by chapter 4's and 5's exercises."""
    ex = EXERCISES["attention"]
    assert "mask" not in ex.stub and "mask" not in ex.prompt
    assert all("mask" not in c.kwargs for seed in (0, 1, 2) for c in ex.all_cases(seed))
    assert not [m.key for m in ex.mistakes if "mask" in m.key]
