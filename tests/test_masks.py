"""causal_mask and padding_mask: torch's conventions (True = may attend, tril top-left),
shapes that compose with scores (N..., L, S), the caller's library and device."""
import numpy as np
import pytest
import torch

import attnlib as al
from conftest import DEVICES, ref_sdpa


@pytest.mark.parametrize("L,S", [(1, 1), (7, 7), (3, 5), (5, 3), (4, None)])
def test_causal_mask_is_torch_tril(L, S):
    m = al.causal_mask(L, S)
    ref = torch.ones(L, L if S is None else S, dtype=torch.bool).tril().numpy()
    assert isinstance(m, np.ndarray) and m.dtype == bool
    np.testing.assert_array_equal(m, ref)


@pytest.mark.parametrize("device", DEVICES)
def test_causal_mask_like_follows_library_and_device(device):
    q = torch.zeros(2, 3, device=device)
    m = al.causal_mask(3, 5, like=q)
    assert isinstance(m, torch.Tensor) and m.dtype == torch.bool and m.device == q.device
    np.testing.assert_array_equal(m.cpu().numpy(), al.causal_mask(3, 5))
    assert isinstance(al.causal_mask(2, like=np.zeros(1)), np.ndarray)


@pytest.mark.parametrize("L,S", [(7, 7), (3, 5), (5, 3)])
def test_causal_mask_equals_is_causal(rng, L, S):
    q, k, v = rng.standard_normal((2, L, 4)), rng.standard_normal((2, S, 4)), rng.standard_normal((2, S, 3))
    np.testing.assert_allclose(al.scaled_dot_product_attention(q, k, v, al.causal_mask(L, S)),
                               ref_sdpa(q, k, v, is_causal=True).numpy(), atol=1e-12)


def test_padding_mask_shape_and_values():
    m = al.padding_mask(np.array([2, 0, 4]), 4)
    assert m.shape == (3, 1, 4) and m.dtype == bool
    np.testing.assert_array_equal(m[:, 0], [[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    np.testing.assert_array_equal(al.padding_mask([2, 0, 4], 4), m)  # a list reads as NumPy


@pytest.mark.parametrize("device", DEVICES)
def test_padding_mask_follows_torch_lengths(device):
    lengths = torch.tensor([1, 3], device=device)
    m = al.padding_mask(lengths, 3)
    assert isinstance(m, torch.Tensor) and m.dtype == torch.bool and m.device == lengths.device
    np.testing.assert_array_equal(m.cpu().numpy(), al.padding_mask(np.array([1, 3]), 3))


def test_masks_compose_with_scores_and_heads(rng):
    N, h, L, S = 2, 3, 4, 5
    pad = al.padding_mask([3, 5], S)  # (N, 1, S)
    both = al.causal_mask(L, S) & pad  # (L, S) & (N, 1, S) -> (N, L, S)
    assert both.shape == (N, L, S)
    q = rng.standard_normal((N, L, 6))
    k = rng.standard_normal((N, S, 6))
    out = al.scaled_dot_product_attention(q, k, k, both)
    np.testing.assert_allclose(out, ref_sdpa(q, k, k, both).numpy(), atol=1e-12)
    qh = rng.standard_normal((N, h, L, 6))  # with heads: add the head axis
    kh = rng.standard_normal((N, h, S, 6))
    out = al.scaled_dot_product_attention(qh, kh, kh, pad[:, None])  # (N, 1, 1, S)
    np.testing.assert_allclose(out, ref_sdpa(qh, kh, kh, pad[:, None]).numpy(), atol=1e-12)


@pytest.mark.parametrize("call,exc,words", [
    (lambda: al.padding_mask([1, 5], 4), ValueError, ["lengths", "[0, 4]", "max 5"]),
    (lambda: al.padding_mask([-1, 2], 4), ValueError, ["lengths", "min -1"]),
    (lambda: al.padding_mask(np.array([1.0, 2.0]), 4), TypeError, ["lengths", "float64", "integer"]),
    (lambda: al.padding_mask([1.9, 2], 4), TypeError, ["lengths", "1.9 is not a whole number", "integer"]),
    (lambda: al.padding_mask(torch.tensor([2.5, 1.0]), 4), TypeError, ["lengths", "2.5", ".long()"]),
    (lambda: al.padding_mask([True, False], 4), TypeError, ["lengths", "bool"]),
    (lambda: al.padding_mask(np.array([[1, 2]]), 4), ValueError, ["lengths", "(1, 2)", "1-D"]),
    (lambda: al.padding_mask([1], 2.5), TypeError, ["S", "int"]),
    (lambda: al.causal_mask(-1), ValueError, ["L", ">= 0"]),
    (lambda: al.causal_mask(3, "4"), TypeError, ["S", "int"]),
    (lambda: al.causal_mask(3, like=[1, 2]), TypeError, ["like", "list"]),
], ids=["too_long", "negative", "float_lengths", "fractional_list", "fractional_tensor", "bool_list", "2d_lengths", "float_S", "negative_L", "str_S", "list_like"])
def test_bad_input_raises_a_message_that_names_the_argument(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_padding_mask_accepts_any_integer_lengths():
    want = al.padding_mask(np.array([1, 3]), 4)
    for lengths in ([1, 3], (1, 3), [np.int64(1), np.int32(3)], np.array([1, 3], np.int32)):
        np.testing.assert_array_equal(al.padding_mask(lengths, 4), want)
    assert al.padding_mask([], 4).shape == (0, 1, 4)
