"""Bad input, the same answer on every path (issue 23).

Every public function that takes q, k, v, and the other public entry points, must refuse the
same bad input with a ValueError or TypeError whose message names the argument (and, for an
array, the shape seen), identically for NumPy and torch inputs, and never return NaN. Inputs
that have a defined answer (empty dims, a 1-D mask, ``is_causal=np.True_``) get the same
answer from NumPy and torch. One table of paths, one table of cases: a new function is added
to ``PATHS`` or ``OTHER_CASES`` and is then held to every rule here.
"""
import re

import numpy as np
import pytest
import torch

import attnlib as al
from attnlib.instruments import inference
from attnlib.models import transformer
from attnlib.models import GPT, GPTConfig
from conftest import to_np

L, S, E = 5, 6, 4


def _eye(q):
    return np.eye(q.shape[-1]) if isinstance(q, np.ndarray) else torch.eye(q.shape[-1], dtype=q.dtype)


def _mha(q, k, v, mask, causal):
    eye = _eye(q)
    return al.multi_head_attention(q, k, v, 1, eye, eye, eye, eye, attn_mask=mask, is_causal=causal)


# name -> (call(q, k, v, mask, is_causal), takes a mask, names of q, k, v in its messages)
QKV = ("q", "k", "v")
PATHS = {
    "sdpa": (lambda q, k, v, m, c: al.scaled_dot_product_attention(q, k, v, m, is_causal=c), True, QKV),
    "sdpa_weights": (lambda q, k, v, m, c: al.scaled_dot_product_attention(q, k, v, m, is_causal=c,
                                                                          return_weights=True)[0], True, QKV),
    "flash": (lambda q, k, v, m, c: al.flash_attention(q, k, v, m, is_causal=c, block_size=2), True, QKV),
    "mha": (_mha, True, ("query", "key", "value")),
    "sliding_window": (lambda q, k, v, m, c: al.sliding_window_attention(q, k, v, window=1, is_causal=c,
                                                                        block_size=2), False, QKV),
    "linear": (lambda q, k, v, m, c: al.linear_attention(q, k, v, is_causal=c, chunk_size=2), False, QKV),
    "random_features": (lambda q, k, v, m, c: al.random_feature_attention(q, k, v, 16, is_causal=c,
                                                                         chunk_size=2), False, QKV),
    "ring": (lambda q, k, v, m, c: al.ring_attention_simulated(q, k, v, 2, is_causal=c), False, QKV),
    "attention_state": (lambda q, k, v, m, c: al.attention_state(q, k, v)[2], False, QKV),
}
CAUSAL_PATHS = [p for p in PATHS if p != "attention_state"]
MASK_PATHS = [p for p in PATHS if PATHS[p][1]]


def _as(lib, x):
    if x is None or lib == "numpy":
        return x
    return torch.from_numpy(np.ascontiguousarray(x))


def run(path, lib, q, k, v, mask=None, is_causal=False):
    fn, takes_mask, _ = PATHS[path]
    return fn(_as(lib, q), _as(lib, k), _as(lib, v), _as(lib, mask) if takes_mask else None, is_causal)


def outcome(fn):
    """``("raised", type, message)`` or ``("returned", float64 array)``."""
    try:
        out = fn()
    except (ValueError, TypeError) as err:
        return "raised", type(err), str(err)
    return "returned", to_np(out).astype(np.float64)


def positive_qkv(seed=0):
    """q and k with positive entries, so that an infinite entry makes scores of one sign."""
    rng = np.random.default_rng(seed)
    q = np.abs(rng.standard_normal((2, L, E))) + 0.1
    k = np.abs(rng.standard_normal((2, S, E))) + 0.1
    v = rng.standard_normal((2, S, E))
    return q, k, v


def _bad(case):
    """q, k, v, mask with one bad entry; returns them and the index (0, 1, 2) of the bad one."""
    q, k, v = positive_qkv()
    mask = None
    if case == "minus_inf_in_a_key":  # every score of key 2 is exactly -inf: it used to be dropped
        k[0, 2, 0] = -np.inf
        return q, k, v, mask, 1
    if case == "minus_inf_in_a_query_with_an_all_true_mask":  # its scores are all -inf: a zero row on torch
        q[1, 3, 0] = -np.inf
        return q, k, v, np.ones((L, S), bool), 0
    if case == "plus_inf_in_a_query":
        q[1, 0, 2] = np.inf
        return q, k, v, mask, 0
    if case == "nan_in_a_key":
        k[1, 1, 1] = np.nan
        return q, k, v, mask, 1
    if case == "nan_in_a_value":
        v[0, 5, 3] = np.nan
        return q, k, v, mask, 2
    if case == "minus_inf_in_a_value":
        v[1, 0, 0] = -np.inf
        return q, k, v, mask, 2
    raise AssertionError(case)


BAD_CASES = ["minus_inf_in_a_key", "minus_inf_in_a_query_with_an_all_true_mask", "plus_inf_in_a_query",
             "nan_in_a_key", "nan_in_a_value", "minus_inf_in_a_value"]


@pytest.mark.parametrize("case", BAD_CASES)
@pytest.mark.parametrize("path", list(PATHS))
def test_nan_and_inf_are_refused_on_every_path_naming_the_argument(path, case):
    q, k, v, mask, bad = _bad(case)
    name = PATHS[path][2][bad]
    seen = {}
    for lib in ("numpy", "torch"):
        with pytest.raises(ValueError) as info:
            run(path, lib, q, k, v, mask)
        seen[lib] = msg = str(info.value)
        shape = (q, k, v)[bad].shape
        assert msg.startswith(f"{name} holds 1 non-finite value(s)"), msg
        assert f"shape {shape}" in msg and "index" in msg, msg
    assert seen["numpy"] == seen["torch"]


@pytest.mark.parametrize("path", ["sdpa", "sdpa_weights", "flash"])
@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_a_key_with_a_minus_inf_component_is_not_silently_dropped(path, lib):
    """The case of the issue: every score of that key is exactly -inf, so the output was
    finite and equal to attention without the key."""
    q, k, v, _, _ = _bad("minus_inf_in_a_key")
    dropped = run(path, "numpy", q[:1], k[:1, [0, 1, 3, 4, 5]], v[:1, [0, 1, 3, 4, 5]])
    assert np.isfinite(to_np(dropped)).all()  # what used to be returned
    with pytest.raises(ValueError, match=r"^k holds 1 non-finite value\(s\) \(-inf at index \(0, 2, 0\)"):
        run(path, lib, q, k, v)


@pytest.mark.parametrize("dtype", ["complex128", "complex64", "int64", "bool"])
@pytest.mark.parametrize("bad", [0, 1, 2])
def test_a_dtype_that_is_not_real_floating_is_refused_on_every_path_naming_the_argument(bad, dtype):
    """complex128 q, k, v on torch's fast path raised ``TypeError: must be real number, not
    complex`` (issue 27): every path now gives attnlib's one message for each library,
    naming the argument and its dtype; NumPy's and torch's differ only in the fix they show."""
    qkv = list(positive_qkv())
    qkv[bad] = qkv[bad].astype(dtype)
    for lib in ("numpy", "torch"):
        seen = {}
        for path in PATHS:
            with pytest.raises(TypeError) as info:
                run(path, lib, *qkv)
            seen[path] = str(info.value)
        for path, msg in seen.items():
            name = PATHS[path][2][bad]
            assert msg.startswith(f"{name} has dtype {'torch.' if lib == 'torch' else ''}{dtype}, but attention "
                                  "needs real floating-point inputs; convert it first"), (path, msg)
        assert len({re.sub(rf"\b{PATHS[p][2][bad]}\b", "ARG", m) for p, m in seen.items()}) == 1, seen


@pytest.mark.parametrize("dim", ["E", "S", "L"])
@pytest.mark.parametrize("path", list(PATHS))
def test_empty_inputs_get_the_same_answer_or_error_on_numpy_and_torch(path, dim):
    shapes = {"E": ((2, L, 0), (2, S, 0), (2, S, 3)), "S": ((2, L, E), (2, 0, E), (2, 0, 3)),
              "L": ((2, 0, E), (2, S, E), (2, S, 3))}[dim]
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s) for s in shapes)
    if path == "mha":  # identity weights need d_model = d_k = d_v
        q, k, v = (rng.standard_normal(s[:-1] + (s[-1] if dim == "E" else E,)) for s in shapes)
        if dim == "E":
            v = rng.standard_normal((2, S, 0))
    got = {lib: outcome(lambda: run(path, lib, q, k, v)) for lib in ("numpy", "torch")}
    if got["numpy"][0] == "raised":
        assert got["torch"][:2] == got["numpy"][:2], got
        assert got["torch"][2] == got["numpy"][2], got
        assert f"{dim} = 0" in got["numpy"][2], got  # the message says what is empty
    else:
        assert got["torch"][0] == "returned", got
        np.testing.assert_allclose(got["torch"][1], got["numpy"][1], atol=1e-12)
        assert np.isfinite(got["numpy"][1]).all()


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("path", CAUSAL_PATHS)
def test_a_numpy_bool_is_causal_is_accepted_everywhere(path, lib):
    q, k, v = positive_qkv()
    np.testing.assert_array_equal(to_np(run(path, lib, q, k, v, is_causal=np.True_)),
                                  to_np(run(path, lib, q, k, v, is_causal=True)))


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("path", MASK_PATHS)
@pytest.mark.parametrize("ndim", [1, 0])
def test_a_mask_with_fewer_dims_broadcasts_on_every_path(path, lib, ndim):
    """A (S,) bool mask (the same keys hidden from every query) with 4-D inputs: torch's fused
    kernel raised IndexError, multi_head_attention AxisError / IndexError."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 3, n, E)) for n in (L, S, S))
    if path == "mha":
        q, k, v = q[0], k[0], v[0]  # (N, L, d_model)
    keep = rng.random(S) > 0.4 if ndim == 1 else np.array(True)
    full = np.broadcast_to(keep, (L, S)).copy()
    np.testing.assert_allclose(to_np(run(path, lib, q, k, v, keep)), to_np(run(path, lib, q, k, v, full)),
                               atol=1e-12)


# ---- the other public entry points -------------------------------------------------------
def _model():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=8, context_length=16, num_layers=1, num_heads=2, d_model=8))


def _x4(lib):
    return _as(lib, np.random.default_rng(3).standard_normal((2, 2, L, E)))


def _nan_at(shape, where):
    x = np.random.default_rng(4).standard_normal(shape)
    x[where] = np.nan
    return x


# id -> (call(lib), libraries, exception, the argument the message must name, words it must contain)
BOTH, TORCH = ("numpy", "torch"), ("torch",)
OTHER_CASES = {
    "softmax_nan": (lambda lib: al.softmax(_as(lib, np.array([1.0, np.nan]))), BOTH, ValueError, "x", ["(2,)"]),
    "softmax_plus_inf": (lambda lib: al.softmax(_as(lib, np.array([[0.0, np.inf]]))), BOTH, ValueError, "x",
                         ["(1, 2)"]),
    "masked_softmax_nan_visible": (lambda lib: al.masked_softmax(_as(lib, np.array([[np.nan, 1.0]])),
                                                                 _as(lib, np.array([[True, True]]))),
                                   BOTH, ValueError, "scores", ["(1, 2)"]),
    "rope_nan_position": (lambda lib: al.apply_rope(_x4(lib), _as(lib, np.array([0, 1, np.nan, 3, 4]))),
                          BOTH, ValueError, "positions", ["(5,)", "finite"]),
    "rope_inf_position": (lambda lib: al.apply_rope(_x4(lib), _as(lib, np.array([0, 1, 2, 3, np.inf]))),
                          BOTH, ValueError, "positions", ["(5,)", "finite"]),
    "rope_base_inf": (lambda lib: al.apply_rope(_x4(lib), base=float("inf")), BOTH, ValueError, "base",
                      ["finite", "inf"]),
    "rope_base_nan": (lambda lib: al.apply_rope(_x4(lib), base=float("nan")), BOTH, ValueError, "base", ["nan"]),
    "rope_base_zero": (lambda lib: al.apply_rope(_x4(lib), base=0), BOTH, ValueError, "base", ["positive"]),
    "rope_base_negative": (lambda lib: al.apply_rope(_x4(lib), base=-2.0), BOTH, ValueError, "base",
                           ["positive"]),
    "rope_positions_per_sequence_with_heads": (  # (N, L) with x (N, h, L, d) and N == h: lined up with h
        lambda lib: al.apply_rope(_x4(lib), _as(lib, np.arange(2 * L).reshape(2, L))), BOTH, ValueError,
        "positions", ["(2, 5)", "(2, 2, 5, 4)", "(2, 1, 5)"]),
    "rope_nan_x": (lambda lib: al.apply_rope(_as(lib, _nan_at((3, 4), (1, 2)))), BOTH, ValueError, "x", ["(3, 4)"]),
    "merge_nan_state": (lambda lib: al.online_softmax_merge(
        *(_as(lib, a) for a in (np.array([np.nan]), np.ones(1), np.ones((1, 2)), np.zeros(1), np.ones(1),
                                np.ones((1, 2))))), BOTH, ValueError, "m1", ["(1,)"]),
    "elu_feature_map_nan": (lambda lib: al.elu_feature_map(_as(lib, _nan_at((3, 4), (0, 0)))), BOTH, ValueError,
                            "x", ["(3, 4)"]),
    "performer_feature_map_nan": (lambda lib: al.performer_feature_map(
        _as(lib, _nan_at((3, 4), (2, 1))), _as(lib, al.random_projection(8, 4))), BOTH, ValueError, "x", ["(3, 4)"]),
    "layer_norm_nan": (lambda lib: transformer.layer_norm(_as(lib, _nan_at((3, 4), (1, 1)))), BOTH, ValueError,
                       "x", ["(3, 4)"]),
    "feed_forward_nan": (lambda lib: transformer.feed_forward(_as(lib, _nan_at((3, 4), (1, 1))), np.eye(4),
                                                              np.zeros(4), np.eye(4), np.zeros(4)),
                         BOTH, ValueError, "x", ["(3, 4)"]),
    "shard_bounds_no_device": (lambda lib: al.shard_bounds(10, 0), BOTH, ValueError, "P", [">= 1"]),
    "model_token_minus_1": (lambda lib: _model()(torch.tensor([[1, -1]])), TORCH, ValueError, "idx",
                            ["-1", "[0, 7]", "(1, 2)"]),
    "model_token_vocab_size": (lambda lib: _model()(torch.tensor([[1, 8]])), TORCH, ValueError, "idx",
                               ["8", "[0, 7]", "(1, 2)"]),
    "extend_token_minus_1": (lambda lib: inference.extend(_model(), torch.tensor([[1, -1]]), inference.KVCache()),
                             TORCH, ValueError, "tokens", ["-1", "[0, 7]", "(1, 2)"]),
    "prefill_token_vocab_size": (lambda lib: inference.prefill(_model(), torch.tensor([[8]]), inference.KVCache()),
                                 TORCH, ValueError, "prompt", ["8", "[0, 7]", "(1, 1)"]),
    "generate_token_minus_1": (lambda lib: inference.generate(_model(), torch.tensor([[-1, 2]]), 2), TORCH,
                               ValueError, "prompt", ["-1", "[0, 7]", "(1, 2)"]),
    "prefill_empty_prompt": (lambda lib: inference.prefill(_model(), torch.zeros(1, 0, dtype=torch.long),
                                                           inference.KVCache()),
                             TORCH, ValueError, "prompt", ["is empty", "(1, 0)"]),
    "kv_cache_bytes_dtype_inf": (lambda lib: inference.kv_cache_bytes(2, 2, 2, dtype=float("inf")), TORCH,
                                 ValueError, "dtype", ["inf", "finite"]),
    "kv_cache_bytes_dtype_nan": (lambda lib: inference.kv_cache_bytes(2, 2, 2, dtype=float("nan")), TORCH,
                                 ValueError, "dtype", ["nan"]),
    "kv_cache_bytes_dtype_bool": (lambda lib: inference.kv_cache_bytes(2, 2, 2, dtype=True), TORCH, TypeError,
                                  "dtype", ["True"]),
    "kv_cache_bytes_dtype_object": (lambda lib: inference.kv_cache_bytes(2, 2, 2, dtype=[2]), TORCH, TypeError,
                                    "dtype", ["[2]", "list"]),
}


@pytest.mark.parametrize("case", list(OTHER_CASES))
def test_other_entry_points_refuse_bad_input_naming_the_argument(case):
    call, libs, exc, name, words = OTHER_CASES[case]
    seen = {}
    for lib in libs:
        with pytest.raises(exc) as info:
            call(lib)
        seen[lib] = msg = str(info.value)
        assert re.search(rf"(^|\W){re.escape(name)}(\W|$)", msg), (name, msg)
        for word in words:
            assert word in msg, (word, msg)
    assert len(set(seen.values())) == 1, seen  # identical for NumPy and torch


def test_kv_cache_bytes_reads_a_numpy_integer_as_a_number_of_bytes():
    """np.dtype(np.int64(2)) is int64 (8 bytes); the number 2 means 2 bytes, as the int 2 does."""
    assert inference.kv_cache_bytes(2, 3, 4, dtype=np.int64(2)) == inference.kv_cache_bytes(2, 3, 4, dtype=2) == 96


def test_the_token_check_does_not_stop_vmap():
    """Chapters 11 and 12 train several seeds at once with torch.func.vmap, which cannot read a value
    back to Python; the range check steps aside there (shapes and dtype are still checked)."""
    import copy

    from torch.nn import functional as F

    import attnlib.models.gpt as model_mod

    models = [_model() for _ in range(2)]
    params, buffers = torch.func.stack_module_state(models)
    template = copy.deepcopy(models[0]).to("meta")
    saved = model_mod.scaled_dot_product_attention
    model_mod.scaled_dot_product_attention = lambda q, k, v, m=None, *, is_causal=False, scale=None, **_: (
        F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=is_causal, scale=scale))
    try:
        out = torch.func.vmap(lambda p, b, x: torch.func.functional_call(template, (p, b), (x,)))(
            params, buffers, torch.randint(8, (2, 3, 5)))
    finally:
        model_mod.scaled_dot_product_attention = saved
    assert out.shape == (2, 3, 5, 8) and torch.isfinite(out).all()
