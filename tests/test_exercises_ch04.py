"""Chapter 4 exercises beyond the generic contract (tests/test_exercises_contract.py):
correct answers in other styles pass, mistakes written independently (in torch, with
loops) are named, and the references agree with attnlib and with torch."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib as al
from attnlib.exercises import EXERCISES, check


def test_catalogue_covers_the_issue_mistakes():
    assert {"mask_after_softmax", "renormalised_after_softmax", "minus_inf_without_guard", "finite_fill",
            "true_means_blocked"} <= {m.key for m in EXERCISES["masked_softmax"].mistakes}
    assert {"documents_leak", "forgot_causal", "padding_is_a_document"} <= {
        m.key for m in EXERCISES["packed_causal_mask"].mistakes}


# --- masked_softmax: correct answers written in other ways pass ------------------------

def ms_torch_nan_to_num(scores, mask):
    s, m = torch.as_tensor(scores), torch.as_tensor(mask)
    w = torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1)
    return torch.nan_to_num(w, nan=0.0)  # an empty row: NaN -> 0


def ms_float32(scores, mask):
    return ms_torch_nan_to_num(torch.as_tensor(scores, dtype=torch.float32), mask)


def ms_where_any(scores, mask):
    s, m = np.broadcast_arrays(np.asarray(scores, float), np.asarray(mask, bool))
    safe = np.where(m.any(-1, keepdims=True), np.where(m, s, -np.inf), 0.0)  # empty rows: all 0
    e = np.exp(safe - safe.max(-1, keepdims=True)) * m
    return e / np.maximum(e.sum(-1, keepdims=True), 1e-300)


def ms_loops(scores, mask):
    s, m = np.broadcast_arrays(np.asarray(scores, float), np.asarray(mask, bool))
    out = np.zeros(s.shape)
    for idx in np.ndindex(*s.shape[:-1]):
        allowed = [j for j in range(s.shape[-1]) if m[idx + (j,)]]
        if not allowed:
            continue
        top = max(s[idx + (j,)] for j in allowed)
        e = {j: np.exp(s[idx + (j,)] - top) for j in allowed}
        total = sum(e.values())
        for j in allowed:
            out[idx + (j,)] = e[j] / total
    return out


def ms_sdpa_identity(scores, mask):  # outside reference: torch's SDPA with q = scores, k = v = I
    s, m = np.broadcast_arrays(np.asarray(scores, float), np.asarray(mask, bool))
    eye = torch.eye(s.shape[-1], dtype=torch.float64)
    return F.scaled_dot_product_attention(torch.tensor(s), eye, eye, attn_mask=torch.tensor(m), scale=1.0)


@pytest.mark.parametrize("fn", [ms_torch_nan_to_num, ms_float32, ms_where_any, ms_loops],
                         ids=lambda f: f.__name__)
def test_masked_softmax_equivalent_answers_pass(fn):
    res = check("masked_softmax", fn)
    assert res.passed, res.message


# --- masked_softmax: mistakes written independently are recognised --------------------

def t(a):
    return torch.as_tensor(np.asarray(a))


def ms_global_max_loops(scores, mask):  # one maximum over every allowed score of the array
    s, m = np.broadcast_arrays(np.asarray(scores, float), np.asarray(mask, bool))
    allowed = [v for v, ok in zip(s.ravel(), m.ravel()) if ok]
    top = max(allowed, default=0.0)
    out = np.zeros(s.shape)
    for idx in np.ndindex(*s.shape[:-1]):
        e = [np.exp(v - top) if ok else 0.0 for v, ok in zip(s[idx], m[idx])]
        total = sum(e)
        out[idx] = [x / total if total > 0 else 0.0 for x in e]
    return out


@pytest.mark.parametrize("fn,key", [
    (lambda s, m: torch.softmax(t(s), -1) * t(m), "mask_after_softmax"),
    (lambda s, m: (lambda w: w / w.sum(-1, keepdim=True))(torch.softmax(t(s), -1) * t(m)),
     "renormalised_after_softmax"),
    (lambda s, m: torch.softmax(t(s).masked_fill(~t(m), float("-inf")), -1), "minus_inf_without_guard"),
    (lambda s, m: torch.softmax(t(s).masked_fill(~t(m), -1e9), -1), "finite_fill"),
    (lambda s, m: torch.softmax(torch.where(t(m), t(s), torch.finfo(torch.float64).min), -1), "finite_fill"),
    (lambda s, m: ms_torch_nan_to_num(s, ~t(m)), "true_means_blocked"),
    (lambda s, m: torch.softmax(t(s) * t(m), -1), "zero_fill"),
    # exp of every score times the mask: a blocked exp(800) = inf times 0 is NaN (issue 20: it was
    # reported as "no max subtraction", whose message does not name the 0 x inf)
    (lambda s, m: (lambda e: e / e.sum(-1, keepdim=True))(torch.exp(t(s)) * t(m)), "exp_times_mask"),
    (lambda s, m: (lambda e: e / torch.where(e.sum(-1, keepdim=True) > 0, e.sum(-1, keepdim=True), 1.0))(
        torch.exp(t(s).masked_fill(~t(m), float("-inf")))), "no_max_subtraction"),
    (lambda s, m: ms_torch_nan_to_num(t(s).expand(torch.broadcast_shapes(t(s).shape, t(m).shape)).mT,
                                      t(m).expand(torch.broadcast_shapes(t(s).shape, t(m).shape)).mT).mT,
     "softmax_over_queries"),
    (lambda s, m: (lambda w: w / torch.clamp(w.sum(-1, keepdim=True), min=1e-12))(torch.softmax(t(s), -1) * t(m)),
     "max_includes_blocked"),
    (lambda s, m: (lambda e: e / torch.where(e.sum(-1, keepdim=True) > 0, e.sum(-1, keepdim=True), 1.0))(
        torch.exp(t(s) - t(s).amax(-1, keepdim=True)) * t(m)), "max_includes_blocked"),
    (lambda s, m: ms_global_max_loops(s, m), "global_max"),
], ids=["after", "renorm", "inf", "1e9", "finfo_min", "inverted", "times_mask", "exp_times_mask", "exp_overflow",
        "axis",
        "renorm_clamped", "max_over_all_keys", "global_max"])
def test_masked_softmax_mistakes_written_in_torch_are_named(fn, key):
    res = check("masked_softmax", fn)
    assert res.mistake == key, res.message


def test_masked_softmax_messages_name_the_fix():
    ex = EXERCISES["masked_softmax"]
    assert "before the softmax" in ex.mistake("mask_after_softmax").message
    assert "zeros" in ex.mistake("minus_inf_without_guard").message
    assert "uniform" in ex.mistake("finite_fill").message
    assert "allowed scores only" in ex.mistake("max_includes_blocked").message
    assert "0 × ∞" in ex.hint  # an all-NaN answer (multiplying -inf by the mask) is told where to look
    assert "own" in ex.mistake("global_max").message


def test_masked_softmax_cases_separate_row_max_from_global_max():
    """A case whose rows differ in size by ~1000: only a per-row maximum keeps both rows."""
    ex = EXERCISES["masked_softmax"]
    assert any(np.ptp(np.asarray(c.args[0], float).max(-1)) > 500 for c in ex.all_cases())


def test_masked_softmax_hint_does_not_hand_over_the_code():
    hint = EXERCISES["masked_softmax"].hint
    assert "np.where" not in hint and "-np.inf" not in hint and "def " not in hint


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("i", range(8))
def test_masked_softmax_reference_matches_attnlib_and_torch_sdpa(i, seed):
    case = EXERCISES["masked_softmax"].all_cases(seed)[i]
    ref = EXERCISES["masked_softmax"].reference(*case.args)
    np.testing.assert_allclose(ref, al.masked_softmax(*case.args), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ref, ms_sdpa_identity(*case.args).numpy(), rtol=1e-12, atol=1e-15)


def test_masked_softmax_cases_contain_the_traps():
    """The cases must separate the mistakes: an empty row and a dominant blocked score."""
    cases = EXERCISES["masked_softmax"].all_cases()
    empty = [c for c in cases if not np.broadcast_to(c.args[1], np.broadcast_shapes(
        np.shape(c.args[0]), np.shape(c.args[1]))).any(-1).all()]
    dominant = [c for c in cases if (np.where(c.args[1], -np.inf, c.args[0]).max() > 100)]
    assert len(empty) >= 2 and dominant


# --- packed_causal_mask -------------------------------------------------------------

def packed_torch(doc_ids):
    d = torch.as_tensor(doc_ids)
    n = d.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return causal & (d.unsqueeze(-1) == d.unsqueeze(-2)) & (d >= 0).unsqueeze(-2)


def packed_loops(doc_ids):
    d = np.asarray(doc_ids)
    out = np.zeros(d.shape + d.shape[-1:], dtype=bool)
    for idx in np.ndindex(*d.shape[:-1]):
        row = d[idx]
        for i in range(len(row)):
            for j in range(i + 1):
                out[idx + (i, j)] = row[j] >= 0 and row[j] == row[i]
    return out


def packed_from_attnlib_masks(doc_ids):
    d = np.asarray(doc_ids)
    same = d[..., :, None] == d[..., None, :]
    return al.causal_mask(d.shape[-1]) & same & (d >= 0)[..., None, :]


@pytest.mark.parametrize("fn", [packed_torch, packed_loops, packed_from_attnlib_masks], ids=lambda f: f.__name__)
def test_packed_equivalent_answers_pass(fn):
    res = check("packed_causal_mask", fn)
    assert res.passed, res.message


@pytest.mark.parametrize("fn,key", [
    (lambda d: torch.ones(len(d[-1]) if np.ndim(d) > 1 else len(d), len(d[-1]) if np.ndim(d) > 1 else len(d),
                          dtype=torch.bool).tril() & (torch.as_tensor(d) >= 0).unsqueeze(-2), "documents_leak"),
    (lambda d: (torch.as_tensor(d).unsqueeze(-1) == torch.as_tensor(d).unsqueeze(-2))
     & (torch.as_tensor(d) >= 0).unsqueeze(-2), "forgot_causal"),
    (lambda d: torch.ones(np.shape(d)[-1], np.shape(d)[-1], dtype=torch.bool).tril()
     & (torch.as_tensor(d).unsqueeze(-1) == torch.as_tensor(d).unsqueeze(-2)), "padding_is_a_document"),
    (lambda d: ~packed_torch(d), "true_means_blocked"),
    (lambda d: torch.ones(np.shape(d)[-1], np.shape(d)[-1], dtype=torch.bool).tril().expand(
        *np.shape(d)[:-1], np.shape(d)[-1], np.shape(d)[-1]), "causal_only"),
    (lambda d: packed_torch(d) & ~torch.eye(np.shape(d)[-1], dtype=torch.bool), "diagonal_blocked"),
], ids=["leak", "no_causal", "pad_doc", "inverted", "causal_only", "strict_j_lt_i"])
def test_packed_mistakes_written_in_torch_are_named(fn, key):
    res = check("packed_causal_mask", fn)
    assert res.mistake == key, res.message


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.integers(0, 3))
def test_packed_reference_is_each_document_alone(doc_lengths, n_pad):
    """Attention with the packed mask equals attending to each document on its own."""
    ids = np.concatenate([np.full(L, i) for i, L in enumerate(doc_lengths)] + [np.full(n_pad, -1)])
    mask = EXERCISES["packed_causal_mask"].reference(ids)
    rng = np.random.default_rng(len(ids))
    q, k, v = (rng.standard_normal((len(ids), 3)) for _ in range(3))
    out = al.scaled_dot_product_attention(q, k, v, mask)
    start = 0
    for L in doc_lengths:
        s = slice(start, start + L)
        alone = al.scaled_dot_product_attention(q[s], k[s], v[s], is_causal=True)
        np.testing.assert_allclose(out[s], alone, rtol=1e-12, atol=1e-12)
        start += L
    assert np.all(out[start:] == 0)  # padding queries attend to nothing


# --- cases that vary per check, new mistakes, the ladder (issue 20) ------------------------

from exercise_catalogue import asked_twice, catalogue_problems, passes_every_seed  # noqa: E402


@pytest.mark.parametrize("name", ["masked_softmax", "packed_causal_mask"])
def test_catalogue_holds_on_every_draw_of_the_cases(name):
    problems = catalogue_problems(EXERCISES[name])
    assert not problems, problems[:5]


@pytest.mark.parametrize("seed", range(10))
def test_every_draw_has_the_traps(seed):
    cases = EXERCISES["masked_softmax"].all_cases(seed)
    shapes = [np.broadcast_shapes(np.shape(c.args[0]), np.shape(c.args[1])) for c in cases]
    masks = [np.broadcast_to(c.args[1], sh) for c, sh in zip(cases, shapes)]
    assert sum(not m.any(-1).all() for m in masks) >= 3                    # rows with nothing allowed
    assert any(np.where(m, -np.inf, c.args[0]).max() > 700 for c, m in zip(cases, masks))  # exp(blocked) = inf
    assert any(np.where(m, c.args[0], -np.inf).max() > 700 for c, m in zip(cases, masks))  # exp(allowed) = inf
    # a fully masked row and large scores in one case
    assert any((~m).all(-1).any() and np.abs(c.args[0]).max() > 700 for c, m in zip(cases, masks))


def test_exp_of_the_scores_times_the_mask_is_told_about_zero_times_infinity():
    def exp_times_mask(scores, mask):
        top = np.where(mask, scores, -1e9).max(-1, keepdims=True)
        e = np.exp(scores - top) * mask            # a blocked exp(800) = inf, times 0
        return e / e.sum(-1, keepdims=True)
    r, shown = asked_twice("masked_softmax", exp_times_mask)
    assert r.mistake == "exp_times_mask" and "0 × ∞" in r.message
    assert "np.exp(scores) * mask" in shown


def test_the_nan_messages_list_zero_times_infinity():
    ex = EXERCISES["masked_softmax"]
    assert "0 × ∞" in ex.mistake("minus_inf_without_guard").message
    assert "0 × ∞" in ex.mistake("exp_times_mask").message


def test_minus_1e9_then_zeroing_the_blocked_weights_is_correct():
    def fill_then_zero(scores, mask):
        s = np.where(mask, scores, -1e9)
        e = np.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True) * mask  # an empty row: uniform, then zeroed
    assert check("masked_softmax", fill_then_zero).passed


def packed_one_row(doc_ids):  # n = len(doc_ids) and axes from the front: breaks on a batch
    d = np.asarray(doc_ids)
    n = len(d)
    causal = np.tril(np.ones((n, n), dtype=bool))
    return causal & (d[:, None] == d[None, :]) & (d[None, :] >= 0)


def test_a_packed_mask_for_one_row_only_is_named():
    r, shown = asked_twice("packed_causal_mask", packed_one_row)
    assert r.mistake == "one_row_only" and "shape[-1]" in shown


def test_packed_loops_pass_on_every_draw():
    assert not passes_every_seed(EXERCISES["packed_causal_mask"], packed_loops, seeds=range(10))
    assert not passes_every_seed(EXERCISES["masked_softmax"], ms_float32, seeds=range(10))


def test_attention_with_identity_keys_is_refused_as_the_library_answer():
    res = check("masked_softmax", ms_sdpa_identity)
    assert res.mistake == "library_shortcut", res.message
