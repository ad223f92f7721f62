"""attnlib.instruments.positions: a model run from a later start position sees only its positions change
(RoPE: nothing changes); the position profile measures every position with the right keys;
bad input is refused with the fix. (Training seeds together and the per-query head measures
are attnlib.instruments.train's: tests/test_train.py.)"""
import pytest
import torch

from attnlib.instruments import inference as inf
from attnlib.instruments import positions as pos
from attnlib.models import GPT, GPTConfig


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


def test_position_profile_refuses_bad_input():
    model = make("learned", 0)
    with pytest.raises(ValueError, match=r"token ids \(N, L \+ 1\)"):
        pos.position_profile(model, torch.zeros(5, dtype=torch.long), trained=3)
    with pytest.raises(ValueError, match="trained must be a positive int"):
        pos.position_profile(model, torch.zeros(1, 5, dtype=torch.long), trained=0)
