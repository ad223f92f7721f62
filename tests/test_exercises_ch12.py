"""Chapter 12 exercises (repeat_kv, apply_rope) beyond the generic contract
(tests/test_exercises_contract.py): the references agree with torch and attnlib, the issue's
mistakes are catalogued, correct answers in other styles pass, independently written
mistakes are named, and calling attnlib's own function is caught."""
import numpy as np
import pytest
import torch

import attnlib as al
from attnlib.exercises import EXERCISES, check
from exercise_catalogue import asked_twice, catalogue_problems, passes_every_seed


@pytest.mark.parametrize("name,required", [
    ("repeat_kv", {"tiled", "wrong_axis"}),
    ("apply_rope", {"interleaved_pairs", "reversed_rotation", "freq_i_over_d", "positions_from_one"}),
])
def test_catalogue_covers_the_issue_mistakes(name, required):
    assert required <= {m.key for m in EXERCISES[name].mistakes}


# --- the references agree with torch and attnlib ------------------------------------------

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
    ("repeat_kv", lambda x, n: torch.as_tensor(x).repeat(1, n, 1, 1), "tiled"),
    ("repeat_kv", lambda x, n: torch.as_tensor(x).repeat_interleave(n, dim=2), "wrong_axis"),
    ("apply_rope", rope_interleaved_torch, "interleaved_pairs"),
    ("apply_rope", lambda x, p, base=10000.0: rope_complex(x, -np.asarray(p), base), "reversed_rotation"),
    ("apply_rope", lambda x, p, base=10000.0: rope_complex(x, np.asarray(p) + 1, base), "positions_from_one"),
    ("apply_rope", lambda x, p, base=10000.0: rope_complex(x, p, 1.0 / base), "freq_inverted"),
    ("apply_rope", rope_one_sign_flipped, "not_a_rotation"),
])
def test_independently_written_mistakes_are_recognised(name, fn, key):
    res = check(name, fn)
    assert res.mistake == key, res.message


@pytest.mark.parametrize("name,fn", [
    ("repeat_kv", lambda x, n: al.repeat_kv(x, n)),
    ("apply_rope", lambda x, p, base=10000.0: al.apply_rope(x, p, base=base)),
])
def test_calling_the_library_does_not_pass(name, fn):
    res = check(name, fn)
    # attnlib.repeat_kv / apply_rope are refused by the checker itself (Exercise.forbidden)
    assert not res.passed and res.mistake == "library_shortcut", res.message
    # and the library is left unpatched afterwards
    assert al.repeat_kv.__name__ == "repeat_kv" and al.apply_rope.__name__ == "apply_rope"


# --- cases that vary per check, the new mistakes, the ladder (issue 20) ---------------------

@pytest.mark.parametrize("name", ["repeat_kv", "apply_rope"])
def test_catalogue_holds_on_every_draw_of_the_cases(name):
    problems = catalogue_problems(EXERCISES[name])
    assert not problems, problems[:5]


@pytest.mark.parametrize("seed", range(10))
def test_every_draw_has_gaps_in_the_positions(seed):
    rope = EXERCISES["apply_rope"].all_cases(seed)
    assert any((np.diff(c.args[1]) > 1).any() for c in rope)
    assert any(c.args[1][0] > 0 for c in rope)


def test_positions_counted_from_the_first_one_fail_on_gaps():
    r, shown = asked_twice("apply_rope", lambda x, p, base=10000.0: rope_complex(x, p[0] + np.arange(len(p)), base))
    assert r.mistake == "positions_consecutive" and "positions)[:, None] * theta" in shown


@pytest.mark.parametrize("fn,key", [
    (lambda x, n: np.repeat(x, n), "flattened"),
    (lambda x, n: torch.as_tensor(x).repeat_interleave(n), "flattened"),
    (lambda x, n: np.broadcast_to(x[:, :, None], (x.shape[0], x.shape[1], n, *x.shape[2:])), "forgot_reshape"),
    (lambda x, n: np.stack([x] * n, axis=1).reshape(x.shape[0], -1, *x.shape[2:]), "tiled"),
])
def test_more_independently_written_mistakes_are_named(fn, key):
    res = check("repeat_kv", fn)
    assert res.mistake == key, res.message


def test_level_one_messages_hold_no_code_that_passes():
    """The issue's examples: the tiled heads and the interleaved RoPE messages no longer
    carry the fix; it comes when the learner asks."""
    tiled = EXERCISES["repeat_kv"].mistake("tiled")
    assert "np.repeat(x, n_rep, axis=1)" not in tiled.message and "np.repeat(x, n_rep, axis=1)" in tiled.fix
    inter = EXERCISES["apply_rope"].mistake("interleaved_pairs")
    assert "x2 cos + x1 sin" not in inter.message and "x2 * cos + x1 * sin" in inter.fix


def test_in_place_no_longer_names_the_order_of_the_heads():
    ex = EXERCISES["repeat_kv"]
    texts = [ex.prompt, ex.hint, *ex.hints] + [t for m in ex.mistakes for t in (m.title, m.message, m.fix)]
    assert not any("in place" in t for t in texts)


@pytest.mark.parametrize("name,fn", [("apply_rope", rope_torch_float32), ("repeat_kv", repeat_broadcast)])
def test_other_correct_answers_pass_on_every_draw(name, fn):
    assert not passes_every_seed(EXERCISES[name], fn, seeds=range(10))


def test_the_hint_ladder_walks_from_the_fix_to_the_near_solution():
    """Level 1 with the failure, level 2 (the fix) on a second check or the first hint(),
    then the exercise's hints, then the end of the ladder."""
    from attnlib.exercises._hints import _LADDER, next_hint

    _LADDER.pop("repeat_kv", None)  # a fresh kernel: no earlier check of repeat_kv
    ex = EXERCISES["repeat_kv"]
    tiled = ex.mistake("tiled")
    r = check("repeat_kv", lambda x, n: np.tile(x, (1, n, 1, 1)))
    assert r.mistake == "tiled" and not r.fix and tiled.fix not in str(r)
    steps = [next_hint("repeat_kv") for _ in range(4)]
    assert steps[0].text == tiled.fix and [s.text for s in steps[1:3]] == list(ex.hints)
    assert steps[0].step == 1 and steps[2].step == steps[2].steps == 3
    assert "last hint" in steps[3].text


def test_the_code_in_level_one_detector_is_not_vacuous():
    """The message issue 20 quotes ('like np.repeat(x, n_rep, axis=1)') is caught."""
    from dataclasses import replace

    from exercise_catalogue import passing_code_in_level_one
    ex = EXERCISES["repeat_kv"]
    old = replace(ex.mistake("tiled"), message="Repeat each head in place, like np.repeat(x, n_rep, axis=1).")
    assert passing_code_in_level_one(replace(ex, mistakes=[old])) == ["np.repeat(x, n_rep, axis=1)"]
