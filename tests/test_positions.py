"""attnlib.positions: seeds trained together follow the paths they follow alone; a model run
from a later start position sees only its positions change (RoPE: nothing changes); the
head measures count the right keys; bad input is refused with the fix."""
import pytest
import torch

from attnlib import inference as inf
from attnlib import positions as pos
from attnlib.model import GPT, GPTConfig


@pytest.fixture(autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def make(kind, seed, **kw):
    torch.manual_seed(seed)
    cfg = GPTConfig(**{**dict(vocab_size=11, context_length=64, num_layers=2, num_heads=2, d_model=16), **kw})
    return inf.rope_gpt(cfg) if kind == "rope" else GPT(cfg)


def batches(n, seed=0, B=4, L=10):
    gens = [torch.Generator().manual_seed(seed + s) for s in range(n)]
    data = []
    for _ in range(6):
        seq = torch.stack([torch.randint(11, (B, L + 1), generator=g) for g in gens])  # (n, B, L + 1)
        data.append((seq[..., :-1], seq[..., 1:]))
    return lambda step: data[step]


@pytest.mark.parametrize("kind", ["learned", "rope"])
def test_seeds_trained_together_follow_their_own_paths(kind):
    together = [make(kind, s) for s in range(3)]
    batch = batches(3)
    losses = pos.train_seeds(together, batch, steps=6, lr=1e-2)
    assert losses.shape == (6, 3)
    for i in range(3):  # seed i alone, with the model's own attention and its own AdamW
        alone = make(kind, i)
        opt = torch.optim.AdamW(alone.parameters(), lr=1e-2, weight_decay=0.0)
        for step in range(6):
            x, y = batch(step)
            loss = alone.loss(x[i], y[i])
            assert abs(loss.item() - losses[step, i].item()) < 1e-4
            opt.zero_grad()
            loss.backward()
            opt.step()
        for (name, a), b in zip(alone.named_parameters(), together[i].parameters()):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4, msg=name)
    assert not together[0].training
    # the model's attention is attnlib's again after training
    import attnlib.model
    from attnlib.attention import scaled_dot_product_attention
    assert attnlib.model.scaled_dot_product_attention is scaled_dot_product_attention


def test_seeds_differ_and_the_callback_sees_every_step():
    models = [make("learned", s) for s in range(2)]
    seen = []
    pos.train_seeds(models, batches(2), steps=3, callback=lambda step, losses: seen.append((step, losses.shape)))
    assert seen == [(1, (2,)), (2, (2,)), (3, (2,))]
    assert not torch.equal(models[0].tok_emb, models[1].tok_emb)


def test_train_seeds_refuses_bad_input_with_the_fix():
    with pytest.raises(ValueError, match="one architecture"):
        pos.train_seeds([make("learned", 0), make("learned", 1, d_model=32)], batches(2), steps=1)
    with pytest.raises(ValueError, match=r"\(n, B, L\) = \(3, B, L\)"):
        pos.train_seeds([make("learned", s) for s in range(3)], batches(2), steps=1)
    with pytest.raises(ValueError, match="steps must be a positive int"):
        pos.train_seeds([make("learned", 0)], batches(1), steps=0)
    with pytest.raises(TypeError, match="non-empty list"):
        pos.train_seeds([], batches(1), steps=1)


def test_a_rope_model_gives_the_same_logits_from_any_start():
    model = make("rope", 0).eval()
    idx = torch.randint(11, (3, 9))
    at0 = pos.logits_from(model, idx, 0)
    torch.testing.assert_close(at0, model(idx))
    for start in (1, 17, 40):
        torch.testing.assert_close(pos.logits_from(model, idx, start), at0, atol=1e-4, rtol=1e-4)


def test_a_learned_table_from_start_reads_its_rows_from_start():
    model = make("learned", 0).eval()
    shifted = make("learned", 0).eval()
    with torch.no_grad():
        shifted.pos_emb[:-20] = model.pos_emb[20:]              # row t of shifted = row t + 20
    idx = torch.randint(11, (2, 12))
    torch.testing.assert_close(pos.logits_from(model, idx, 20), shifted(idx), atol=1e-5, rtol=1e-5)
    assert (pos.logits_from(model, idx, 20) - model(idx)).abs().max() > 1e-2


def test_logits_from_refuses_bad_input():
    model = make("learned", 0)
    with pytest.raises(ValueError, match="start must be an int >= 0"):
        pos.logits_from(model, torch.zeros(1, 3, dtype=torch.long), -1)
    with pytest.raises(ValueError, match=r"token ids \(N, L\)"):
        pos.logits_from(model, torch.zeros(3, dtype=torch.long), 2)


def test_seen_before_marks_repeated_tokens():
    idx = torch.tensor([[3, 1, 3, 2, 1, 3]])
    assert pos.seen_before(idx).tolist() == [[False, False, True, False, True, True]]


def test_previous_token_weight_reads_the_first_subdiagonal():
    w = torch.rand(2, 3, 5, 5)
    out = pos.previous_token_weight(w)
    assert out.shape == (2, 3, 5) and torch.isnan(out[..., 0]).all()
    for i in range(1, 5):
        assert torch.equal(out[..., i], w[..., i, i - 1])


def test_induction_weight_sums_over_every_earlier_occurrence():
    idx = torch.tensor([[5, 7, 9, 5, 7, 9, 5]])                # query 6 (token 5): keys 1 and 4 follow a 5
    w = torch.zeros(1, 2, 7, 7)
    w[0, 0, 6, 1], w[0, 0, 6, 4], w[0, 0, 6, 5] = 0.25, 0.5, 0.25
    w[0, 1, 6, 6] = 1.0
    out = pos.induction_weight(w, idx)                         # (1, 2, 7)
    assert out.shape == (1, 2, 7)
    assert out[0, 0, 6].item() == pytest.approx(0.75) and out[0, 1, 6].item() == 0.0
    assert torch.isnan(out[0, :, :3]).all() and not torch.isnan(out[0, :, 3:]).any()
    assert pos.induction_weight(w[:, 0], idx).shape == (1, 7)


def test_position_profile_measures_every_position():
    model = make("learned", 0).eval()
    seq = torch.tensor([[1, 2, 3, 1, 2, 3, 1, 2, 3]] * 2)    # inputs: 8 positions
    prof = pos.position_profile(model, seq, trained=4)
    assert prof["accuracy"].shape == (8,) and prof["previous"].shape == (2, 8)
    assert torch.isnan(prof["accuracy"][:3]).all() and not torch.isnan(prof["accuracy"][3:]).any()
    _, w = model(seq[:, :-1], return_weights=True)
    torch.testing.assert_close(prof["previous"][:, 5], w[0][0, :, 5, 4])
    torch.testing.assert_close(prof["in_window"][:, 6], w[1][0, :, 6, :4].sum(-1))
    torch.testing.assert_close(prof["induction"][:, 6], w[1][0, :, 6, 1] + w[1][0, :, 6, 4])
