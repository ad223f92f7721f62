"""One answer on every path (issue 10): the same input goes through every way attnlib can
compute attention, and every path must return the same numbers or raise the same error.

Paths: NumPy (plain), NumPy ``return_weights=True``, NumPy ``flash_attention``, torch fused
(``F.scaled_dot_product_attention``), torch plain (the fused kernel switched off), torch
``return_weights=True``, torch ``flash_attention``, and ``multi_head_attention`` with one
head and identity weights (which is attention of the same q, k, v) in NumPy and torch.
"""
import numpy as np
import pytest
import torch

import attnlib as al
from attnlib.kernels import _fast as fast_mod
from conftest import DEVICES, to_np

L, S, E = 5, 7, 4  # L < S, so is_causal hides keys L.. from every query


def _mha(q, k, v, attn_mask=None, *, is_causal=False, **_):
    """multi_head_attention with one head and identity weights: attention of q, k, v."""
    eye = np.eye(E, dtype=to_np(q).dtype) if isinstance(q, np.ndarray) else torch.eye(E, dtype=q.dtype, device=q.device)
    return al.multi_head_attention(q, k, v, 1, eye, eye, eye, eye, attn_mask=attn_mask, is_causal=is_causal)


PATHS = {
    "numpy": ("numpy", lambda *a, **kw: al.scaled_dot_product_attention(*a, **kw)),
    "numpy_weights": ("numpy", lambda *a, **kw: al.scaled_dot_product_attention(*a, **kw, return_weights=True)[0]),
    "numpy_flash": ("numpy", lambda *a, **kw: al.flash_attention(*a, **kw, block_size=2)),
    "numpy_mha": ("numpy", _mha),
    "torch_fused": ("torch", lambda *a, **kw: al.scaled_dot_product_attention(*a, **kw)),
    "torch_plain": ("torch", "plain"),
    "torch_weights": ("torch", lambda *a, **kw: al.scaled_dot_product_attention(*a, **kw, return_weights=True)[0]),
    "torch_flash": ("torch", lambda *a, **kw: al.flash_attention(*a, **kw, block_size=2)),
    "torch_mha": ("torch", _mha),
}
ARG_NAMES_MHA = {"q": "query", "k": "key", "v": "value", "attn_mask": "attn_mask"}


def run_path(path, monkeypatch, device, q, k, v, mask=None, *, bfloat16=False, **kw):
    """Convert the NumPy inputs for ``path`` and run it; return a float64 NumPy result.
    ``bfloat16``: torch paths get q, k, v as bfloat16 (NumPy has no such dtype)."""
    lib, fn = PATHS[path]
    if fn == "plain":  # torch through the plain path: no fused kernel on this torch
        monkeypatch.setattr(fast_mod, "fused_sdpa", lambda: None)
        fn = PATHS["torch_fused"][1]
    if lib == "torch":
        q, k, v = (al.to_device(x, device) for x in (q, k, v))
        if bfloat16:
            q, k, v = (x.bfloat16() for x in (q, k, v))
        mask = None if mask is None else al.to_device(mask, device)
    out = fn(q, k, v, mask, **kw)
    assert type(out) is type(q) and out.dtype == q.dtype and out.shape == q.shape[:-2] + (L, E)
    return to_np(out).astype(np.float64)


def qkv(dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for shape in ((2, L, E), (2, S, E), (2, S, E))]


def reference(q, k, v, mask=None, **kw):
    """The plain NumPy path in float64 (float32 for 16-bit inputs: their compute dtype)."""
    ct = np.float64 if q.dtype == np.float64 else np.float32
    q, k, v = (x.astype(ct) for x in (q, k, v))
    if mask is not None and mask.dtype != bool:
        mask = mask.astype(ct)
    return al.scaled_dot_product_attention(q, k, v, mask, **kw).astype(np.float64)


TOL = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-5, "float64": 1e-12}
GRID = [(p, d) for p in PATHS for d in ("float16", "bfloat16", "float32", "float64")
        if not (d == "bfloat16" and PATHS[p][0] == "numpy")]


def _inputs(dtype):
    """q, k, v in ``dtype``; for bfloat16, float32 arrays holding bfloat16 values."""
    if dtype != "bfloat16":
        return qkv(dtype)
    return [to_np(torch.from_numpy(x).bfloat16()) for x in qkv("float32")]


# ---- the same numbers on every path and dtype -------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path,dtype", GRID, ids=[f"{p}-{d}" for p, d in GRID])
@pytest.mark.parametrize("case", ["minus_1e9_row", "fully_masked_bool", "fully_masked_float", "causal",
                                  "none", "mixed_float_mask"])
def test_same_answer_on_every_path(path, dtype, case, device, monkeypatch):
    """A float32 mask with a row of -1e9 on 16-bit inputs was rounded to -inf on the fused
    path only (zeros there, the average elsewhere); now the mask is added in the compute
    dtype everywhere. Fully masked rows give zeros everywhere."""
    q, k, v = _inputs(dtype)
    mask, kw = None, {}
    if case == "minus_1e9_row":
        mask = np.zeros((L, S), np.float32)
        mask[1] = -1e9
    elif case == "mixed_float_mask":
        mask = np.random.default_rng(3).standard_normal((L, S)).astype(np.float32)
        mask[:, -2:] = -np.inf
    elif case == "fully_masked_bool":
        mask = np.ones((2, L, S), bool)
        mask[1, 2] = False
    elif case == "fully_masked_float":
        mask = np.zeros((L, S), np.float32)
        mask[3] = -np.inf
    elif case == "causal":
        kw = dict(is_causal=True)
    want = reference(q, k, v, mask, **kw)
    got = run_path(path, monkeypatch, device, q, k, v, mask, bfloat16=dtype == "bfloat16", **kw)
    np.testing.assert_allclose(got, want, atol=TOL[dtype], rtol=TOL[dtype])
    if case == "minus_1e9_row" and dtype != "float64":  # float32 compute: -1e9 swallows the
        uniform = v.astype(np.float64).mean(-2)  # scores, so the row is the average of v
        np.testing.assert_allclose(got[:, 1], uniform, atol=10 * TOL[dtype])
    if case.startswith("fully_masked"):
        dead = got[1, 2] if case == "fully_masked_bool" else got[:, 3]
        assert (dead == 0).all()


# ---- NaN and inf: one ValueError, naming the argument, on every path ---------------------
def _nan_case(case):
    q, k, v = qkv("float64")
    mask, kw = None, {}
    if case == "float_mask_nan_row":
        mask = np.zeros((L, S))
        mask[2] = np.nan
        name = "attn_mask"
    elif case == "float_mask_plus_inf":
        mask = np.zeros((L, S))
        mask[0, 1] = np.inf
        name = "attn_mask"
    elif case == "nan_in_masked_out_key":  # no query sees key 3: NumPy used to ignore it
        mask = np.ones((L, S), bool)
        mask[:, 3] = False
        k[1, 3, 0] = np.nan
        name = "k"
    elif case == "nan_in_masked_out_query":  # query 2 sees nothing
        mask = np.ones((L, S), bool)
        mask[2] = False
        q[0, 2, 1] = np.nan
        name = "q"
    elif case == "nan_in_masked_out_value":
        mask = np.ones((L, S), bool)
        mask[:, 4] = False
        v[0, 4, 2] = np.nan
        name = "v"
    elif case == "nan_key_under_float_mask_minus_inf":
        mask = np.zeros((L, S))
        mask[:, 3] = -np.inf
        k[0, 3, 0] = np.nan
        name = "k"
    elif case == "nan_key_beyond_causal_reach":  # is_causal with L < S: key S-1 is never seen
        kw = dict(is_causal=True)
        k[0, S - 1, 0] = np.nan
        name = "k"
    elif case == "inf_in_query":
        q[1, 0, 0] = np.inf
        name = "q"
    elif case == "nan_in_value_no_mask":
        v[1, 0, 3] = np.nan
        name = "v"
    else:
        raise AssertionError(case)
    return q, k, v, mask, kw, name


NAN_CASES = ["float_mask_nan_row", "float_mask_plus_inf", "nan_in_masked_out_key", "nan_in_masked_out_query",
             "nan_in_masked_out_value", "nan_key_under_float_mask_minus_inf", "nan_key_beyond_causal_reach",
             "inf_in_query", "nan_in_value_no_mask"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("case", NAN_CASES)
def test_nan_and_inf_are_refused_on_every_path(path, case, device, monkeypatch):
    q, k, v, mask, kw, name = _nan_case(case)
    if path.endswith("mha"):
        name = ARG_NAMES_MHA[name]
    with pytest.raises(ValueError) as info:
        run_path(path, monkeypatch, device, q, k, v, mask, **kw)
    msg = str(info.value)
    assert msg.startswith(f"{name} holds"), msg
    assert "non-finite" in msg and "index" in msg, msg


@pytest.mark.parametrize("path", [p for p in PATHS if p.startswith("torch")])
@pytest.mark.parametrize("case", NAN_CASES)
def test_nan_and_inf_are_refused_where_the_kernel_is_not_verified(path, case, monkeypatch):
    """On a GPU the fused kernel is not verified, and the fast path zeroes the rows that see
    no key itself. A float mask row of NaN is not such a row: on an H200 it was zeroed and the
    call passed. Here the CPU takes that path too."""
    monkeypatch.setattr(fast_mod, "kernel_verified", lambda device_type, dtype: False)
    test_nan_and_inf_are_refused_on_every_path(path, case, "cpu", monkeypatch)


@pytest.mark.parametrize("path", [p for p in PATHS if p.startswith("torch")])
def test_fast_path_falls_back_when_a_kernel_returns_nan_for_finite_inputs(path, monkeypatch):
    """A kernel that gives NaN for a fully masked row (PyTorch < 2.5): the output check sends
    the call to the plain path, which gives zeros; finite inputs are never refused."""
    real = fast_mod.fused_sdpa()

    def nan_kernel(q, k, v, attn_mask=None, **kw):
        out = real(q, k, v, attn_mask=attn_mask, **kw)
        if attn_mask is None:
            return out
        dead = ~attn_mask.any(-1) if attn_mask.dtype == torch.bool else ~(attn_mask > -torch.inf).any(-1)
        return out.masked_fill(dead[..., None], float("nan"))

    monkeypatch.setattr(fast_mod, "fused_sdpa", lambda: nan_kernel)
    fast_mod.kernel_verified.cache_clear()
    try:
        q, k, v = qkv("float64")
        mask = np.ones((L, S), bool)
        mask[2] = False
        got = run_path(path, monkeypatch, "cpu", q, k, v, mask)
        np.testing.assert_allclose(got, reference(q, k, v, mask), atol=1e-12)
        assert (got[:, 2] == 0).all()
    finally:
        fast_mod.kernel_verified.cache_clear()


def test_the_cpu_kernel_is_verified_and_the_mask_pass_is_skipped():
    """The feature probe passes on this torch (2.13, CPU) for every float dtype."""
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        assert fast_mod.kernel_verified("cpu", dtype)
    assert not fast_mod.kernel_verified("cuda", torch.float32)  # unverified: guard kept


def test_scores_that_overflow_raise_instead_of_nan():
    q = np.full((3, 2), 1e20, np.float32)
    with pytest.raises(ValueError, match="overflowed float32"):
        al.scaled_dot_product_attention(q, q, q)


# ---- argument checks: one check, one message, every function --------------------------
def _rng_qkv(lib="numpy"):
    q, k, v = qkv("float64")
    return [torch.from_numpy(x) for x in (q, k, v)] if lib == "torch" else [q, k, v]


def _eye(q):
    return np.eye(E) if isinstance(q, np.ndarray) else torch.eye(E, dtype=q.dtype)


FLAG_CALLS = {
    "sdpa": lambda q, k, v, c: al.scaled_dot_product_attention(q, k, v, is_causal=c),
    "sdpa_weights": lambda q, k, v, c: al.scaled_dot_product_attention(q, k, v, is_causal=c, return_weights=True),
    "flash": lambda q, k, v, c: al.flash_attention(q, k, v, is_causal=c),
    "mha": lambda q, k, v, c: al.multi_head_attention(q, k, v, 1, *[_eye(q)] * 4, is_causal=c),
    "sliding_window": lambda q, k, v, c: al.sliding_window_attention(q, k, v, window=1, is_causal=c),
    "linear": lambda q, k, v, c: al.linear_attention(q, k, v, is_causal=c),
    "sliding_window_mask": lambda q, k, v, c: al.sliding_window_mask(3, window=1, is_causal=c),
}


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("call", list(FLAG_CALLS))
@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_is_causal_must_be_a_bool_everywhere(call, lib, bad):
    """``is_causal="yes"`` was accepted on NumPy and refused by torch in torch's words."""
    q, k, v = _rng_qkv(lib)
    with pytest.raises(TypeError) as info:
        FLAG_CALLS[call](q, k, v, bad)
    assert str(info.value).startswith(f"is_causal must be True or False, got {bad!r}")


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("call", list(FLAG_CALLS))
def test_a_numpy_bool_is_a_bool(call, lib):
    q, k, v = _rng_qkv(lib)
    a, b = FLAG_CALLS[call](q, k, v, np.bool_(True)), FLAG_CALLS[call](q, k, v, True)
    a, b = (x[0] if isinstance(x, tuple) else x for x in (a, b))
    np.testing.assert_array_equal(to_np(a), to_np(b))


INT_CALLS = {  # (call with an integer n, the argument's name)
    "flash_block_size": (lambda q, n: al.flash_attention(q, q, q, block_size=n), "block_size"),
    "mha_num_heads": (lambda q, n: al.multi_head_attention(q, q, q, n, *[_eye(q)] * 4), "num_heads"),
    "linear_chunk_size": (lambda q, n: al.linear_attention(q, q, q, is_causal=True, chunk_size=n), "chunk_size"),
    "sliding_block_size": (lambda q, n: al.sliding_window_attention(q, q, q, window=1, block_size=n), "block_size"),
    "sliding_window": (lambda q, n: al.sliding_window_attention(q, q, q, window=n), "window"),
    "causal_mask": (lambda q, n: al.causal_mask(n, like=q), "L"),
    "padding_mask": (lambda q, n: al.padding_mask([1], n), "S"),
}


@pytest.mark.parametrize("call", list(INT_CALLS))
@pytest.mark.parametrize("n", [2, np.int64(2), np.int32(2), torch.tensor(2).item()], ids=["int", "int64", "int32", "item"])
def test_integer_like_arguments_are_accepted_everywhere(call, n):
    """``block_size=np.int64(2)`` was refused while ``num_heads=np.int64(2)`` was accepted."""
    q = _rng_qkv()[0]
    fn, _ = INT_CALLS[call]
    np.testing.assert_array_equal(to_np(fn(q, n)), to_np(fn(q, 2)))


@pytest.mark.parametrize("call", list(INT_CALLS))
@pytest.mark.parametrize("bad", [2.0, True, "2"], ids=["float", "bool", "str"])
def test_non_integers_are_refused_naming_the_argument(call, bad):
    q = _rng_qkv()[0]
    fn, name = INT_CALLS[call]
    with pytest.raises((TypeError, ValueError)) as info:
        fn(q, bad)
    assert name in str(info.value) and repr(bad) in str(info.value), str(info.value)


@pytest.mark.parametrize("call,name", [("flash_block_size", "block_size"), ("mha_num_heads", "num_heads"),
                                       ("linear_chunk_size", "chunk_size")])
def test_zero_is_a_value_error(call, name):
    q = _rng_qkv()[0]
    with pytest.raises(ValueError, match=f"{name} must be a positive int .*got 0"):
        INT_CALLS[call][0](q, 0)


@pytest.mark.parametrize("fn", [al.scaled_dot_product_attention, al.flash_attention, al.sliding_window_attention,
                                al.linear_attention])
def test_a_numpy_scalar_query_gets_a_clear_message(fn):
    _, k, v = _rng_qkv()
    kw = dict(window=1) if fn is al.sliding_window_attention else {}
    with pytest.raises(TypeError) as info:
        fn(np.float64(1.0), k, v, **kw)
    msg = str(info.value)
    assert msg.startswith("q is a NumPy scalar (float64), not an array") and "numpy array" not in msg, msg


def test_the_kernel_probe_is_invisible_to_a_flop_counter():
    """The one-time probe runs on the first masked call; a learner counting that call's FLOPs
    (chapter 7) must see the same count as for any later call."""
    from torch.utils.flop_counter import FlopCounterMode

    fast_mod.kernel_verified.cache_clear()
    q, m = torch.randn(2, 4, 8), torch.ones(4, 4, dtype=torch.bool)
    counts = []
    for _ in range(2):
        with FlopCounterMode(display=False) as counter:
            al.scaled_dot_product_attention(q, q, q, m)
        counts.append(counter.get_total_flops())
    assert counts[0] == counts[1] > 0


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("fn", ["sliding_window", "linear", "linear_causal"])
@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_sparse_and_linear_attention_refuse_nan_too(lib, fn, where):
    """The same policy in the other attention functions; the NaN sits at the last key, which
    a window of 1 hides from query 0 and the causal form shows only to the last query."""
    q, k, v = _rng_qkv(lib)
    x = {"q": q, "k": k, "v": v}[where]
    x[0, -1, 0] = float("nan")
    call = {"sliding_window": lambda: al.sliding_window_attention(q, k, v, window=1),
            "linear": lambda: al.linear_attention(q, k, v),
            "linear_causal": lambda: al.linear_attention(q, k, v, is_causal=True)}[fn]
    with pytest.raises(ValueError, match=f"^{where} holds 1 non-finite value"):
        call()
