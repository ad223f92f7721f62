"""attnlib.instruments.train: chapter 9's tasks, training loop and measurements."""
import math

import numpy as np
import pytest
import torch

import attnlib.models.gpt
from attnlib.instruments import inference as inf
from attnlib.instruments import train as T
from attnlib.kernels.attention import scaled_dot_product_attention
from attnlib.models import GPT, GPTConfig
from attnlib.ui.plots import LivePlot, Shown


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


def test_prev_token_weight_reads_the_first_subdiagonal():
    w = torch.rand(2, 3, 5, 5)
    out = T.prev_token_weight(w)
    assert out.shape == (2, 3, 5) and torch.isnan(out[..., 0]).all()
    for i in range(1, 5):
        assert torch.equal(out[..., i], w[..., i, i - 1])
    np.testing.assert_array_equal(T.prev_token_weight(w.numpy()), out.numpy())   # NumPy alike
    torch.testing.assert_close(T.prev_token_score(w), out[..., 1:].mean(-1))    # the score is its mean


def test_seen_before_marks_repeated_tokens():
    idx = torch.tensor([[3, 1, 3, 2, 1, 3]])
    assert T.seen_before(idx).tolist() == [[False, False, True, False, True, True]]


def test_induction_weight_sums_over_every_earlier_occurrence():
    idx = torch.tensor([[5, 7, 9, 5, 7, 9, 5]])                # query 6 (token 5): keys 1 and 4 follow a 5
    w = torch.zeros(1, 2, 7, 7)
    w[0, 0, 6, 1], w[0, 0, 6, 4], w[0, 0, 6, 5] = 0.25, 0.5, 0.25
    w[0, 1, 6, 6] = 1.0
    out = T.induction_weight(w, idx)                           # (1, 2, 7)
    assert out.shape == (1, 2, 7)
    assert out[0, 0, 6].item() == pytest.approx(0.75) and out[0, 1, 6].item() == 0.0
    assert torch.isnan(out[0, :, :3]).all() and not torch.isnan(out[0, :, 3:]).any()
    assert T.induction_weight(w[:, 0], idx).shape == (1, 7)
    with pytest.raises(ValueError, match=r"weights must be \(N, h, L, L\) or \(N, L, L\) = \(1, \[h,\] 7, 7\)"):
        T.induction_weight(w[..., :6], idx)


def test_induction_weight_needs_no_period_and_agrees_with_induction_score_on_two_copies():
    period, L = 5, 10
    idx = T.repeated_blocks(6, period, length=L, vocab_size=16, generator=gen(4))   # (6, 10): two copies
    w = torch.rand(6, 3, L, L).tril()
    w = w / w.sum(-1, keepdim=True)                            # causal weights, rows sum to 1
    per_query = T.induction_weight(w, idx)                     # (6, 3, 10), NaN on the first copy
    assert torch.isnan(per_query[..., :period]).all() and not torch.isnan(per_query[..., period:]).any()
    torch.testing.assert_close(per_query[..., period:].mean(-1), T.induction_score(w, period))
    torch.testing.assert_close(T.seen_before(idx), ~torch.isnan(per_query[:, 0]))


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


def small_cfg(**kw):
    return GPTConfig(vocab_size=16, context_length=16, num_heads=2, d_model=32, **kw)


def make_batch(g, n=8):
    return T.lm_pair(T.repeated_blocks(n, (4, 8), vocab_size=16, generator=g))


def run(seeds=(0, 1, 2), steps=12, **kw):
    ev = T.repeated_blocks(16, 8, vocab_size=16, generator=gen(99))
    kw.setdefault("evaluate", lambda m: T.copy_losses(m, ev, 8))
    return T.train_seeds(lambda: GPT(small_cfg()).double(), seeds, T.seeded_batches(make_batch, seeds),
                         steps=steps, lr=3e-3, eval_every=5, **kw)


def test_lm_pair_keeps_leading_dims():
    seq = torch.arange(24).view(2, 3, 4)
    x, y = T.lm_pair(seq)
    assert torch.equal(x, seq[..., :-1]) and torch.equal(y, seq[..., 1:])


def test_seeded_batches_stack_one_stream_per_seed():
    batch = T.seeded_batches(make_batch, [3, 5])
    x, y = batch(0)
    assert x.shape == (2, 8, 15) and y.shape == (2, 8, 15)
    alone = make_batch(gen(1005))  # seed 5's stream: torch.Generator().manual_seed(1000 + 5)
    assert torch.equal(x[1], alone[0]) and torch.equal(y[1], alone[1])
    assert not torch.equal(x[0], x[1])


BUILD = {"learned positions, FFN": lambda: GPT(small_cfg(mlp=True)).double(),   # chapter 9
         "RoPE": lambda: inf.rope_gpt(small_cfg()).double()}                      # chapter 12


@pytest.mark.parametrize("kind", list(BUILD))
def test_train_seeds_trains_each_seed_as_if_alone(kind):
    steps, seeds = 8, (0, 4)
    run_ = T.train_seeds(BUILD[kind], seeds, T.seeded_batches(make_batch, seeds),
                         steps=steps, lr=3e-3, warmup=3)
    for i, seed in enumerate(seeds):
        torch.manual_seed(seed)
        model = BUILD[kind]()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
        g = gen(1000 + seed)
        losses, norms = [], []
        for step in range(steps):
            for group in opt.param_groups:
                group["lr"] = 3e-3 * min(1.0, (step + 1) / 3)
            loss = model.loss(*make_batch(g))
            opt.zero_grad()
            loss.backward()
            norms.append(float(torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))))
            opt.step()
            losses.append(float(loss.detach()))
        np.testing.assert_allclose(run_.loss[:, i], losses, rtol=1e-9)
        np.testing.assert_allclose(run_.grad_norm[:, i], norms, rtol=1e-9)
        for (name, p), q in zip(model.named_parameters(), run_.models[i].parameters()):
            torch.testing.assert_close(q, p, rtol=1e-9, atol=1e-9, msg=name)
        assert not run_.models[i].training                          # left in eval mode
    # the model's attention is attnlib's own, inside vmap and after it: nothing was swapped
    assert attnlib.models.gpt.scaled_dot_product_attention is scaled_dot_product_attention


def test_seeds_differ_and_on_step_sees_every_step():
    seen = []
    r = run(steps=3, evaluate=None, on_step=lambda step, losses: seen.append((step, losses.shape, losses)))
    assert [(step, shape) for step, shape, _ in seen] == [(1, (3,)), (2, (3,)), (3, (3,))]
    for step, _, losses in seen:
        np.testing.assert_array_equal(losses, r.loss[step - 1])
    assert not torch.equal(r.models[0].tok_emb, r.models[1].tok_emb)


def test_train_seeds_refuses_bad_input_with_the_fix():
    widths = iter([32, 16])
    with pytest.raises(ValueError, match="one architecture"):      # seed 1's model is narrower
        T.train_seeds(lambda: GPT(GPTConfig(vocab_size=16, context_length=16, num_heads=2, d_model=next(widths))),
                      (0, 1), T.seeded_batches(make_batch, (0, 1)), steps=1)
    with pytest.raises(ValueError, match=r"with 3 seeds both must be \(3, \.\.\.\)"):
        T.train_seeds(lambda: GPT(small_cfg()), (0, 1, 2), T.seeded_batches(make_batch, (0, 1)), steps=1)
    with pytest.raises(ValueError, match="steps must be a positive int"):
        T.train_seeds(lambda: GPT(small_cfg()), (0,), T.seeded_batches(make_batch, (0,)), steps=0)
    with pytest.raises(ValueError, match="seeds is empty"):
        T.train_seeds(lambda: GPT(small_cfg()), [], T.seeded_batches(make_batch, []), steps=1)


def test_train_seeds_records_per_seed_and_is_deterministic():
    blocks = lambda name: name.split(".")[1] if name.startswith("blocks.") else None  # noqa: E731
    a = run(snapshot=lambda m: T.head_scores(m, T.repeated_blocks(2, 8, vocab_size=16, generator=gen(3)), 8)["prev"],
            snapshot_at=(0, 12), grad_groups=blocks)
    b = run()
    assert a.loss.shape == (12, 3) and a.grad_norm.shape == (12, 3) and a.steps == 12
    assert sorted(a.evals) == [0, 5, 10, 12] and sorted(a.snapshots) == [0, 12]
    assert len(a.snapshots[12]) == 3 and a.snapshots[12][0].shape == (2, 2)
    steps, rep = a.eval_series("repeat")
    assert list(steps) == [0, 5, 10, 12] and rep.shape == (4, 3) and np.all(rep[-1] < rep[0])
    np.testing.assert_array_equal(a.final("first"), a.evals[12]["first"])
    np.testing.assert_array_equal(a.loss, b.loss)
    assert sorted(a.group_grad_norm) == ["0", "1"] and a.group_grad_norm["0"].shape == (12, 3)
    # the blocks' norms and the rest (embeddings, unembedding) make up the whole gradient
    assert np.all(a.group_grad_norm["0"] ** 2 + a.group_grad_norm["1"] ** 2 < a.grad_norm ** 2)
    assert a.wall_seconds > 0 and a.cpu_seconds > 0


def test_each_seeds_model_is_the_trained_one():
    r = run(evaluate=None)
    ev = T.repeated_blocks(4, 8, vocab_size=16, generator=gen(7))
    x, y = T.lm_pair(ev)
    params = [dict(m.named_parameters()) for m in r.models]
    assert not torch.equal(params[0]["tok_emb"], params[1]["tok_emb"])
    with torch.no_grad():
        losses = [float(m.loss(x, y)) for m in r.models]
    assert len(set(losses)) == 3


def test_warmup_changes_the_run():
    a, b = run(steps=6, evaluate=None), run(steps=6, evaluate=None, warmup=4)
    np.testing.assert_array_equal(a.loss[0], b.loss[0])
    assert not np.allclose(a.loss[3], b.loss[3])


def test_a_non_finite_loss_names_the_seed_and_step():
    nan_loss = lambda logits, y: T.next_token_loss(logits, y) * torch.nan  # noqa: E731
    with pytest.raises(FloatingPointError, match="seed 0: the loss is nan at step 0"):
        run(loss=nan_loss)


def test_train_seeds_learns_the_previous_token_task_with_ignored_targets():
    seeds = (0, 1)
    cfg = GPTConfig(vocab_size=8, context_length=12, num_layers=1, num_heads=2, d_model=32)
    x, y = T.previous_token_task(64, 12, vocab_size=8, generator=gen(5))
    r = T.train_seeds(lambda: GPT(cfg), seeds,
                      T.seeded_batches(lambda g: T.previous_token_task(32, 12, vocab_size=8, generator=g), seeds),
                      steps=60, lr=1e-2, evaluate=lambda m: {"loss": m.loss(x, y)}, eval_every=30)
    assert np.all(r.final("loss") < 0.5 * r.evals[0]["loss"])


def test_seen_token_mass_of_a_uniform_model():
    x = torch.tensor([[1, 2, 1, 3], [0, 0, 0, 0]])
    uniform = lambda idx: torch.zeros(*idx.shape, 5)  # noqa: E731  (V = 5: every token 1/5)
    np.testing.assert_allclose(T.seen_token_mass(uniform, x), np.array([1, 2, 2, 3]) / 5 / 2 + 1 / 5 / 2)


def test_live_plot_is_silent_outside_jupyter():
    live = LivePlot(["first", "repeat"], every=1)
    r = run(steps=10, live=live)
    assert live._handle is None and r.evals


def test_copy_stats_agree_with_copy_losses_and_seen_token_mass():
    torch.manual_seed(0)
    model = GPT(small_cfg()).double()
    seq = T.repeated_blocks(6, 5, length=14, vocab_size=16, generator=gen(2))
    stats = T.copy_stats(model, seq, 5)
    losses = T.copy_losses(model, seq, 5)
    assert stats["first"] == pytest.approx(losses["first"]) and stats["repeat"] == pytest.approx(losses["repeat"])
    mass = T.seen_token_mass(model, T.lm_pair(seq)[0])
    assert stats["seen_first"] == pytest.approx(mass[:4].mean()) and stats["seen_repeat"] == pytest.approx(mass[4:].mean())


@pytest.mark.parametrize("values, step, want", [([0.34, 0.47], 0.1, "0.3–0.5"), ([0.30, 0.30], 0.1, "0.3"),
                                                ([3.46, 3.49, 3.5], 0.05, "3.45–3.50"), ([180, 240], 50, "150–250"),
                                                ([2.0], 1, "2"), ([-0.04, 0.02], 0.1, "-0.1–0.1")])
def test_span_rounds_outward(values, step, want):
    assert T.span(values, step) == want
    with pytest.raises(ValueError, match="numbers"):
        T.span([1.0, float("nan")])


def test_live_plot_follows_several_runs_with_their_labels():
    live = LivePlot(["repeat"], ["first run", "second run"], xmax=10)
    a = run(steps=10, live=live)
    b = run(steps=12, live=live)
    assert live._runs == [a, b] and live._label(1, 0) == "second run" and live._label(2, 0) == "repeat"
    live._draw("done")  # what a notebook shows: both runs, cut at step 10
    lines = [line for line in live._ax.get_lines() if len(line.get_xdata())]
    assert len(lines) == 2 * 3 and max(max(line.get_xdata()) for line in lines) == 10
    assert [t.get_text() for t in live._ax.get_legend().get_texts()] == ["first run", "second run"]



@pytest.mark.parametrize("where, outside", [("outside", True), ("upper right", False)])
def test_live_plot_can_put_its_legend_beside_the_axes(where, outside):
    """legend_loc="outside": the legend sits right of the axes, where it covers no curve
    (issue 28: chapter 10's legend in the upper right hid the end of a curve)."""
    live = LivePlot(["repeat"], ["first run", "second run"], legend_loc=where)
    run(steps=10, live=live)
    run(steps=10, live=live)
    live._draw("done")
    fig = live._fig
    fig.canvas.draw()
    legend = live._ax.get_legend().get_window_extent()
    axes = live._ax.get_window_extent()
    assert bool(legend.x0 >= axes.x1) is outside, (legend, axes)
    assert legend.x1 <= fig.bbox.x1 + 1, "the legend is cut off at the figure's right edge"

def _fake_notebook(monkeypatch) -> list:
    """IPython's display as a notebook would call it; returns the list of what is shown."""
    import IPython
    import IPython.display
    import matplotlib.pyplot as plt

    shown = []

    class Handle:
        def update(self, obj, raw=False):
            shown.append(obj)

    def display(obj, raw=False, display_id=False):
        shown.append(obj)
        return Handle()

    plt.close(plt.figure())  # pyplot's display hook is settled before IPython is faked
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", display)
    monkeypatch.setattr(IPython.display, "clear_output", lambda wait=False: shown.append("cleared"))
    return shown


def _png_colour_type(frame: dict) -> int:
    import base64

    return base64.b64decode(frame["image/png"])[25]  # IHDR's colour type: 3 palette, 6 RGBA


@pytest.mark.parametrize("seconds, redraws", [(0.0, 3), (1e9, 1)])
def test_live_plot_redraws_at_most_once_in_live_seconds_and_stores_the_compact_png(monkeypatch, seconds, redraws):
    """A redraw costs a few tenths of a second: while training, one every LIVE_SECONDS at
    most (a plain PNG, replaced by the next); the figure that stays is the compact one."""
    from attnlib.ui import plots

    shown = _fake_notebook(monkeypatch)
    monkeypatch.setattr(plots, "LIVE_SECONDS", seconds)
    run(steps=10, live=LivePlot(["repeat"], every=1))        # evaluations at steps 0, 5, 10, then the close
    live, final = shown[:-1], shown[-1]
    assert len(live) == redraws and {_png_colour_type(f) for f in live} == {6}
    assert _png_colour_type(final) == 3


def test_live_plot_shows_the_finished_figure_with_its_alt_text(monkeypatch):
    shown = _fake_notebook(monkeypatch)
    live = LivePlot(["repeat"], ["first run", "second run"], every=1,
                    alt=lambda runs: f"{len(runs)} runs, last repeat loss {runs[-1].final('repeat').mean():.1f}")
    a = run(steps=10, live=live)
    assert shown and all(set(s) == {"image/png"} for s in shown)     # one run of two: live PNGs only
    b = run(steps=10, live=live)
    assert shown[-2] == "cleared" and isinstance(shown[-1], Shown) and shown[-1].png.startswith(b"\x89PNG")
    assert shown[-1].alt == f"2 runs, last repeat loss {b.final('repeat').mean():.1f}" and live._runs == [a, b]
