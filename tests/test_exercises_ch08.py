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
