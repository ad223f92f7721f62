"""Chapter 5 exercises beyond the generic contract (tests/test_exercises_contract.py):
references agree with torch, and multi-head mistakes written independently, in torch,
are named too."""
import numpy as np
import pytest
import torch

from attnlib.exercises import EXERCISES, check

NAMES = ["split_heads", "head_scores", "multi_head_attention"]


def test_catalogues_cover_the_issue_mistakes():
    assert "reshape_without_transpose" in {m.key for m in EXERCISES["split_heads"].mistakes}
    keys = {m.key for m in EXERCISES["multi_head_attention"].mistakes}
    assert {"reshape_without_transpose", "scale_by_d_model", "forgot_w_o", "mask_after_softmax"} <= keys
    assert {"scale_by_d_model", "no_scale", "scale_by_num_heads"} <= {
        m.key for m in EXERCISES["head_scores"].mistakes}


@pytest.mark.parametrize("name", NAMES)
def test_hints_lead_to_the_idea_without_the_code(name):
    hint = EXERCISES[name].hint
    assert not any(code in hint for code in ("reshape(", "swapaxes", "@", "np.", "√d_head", "sqrt("))


# --- correct answers written in other ways pass ------------------------------------

def split_torch(x, num_heads):
    t = torch.as_tensor(x)
    return t.unflatten(-1, (num_heads, -1)).transpose(-2, -3)


def split_loop(x, num_heads):
    d_head = x.shape[-1] // num_heads
    return np.stack([x[..., k * d_head:(k + 1) * d_head] for k in range(num_heads)], axis=-3)


def mha_torch(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    x = torch.as_tensor(x)
    q, k, v = (split_torch(x @ torch.as_tensor(w), num_heads) for w in (w_q, w_k, w_v))
    m = None if mask is None else torch.as_tensor(mask)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)  # (..., h, n, d_head)
    return out.transpose(-2, -3).flatten(-2) @ torch.as_tensor(w_o)


def mha_loop_over_heads(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    d = x.shape[-1]
    dh = d // num_heads
    heads = []
    for k in range(num_heads):
        cols = slice(k * dh, (k + 1) * dh)
        q, kk, v = x @ w_q[:, cols], x @ w_k[:, cols], x @ w_v[:, cols]
        s = np.einsum("...ie,...je->...ij", q, kk) / np.sqrt(dh)
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        w = np.exp(s - s.max(-1, keepdims=True))
        heads.append((w / w.sum(-1, keepdims=True)) @ v)
    return np.concatenate(heads, axis=-1) @ w_o


def mha_loop_mask_after_softmax(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    d = x.shape[-1]
    dh = d // num_heads
    heads = []
    for k in range(num_heads):
        cols = slice(k * dh, (k + 1) * dh)
        q, kk, v = (torch.as_tensor(x @ w[:, cols]) for w in (w_q, w_k, w_v))
        w = torch.softmax(q @ kk.mT / dh ** 0.5, dim=-1)
        if mask is not None:
            w = w * torch.as_tensor(mask)  # zeroed after the softmax
        heads.append(w @ v)
    return torch.cat(heads, dim=-1) @ torch.as_tensor(w_o)


def scores_torch(x, w_q, w_k, num_heads):
    x = torch.as_tensor(x)
    q, k = (split_torch(x @ torch.as_tensor(w), num_heads) for w in (w_q, w_k))
    return q @ k.mT / (x.shape[-1] // num_heads) ** 0.5


def scores_einsum_loops(x, w_q, w_k, num_heads):
    dh = x.shape[-1] // num_heads
    out = [np.einsum("...ie,...je->...ij", x @ w_q[:, k * dh:(k + 1) * dh], x @ w_k[:, k * dh:(k + 1) * dh])
           for k in range(num_heads)]
    return np.stack(out, axis=-3) / np.sqrt(dh)


def mha_torch_float32(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    f32 = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731 - what a torch user writes
    return mha_torch(f32(x), f32(w_q), f32(w_k), f32(w_v), f32(w_o), num_heads, mask)


@pytest.mark.parametrize("name,fn", [("split_heads", split_torch), ("split_heads", split_loop),
                                     ("multi_head_attention", mha_torch),
                                     ("multi_head_attention", mha_torch_float32),
                                     ("multi_head_attention", mha_loop_over_heads),
                                     ("head_scores", scores_torch), ("head_scores", scores_einsum_loops)])
def test_equivalent_correct_answers_pass(name, fn):
    res = check(name, fn)
    assert res.passed, res.message


# --- mistakes written independently of the catalogue are still recognised ------------

def mha_torch_scaled_by_d_model(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    x = torch.as_tensor(x)
    q, k, v = (split_torch(x @ torch.as_tensor(w), num_heads) for w in (w_q, w_k, w_v))
    m = None if mask is None else torch.as_tensor(mask)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=x.shape[-1] ** -0.5)
    return out.transpose(-2, -3).flatten(-2) @ torch.as_tensor(w_o)


def mha_loop_without_w_o(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    return mha_loop_over_heads(x, w_q, w_k, w_v, np.eye(x.shape[-1]), num_heads, mask)


def mha_torch_view_only(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    x = torch.as_tensor(x)
    *b, n, d = x.shape
    q, k, v = ((x @ torch.as_tensor(w)).reshape(*b, num_heads, n, d // num_heads) for w in (w_q, w_k, w_v))
    m = None if mask is None else torch.as_tensor(mask)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
    return out.reshape(*b, n, d) @ torch.as_tensor(w_o)


def mha_loop_mask_inverted(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    return mha_loop_over_heads(x, w_q, w_k, w_v, w_o, num_heads, None if mask is None else ~mask)


def _loop_heads(x, w_q, w_k, w_v, w_o, num_heads, mask, *, transpose=False, add_mask=False):
    d_head = x.shape[-1] // num_heads
    heads = []
    for i in range(num_heads):
        c = slice(i * d_head, (i + 1) * d_head)
        q, k, v = x @ w_q[:, c], x @ w_k[:, c], x @ w_v[:, c]
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_head)
        if mask is not None:
            s = s + mask if add_mask else np.where(mask, s, -np.inf)
        e = np.exp(s - s.max(-1, keepdims=True))
        w = e / e.sum(-1, keepdims=True)
        heads.append((np.swapaxes(w, -1, -2) if transpose else w) @ v)
    return np.concatenate(heads, axis=-1) @ w_o


def mha_loop_zero_fill(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    d_head = x.shape[-1] // num_heads
    heads = []
    for i in range(num_heads):
        c = slice(i * d_head, (i + 1) * d_head)
        s = (x @ w_q[:, c]) @ np.swapaxes(x @ w_k[:, c], -1, -2) / np.sqrt(d_head)
        if mask is not None:
            s = s * mask                       # blocked scores become 0, not -inf
        heads.append(torch.softmax(torch.as_tensor(s), -1).numpy() @ (x @ w_v[:, c]))
    return np.concatenate(heads, axis=-1) @ w_o


def mha_torch_renormalised_after(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    xt = torch.as_tensor(x)
    q, k, v = (split_torch(xt @ torch.as_tensor(w), num_heads) for w in (w_q, w_k, w_v))
    w = torch.softmax(q @ k.mT / (x.shape[-1] // num_heads) ** 0.5, -1)
    if mask is not None:
        w = w * torch.as_tensor(mask)
        w = w / w.sum(-1, keepdim=True)        # 0 / 0 where every allowed weight underflowed
    return (w @ v).transpose(-2, -3).flatten(-2) @ torch.as_tensor(w_o)


def mha_loop_weights_transposed(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    return _loop_heads(x, w_q, w_k, w_v, w_o, num_heads, mask, transpose=True)


def mha_loop_bool_mask_added(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
    return _loop_heads(x, w_q, w_k, w_v, w_o, num_heads, mask, add_mask=True)


@pytest.mark.parametrize("name,fn,key", [
    ("split_heads", lambda x, h: torch.as_tensor(x).view(*x.shape[:-2], h, x.shape[-2], -1),
     "reshape_without_transpose"),
    ("split_heads", lambda x, h: torch.as_tensor(x).unflatten(-1, (h, -1)), "forgot_transpose"),
    ("split_heads", lambda x, h: torch.as_tensor(x).unflatten(-1, (h, -1)).transpose(0, 1), "hardcoded_axes"),
    ("multi_head_attention", mha_torch_scaled_by_d_model, "scale_by_d_model"),
    ("multi_head_attention", mha_loop_without_w_o, "forgot_w_o"),
    ("multi_head_attention", mha_torch_view_only, "reshape_without_transpose"),
    ("multi_head_attention", mha_loop_mask_inverted, "mask_inverted"),
    ("multi_head_attention", mha_loop_mask_after_softmax, "mask_after_softmax"),
    ("head_scores", lambda x, wq, wk, h: scores_torch(x, wq, wk, h) * (x.shape[-1] // h) ** 0.5
     / x.shape[-1] ** 0.5, "scale_by_d_model"),
    ("head_scores", lambda x, wq, wk, h: scores_torch(x, wq, wk, h) * (x.shape[-1] // h) ** 0.5, "no_scale"),
    ("head_scores", lambda x, wq, wk, h: scores_torch(x, wq, wk, h) * (x.shape[-1] // h) ** 0.5 / h ** 0.5,
     "scale_by_num_heads"),
    ("head_scores", lambda x, wq, wk, h: scores_torch(x, wq, wk, h).mT, "scores_transposed"),
    ("head_scores", lambda x, wq, wk, h: torch.softmax(scores_torch(x, wq, wk, h), -1), "returned_weights"),
    ("split_heads", lambda x, h: np.stack(np.split(x, h, axis=-1), axis=0), "hardcoded_axes"),
    ("multi_head_attention", mha_loop_weights_transposed, "weights_transposed"),
    ("multi_head_attention", mha_loop_bool_mask_added, "bool_mask_added"),
    ("multi_head_attention", mha_loop_zero_fill, "mask_zero_fill"),
    ("multi_head_attention", mha_torch_renormalised_after, "renormalised_after_softmax"),
])
def test_independently_written_mistakes_are_recognised(name, fn, key):
    res = check(name, fn)
    assert res.mistake == key, res.message


# --- the reference agrees with torch.nn.MultiheadAttention ---------------------------

@pytest.mark.parametrize("n,d_model,h,causal", [(1, 8, 2, False), (7, 12, 3, True), (97, 16, 4, False),
                                                (5, 8, 8, True), (6, 6, 1, False)])
def test_reference_matches_nn_multihead_attention(n, d_model, h, causal):
    rng = np.random.default_rng(n + d_model + h)
    x = rng.standard_normal((2, n, d_model))
    w_q, w_k, w_v, w_o = (rng.standard_normal((d_model, d_model)) / np.sqrt(d_model) for _ in range(4))
    mask = np.tril(np.ones((n, n), dtype=bool)) if causal else None
    ours = EXERCISES["multi_head_attention"].reference(x, w_q, w_k, w_v, w_o, h, mask)

    mha = torch.nn.MultiheadAttention(d_model, h, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.as_tensor(np.concatenate([w_q.T, w_k.T, w_v.T])))  # torch uses x @ W.T
        mha.out_proj.weight.copy_(torch.as_tensor(w_o.T))
        xt = torch.as_tensor(x)
        blocked = None if mask is None else torch.as_tensor(~mask)  # nn.MultiheadAttention: True = blocked
        theirs, _ = mha(xt, xt, xt, attn_mask=blocked, need_weights=False)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape,h", [((5, 8), 2), ((2, 3, 12), 3), ((4, 1, 6), 6)])
def test_split_reference_matches_torch_view_and_transpose(shape, h):
    x = np.random.default_rng(0).standard_normal(shape)
    ref = EXERCISES["split_heads"].reference(x, h)
    t = torch.as_tensor(x)
    np.testing.assert_array_equal(ref, t.view(*shape[:-1], h, shape[-1] // h).transpose(-2, -3).numpy())


def test_head_scores_reference_has_unit_variance_at_every_head_width():
    """The claim the exercise asks for, measured: unit-variance q, k components give scores of
    variance ~1 whatever d_model and the number of heads."""
    rng = np.random.default_rng(3)
    for d_model, h in [(64, 1), (64, 8), (96, 3)]:
        x = rng.standard_normal((400, d_model))
        eye = np.eye(d_model)  # q = k = x: independent unit-variance components
        scores = EXERCISES["head_scores"].reference(x, eye, eye, h)  # (h, 400, 400)
        off = scores[..., :200, 200:]  # queries 0..199 against keys 200..399: independent
        assert abs(off.var() - 1) < 0.1, (d_model, h, off.var())


# --- cases that vary per check, new mistakes, the ladder (issue 20) ------------------------

from exercise_catalogue import asked_twice, catalogue_problems, passes_every_seed  # noqa: E402


@pytest.mark.parametrize("name", NAMES)
def test_catalogue_holds_on_every_draw_of_the_cases(name):
    problems = catalogue_problems(EXERCISES[name])
    assert not problems, problems[:5]


def test_interleaved_heads_are_named_in_both_exercises():
    def scores_interleaved(x, w_q, w_k, num_heads):
        def split(t):
            return np.moveaxis(t.reshape(*t.shape[:-1], -1, num_heads), -1, -3)   # column c -> head c % h
        return split(x @ w_q) @ np.swapaxes(split(x @ w_k), -1, -2) / np.sqrt(x.shape[-1] // num_heads)

    r, shown = asked_twice("head_scores", scores_interleaved)
    assert r.mistake == "interleaved_columns" and "(..., n, h, d_head)" in shown


def test_a_naive_softmax_in_multi_head_attention_is_named_on_the_large_score_case():
    def naive(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
        d_head = x.shape[-1] // num_heads
        q, k, v = (split_loop(x @ w, num_heads) for w in (w_q, w_k, w_v))
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_head)
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        e = np.exp(s)
        heads = e / e.sum(-1, keepdims=True) @ v
        return np.concatenate(list(np.moveaxis(heads, -3, 0)), axis=-1) @ w_o

    assert check("multi_head_attention", naive).mistake == "softmax_overflow"


def test_split_heads_is_exact_and_float32_answers_pass_the_other_two():
    assert EXERCISES["split_heads"].rtol == EXERCISES["split_heads"].atol == 0.0
    assert not passes_every_seed(EXERCISES["multi_head_attention"], mha_torch_float32, seeds=range(10))

    def scores_f32(x, w_q, w_k, num_heads):
        return scores_torch(*(torch.as_tensor(a, dtype=torch.float32) for a in (x, w_q, w_k)), num_heads)
    assert not passes_every_seed(EXERCISES["head_scores"], scores_f32, seeds=range(10))
