"""Chapter 8 exercises beyond the generic contract (tests/test_exercises_contract.py):
other correct one-token steps of causal linear attention pass (torch, einsum, loops), the
step reproduces al.linear_attention over a sequence, and mistakes written another way are
named."""
import numpy as np
import pytest
import torch

import attnlib as al
from attnlib.exercises import check
from exercise_catalogue import catalogue_problems, passes_every_seed

# ---------------------------------------------------------------- linear_attention_step

def step_torch(kv, z, phi_q, phi_k, v):
    kv, z, phi_q, phi_k, v = (torch.as_tensor(x) for x in (kv, z, phi_q, phi_k, v))
    kv = kv + torch.outer(phi_k, v)
    z = z + phi_k
    return kv, z, (phi_q @ kv) / (phi_q @ z)


def step_einsum(kv, z, phi_q, phi_k, v):
    kv = kv + np.einsum("f,e->fe", phi_k, v)
    z = z + phi_k
    return kv, z, np.einsum("f,fe->e", phi_q, kv) / np.einsum("f,f->", phi_q, z)


def step_loops(kv, z, phi_q, phi_k, v):
    F, Ev = kv.shape
    new_kv = [[kv[f][e] + phi_k[f] * v[e] for e in range(Ev)] for f in range(F)]
    new_z = [z[f] + phi_k[f] for f in range(F)]
    den = sum(phi_q[f] * new_z[f] for f in range(F))
    out = [sum(phi_q[f] * new_kv[f][e] for f in range(F)) / den for e in range(Ev)]
    return np.array(new_kv), np.array(new_z), np.array(out)


@pytest.mark.parametrize("fn", [step_torch, step_einsum, step_loops])
def test_other_correct_step_solutions_pass(fn):
    res = check("linear_attention_step", fn)
    assert res.passed, res.message


def test_the_step_reproduces_causal_linear_attention_over_a_sequence():
    """The exercise teaches what al.linear_attention(is_causal=True) computes."""
    ref = al.exercises.EXERCISES["linear_attention_step"].reference
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((30, 4)) for _ in range(3))
    fq, fk = al.elu_feature_map(q), al.elu_feature_map(k)
    kv, z, outs = np.zeros((4, 4)), np.zeros(4), []
    for i in range(30):
        kv, z, out = ref(kv, z, fq[i], fk[i], v[i])
        outs.append(out)
    np.testing.assert_allclose(np.array(outs), al.linear_attention(q, k, v, is_causal=True), atol=1e-12)


def test_a_step_that_reads_before_adding_its_own_key_is_named():
    def early(kv, z, phi_q, phi_k, v):
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (phi_q @ kv) / (phi_q @ z)
        return kv + np.outer(phi_k, v), z + phi_k, out

    res = check("linear_attention_step", early)
    assert res.mistake == "read_before_write" and "j <= i" in res.message


def test_an_explicit_quadratic_answer_is_impossible_the_step_sees_one_token():
    """The stub's inputs are one token and a fixed-size state: the signature itself forces the
    running-sum idea (there is no sequence to build an (L, L) matrix from)."""
    ex = al.exercises.EXERCISES["linear_attention_step"]
    for case in ex.all_cases():
        kv, z, phi_q, phi_k, v = case.args
        assert phi_q.ndim == phi_k.ndim == v.ndim == 1 and kv.shape == (z.shape[0], v.shape[0])


def test_the_chapter_shows_the_registered_step_stub():
    import json
    from pathlib import Path

    stub = al.exercises.EXERCISES["linear_attention_step"].stub
    nb = json.loads((Path(__file__).parents[1] / "chapters" / "08_long_sequences.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    shown = [c for c in cells if "raise NotImplementedError" in c and 'check("linear_attention_step"' in c]
    assert len(shown) == 1 and shown[0].startswith(stub.rstrip("\n"))


def _learner_key_normaliser(kv, z, phi_q, phi_k, v):
    kv = kv + phi_k[:, None] * v[None, :]
    z = z + phi_k
    return kv, z, np.dot(phi_q, kv) / np.dot(z, phi_k)


def _learner_query_in_state(kv, z, phi_q, phi_k, v):
    kv = kv + np.einsum("f,e->fe", phi_q, v)
    z = z + phi_q
    return kv, z, np.einsum("f,fe->e", phi_q, kv) / (phi_q * z).sum()


def _learner_out_first(kv, z, phi_q, phi_k, v):
    new_kv, new_z = kv + np.outer(phi_k, v), z + phi_k
    return (new_kv.T @ phi_q) / (new_z @ phi_q), new_kv, new_z


@pytest.mark.parametrize("fn,key", [(_learner_key_normaliser, "key_normaliser"),
                                    (_learner_query_in_state, "query_in_state"),
                                    (_learner_out_first, "out_first")])
def test_step_mistakes_written_another_way_are_named(fn, key):
    res = check("linear_attention_step", fn)
    assert not res.passed and res.mistake == key, res.message


def test_catalogue_holds_on_every_draw_of_the_cases():
    problems = catalogue_problems(al.exercises.EXERCISES["linear_attention_step"])
    assert not problems, problems[:5]


def step_float32(kv, z, phi_q, phi_k, v):
    return step_torch(*(torch.as_tensor(x, dtype=torch.float32) for x in (kv, z, phi_q, phi_k, v)))


def test_float32_answers_pass_on_every_draw():
    assert not passes_every_seed(al.exercises.EXERCISES["linear_attention_step"], step_float32, seeds=range(10))
