"""masked_softmax: the weights of torch's SDPA for the same scores and bool mask, rows over
the allowed keys only, zeros (never NaN, never uniform) for a row with nothing allowed,
blocked scores ignored whatever they hold, 16-bit floats kept, clear errors."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnlib as al
from conftest import DEVICES, to_np


def sdpa_weights(scores, mask):
    """Torch SDPA's weights for raw ``scores`` (L, S): with q = scores, k = I, v = I and
    scale 1, q @ k.T = scores and the output rows are the weight rows."""
    s = torch.as_tensor(scores, dtype=torch.float64)
    eye = torch.eye(s.shape[-1], dtype=torch.float64)
    m = torch.as_tensor(np.array(mask)).expand(s.shape)
    return F.scaled_dot_product_attention(s, eye, eye, attn_mask=m, scale=1.0).numpy()


def random_case(rng, L, S, p_allowed=0.6):
    scores = 4 * rng.standard_normal((L, S))
    mask = rng.random((L, S)) < p_allowed
    mask[0] = False  # always one fully masked row
    if L > 1:
        mask[1] = True  # and one fully allowed row
    return scores, mask


@pytest.mark.parametrize("L,S", [(1, 1), (2, 7), (7, 7), (5, 97), (33, 4)])
@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_matches_torch_sdpa_weights(rng, L, S, lib):
    scores, mask = random_case(rng, L, S)
    ref = sdpa_weights(scores, mask)
    if lib == "torch":
        scores, mask = torch.from_numpy(scores), torch.from_numpy(mask)
    out = al.masked_softmax(scores, mask)
    assert type(out) is type(scores) and out.dtype == scores.dtype and out.shape == scores.shape
    np.testing.assert_allclose(to_np(out), ref, rtol=1e-12, atol=1e-12)


def test_rows_with_an_allowed_key_match_torch_softmax(rng):
    scores, mask = random_case(rng, 6, 9)
    ok = mask.any(-1)
    ref = torch.softmax(torch.from_numpy(scores).masked_fill(~torch.from_numpy(mask), float("-inf")), -1)
    out = al.masked_softmax(scores, mask)
    np.testing.assert_allclose(out[ok], ref.numpy()[ok], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(out[ok].sum(-1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_fully_masked_row_gives_zeros_not_nan_or_uniform(lib):
    scores = np.array([[0.3, -1.2, 0.8], [0.3, -1.2, 0.8]])
    mask = np.array([[False, False, False], [True, False, True]])
    if lib == "torch":
        scores, mask = torch.from_numpy(scores), torch.from_numpy(mask)
    out = to_np(al.masked_softmax(scores, mask))
    assert np.array_equal(out[0], [0.0, 0.0, 0.0])
    assert np.isfinite(out).all() and out[1, 1] == 0 and np.isclose(out[1].sum(), 1)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e300])
def test_blocked_scores_take_no_part(bad):
    scores = np.array([[bad, 1.0, 2.0]])
    mask = np.array([[False, True, True]])
    clean = al.masked_softmax(np.array([[0.0, 1.0, 2.0]]), mask)
    assert np.array_equal(al.masked_softmax(scores, mask), clean)


def test_mask_is_applied_before_the_softmax_so_the_future_cannot_leak(rng):
    """Changing a blocked score leaves every allowed weight bit-for-bit the same."""
    scores = rng.standard_normal((5, 5))
    mask = al.causal_mask(5)
    changed = scores + np.triu(100 * rng.standard_normal((5, 5)), 1)  # only the future
    assert np.array_equal(al.masked_softmax(scores, mask), al.masked_softmax(changed, mask))


@pytest.mark.parametrize("mask_shape", [(4, 6), (1, 6), (6,), (3, 1, 6), (3, 4, 6)])
def test_mask_broadcasts_like_sdpa(rng, mask_shape):
    scores = rng.standard_normal((3, 4, 6))
    mask = rng.random(mask_shape) < 0.7
    out = al.masked_softmax(scores, mask)
    full = np.broadcast_to(mask, scores.shape)
    ref = np.stack([sdpa_weights(scores[b], full[b]) for b in range(3)])
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_a_mask_with_more_batch_dims_broadcasts_the_scores(rng):
    scores = rng.standard_normal((4, 6))
    mask = rng.random((2, 4, 6)) < 0.5
    out = al.masked_softmax(scores, mask)
    assert out.shape == (2, 4, 6)
    np.testing.assert_allclose(out[1], al.masked_softmax(scores, mask[1]), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_keeps_its_dtype_and_is_exact_to_its_rounding(rng, dtype):
    scores, mask = random_case(rng, 8, 16)
    st = torch.from_numpy(scores).to(dtype)
    out = al.masked_softmax(st, torch.from_numpy(mask))
    assert out.dtype == dtype
    ref = sdpa_weights(st.double().numpy(), mask)
    tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-6}[dtype]
    np.testing.assert_allclose(out.double().numpy(), ref, atol=tol)
    assert torch.all(out[0] == 0)  # the fully masked row, in 16 bits too


@pytest.mark.parametrize("device", DEVICES)
def test_stays_on_the_device(rng, device):
    scores, mask = random_case(rng, 4, 5)
    st = torch.from_numpy(scores).to(device)
    out = al.masked_softmax(st, torch.from_numpy(mask).to(device))
    assert out.device == st.device
    np.testing.assert_allclose(out.cpu().numpy(), sdpa_weights(scores, mask), atol=1e-12)


def test_inputs_are_not_modified(rng):
    scores, mask = random_case(rng, 4, 5)
    s0, m0 = scores.copy(), mask.copy()
    al.masked_softmax(scores, mask)
    assert np.array_equal(scores, s0) and np.array_equal(mask, m0)


def test_a_float_mask_is_refused_with_the_additive_form_named():
    with pytest.raises(TypeError, match="bool"):
        al.masked_softmax(np.zeros((2, 3)), np.zeros((2, 3)))


def test_a_mask_that_does_not_broadcast_is_refused_with_both_shapes():
    with pytest.raises(ValueError, match=r"\(2, 4\).*\(2, 3\)"):
        al.masked_softmax(np.zeros((2, 3)), np.ones((2, 4), dtype=bool))


def test_mixed_libraries_are_refused():
    with pytest.raises(TypeError, match="NumPy|numpy"):
        al.masked_softmax(torch.zeros(2, 3), np.ones((2, 3), dtype=bool))


def test_large_allowed_scores_and_rows_of_different_size_stay_finite():
    """Each row subtracts its own largest allowed score: exp never overflows, and a row of
    small scores beside a row of huge ones keeps its weights (no global maximum)."""
    scores = np.array([[1000.0, 999.0, 0.0], [-1.0, 0.0, 1.0]])
    mask = np.array([[True, True, False], [True, True, True]])
    out = al.masked_softmax(scores, mask)
    np.testing.assert_allclose(out, sdpa_weights(scores, mask), rtol=1e-12, atol=1e-15)
    assert np.isfinite(out).all() and out[1].min() > 0.05
