"""Chapter 13's shipped model: its files, its record, and make model's training, which a short
run must reproduce along the recorded loss curve."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest
import torch

from attnlib.data.chars import CharTokenizer
from attnlib.models import GPT, GPTConfig, pretrained

ROOT = pathlib.Path(__file__).resolve().parents[1]


def trainer():
    spec = importlib.util.spec_from_file_location("train_text_model", ROOT / "tools" / "train_text_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tt():
    return trainer()


@pytest.fixture(scope="module")
def data(tt):
    return tt.corpus()


def test_save_and_load_give_the_same_model(tmp_path):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=5, context_length=16, d_model=8, num_heads=2, mlp=True)).eval()
    tok = CharTokenizer("ab c\n")
    pretrained.save(model, tok, "tiny", {"note": "test"}, folder=tmp_path)
    again, tok2, record = pretrained.load("tiny", folder=tmp_path)
    x = torch.tensor([[0, 1, 2, 3, 4, 0]])
    assert torch.equal(model(x), again(x)) and tok2.alphabet == tok.alphabet and record == {"note": "test"}
    assert pretrained.size_bytes("tiny", folder=tmp_path) > 4 * model.num_parameters()


def test_files_from_different_runs_are_refused(tmp_path):
    model = GPT(GPTConfig(vocab_size=5, context_length=16, d_model=8, num_heads=2))
    pretrained.save(model, CharTokenizer("ab c\n"), "tiny", {}, folder=tmp_path)
    (tmp_path / "tiny.bin").write_bytes((tmp_path / "tiny.bin").read_bytes()[:-4])
    with pytest.raises(ValueError, match="different runs"):
        pretrained.load("tiny", folder=tmp_path)
    with pytest.raises(FileNotFoundError, match="make model"):
        pretrained.load("nothing", folder=tmp_path)


def test_the_shipped_model_is_small_and_knows_the_plays(tt, data):
    model, tok, record = pretrained.load()
    assert tok.alphabet == data[0].alphabet                       # the corpus's characters, in order
    assert pretrained.size_bytes() < 3 * 2**20                     # a few MB at most: the page downloads it
    assert record["steps"] == tt.STEPS and record["seed"] == tt.SEED
    steps = [p["step"] for p in record["curve"]]
    assert steps[0] == 0 and steps[-1] == record["steps"] and steps == sorted(steps)


def test_the_shipped_model_has_the_recorded_validation_loss(tt, data):
    """The record's last validation loss, measured again on the same windows with the shipped weights."""
    model, tok, record = pretrained.load()
    _, _, val = data
    T = model.cfg.context_length
    starts = torch.randint(len(val) - T - 1, (tt.EVAL_WINDOWS,), generator=torch.Generator().manual_seed(1))
    loss = tt.val_loss(model, *tt.windows(val, starts, T))
    assert abs(loss - record["curve"][-1]["val"]) < 2e-3
    assert loss < 1.6


@pytest.mark.slow
def test_a_short_retraining_follows_the_recorded_curve(tt, data):
    """make model's first 100 steps, again: the losses at steps 0, 50 and 100 are the recorded
    ones (to the bit on the machine that trained it; within 0.02 nats on another CPU)."""
    _, _, record = pretrained.load()
    recorded = {p["step"]: p["val"] for p in record["curve"]}
    seen = []
    _, _, rec = tt.train(100, data=data, progress=seen.append)
    again = {p["step"]: p["val"] for p in rec["curve"]}
    assert sorted(again) == [0, 50, 100] and len(seen) == 3
    for step, loss in again.items():
        assert abs(loss - recorded[step]) < 0.02, (step, loss, recorded[step])
    assert again[100] < again[0] - 1.5                              # it did learn: 4.8 -> about 2.6
