"""Chapter 13 exercises (word_start_score, temperature_probs) beyond the generic contract
(tests/test_exercises_contract.py): the references agree with independent implementations
(a regular expression, torch), the issue's mistakes are catalogued, correct answers in
other styles pass (loops, regular expressions, torch, float32, p ** (1/T) renormalised),
independently written mistakes are named, the overflow at a low temperature is named as
such rather than as a bare NaN, and a ready-made softmax is refused."""
import math
import re

import numpy as np
import pytest
import torch

from attnlib.exercises import EXERCISES, check
from exercise_catalogue import asked_twice, catalogue_problems, passes_every_seed

WORD = re.compile(r"[A-Za-z']+")  # the cases are ASCII: letters and apostrophes


@pytest.mark.parametrize("name,required", [
    ("word_start_score", {"key_before_word", "second_letters_included", "word_starts_included", "every_query",
                          "previous_character",
                          "apostrophe_splits", "sum", "mean_over_heads"}),
    ("temperature_probs", {"multiplied", "no_max_subtraction", "power_unnormalised", "wrong_axis",
                           "no_softmax"}),
])
def test_catalogue_covers_the_issue_mistakes(name, required):
    assert required <= {m.key for m in EXERCISES[name].mistakes}


# --- independent implementations ----------------------------------------------------------

def wss_regex(weights, text, pattern=WORD, offset=0, skip=2):
    q, k = [], []
    for m in pattern.finditer(text):
        for t in range(m.start() + skip, m.end()):
            q.append(t)
            k.append(m.start() + offset)
    return np.asarray(weights)[:, q, k].mean(-1)


def wss_loops(weights, text):
    total, count, start = np.zeros(len(weights)), 0, None
    for t, c in enumerate(text):
        if c.isalpha() or c == "'":
            if start is None:
                start = t
            elif t - start >= 2:
                total += weights[:, t, start]
                count += 1
        else:
            start = None
    return total / count


def wss_torch_float32(weights, text):
    w = torch.as_tensor(weights, dtype=torch.float32)
    is_word = torch.tensor([c.isalpha() or c == "'" for c in text])
    t = torch.arange(len(text))
    begins = is_word & ~torch.cat([torch.tensor([False]), is_word[:-1]])
    start = torch.cummax(torch.where(begins, t, 0), dim=0).values   # the last word start so far
    q = t[is_word & (t - start >= 2)]
    return w[:, q, start[q]].mean(-1)


def temperature_torch_logsumexp(logits, temperature):
    z = torch.as_tensor(logits) / temperature
    return (z - torch.logsumexp(z, dim=-1, keepdim=True)).exp()


def temperature_power_renormalised(logits, temperature):
    """p ** (1/T), renormalised: proportional to exp(logits / T), so it IS the answer."""
    e = np.exp(logits - logits.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    p = p ** (1.0 / temperature)
    return p / p.sum(-1, keepdims=True)


def temperature_loops(logits, temperature):
    out = []
    for row in logits.tolist():
        z = [x / temperature for x in row]
        m = max(z)
        e = [math.exp(x - m) for x in z]
        out.append([x / sum(e) for x in e])
    return np.array(out)


def temperature_torch_float32(logits, temperature):
    z = torch.as_tensor(logits, dtype=torch.float32) / temperature
    e = torch.exp(z - z.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


@pytest.mark.parametrize("seed", range(5))
def test_the_references_agree_with_a_regex_and_with_torch(seed):
    for c in EXERCISES["word_start_score"].all_cases(seed):
        np.testing.assert_allclose(EXERCISES["word_start_score"].reference(*c.args), wss_regex(*c.args),
                                   rtol=1e-12, atol=0)
    for c in EXERCISES["temperature_probs"].all_cases(seed):
        logits, T = c.args
        want = torch.softmax(torch.as_tensor(logits) / T, dim=-1).numpy()
        np.testing.assert_allclose(EXERCISES["temperature_probs"].reference(logits, T), want, rtol=1e-10, atol=1e-300)


@pytest.mark.parametrize("name,fn", [
    ("word_start_score", wss_regex), ("word_start_score", wss_loops), ("word_start_score", wss_torch_float32),
    ("temperature_probs", temperature_torch_logsumexp), ("temperature_probs", temperature_power_renormalised),
    ("temperature_probs", temperature_loops), ("temperature_probs", temperature_torch_float32),
])
def test_equivalent_correct_answers_pass(name, fn):
    res = check(name, fn)
    assert res.passed, res.message


@pytest.mark.parametrize("name,fn", [
    ("word_start_score", wss_loops), ("word_start_score", wss_torch_float32),
    ("temperature_probs", temperature_power_renormalised), ("temperature_probs", temperature_torch_float32),
])
def test_other_correct_answers_pass_on_every_draw(name, fn):
    with np.errstate(all="ignore"):
        assert not passes_every_seed(EXERCISES[name], fn, seeds=range(20))


# --- mistakes written independently of the catalogue are still recognised ------------------

def wss_split_words(weights, text):
    """Words from str.split(): punctuation sticks to them."""
    q, k, pos = [], [], 0
    for word in text.split():
        s = text.index(word, pos)
        q += range(s + 2, s + len(word))
        k += [s] * max(0, len(word) - 2)
        pos = s + len(word)
    return np.asarray(weights)[:, q, k].mean(-1)


def wss_previous_loops(weights, text):
    word = [c.isalpha() or c == "'" for c in text]
    vals = [weights[:, t, t - 1] for t in range(2, len(text)) if word[t] and word[t - 1] and word[t - 2]]
    return np.mean(vals, axis=0)


def wss_stale_start(weights, text):
    """Every character that does not begin a word is scored, keyed to the last start."""
    vals, start = [], 0
    for t, c in enumerate(text):
        word = c.isalpha() or c == "'"
        if word and (t == 0 or not (text[t - 1].isalpha() or text[t - 1] == "'")):
            start = t
        else:
            vals.append(weights[:, t, start])
    return np.mean(vals, axis=0)


def wss_with_first_letters(weights, text):
    q = [t for m in WORD.finditer(text) for t in range(m.start(), m.end())]
    k = [m.start() for m in WORD.finditer(text) for _ in range(m.start(), m.end())]
    return np.asarray(weights)[:, q, k].mean(-1)


def wss_scan_back(weights, text):
    """Scan back from each letter while the character is a word character: stops ON the
    character before the word (index -1 for the first word of the text)."""
    vals = []
    for t, c in enumerate(text):
        if (c.isalpha() or c == "'") and t > 1 and all(text[i].isalpha() or text[i] == "'" for i in (t - 1, t - 2)):
            s = t
            while s >= 0 and (text[s].isalpha() or text[s] == "'"):
                s -= 1
            vals.append(weights[:, t, s])
    return np.mean(vals, axis=0)


def wss_before_skipping_the_first_word(weights, text):
    """The character before each word, and a word at position 0 (which has none) left out."""
    pairs = [(t, m.start() - 1) for m in WORD.finditer(text) if m.start() > 0 for t in range(m.start() + 2, m.end())]
    q, k = zip(*pairs)
    return np.asarray(weights)[:, list(q), list(k)].mean(-1)


@pytest.mark.parametrize("fn,key", [
    (lambda w, text: wss_regex(w, text, offset=-1), "key_before_word"),
    (wss_scan_back, "key_before_word"),
    (wss_before_skipping_the_first_word, "key_before_word"),
    (wss_with_first_letters, "word_starts_included"),
    (wss_stale_start, "every_query"),
    (lambda w, text: wss_regex(w, text) * sum(max(0, m.end() - m.start() - 2) for m in WORD.finditer(text)) / len(text),
     "divided_by_L"),
    (lambda w, text: wss_regex(w, text, skip=1), "second_letters_included"),
    (wss_previous_loops, "previous_character"),
    (lambda w, text: wss_regex(w, text, re.compile(r"[A-Za-z]+")), "apostrophe_splits"),
    (lambda w, text: wss_regex(w, text, re.compile(r"\w+")), "apostrophe_splits"),
    (wss_split_words, "whitespace_words"),
    (lambda w, text: wss_regex(np.swapaxes(w, -1, -2), text), "transposed"),
    (lambda w, text: wss_regex(w, text) * sum(max(0, m.end() - m.start() - 2) for m in WORD.finditer(text)), "sum"),
    (lambda w, text: np.asarray(w)[:, [t for m in WORD.finditer(text) for t in range(m.start() + 2, m.end())],
                                   [m.start() for m in WORD.finditer(text) for _ in range(m.start() + 2, m.end())]
                                   ].mean(0), "mean_over_heads"),
])
def test_independently_written_word_start_mistakes_are_recognised(fn, key):
    res = check("word_start_score", fn)
    assert res.mistake == key, res.message


def temperature_naive_torch(logits, temperature, dtype=torch.float64):
    e = torch.exp(torch.as_tensor(logits, dtype=dtype) / temperature)
    return e / e.sum(dim=-1, keepdim=True)


def temperature_divide_exp(logits, temperature):
    e = np.exp(logits - logits.max(-1, keepdims=True)) / temperature
    return e / e.sum(-1, keepdims=True)


def temperature_in_place(logits, temperature):
    logits /= temperature
    logits -= logits.max(-1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("fn,key", [
    (lambda x, T: temperature_torch_logsumexp(x * T * T, T), "multiplied"),
    (temperature_naive_torch, "no_max_subtraction"),
    (lambda x, T: temperature_naive_torch(x, T, torch.float32), "no_max_subtraction"),
    (lambda x, T: np.exp(x) ** (1 / T) / (np.exp(x) ** (1 / T)).sum(-1, keepdims=True), "no_max_subtraction"),
    (lambda x, T: np.exp(x / T - (x / T).max()) / np.exp(x / T - (x / T).max()).sum(-1, keepdims=True),
     "global_max"),
    (lambda x, T: temperature_torch_logsumexp(x, 1.0) ** (1 / T), "power_unnormalised"),
    (lambda x, T: temperature_torch_logsumexp(x.T, T).T, "wrong_axis"),
    (lambda x, T: temperature_torch_logsumexp(x.reshape(1, -1), T).reshape(x.shape), "wrong_axis"),
    (lambda x, T: torch.as_tensor(x) / T, "no_softmax"),
    (temperature_divide_exp, "temperature_cancels"),
    (temperature_in_place, "mutates"),
])
def test_independently_written_temperature_mistakes_are_recognised(fn, key):
    res = check("temperature_probs", fn)
    assert res.mistake == key, res.message


def test_the_overflow_is_named_not_just_reported_as_nan():
    """A softmax without the max subtraction gives NaN only at T = 0.01: the checker names the
    overflow and the idea (a constant per row that keeps the exponents <= 0)."""
    with np.errstate(all="ignore"):
        cases = EXERCISES["temperature_probs"].all_cases(3)
        assert any(np.isnan(temperature_naive_torch(*c.args).numpy()).any() for c in cases)
    r, shown = asked_twice("temperature_probs", temperature_naive_torch)
    assert r.mistake == "no_max_subtraction" and r.details["problem"] == "mistake", r.message
    assert "overflows" in r.message and "inf / inf is NaN" in r.message and "keepdims=True" in shown


@pytest.mark.parametrize("fn", [
    lambda x, T: torch.softmax(torch.as_tensor(x) / T, dim=-1),
    lambda x, T: torch.as_tensor(x / T).softmax(-1),
    lambda x, T: np.asarray(__import__("attnlib").softmax(x / T, axis=-1)),
])
def test_a_ready_made_softmax_does_not_pass(fn):
    res = check("temperature_probs", fn)
    assert not res.passed and res.mistake == "library_shortcut", res.message


# --- the cases ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["word_start_score", "temperature_probs"])
def test_catalogue_holds_on_every_draw_of_the_cases(name):
    problems = catalogue_problems(EXERCISES[name])
    assert not problems, problems[:5]


@pytest.mark.parametrize("seed", range(10))
def test_every_draw_has_what_tells_the_mistakes_apart(seed):
    texts = [c.args[1] for c in EXERCISES["word_start_score"].all_cases(seed)]
    assert all(len(c.args[0]) >= 1 and c.args[0].shape[1:] == (len(t), len(t))
               for c, t in zip(EXERCISES["word_start_score"].all_cases(seed), texts))
    assert any(re.search(r"[A-Za-z]'[A-Za-z]|(?<![A-Za-z])'[A-Za-z]", t) for t in texts)   # o'er, 'tis
    assert any(t[0].isalpha() for t in texts) and any(not t[0].isalpha() or t[1].isalpha() for t in texts)
    assert any(re.search(r"[A-Za-z][,;:!?.]", t) for t in texts)                           # "lord,"
    assert any(m.end() - m.start() >= 3 for t in texts for m in WORD.finditer(t))
    temps = [c.args[1] for c in EXERCISES["temperature_probs"].all_cases(seed)]
    assert min(temps) <= 0.01 and max(temps) >= 4 and 1.0 in temps
    cold = next(c.args[0] for c in EXERCISES["temperature_probs"].all_cases(seed) if c.args[1] == 0.01)
    assert (cold.max(-1) / 0.01 > 710).all()      # exp overflows in float64 in every row


def test_the_level_one_messages_hold_no_fix():
    ex = EXERCISES["temperature_probs"]
    m = ex.mistake("no_max_subtraction")
    assert "z.max(axis=-1, keepdims=True)" not in m.message and "z.max(axis=-1, keepdims=True)" in m.fix
    m = EXERCISES["word_start_score"].mistake("key_before_word")
    assert "m.start() itself" in m.fix and "m.start()" not in m.message
