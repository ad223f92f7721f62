"""attnlib.train: chapter 7's tasks, training loop and measurements."""
import math

import numpy as np
import pytest
import torch

from attnlib import train as T
from attnlib.model import GPT, GPTConfig


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_repeated_blocks_repeat_with_their_period_and_distinct_ids():
    seq = T.repeated_blocks(5, 4, length=11, vocab_size=9, generator=gen())
    assert seq.shape == (5, 11) and seq.dtype == torch.long
    assert torch.equal(seq[:, 4:], seq[:, :7])
    assert all(len(set(row[:4].tolist())) == 4 for row in seq)


def test_repeated_blocks_with_random_periods():
    seq = T.repeated_blocks(200, (3, 6), length=12, vocab_size=8, generator=gen(1))
    periods = []
    for row in seq.tolist():
        p = next(p for p in range(3, 7) if row[p:] == row[:12 - p])
        periods.append(p)
    assert set(periods) == {3, 4, 5, 6}
    torch.testing.assert_close(T.repeated_blocks(3, (3, 6), generator=gen(2)),
                               T.repeated_blocks(3, (3, 6), generator=gen(2)))
    with pytest.raises(ValueError, match="vocab_size"):
        T.repeated_blocks(2, 10, vocab_size=5)


def test_previous_token_task_targets():
    x, y = T.previous_token_task(3, 7, generator=gen())
    assert torch.equal(y[:, 1:], x[:, :-1]) and torch.all(y[:, 0] == -100)


def test_scores_of_perfect_and_uniform_heads():
    L, period = 9, 4
    prev = torch.diag(torch.ones(L - 1), -1)
    prev[0, 0] = 1.0
    ind = torch.zeros(L, L)
    ind[torch.arange(period, L), torch.arange(period, L) - period + 1] = 1.0
    assert float(T.prev_token_score(prev)) == pytest.approx(1.0)
    assert float(T.induction_score(ind, period)) == pytest.approx(1.0)
    assert float(T.prev_token_score(ind)) == pytest.approx(0.0)
    uniform = np.tril(np.ones((L, L))) / np.arange(1, L + 1)[:, None]
    assert T.prev_token_score(uniform) == pytest.approx(np.mean(1 / np.arange(2, L + 1)))
    stacked = np.stack([prev.numpy(), ind.numpy()])  # (2, L, L): one score per head
    np.testing.assert_allclose(T.induction_score(stacked, period), [0.0, 1.0])


def test_phase_change_step():
    steps = np.arange(0, 100, 10)
    vals = np.array([4, 4, 3.9, 3.8, 3.0, 1.5, 0.5, 0.2, 0.1, 0.1])
    assert T.phase_change_step(steps, vals, start=4, end=0.1) == 50


def test_attention_stats_of_a_uniform_model():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=8, context_length=16, num_heads=2, d_model=16))
    for b in model.blocks:  # zero queries: every weight uniform over the visible keys
        torch.nn.init.zeros_(b.attn.w_q)
    stats = T.attention_stats(model, torch.randint(8, (2, 16)), min_keys=16)
    assert stats["max_weight"] == pytest.approx(1 / 16)
    assert stats["entropy"] == pytest.approx(math.log(16))
    p = np.full(16, 1 / 16)
    assert stats["jacobian_norm"] == pytest.approx(np.linalg.norm(np.diag(p) - np.outer(p, p)))


def test_gradient_norms_match_autograd_and_clear_grads():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=8, context_length=16, num_layers=3, d_model=16, mlp=True))
    x = torch.randint(8, (2, 10))
    y = torch.randint(8, (2, 10))
    layers = T.layer_grad_norms(model, x, y)
    qk = T.grad_norms(model, x, y)
    assert layers.shape == (3,) and all(p.grad is None for p in model.parameters())
    model.loss(x, y).backward()
    want = math.sqrt(sum(float((p.grad ** 2).sum()) for p in model.blocks[1].parameters()))
    assert layers[1] == pytest.approx(want)
    want_q = math.sqrt(sum(float((b.attn.w_q.grad ** 2).sum()) for b in model.blocks))
    assert qk["w_q"] == pytest.approx(want_q)


def test_copy_losses_and_ablation_losses():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, context_length=16, num_heads=2, d_model=16))
    seq = T.repeated_blocks(8, 5, length=16, vocab_size=16, generator=gen())
    x, y = T.lm_pair(seq)
    per = T.position_losses(model, x, y)
    losses = T.copy_losses(model, seq, 5)
    assert losses["first"] == pytest.approx(per[:4].mean(), rel=1e-6)
    assert losses["repeat"] == pytest.approx(per[4:].mean(), rel=1e-6)
    ab = T.ablation_losses(model, seq, 5, [(0, 1), (1, 0)])
    with model.ablated([(0, 1)]):
        assert ab[(0, 1)] == pytest.approx(T.copy_losses(model, seq, 5)["repeat"])
    assert T.copy_losses(model, seq, 5) == losses  # the ablation was undone


def run(seed=0, steps=40, **kw):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=16, context_length=16, num_heads=2, d_model=32))
    g = gen(seed)
    ev = T.repeated_blocks(32, 8, vocab_size=16, generator=gen(99))
    hist = T.train(model, lambda s: T.lm_pair(T.repeated_blocks(16, 8, vocab_size=16, generator=g)),
                   steps=steps, lr=3e-3, evaluate=lambda m: T.copy_losses(m, ev, 8), eval_every=10,
                   snapshot=lambda m: T.head_scores(m, ev[:4], 8)["prev"], snapshot_at=(0, steps), **kw)
    return model, hist


def test_train_records_and_is_deterministic():
    _, a = run()
    _, b = run()
    assert len(a.loss) == 40 and len(a.grad_norm) == 40
    assert sorted(a.evals) == [0, 10, 20, 30, 40] and sorted(a.snapshots) == [0, 40]
    assert a.loss == b.loss and a.evals == b.evals
    steps, rep = a.eval_series("repeat")
    assert list(steps) == [0, 10, 20, 30, 40] and rep[-1] < rep[0]


def test_warmup_changes_the_run():
    _, a = run(steps=20)
    _, b = run(steps=20, warmup=10)
    assert a.loss[0] == b.loss[0] and a.loss[5] != b.loss[5]


def test_live_plot_is_silent_outside_jupyter():
    live = T.LivePlot(["first", "repeat"], every=1)
    _, hist = run(steps=10, live=live)
    assert live._handle is None and hist.evals
