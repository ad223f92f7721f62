"""Chapter 13's instruments: what a character-level model's heads do on real text.

A *pattern* names, for every query position ``t`` of a text, one key position ``key[t]``
that a head of that kind would attend to, and whether the pattern applies at ``t`` at all
(``valid[t]``). A head's score for a pattern is the mean weight its valid queries put on
their pattern key: 1 for a head that does exactly that, about ``1 / (t + 1)`` for a head
that spreads its weight evenly. :data:`PATTERNS` lists them:

* ``previous``: the character just before (``t - 1``);
* ``word_start``: the first character of the word ``t`` is in (a word is a run of letters
  and apostrophes);
* ``line_start``: the first character of ``t``'s line (not the newline; lines that start
  before the window are not scored);
* ``speaker``: in a speech, the first character of the speaker's name, the line after a
  blank one that holds only a name and a full stop (``HAMLET.``, ``Ham.``) and opens the speech;
* ``bracket``: inside a stage direction, its opening ``[``;
* ``first``: the window's first character (a "sink" some heads park their weight on).

Every pattern but ``previous`` scores only the queries whose key is at least two
characters back: where the key is ``t - 1`` (the second letter of a word, say), a
previous-character head would score on it too, and the two kinds could not be told apart.

Everything here measures a model on text; the model (:mod:`attnlib.models.gpt`) and the
corpus (:mod:`attnlib.data.shakespeare`) live elsewhere. Nothing here is an exercise's
answer key.
"""
from __future__ import annotations

import re

import numpy as np
import torch

from ..i18n import N_
from .inference import KVCache, extend

__all__ = ["PATTERNS", "pattern_keys", "windows", "encode_windows", "head_scores",
           "chance_scores", "window_losses", "window_ablation_losses", "repeat_losses", "copy_opportunity", "sample"]

PATTERNS = {
    "previous": N_("the previous character"),
    "word_start": N_("the start of the word"),
    "line_start": N_("the start of the line"),
    "speaker": N_("the speaker's name"),
    "bracket": N_("the opening bracket"),
    "first": N_("the window's first character"),
}

_WORD = re.compile(r"[A-Za-z']+")
# a speaker's name alone on a line after a blank one: "HAMLET.", "First Witch.", "Ham."
_SPEAKER = re.compile(r"(?:\A|(?<=\n\n))([A-Z][A-Za-z' ]{0,30}[A-Za-z])\.$", re.MULTILINE)


def pattern_keys(text: str, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """``(key, valid)`` of ``pattern`` on ``text``: two ``(L,)`` arrays, ``L = len(text)``, the
    key position of every query (int, ``0`` where not valid) and where the pattern applies."""
    L = len(text)
    key, valid = np.zeros(L, dtype=np.int64), np.zeros(L, dtype=bool)
    if pattern == "previous":
        key[1:], valid[1:] = np.arange(L - 1), True
    elif pattern == "first":
        valid[1:] = True
    elif pattern == "word_start":
        for m in _WORD.finditer(text):
            key[m.start() + 1:m.end()], valid[m.start() + 1:m.end()] = m.start(), True
    elif pattern == "line_start":
        for m in re.finditer(r"\n", text):            # lines that start inside the window
            end = text.find("\n", m.end())
            end = L if end < 0 else end
            if end > m.end() + 1:
                key[m.end() + 1:end], valid[m.end() + 1:end] = m.end(), True
    elif pattern == "speaker":
        names = list(_SPEAKER.finditer(text))
        for a, b in zip(names, names[1:] + [None]):
            stop = b.start() if b is not None else L
            start = text.find("\n", a.end()) + 1            # the speech begins on the next line
            if 0 < start < stop:
                key[start:stop], valid[start:stop] = a.start(), True
    elif pattern == "bracket":
        for m in re.finditer(r"\[[^\]\[]*", text):
            key[m.start() + 1:m.end()], valid[m.start() + 1:m.end()] = m.start(), True
    else:
        raise ValueError(f"pattern={pattern!r}; use one of {list(PATTERNS)}")
    if pattern != "previous":
        valid &= key <= np.arange(L) - 2     # two or more back: not what a previous-character head reads
    return key, valid


def windows(text: str, n: int, length: int, *, seed: int = 0) -> list[str]:
    """``n`` windows of ``length + 1`` characters from ``text`` at seeded random starts that
    begin a line (so a window's first line is whole); sorted by position."""
    starts = np.array([m.end() for m in re.finditer("\n", text[:len(text) - length - 1])], dtype=np.int64)
    if len(starts) < n:
        raise ValueError(f"text has {len(starts)} line starts, fewer than n={n} windows")
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(starts, size=n, replace=False))
    return [text[s:s + length + 1] for s in chosen]


def encode_windows(tokenizer, texts) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-character targets of windows of equal length ``L + 1``: two ``(N, L)``."""
    ids = torch.tensor([tokenizer.encode(t) for t in texts])          # (N, L + 1)
    return ids[:, :-1], ids[:, 1:]


@torch.no_grad()
def head_scores(model, tokenizer, texts, patterns=tuple(PATTERNS)) -> dict:
    """Every head's score for every pattern on each window.

    Args:
        model: a :class:`attnlib.models.gpt.GPT`.
        tokenizer: its :class:`attnlib.data.chars.CharTokenizer`.
        texts: windows of equal length ``L + 1`` (the last character is only a target).
        patterns: the names of :data:`PATTERNS` to score. Default: all.

    Returns:
        ``{pattern: (N, layers, h) array}``, the mean weight over each window's valid queries,
        NaN for a window where the pattern never applies.
    """
    x, _ = encode_windows(tokenizer, texts)                           # (N, L)
    _, weights = model(x, return_weights=True)                       # layers x (N, h, L, L)
    w = torch.stack(weights, 1).double().cpu().numpy()               # (N, layers, h, L, L)
    L = x.shape[1]
    out = {}
    for p in patterns:
        scores = np.full(w.shape[:3], np.nan)
        for n, t in enumerate(texts):
            key, valid = pattern_keys(t[:L], p)
            if valid.any():
                q = np.flatnonzero(valid)
                scores[n] = w[n][:, :, q, key[q]].mean(-1)           # (layers, h, queries) -> (layers, h)
        out[p] = scores
    return out


def chance_scores(texts, patterns=tuple(PATTERNS)) -> dict:
    """What each pattern's score is worth by chance: the score of a head that spreads its
    weight evenly over the ``t + 1`` keys query ``t`` may see, on the same windows and queries
    as :func:`head_scores`. Returns ``{pattern: (N,) array}`` (NaN where the pattern never applies)."""
    out = {}
    for p in patterns:
        vals = []
        for t in texts:
            _, valid = pattern_keys(t[:-1], p)
            q = np.flatnonzero(valid)
            vals.append((1.0 / (q + 1)).mean() if q.size else np.nan)
        out[p] = np.array(vals)
    return out


@torch.no_grad()
def window_ablation_losses(model, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """The next-character loss (nats) of each window with each head zeroed in turn:
    ``(N, layers, h)``. Compare with :func:`window_losses` (no head zeroed), window by window."""
    cfg = model.cfg
    out = np.empty((x.shape[0], cfg.num_layers, cfg.num_heads))
    for layer in range(cfg.num_layers):
        for head in range(cfg.num_heads):
            with model.ablated([(layer, head)]):
                out[:, layer, head] = window_losses(model, x, y)
    return out


@torch.no_grad()
def window_losses(model, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """Mean next-character loss (nats) of each window: ``(N,)``."""
    logits = model(x)                                                 # (N, L, V)
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none")  # (N, L)
    return nll.mean(-1).double().cpu().numpy()


@torch.no_grad()
def repeat_losses(model, tokenizer, passages) -> np.ndarray:
    """Each passage twice in a row: the mean loss (nats) on its first and on its second copy.

    Args:
        passages: texts of equal length ``P`` (``2P <= context_length``).

    Returns:
        ``(N, 2)``: per passage, the mean loss over predictions of characters ``1 .. P-1`` of
        the first copy and of the same characters of the second (the first character of
        each copy is left out: in the first copy nothing precedes it).
    """
    ids = torch.tensor([tokenizer.encode(p + p) for p in passages])    # (N, 2P)
    P = ids.shape[1] // 2
    logits = model(ids[:, :-1])                                         # (N, 2P - 1, V)
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    first, second = nll[:, :P - 1], nll[:, P:]                          # targets 1..P-1 of each copy
    return torch.stack([first.mean(-1), second.mean(-1)], -1).double().cpu().numpy()


def copy_opportunity(text: str, length: int, *, context: int = 8, n: int = 2000, seed: int = 0) -> float:
    """How often copying would help: the fraction of positions in random ``length``-character
    windows of ``text`` whose preceding ``context`` characters occurred earlier in the window
    and were followed there by the same character as here (what an induction head predicts)."""
    rng = np.random.default_rng(seed)
    hits = total = 0
    for s in rng.integers(0, len(text) - length, size=n):
        w = text[s:s + length]
        for t in range(context, length):
            total += 1
            before = w[t - context:t]
            j = w.rfind(before, 0, t - 1)                   # an earlier occurrence, ending before t - 1
            hits += j >= 0 and w[j + context] == w[t]
    return hits / total


@torch.no_grad()
def sample(model, prompt: torch.Tensor, n_new: int, *, temperature: float, generator=None) -> torch.Tensor:
    """Sample ``n_new`` tokens after ``prompt`` ``(N, L0)`` with a KV cache (chapter 11), each
    drawn from ``softmax(logits / temperature)``; ``temperature=0`` takes the most likely one.

    Returns:
        token ids ``(N, L0 + n_new)``.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0: always the most likely token), got {temperature}")
    cache, idx = KVCache(), prompt
    logits = extend(model, prompt, cache)[:, -1]                        # (N, V)
    for step in range(n_new):
        if temperature == 0:
            nxt = logits.argmax(-1, keepdim=True)                       # (N, 1)
        else:
            probs = torch.softmax(logits.double() / temperature, -1)     # (N, V)
            nxt = torch.multinomial(probs, 1, generator=generator)      # (N, 1)
        idx = torch.cat([idx, nxt], dim=1)
        if step + 1 < n_new:
            logits = extend(model, nxt, cache)[:, -1]
    return idx
