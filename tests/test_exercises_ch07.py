"""Chapter 7 exercises beyond the generic contract (tests/test_exercises_contract.py): the
catalogues the issue asks for, correct answers written in other ways, mistakes written
independently, and the references against attnlib.train and torch."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlib import train as T
from attnlib.exercises import EXERCISES, check


def test_catalogues_cover_the_issue_mistakes():
    need = {"diagonal", "future", "sum"}
    # in prev_token_score the swapped read w[i - 1, i] averages the same entries as the future
    # diagonal w[i, i + 1]: one mistake, the swap as its variant
    assert need | {"includes_first"} <= {m.key for m in EXERCISES["prev_token_score"].mistakes}
    assert EXERCISES["prev_token_score"].mistake("future").variants
    assert need | {"transposed", "duplicate_token", "includes_first_copy"} <= {
        m.key for m in EXERCISES["induction_score"].mistakes}
    assert {"unshifted_targets", "off_by_one_start"} <= {m.key for m in EXERCISES["repeat_loss"].mistakes}


# --- correct answers written in other ways pass ------------------------------------

def prev_loop(weights):
    w = np.asarray(weights)
    L = w.shape[-1]
    return sum(w[..., i, i - 1] for i in range(1, L)) / (L - 1)


def prev_torch(weights):
    return torch.diagonal(torch.as_tensor(weights, dtype=torch.float32), offset=-1, dim1=-2, dim2=-1).mean(-1)


def induction_diagonal(weights, period):
    return np.diagonal(weights, offset=1 - period, axis1=-2, axis2=-1)[..., 1:].mean(-1)


def induction_loop(weights, period):
    L = weights.shape[-1]
    return np.mean([weights[..., i, i - period + 1] for i in range(period, L)], axis=0)


def repeat_loss_torch(logits, seq, period):
    lg, s = torch.as_tensor(logits), torch.as_tensor(seq)
    loss = F.cross_entropy(lg.transpose(1, 2), s[:, 1:], reduction="none")  # (N, L - 1)
    return loss[:, period - 1:].mean().item()


# (attnlib.train.prev_token_score is the library's own answer: refused, issue 20;
# tests/test_exercises_contract.py::test_a_borrowed_answer_is_refused_whatever_name_reaches_it)
@pytest.mark.parametrize("name,fn", [("prev_token_score", prev_loop), ("prev_token_score", prev_torch),
                                     ("induction_score", induction_diagonal), ("induction_score", induction_loop),
                                     ("repeat_loss", repeat_loss_torch)])
def test_equivalent_correct_answers_pass(name, fn):
    res = check(name, fn)
    assert res.passed, res.message


# --- mistakes written independently of the catalogue are still recognised ------------

@pytest.mark.parametrize("name,fn,key", [
    ("prev_token_score", lambda w: np.diagonal(w, axis1=-2, axis2=-1).mean(-1), "diagonal"),
    ("prev_token_score", lambda w: np.diagonal(w, offset=-1, axis1=-2, axis2=-1).sum(-1), "sum"),
    ("prev_token_score", lambda w: np.diagonal(w, offset=1, axis1=-2, axis2=-1).mean(-1), "future"),
    ("prev_token_score", lambda w: np.diagonal(np.swapaxes(w, -1, -2), offset=-1, axis1=-2, axis2=-1).mean(-1),
     "future"),
    ("induction_score", lambda w, p: np.diagonal(w, offset=-p, axis1=-2, axis2=-1).mean(-1), "duplicate_token"),
    ("induction_score", lambda w, p: np.diagonal(w, offset=1 - p, axis1=-2, axis2=-1).mean(-1),
     "includes_first_copy"),
    ("repeat_loss", lambda lg, s, p: F.cross_entropy(torch.as_tensor(lg).transpose(1, 2),
                                                     torch.as_tensor(s)[:, :-1], reduction="none")[:, p - 1:].mean().item(),
     "unshifted_targets"),
    ("repeat_loss", lambda lg, s, p: F.cross_entropy(torch.as_tensor(lg).transpose(1, 2),
                                                     torch.as_tensor(s)[:, 1:]).item(), "includes_first_copy"),
])
def test_independently_written_mistakes_are_recognised(name, fn, key):
    res = check(name, fn)
    assert res.mistake == key, res.message


# --- the references agree with the chapter's instruments -----------------------------

def test_references_agree_with_attnlib_train():
    rng = np.random.default_rng(0)
    w = rng.random((2, 3, 10, 10))
    np.testing.assert_allclose(EXERCISES["prev_token_score"].reference(w), T.prev_token_score(w))
    np.testing.assert_allclose(EXERCISES["induction_score"].reference(w, 4), T.induction_score(w, 4))


def test_repeat_loss_reference_equals_the_models_repeat_loss():
    from attnlib.model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, context_length=16)).double()
    seq = T.repeated_blocks(4, 6, length=16, vocab_size=16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(seq[:, :-1]).numpy()
    ours = EXERCISES["repeat_loss"].reference(logits, seq.numpy(), 6)
    assert ours == pytest.approx(T.copy_losses(model, seq, 6)["repeat"], rel=1e-6)


def test_perfect_heads_score_one():
    L, period = 10, 4
    prev = np.eye(L, k=-1)
    prev[0, 0] = 1.0
    assert EXERCISES["prev_token_score"].reference(prev) == pytest.approx(1.0)
    ind = np.zeros((L, L))
    ind[np.arange(period, L), np.arange(period, L) - period + 1] = 1.0
    assert EXERCISES["induction_score"].reference(ind, period) == pytest.approx(1.0)
