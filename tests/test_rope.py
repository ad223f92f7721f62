"""apply_rope: equal to the rotate_half reference (GPT-NeoX / Llama / HF transformers) on
NumPy and torch, any float dtype and awkward sizes; q.k after RoPE depends only on i - j
(hypothesis); the interleaved pairing of the RoFormer paper is a fixed permutation of the
features; bad input is refused with a message that names it."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib as al
from conftest import DEVICES


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def rope_reference(x, positions, base=10000.0):
    """Hugging Face transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb, in float64."""
    d = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    freqs = positions.double()[..., None] * inv_freq  # (..., L, d/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (..., L, d)
    return x.double() * emb.cos() + rotate_half(x.double()) * emb.sin()


def rope_interleaved(x, positions, base=10000.0):
    """The RoFormer paper's pairing: (x[2i], x[2i+1]) rotated by positions * base^(-2i/d)."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = positions.double()[..., None] * theta  # (L, d/2)
    xe, xo = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = xe * ang.cos() - xo * ang.sin()
    out[..., 1::2] = xo * ang.cos() + xe * ang.sin()
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1, 2), (7, 8), (97, 64), (2, 3, 7, 16), (4, 1, 6)])
def test_equals_rotate_half_reference(device, shape):
    x = torch.randn(shape, dtype=torch.float64, device=device)
    ours = al.apply_rope(x)
    assert ours.device == x.device and ours.shape == x.shape
    ref = rope_reference(x.cpu(), torch.arange(shape[-2]))
    torch.testing.assert_close(ours.cpu(), ref, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3), (torch.bfloat16, 2e-2)])
def test_dtypes_are_kept_and_accurate(dtype, tol):
    x = torch.randn(3, 97, 32)
    out = al.apply_rope(x.to(dtype))
    assert out.dtype == dtype
    ref = rope_reference(x.to(dtype).float(), torch.arange(97))
    torch.testing.assert_close(out.double(), ref, atol=tol * 4, rtol=tol)


def test_numpy_equals_torch_with_explicit_positions_and_base():
    x = np.random.default_rng(0).standard_normal((2, 5, 12))
    pos = np.array([3, 4, 5, 9, 100])
    ours = al.apply_rope(x, pos, base=500.0)
    assert isinstance(ours, np.ndarray)
    np.testing.assert_allclose(ours, rope_reference(torch.from_numpy(x), torch.from_numpy(pos), 500.0).numpy(),
                               atol=1e-12)


def test_per_sequence_positions_broadcast():
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2, 3], [10, 11, 12, 13]])
    out = al.apply_rope(x, pos)
    torch.testing.assert_close(out[1], al.apply_rope(x[1], pos[1]))


def test_position_zero_is_identity_and_norm_is_kept():
    x = torch.randn(1, 16, dtype=torch.float64)
    torch.testing.assert_close(al.apply_rope(x, torch.tensor([0])), x)
    y = al.apply_rope(torch.randn(50, 16, dtype=torch.float64))
    torch.testing.assert_close(al.apply_rope(y, torch.zeros(50)).norm(dim=-1), y.norm(dim=-1))


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 5000), n=st.integers(0, 5000), shift=st.integers(-3000, 3000),
       d=st.sampled_from([2, 8, 64]), seed=st.integers(0, 2**16))
def test_score_depends_only_on_relative_position(m, n, shift, d, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, d, generator=g, dtype=torch.float64), torch.randn(1, d, generator=g, dtype=torch.float64)
    m2, n2 = max(m + shift, 0), max(n + shift, 0)
    if m2 - n2 != m - n:
        m2, n2 = m, n
    s1 = (al.apply_rope(q, torch.tensor([m])) @ al.apply_rope(k, torch.tensor([n])).T).item()
    s2 = (al.apply_rope(q, torch.tensor([m2])) @ al.apply_rope(k, torch.tensor([n2])).T).item()
    assert abs(s1 - s2) < 1e-9 * max(1.0, abs(s1))


def test_interleaved_pairing_is_a_fixed_permutation_of_the_features():
    d, L = 16, 9
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # evens first, then odds
    x = torch.randn(L, d, dtype=torch.float64)
    pos = torch.arange(L)
    torch.testing.assert_close(al.apply_rope(x[:, perm], pos), rope_interleaved(x, pos)[:, perm])


def test_bad_input_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="d = 5 must be even"):
        al.apply_rope(torch.zeros(3, 5))
    with pytest.raises(ValueError, match=r"positions has shape \(4,\) .* broadcast to x.shape\[:-1\] = \(3,\)"):
        al.apply_rope(torch.zeros(3, 4), torch.arange(4))
    with pytest.raises(ValueError, match="at least 2 dims"):
        al.apply_rope(torch.zeros(4))
    with pytest.raises(TypeError, match="real floating"):
        al.apply_rope(torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="base must be a positive number"):
        al.apply_rope(torch.zeros(3, 4), base=0)
    with pytest.raises(TypeError, match="numpy|NumPy"):
        al.apply_rope(torch.zeros(3, 4), np.arange(3))
