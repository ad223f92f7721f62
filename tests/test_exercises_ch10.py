"""Chapter 10's exercise (``repeat_loss``) beyond the generic contract
(tests/test_exercises_contract.py): the catalogue the issue asks for, correct answers written
in other ways, mistakes written independently, and the reference against the model's own
repeat loss (attnlib.instruments.train.copy_losses)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from exercise_catalogue import catalogue_problems, passes_every_seed

from attnlib.exercises import EXERCISES, check
from attnlib.instruments import train as T


def test_catalogue_covers_the_issue_mistakes():
    assert {"unshifted_targets", "off_by_one_start"} <= {m.key for m in EXERCISES["repeat_loss"].mistakes}


def repeat_loss_torch(logits, seq, period):
    lg, s = torch.as_tensor(logits), torch.as_tensor(seq)
    loss = F.cross_entropy(lg.transpose(1, 2), s[:, 1:], reduction="none")  # (N, L - 1)
    return loss[:, period - 1:].mean().item()


def log_softmax_np(lg):
    z = lg - lg.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_an_equivalent_correct_answer_passes():
    res = check("repeat_loss", repeat_loss_torch)
    assert res.passed, res.message


def test_an_equivalent_correct_answer_passes_on_every_draw():
    assert not passes_every_seed(EXERCISES["repeat_loss"], repeat_loss_torch, seeds=range(10))


@pytest.mark.parametrize("fn,key", [
    # written independently of the catalogue
    (lambda lg, s, p: F.cross_entropy(torch.as_tensor(lg).transpose(1, 2),
                                      torch.as_tensor(s)[:, :-1], reduction="none")[:, p - 1:].mean().item(),
     "unshifted_targets"),
    (lambda lg, s, p: F.cross_entropy(torch.as_tensor(lg).transpose(1, 2), torch.as_tensor(s)[:, 1:]).item(),
     "includes_first_copy"),
    # no log-softmax: a negative loss
    (lambda lg, s, p: -np.take_along_axis(lg, s[:, 1:, None], -1)[..., 0][:, p - 1:].mean(), "no_log_softmax"),
    # the chapter-2 trap: log(exp(l) / sum exp(l)) is NaN at logits near 1000
    (lambda lg, s, p: -np.take_along_axis(np.log(np.exp(lg) / np.exp(lg).sum(-1, keepdims=True)),
                                          s[:, 1:, None], -1)[..., 0][:, p - 1:].mean(), "log_softmax_overflow"),
    (lambda lg, s, p: -torch.log(torch.exp(torch.as_tensor(lg)) / torch.exp(torch.as_tensor(lg)).sum(
        -1, keepdim=True)).gather(-1, torch.as_tensor(s)[:, 1:, None])[..., 0][:, p - 1:].mean().item(),
     "log_softmax_overflow"),
    # a slice for the batch and fancy indices for positions and targets: (N, N, L - 1)
    (lambda lg, s, p: -log_softmax_np(lg)[:, np.arange(lg.shape[1]), s[:, 1:]][..., p - 1:].mean(),
     "batch_index_mixed"),
])
def test_wrong_answers_written_independently_are_named(fn, key):
    res = check("repeat_loss", fn)
    assert res.mistake == key, res.message


def test_the_reference_equals_the_models_repeat_loss():
    from attnlib.models import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, context_length=16)).double()
    seq = T.repeated_blocks(4, 6, length=16, vocab_size=16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(seq[:, :-1]).numpy()
    ours = EXERCISES["repeat_loss"].reference(logits, seq.numpy(), 6)
    assert ours == pytest.approx(T.copy_losses(model, seq, 6)["repeat"], rel=1e-6)


def test_catalogue_holds_on_every_draw_of_the_cases():
    problems = catalogue_problems(EXERCISES["repeat_loss"])
    assert not problems, problems[:5]


def test_no_log_softmax_says_the_loss_is_negative():
    msg = EXERCISES["repeat_loss"].mistake("no_log_softmax").message
    assert "negative" in msg and "never" in msg


@pytest.mark.parametrize("seed", range(10))
def test_every_draw_has_logits_near_1000(seed):
    cases = EXERCISES["repeat_loss"].all_cases(seed)
    assert any(np.asarray(c.args[0]).min() > 900 for c in cases)


def test_the_stub_says_the_input_is_numpy():
    stub = EXERCISES["repeat_loss"].stub
    assert "NumPy" in stub and "torch.as_tensor" in stub


def test_repeat_loss_does_not_answer_its_question():
    """Which positions count is the question the chapter asks: the stub and prompt do not say."""
    ex = EXERCISES["repeat_loss"]
    for text in (ex.stub, ex.prompt):
        assert "period - 1" not in text and "t = period" not in text
