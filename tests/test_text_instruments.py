"""Chapter 13's instruments (attnlib.instruments.text): patterns, head scores, ablation,
repeats, copying and sampling, on texts and models built here."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib.data.chars import CharTokenizer
from attnlib.instruments import inference as inf
from attnlib.instruments import text as tx
from attnlib.models import GPT, GPTConfig

TEXT = "Pol.\nI hear him.\n\n[Exit King.]\n\nHam.\nTo be, o'er\n"


def keys_as_text(text, pattern):
    key, valid = tx.pattern_keys(text, pattern)
    return "".join(text[k] if v else "." for k, v in zip(key, valid))


def test_each_pattern_points_where_it_says():
    assert keys_as_text("ab c", "previous") == ".ab "
    # every pattern but "previous" scores only keys two or more back (t - 1 is the previous character's)
    assert keys_as_text("to o'er!", "word_start") == ".....oo."          # apostrophes inside a word
    assert keys_as_text("ab\ncde\nf", "line_start") == ".....c.."      # the window's first line is not scored
    assert keys_as_text(TEXT, "speaker").replace(".", "") == "P" * 27 + "H" * 12
    assert keys_as_text("a [Exit b] c", "bracket") == "....[[[[[..."
    assert keys_as_text("abc", "first") == "..a"
    with pytest.raises(ValueError, match="use one of"):
        tx.pattern_keys("abc", "nonsense")


class FixedWeights(torch.nn.Module):
    """A 'model' whose one head attends exactly where a pattern points (rows with no key: the query itself)."""

    def __init__(self, pattern):
        super().__init__()
        self.pattern = pattern

    def forward(self, idx, return_weights=True):
        L = idx.shape[1]
        w = torch.zeros(idx.shape[0], 1, L, L, dtype=torch.float64)
        for n in range(idx.shape[0]):
            key, valid = tx.pattern_keys(self.text[n][:L], self.pattern)
            for t in range(L):
                w[n, 0, t, key[t] if valid[t] else t] = 1.0
        return None, [w]


@pytest.mark.parametrize("pattern", list(tx.PATTERNS))
def test_a_head_doing_exactly_one_thing_scores_one_there(pattern):
    texts = [TEXT + "x", TEXT.replace("Ham", "Hor") + "y"]
    tok = CharTokenizer.from_text("".join(texts))
    model = FixedWeights(pattern)
    model.text = texts
    scores = tx.head_scores(model, tok, texts)
    assert np.allclose(scores[pattern], 1.0)
    # the other patterns point elsewhere, except where two coincide on this text: the stage
    # direction "[Exit King.]" fills its line, so its bracket is its line's start
    same_here = {("line_start", "bracket")}
    others = [p for p in tx.PATTERNS if p != pattern and (pattern, p) not in same_here]
    assert all(np.nanmax(scores[p]) < 1 for p in others)


def test_chance_is_the_even_spread_over_the_visible_keys():
    text = "ab cde\n"                                                # queries 1..5 (the last char is a target)
    got = tx.chance_scores([text + "z"], ["previous", "word_start"])
    assert got["previous"][0] == pytest.approx(np.mean(1 / (np.arange(1, 7) + 1)))
    assert got["word_start"][0] == pytest.approx(1 / 6)               # only "e": its word starts two back


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    tok = CharTokenizer.from_text(TEXT + "xyz")
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, context_length=64, d_model=16, num_heads=2, mlp=True)).eval()
    return model, tok


def test_ablation_changes_the_loss_of_each_window(small):
    model, tok = small
    x, y = tx.encode_windows(tok, [TEXT[:21], TEXT[10:31]])
    base = tx.window_losses(model, x, y)
    cost = tx.window_ablation_losses(model, x, y)
    assert base.shape == (2,) and cost.shape == (2, 2, 2)
    assert np.all(np.abs(cost - base[:, None, None]) > 1e-6)
    assert np.array_equal(tx.window_losses(model, x, y), base)     # the model is whole again afterwards


def test_repeat_losses_measure_each_copy(small):
    model, tok = small
    r = tx.repeat_losses(model, tok, ["I hear him", "To be, o'e"])
    assert r.shape == (2, 2) and np.isfinite(r).all()


def test_copy_opportunity_tells_repeated_text_from_text_that_never_repeats():
    rng = np.random.default_rng(0)
    assert tx.copy_opportunity("abcdefghijklmnop" * 40, 64, n=50) > 0.7
    noise = "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), 5000))
    assert tx.copy_opportunity(noise, 64, n=50) < 0.01


def test_temperature_zero_is_greedy_decoding_and_negative_is_refused(small):
    model, tok = small
    prompt = torch.tensor([tok.encode("Ham.\nTo")])
    assert torch.equal(tx.sample(model, prompt, 20, temperature=0), inf.generate(model, prompt, 20))
    a = tx.sample(model, prompt, 20, temperature=1.0, generator=torch.Generator().manual_seed(3))
    b = tx.sample(model, prompt, 20, temperature=1.0, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == (1, len("Ham.\nTo") + 20)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        tx.sample(model, prompt, 5, temperature=-1)


def test_windows_start_lines_and_are_reproducible():
    text = "".join(f"line {i}\n" for i in range(200))
    a, b = tx.windows(text, 5, 20, seed=3), tx.windows(text, 5, 20, seed=3)
    assert a == b and all(len(w) == 21 and w.startswith("line ") for w in a)
    with pytest.raises(ValueError, match="fewer than"):
        tx.windows(text, 500, 20)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TEXTS = st.text(alphabet="ab'Z .,\n[]", max_size=60)


@settings(max_examples=200, deadline=None)
@given(TEXTS)
def test_every_pattern_key_lies_behind_its_query(text):
    """Causal, and (but for the previous character) two or more back, on any text."""
    t = np.arange(len(text))
    for p in tx.PATTERNS:
        key, valid = tx.pattern_keys(text, p)
        assert key.shape == valid.shape == (len(text),)
        back = 1 if p == "previous" else 2
        assert np.all(key[valid] <= t[valid] - back) and np.all(key[valid] >= 0)


@settings(max_examples=200, deadline=None)
@given(TEXTS)
def test_the_tokenizer_round_trips_any_text_over_its_alphabet(text):
    tok = CharTokenizer("ab'Z .,\n[]")
    assert tok.decode(tok.encode(text)) == text
