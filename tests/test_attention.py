"""scaled_dot_product_attention: equal to torch SDPA over a grid of dtypes, batch shapes,
awkward sizes and masks, for NumPy and torch inputs; fully masked rows, huge logits and
16-bit floats; the fast and plain paths agree; bad input fails with a message that teaches."""
import numpy as np
import pytest
import torch

import attnlib as al
from attnlib.kernels import _fast as fast_mod
from attnlib.kernels import attention as attention_mod
from conftest import CUDA, DEVICES, ref_sdpa, ref_weights, to_np

# (L, S, E, Ev, scale): a single token, a square case, L != S both ways with E != Ev.
SIZES = [(1, 1, 1, 1, None), (7, 7, 8, 8, None), (7, 97, 16, 5, 0.3), (97, 7, 5, 16, None)]
BATCHES = [(), (2,), (2, 3)]
MASKS = [None, "causal", "bool", "bool_2d", "float", "float_2d"]
TOL = {"float64": 1e-12, "float32": 2e-5}


def make_qkv(rng, batch, L, S, E, Ev, dtype="float64"):
    q = rng.standard_normal(batch + (L, E))
    k = rng.standard_normal(batch + (S, E))
    v = rng.standard_normal(batch + (S, Ev))
    return [x.astype(dtype) for x in (q, k, v)]


def make_mask(rng, kind, batch, L, S):
    """A mask of the given kind; every query keeps at least one key (torch's reference
    behaviour for fully masked rows has its own tests below)."""
    if kind in (None, "causal"):
        return None
    shape = (L, S) if kind.endswith("_2d") else batch + (L, S)
    keep = rng.random(shape) > 0.4
    keep[..., np.arange(L), np.arange(L) % S] = True  # at least one visible key per query
    if kind.startswith("bool"):
        return keep
    return np.where(keep, rng.standard_normal(shape), -np.inf)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("size", SIZES, ids=str)
@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_matches_torch_sdpa(rng, lib, dtype, batch, size, mask):
    L, S, E, Ev, scale = size
    q, k, v = make_qkv(rng, batch, L, S, E, Ev, dtype)
    m = make_mask(rng, mask, batch, L, S)
    if m is not None and m.dtype != bool:
        m = m.astype(dtype)
    causal = mask == "causal"
    ref = ref_sdpa(q, k, v, m, causal, scale).numpy()
    ref_w = ref_weights(q, k, m, causal, scale).numpy()
    if lib == "torch":
        q, k, v = (torch.from_numpy(x) for x in (q, k, v))
        m = None if m is None else torch.from_numpy(m)
    out = al.scaled_dot_product_attention(q, k, v, m, is_causal=causal, scale=scale)
    out2, w = al.scaled_dot_product_attention(q, k, v, m, is_causal=causal, scale=scale,
                                              return_weights=True)
    tol = TOL[dtype]
    assert out.shape == batch + (L, Ev) and w.shape == batch + (L, S)
    np.testing.assert_allclose(to_np(out), ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(to_np(out2), ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(to_np(w), ref_w, rtol=tol, atol=tol)


@pytest.mark.parametrize("batches", [((2, 1), (3,), (1,)), ((), (4,), ()), ((2, 3), (1, 3), (2, 1))],
                         ids=str)
def test_batch_dims_broadcast_like_torch(rng, batches):
    bq, bk, bv = batches
    q = rng.standard_normal(bq + (5, 4))
    k = rng.standard_normal(bk + (6, 4))
    v = rng.standard_normal(bv + (6, 3))
    ref = ref_sdpa(q, k, v).numpy()
    np.testing.assert_allclose(al.scaled_dot_product_attention(q, k, v), ref, atol=1e-12)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    np.testing.assert_allclose(to_np(al.scaled_dot_product_attention(tq, tk, tv)), ref, atol=1e-12)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("return_weights", [False, True])
def test_result_keeps_type_dtype_and_device(rng, lib, dtype, return_weights):
    q, k, v = make_qkv(rng, (2,), 3, 4, 5, 6, dtype)
    if lib == "torch":
        q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    res = al.scaled_dot_product_attention(q, k, v, return_weights=return_weights)
    for x in res if return_weights else (res,):
        assert type(x) is type(q)
        assert x.dtype == q.dtype
        if lib == "torch":
            assert x.device == q.device


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["bool", "float", "padding"])
@pytest.mark.parametrize("return_weights", [False, True])
def test_fully_masked_row_gives_zeros(rng, device, kind, return_weights):
    q, k, v = (torch.from_numpy(x).to(device) for x in make_qkv(rng, (2,), 4, 5, 3, 3))
    if kind == "padding":  # batch element 1 has no real key at all
        m = al.padding_mask(torch.tensor([3, 0], device=device), 5)
        dead = (slice(1, 2), slice(None))
    else:
        m = torch.ones(2, 4, 5, dtype=torch.bool, device=device)
        m[0, 2] = False  # query 2 of batch element 0 sees nothing
        dead = (slice(0, 1), slice(2, 3))
        if kind == "float":
            m = torch.zeros(2, 4, 5, dtype=torch.float64, device=device).masked_fill(~m, -torch.inf)
    for args in ((q, k, v, m), tuple(to_np(x) for x in (q, k, v, m))):
        res = al.scaled_dot_product_attention(*args, return_weights=return_weights)
        out = to_np(res[0] if return_weights else res)
        assert np.isfinite(out).all()
        assert (out[dead] == 0).all()
        alive = np.ones(out.shape[:2], bool)
        alive[dead] = False
        assert (np.abs(out[alive]).sum(-1) > 0).all()
        if return_weights:
            w = to_np(res[1])
            assert (w[dead] == 0).all() and np.allclose(w[alive].sum(-1), 1)


def test_torch_sdpa_gives_zeros_for_fully_masked_rows_on_cpu():
    """The fact attnlib/kernels/attention.py's module docstring records (zeros in PyTorch 2.13 on
    the CPU) and the reference in these tests relies on."""
    q = torch.randn(3, 2, dtype=torch.float64)
    m = torch.tensor([[True, True], [False, False], [True, False]])
    out = torch.nn.functional.scaled_dot_product_attention(q, q[:2], q[:2], attn_mask=m)
    assert (out[1] == 0).all() and torch.isfinite(out).all()


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("return_weights", [False, True])
def test_huge_logits_stay_finite_in_float32(lib, return_weights):
    # scores of +-1e4 (scale=1): exp would overflow without subtracting the row maximum
    q = np.array([[1e2, 0.0], [-1e2, 0.0], [0.0, 1e2]], dtype=np.float32)
    k = np.array([[1e2, 0.0], [-1e2, 0.0], [0.0, 0.0]], dtype=np.float32)
    v = np.array([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]], dtype=np.float32)
    if lib == "torch":
        q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    res = al.scaled_dot_product_attention(q, k, v, scale=1.0, return_weights=return_weights)
    out = to_np(res[0] if return_weights else res)
    assert np.isfinite(out).all()
    # query 0 scores (1e4, -1e4, 0): all weight on key 0; query 1 on key 1; query 2 ties
    np.testing.assert_allclose(out, [[1, 0], [0, 1], [2, 2]], atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("return_weights", [False, True])
def test_16bit_floats_match_float32(rng, device, dtype, causal, return_weights):
    q, k, v = (torch.from_numpy(x).to(device) for x in make_qkv(rng, (2, 3), 7, 7, 16, 8, "float32"))
    ref = ref_sdpa(q, k, v, is_causal=causal).numpy()
    res = al.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), is_causal=causal,
                                          return_weights=return_weights)
    out = res[0] if return_weights else res
    assert out.dtype == dtype and out.device == q.device
    tol = 1e-2 if dtype == torch.float16 else 5e-2
    np.testing.assert_allclose(to_np(out), ref, atol=tol, rtol=tol)
    if return_weights:
        assert res[1].dtype == dtype
        np.testing.assert_allclose(to_np(res[1]), ref_weights(q, k, is_causal=causal).numpy(),
                                   atol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float", "fully_masked"])
def test_fast_path_equals_plain_path(rng, device, mask):
    assert fast_mod.fused_sdpa() is not None  # torch 2.13 has the fused kernel
    q, k, v = (torch.from_numpy(x).to(device) for x in make_qkv(rng, (2, 2), 9, 11, 8, 6))
    m = None
    if mask in ("bool", "float", "fully_masked"):
        m = torch.from_numpy(rng.random((9, 11)) > 0.5).to(device)
        m[:, 0] = True
        if mask == "fully_masked":
            m[3] = False
        if mask == "float":
            m = torch.zeros(9, 11, dtype=q.dtype, device=device).masked_fill(~m, -torch.inf)
    causal = mask == "causal"
    fast = al.scaled_dot_product_attention(q, k, v, m, is_causal=causal)
    xp = al.kernels._array.namespace(q=q)
    plain = attention_mod._attention(xp, q, k, v, m, causal, 8 ** -0.5, False)
    torch.testing.assert_close(fast, plain, rtol=1e-12, atol=1e-12)


def test_fast_path_is_taken_only_for_torch_without_weights(rng, monkeypatch):
    calls = []
    real = fast_mod.fused_sdpa()
    monkeypatch.setattr(fast_mod, "fused_sdpa",
                        lambda: lambda *a, **kw: calls.append(1) or real(*a, **kw))
    q, k, v = make_qkv(rng, (), 3, 4, 2, 2)
    al.scaled_dot_product_attention(q, k, v)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    al.scaled_dot_product_attention(tq, tk, tv, return_weights=True)
    assert calls == []
    al.scaled_dot_product_attention(tq, tk, tv)
    assert calls == [1]


def test_gradients_flow_through_the_plain_path(rng):
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in make_qkv(rng, (2,), 4, 5, 3, 3))
    out, w = al.scaled_dot_product_attention(q, k, v, is_causal=True, return_weights=True)
    out.sum().backward()
    q2, k2, v2 = (x.detach().clone().requires_grad_() for x in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(q2, k2, v2, is_causal=True).sum().backward()
    for a, b in ((q, q2), (k, k2), (v, v2)):
        torch.testing.assert_close(a.grad, b.grad)


def test_inputs_are_not_modified(rng):
    q, k, v = make_qkv(rng, (2,), 4, 5, 3, 3)
    m = rng.random((4, 5)) > 0.3
    copies = [x.copy() for x in (q, k, v, m)]
    al.scaled_dot_product_attention(q, k, v, m, return_weights=True)
    al.scaled_dot_product_attention(q, k, v, m)
    for a, b in zip((q, k, v, m), copies):
        np.testing.assert_array_equal(a, b)


# ---- bad input: (kwargs builder, exception, words the message must contain) ----
def _bad_cases():
    r = np.random.default_rng(1)
    q, k, v = r.standard_normal((2, 4, 3)), r.standard_normal((2, 5, 3)), r.standard_normal((2, 5, 6))
    t = torch.from_numpy
    return {
        "q_k_last_dim": (dict(q=q, k=r.standard_normal((2, 5, 4)), v=v), ValueError,
                         ["q", "k", "(2, 4, 3)", "(2, 5, 4)", "last dim"]),
        "k_v_length": (dict(q=q, k=k, v=r.standard_normal((2, 6, 6))), ValueError,
                       ["k", "v", "(2, 5, 3)", "(2, 6, 6)", "same length"]),
        "batch_not_broadcasting": (dict(q=q, k=r.standard_normal((3, 5, 3)), v=v), ValueError,
                                   ["batch", "q (2,)", "k (3,)", "broadcast"]),
        "mask_wrong_shape": (dict(q=q, k=k, v=v, attn_mask=np.ones((4, 6), bool)), ValueError,
                             ["attn_mask", "(4, 6)", "(2, 4, 5)", "(L, S) = (4, 5)"]),
        "mask_extra_batch": (dict(q=q, k=k, v=v, attn_mask=np.ones((3, 2, 4, 5), bool)), ValueError,
                             ["attn_mask", "(3, 2, 4, 5)", "(2, 4, 5)"]),
        "int_mask": (dict(q=q, k=k, v=v, attn_mask=np.ones((4, 5), int)), TypeError,
                     ["attn_mask", "int64", "bool"]),
        "numpy_mask_torch_q": (dict(q=t(q), k=t(k), v=t(v), attn_mask=np.ones((4, 5), bool)),
                               TypeError, ["attn_mask", "NumPy", "torch", "to_device"]),
        "numpy_k_torch_q": (dict(q=t(q), k=k, v=t(v)), TypeError, ["q", "k", "NumPy", "torch"]),
        "mask_and_causal": (dict(q=q, k=k, v=v, attn_mask=np.ones((4, 5), bool), is_causal=True),
                            ValueError, ["attn_mask", "is_causal", "causal_mask"]),
        "int_q": (dict(q=np.ones((4, 3), int), k=np.ones((5, 3), int), v=np.ones((5, 2), int)),
                  TypeError, ["q", "int64", "float"]),
        "mixed_dtypes": (dict(q=q, k=k.astype(np.float32), v=v), TypeError,
                         ["float64", "float32", "match"]),
        "vector_q": (dict(q=q[0, 0], k=k, v=v), ValueError, ["q", "(3,)", "2 dims"]),
        "list_q": (dict(q=[[1.0, 2.0]], k=k, v=v), TypeError, ["q", "list"]),
        "bad_scale": (dict(q=q, k=k, v=v, scale=np.ones(2)), TypeError, ["scale"]),
    }


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_input_raises_a_message_that_names_the_argument(case, lib):
    """Also with torch inputs, where the fast path runs torch's kernel first and attnlib's
    checks explain its refusal."""
    kwargs, exc, words = _bad_cases()[case]
    kwargs = dict(kwargs)
    if lib == "torch":
        if any(isinstance(x, torch.Tensor) for x in kwargs.values()) or case == "list_q":
            pytest.skip("case mixes libraries on purpose")
        kwargs = {n: torch.from_numpy(x) if isinstance(x, np.ndarray) else x for n, x in kwargs.items()}
    with pytest.raises(exc) as info:
        al.scaled_dot_product_attention(kwargs.pop("q"), kwargs.pop("k"), kwargs.pop("v"), **kwargs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@CUDA
@pytest.mark.cuda
@pytest.mark.parametrize("return_weights", [False, True])
def test_torch_mask_on_another_device_is_refused(rng, return_weights):
    q = torch.randn(4, 3, device="cuda")
    with pytest.raises(ValueError, match="attn_mask is on cpu"):
        al.scaled_dot_product_attention(q, q, q, torch.ones(4, 4, dtype=torch.bool),
                                        return_weights=return_weights)


@pytest.mark.parametrize("float_mask", [False, True])
def test_fast_path_zeroes_fully_masked_rows_even_if_the_kernel_gives_nan(rng, monkeypatch, float_mask):
    """Older torch releases and some GPU kernels return NaN for a query with no visible key;
    simulate such a kernel and check attnlib still returns zeros there."""
    real = fast_mod.fused_sdpa()

    def nan_kernel(q, k, v, attn_mask=None, **kw):
        out = real(q, k, v, attn_mask=attn_mask, **kw)
        dead = ~attn_mask.any(-1) if attn_mask.dtype == torch.bool else ~(attn_mask > -torch.inf).any(-1)
        return out.masked_fill(dead[..., None], float("nan"))

    monkeypatch.setattr(fast_mod, "fused_sdpa", lambda: nan_kernel)
    q, k, v = (torch.from_numpy(x) for x in make_qkv(rng, (2,), 4, 5, 3, 3))
    m = torch.ones(2, 4, 5, dtype=torch.bool)
    m[1, 2] = False
    if float_mask:
        m = torch.zeros(2, 4, 5, dtype=q.dtype).masked_fill(~m, -torch.inf)
    out = al.scaled_dot_product_attention(q, k, v, m)
    assert torch.isfinite(out).all() and (out[1, 2] == 0).all()
    torch.testing.assert_close(out, ref_sdpa(q, k, v, m))


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("return_weights", [False, True])
def test_no_keys_at_all_gives_zeros(lib, return_weights):
    q, k, v = np.ones((2, 1, 3, 4)), np.ones((4, 0, 4)), np.ones((1, 0, 5))
    if lib == "torch":
        q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    res = al.scaled_dot_product_attention(q, k, v, return_weights=return_weights)
    out = res[0] if return_weights else res
    assert out.shape == (2, 4, 3, 5) and (to_np(out) == 0).all()
    if return_weights:
        assert res[1].shape == (2, 4, 3, 0)
