"""Exercises of chapter 13 (attention on real text): ``word_start_score`` and
``temperature_probs``.

Conventions (those of the chapter): the model reads characters, so one layer's attention
weights on a text of L characters are ``(h, L, L)``, rows are queries and columns keys,
causal. A *word* is a maximal run of characters ``c`` with ``c.isalpha() or c == "'"`` (so
"o'er" and "'tis" are one word each) and its *start* is the index of its first character.
Temperature divides the logits before the softmax, ``softmax(logits / T)`` along the last
axis (the vocabulary). The references are plain NumPy, independent of attnlib's kernels
and instruments; a submission that calls a ready-made softmax is told to write it itself.
"""
from __future__ import annotations

import numpy as np

from .._model import SOFTMAX_SHORTCUTS, Case, Exercise, Mistake, register
from ._ref import f64
from ._ref import stable_softmax as _stable_softmax

__all__ = []  # exercises register themselves; nothing to import from here


# --------------------------------------------------------------------------- word_start_score

def _in_word(c: str) -> bool:
    return c.isalpha() or c == "'"


def _word_starts(text: str, in_word=_in_word) -> np.ndarray:
    """(L,) ints: the index of the first character of the word each position lies in, -1
    for a position outside every word."""
    start = np.full(len(text), -1)
    for t, c in enumerate(text):
        if in_word(c):
            start[t] = start[t - 1] if t > 0 and start[t - 1] >= 0 else t
    return start


def _wss(weights, text, *, in_word=_in_word, queries="two_back", key="start", first_word="wrap",
         reduce="mean"):
    """The reference (defaults) and, through the keywords, each catalogued mistake."""
    w = f64(weights)                                      # (h, L, L)
    L = len(text)
    start = _word_starts(text, in_word)                   # (L,)
    t = np.arange(L)
    if queries == "two_back":                             # in a word, two or more after its start
        q = t[(start >= 0) & (start <= t - 2)]
    elif queries == "after_first":                        # the mistake: second letters scored too
        q = t[(start >= 0) & (start < t)]
    elif queries == "with_starts":                        # the mistake: word starts scored too
        q = t[start >= 0]
    else:                                                 # the mistake: every non-start position,
        q = t[start != t]                                 # keyed to the last word start before it
        start = np.maximum.accumulate(np.where(start == t, t, 0))
    if key == "before":                                   # the mistake: the character before the word
        k = start[q] - 1
        if first_word == "clip":
            k = np.maximum(k, 0)
        elif first_word == "skip":
            q, k = q[k >= 0], k[k >= 0]
    elif key == "previous":                               # the mistake: the previous character
        k = q - 1
    else:
        k = start[q]
    if key == "transposed":                               # the mistake: rows and columns swapped
        vals = w[:, k, q]
    else:
        vals = w[:, q, k]                                 # (h, n): the weight from query q to key k
    if reduce == "sum":
        return vals.sum(-1)
    if reduce == "per_char":                              # the mistake: divided by L
        return vals.sum(-1) / L
    if reduce == "heads":                                 # the mistake: averaged over the heads
        return vals.mean(0)
    return vals.mean(-1)                                  # (h,)


def _word_start_reference(weights, text):
    return _wss(weights, text)


# Public-domain lines in the layout of the corpus (Project Gutenberg's plays): speakers'
# names in capitals, verse lines, the apostrophes of the verse ('tis, o'er, ne'er, I'll).
_LINES = (
    "But, soft! what light through yonder window breaks?",
    "It is the east, and Juliet is the sun.",
    "Now is the winter of our discontent",
    "Made glorious summer by this sun of York;",
    "Friends, Romans, countrymen, lend me your ears;",
    "I come to bury Caesar, not to praise him.",
    "To be, or not to be: that is the question:",
    "The slings and arrows of outrageous fortune,",
    "Is this a dagger which I see before me,",
    "The handle toward my hand? Come, let me clutch thee.",
    "Once more unto the breach, dear friends, once more;",
    "It droppeth as the gentle rain from heaven",
    "And all the men and women merely players;",
    "Out, damned spot! out, I say!",
    "If music be the food of love, play on;",
    "O, that this too too solid flesh would melt,",
    "Good night, good night! parting is such sweet sorrow,",
    "Look, the morn, in russet mantle clad,",
)
_APOSTROPHE_LINES = (
    "'Tis now the very witching time of night,",
    "Walks o'er the dew of yon high eastward hill:",
    "Whether 'tis nobler in the mind to suffer",
    "What's in a name? that which we call a rose",
    "The quality of mercy is not strain'd,",
    "All the world's a stage, and ne'er a part so hard.",
    "I'll speak to it, though hell itself should gape",
    "Thou art e'en as just a man as e'er I met.",
)
_SPEAKERS = ("ROMEO", "JULIET", "HAMLET", "MACBETH", "PORTIA", "FIRST WITCH", "KING HENRY", "LADY MACBETH")


def _text_weights(rng, text, patterns, sharp=4.0):
    """Causal attention weights (h, L, L) on ``text``, one head per pattern: "spread"
    (random), "previous" (the previous character), "start" (the word start) or "before"
    (the character before the word) get ``sharp`` extra score on their key."""
    L = len(text)
    s = rng.standard_normal((len(patterns), L, L))
    start = _word_starts(text)
    t = np.arange(L)
    inside = (start >= 0) & (start < t)
    for h, p in enumerate(patterns):
        if p == "previous":
            s[h, t[1:], t[1:] - 1] += sharp
        elif p == "start":
            s[h, t[inside], start[inside]] += sharp
        elif p == "before":
            ok = inside & (start > 0)
            s[h, t[ok], start[ok] - 1] += sharp
    s = np.where(np.tril(np.ones((L, L), dtype=bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _wss_cases(rng):
    pick = lambda pool, n: [pool[i] for i in rng.choice(len(pool), size=n, replace=False)]  # noqa: E731
    heads = ["spread", "previous", "start", "before"]

    def shuffled(n):
        return [heads[i] for i in rng.permutation(len(heads))[:n]]

    one = pick(_LINES, 1)[0]
    play = "{}.\n{}\n{}\n".format(pick(_SPEAKERS, 1)[0], *pick(_LINES + _APOSTROPHE_LINES, 2))
    quoted = "\n".join(pick(_APOSTROPHE_LINES, 2))
    passage = "\n".join(pick(_LINES + _APOSTROPHE_LINES, 4))
    # a window of a longer passage that begins inside a word (the model reads windows)
    begin = int(rng.choice([i for i in range(1, 60) if _in_word(passage[i]) and _in_word(passage[i - 1])]))
    window = passage[begin:begin + int(rng.integers(45, 70))]
    short = pick(["Out, damned spot!", "O Romeo, Romeo!", "Et tu, Brute?", "Lord, what fools!"], 1)[0]
    L = len(quoted)
    uniform = np.tril(np.ones((L, L))) / np.arange(1, L + 1)[:, None]
    return [
        Case(args=(_text_weights(rng, one, shuffled(3)), one), label="one line that begins with a word, 3 heads"),
        Case(args=(_text_weights(rng, play, shuffled(4)), play),
             label="a speaker's name and two lines, 4 heads (previous character, word start, the "
                   "character before the word, spread)"),
        Case(args=(_text_weights(rng, quoted, shuffled(2)), quoted),
             label="two lines with apostrophes ('tis, o'er, ne'er...), 2 heads"),
        Case(args=(_text_weights(rng, window, shuffled(4)), window),
             label="a window of a passage that begins inside a word, 4 heads"),
        Case(args=(_text_weights(rng, short, ["spread"]), short), label="a short line, one head"),
        Case(args=(np.stack([uniform, _text_weights(rng, quoted, ["start"])[0]]), quoted),
             label="uniform causal weights and a word-start head"),
    ]


register(Exercise(
    name="word_start_score",
    chapter="13_real_text",
    prompt="For each head, return the mean attention weight from every character of a word that stands "
           "two or more characters after the word's first character, to that first character. A word is a "
           "maximal run of letters and apostrophes; weights is (h, L, L) with rows as queries, text has L "
           "characters; return (h,).",
    stub='''def word_start_score(weights, text):
    """How much each head looks back to the start of the current word.

    weights: (h, L, L) NumPy array, one layer's causal attention weights on
        text, row t = query t, column = key (to use torch, convert first).
    text: a str of L characters. A word is a maximal run of characters c with
        c.isalpha() or c == "'" (so "o'er" and "'tis" are one word each); its
        start is the index of its first character.
    Returns (h,): for each head, the mean of weights[head, t, start] over every
    position t of a word with t - start >= 2, start being the start of t's word.
    (For the second letter, t - start == 1, the start is also the previous
    character: the chapter leaves it out, and so does this score. The texts
    checked always have positions to score.)
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_word_start_reference,
    cases=_wss_cases,
    mistakes=[
        Mistake("key_before_word", "The key is the character before the word (off by one)",
                "You read the weight from each letter to the character just BEFORE its word: the space, "
                "newline or punctuation mark that ended the text before it, not the word's first letter. "
                "Scanning back from a letter stops on a character outside the word; the start is the "
                "position after it. (For a word at position 0 there is no such character, and index -1 "
                "is the last key in Python.)",
                fn=lambda w, text: _wss(w, text, key="before"),
                variants=(lambda w, text: _wss(w, text, key="before", first_word="clip"),
                          lambda w, text: _wss(w, text, key="before", first_word="skip")),
                fix="The start is one past the last non-word character before t (0 if there is none); "
                    "with a regular expression, a match's m.start() itself, not m.start() - 1."),
        Mistake("second_letters_included", "The second letter of each word is scored too",
                "You scored the second letter of every word as well. Its word's start is also its previous "
                "character, so a previous-character head scores there as much as a word-start head: the "
                "score would mix the two kinds of head. Like the chapter, score only the characters two or "
                "more after their word's start.",
                fn=lambda w, text: _wss(w, text, queries="after_first"),
                fix="Keep the positions t with t - start >= 2 (not start < t)."),
        Mistake("word_starts_included", "The first letter of each word is scored too",
                "You also scored the first character of every word. Its key is itself, so it adds its "
                "self-weight (how much that letter looks at itself), which says nothing about looking back "
                "to the start of a word. Score only the characters after the first one of their word.",
                fn=lambda w, text: _wss(w, text, queries="with_starts"),
                fix="Keep the positions t whose word starts two or more before them (t - start >= 2): a "
                    "word's first character has start == t."),
        Mistake("every_query", "Spaces and punctuation are scored too",
                "You scored every character that does not begin a word, spaces, punctuation and newlines "
                "included, each with the start of the last word before it. Those characters lie in no "
                "word, so there is no word start for them to look back to: leave them out of the mean.",
                fn=lambda w, text: _wss(w, text, queries="all"),
                fix="Score only positions whose character is a word character (c.isalpha() or c == \"'\") "
                    "and stands two or more after the first of its word."),
        Mistake("divided_by_L", "Divided by the length of the text",
                "You summed the right weights but divided by L, the number of characters, as if every "
                "character were scored; spaces, punctuation and first letters are not. The mean is over "
                "the scored positions only: divide by how many there are.",
                fn=lambda w, text: _wss(w, text, reduce="per_char"),
                fix="Divide the sum by the number of scored positions, or take the mean of the gathered "
                    "(h, n) weights along axis=-1."),
        Mistake("previous_character", "The previous character instead of the word start",
                "You measured how much each letter looks at the character just before it: the "
                "previous-character score of a previous-token head. From the third letter of a word on, "
                "the start lies further back than the previous character. Every letter of a word looks "
                "back to the same key, its word's first letter.",
                fn=lambda w, text: _wss(w, text, key="previous"),
                fix="Use the start of t's word as the key for every t in the word, not t - 1."),
        Mistake("apostrophe_splits", "Apostrophes end a word",
                "You treated the apostrophe as a separator, so \"o'er\" became two words and \"'tis\" "
                "began at its t: the letters after an apostrophe looked back to the wrong start. Here, as "
                "in the chapter, an apostrophe belongs to the word, as in the contractions of the verse.",
                fn=lambda w, text: _wss(w, text, in_word=str.isalpha),
                fix="Test c.isalpha() or c == \"'\" (as a regular expression, [A-Za-z']+), not c.isalpha() "
                    "alone, nor \\w+."),
        Mistake("whitespace_words", "Words split at whitespace only",
                "You cut the text at spaces and newlines, as str.split does, so punctuation stuck to a word "
                "became part of it: the comma of \"lord,\" and the \"!\" of \"soft!\" were scored as letters. "
                "A word here is a run of letters and apostrophes only; punctuation lies outside it.",
                fn=lambda w, text: _wss(w, text, in_word=lambda c: not c.isspace()),
                fix="Decide each character with c.isalpha() or c == \"'\" instead of splitting at whitespace."),
        Mistake("transposed", "Rows and columns swapped",
                "You read the weight from each word's first letter to a LATER letter of the word: under the "
                "causal mask those weights are all 0. Rows are queries and columns keys: the letter that "
                "looks back is the row, the word start it looks at is the column.",
                fn=lambda w, text: _wss(w, text, key="transposed"),
                fix="Index weights[:, t, start]: the query t first, then the key."),
        Mistake("sum", "A sum instead of a mean",
                "You added the weights of the scored positions instead of averaging them, so the score "
                "grows with the length of the text and a perfect word-start head scores far more than 1. "
                "Divide by the number of positions scored.",
                fn=lambda w, text: _wss(w, text, reduce="sum"),
                fix="Take the mean of the gathered (h, n) weights along axis=-1, not their sum."),
        Mistake("mean_over_heads", "Averaged over the heads instead of the positions",
                "Your result has one number per scored position: you averaged the gathered weights over "
                "the heads (axis 0). The score describes each head: average over the positions and keep "
                "one number per head.",
                fn=lambda w, text: _wss(w, text, reduce="heads"),
                fix="Reduce the (h, n) array of gathered weights along its last axis, axis=-1."),
    ],
    hint="First find the start of the word each character lies in, or that it lies in no word: one pass "
         "over the text that remembers where the current word began. Then, per head, average the weight "
         "from each character two or more after its word's start to that start.",
    hints=("A word character that stands at index 0 or follows a non-word character begins a word; every "
           "later character of the word keeps that start. The queries are the word characters whose start "
           "lies two or more before them, the keys their starts: gather weights[:, queries, keys], shape "
           "(h, n), and average over the n positions.",
           "start = an array of L ints, -1 outside words; for t, c in enumerate(text): if c is a word "
           "character, start[t] = start[t - 1] if t > 0 and start[t - 1] >= 0 else t. Then q = the t with "
           "0 <= start[t] <= t - 2 and the answer is weights[:, q, start[q]].mean(axis=-1)."),
    rtol=1e-4, atol=1e-6,  # weights in [0, 1]: a float32 answer passes
))


# --------------------------------------------------------------------------- temperature_probs

def _temperature_reference(logits, temperature):
    return _stable_softmax(f64(logits) / temperature, axis=-1)   # (N, V), each row sums to 1


def _naive(logits, temperature, dtype=np.float64):
    e = np.exp(np.asarray(logits, dtype=dtype) / dtype(temperature))  # exp(1000) = inf -> inf / inf = NaN
    return e / e.sum(-1, keepdims=True)


def _global_max(logits, temperature):
    z = f64(logits) / temperature
    e = np.exp(z - z.max())                                      # one max for every row
    return e / e.sum(-1, keepdims=True)


def _power_unnormalised(logits, temperature):
    return _stable_softmax(logits, axis=-1) ** (1.0 / temperature)   # rows no longer sum to 1


def _whole_array(logits, temperature):
    z = f64(logits) / temperature
    e = np.exp(z - z.max())
    return e / e.sum()


def _divides_in_place(logits, temperature):
    logits /= temperature                                        # the caller's logits change
    return _stable_softmax(logits, axis=-1)


def _temperature_cases(rng):
    n = rng.standard_normal
    cold = rng.uniform(-10, 10, (3, 12))
    cold[np.arange(3), rng.integers(0, 12, 3)] = rng.uniform(8, 11, 3)   # logits / 0.01 above 709
    levels = np.array([[10.0], [-10.0]]) + rng.uniform(-1, 1, (2, 7))    # rows 20 apart
    return [
        Case(args=(3 * n((4, 10)), 1.0), label="4 rows of 10 logits, T = 1"),
        Case(args=(3 * n((3, 8)), float(rng.choice([0.5, 0.7]))), label="3 rows of 8 logits, T below 1 (sharper)"),
        Case(args=(3 * n((2, 9)), float(rng.choice([4.0, 5.0]))), label="2 rows of 9 logits, a high T (flatter)"),
        Case(args=(cold, 0.01), label="logits up to about 10 at T = 0.01: exp(logits / T) overflows"),
        Case(args=(levels, 0.02), label="two rows of logits near +10 and -10, T = 0.02"),
        Case(args=(3 * n((1, 65)), 0.8), label="one row over a 65-character vocabulary, T = 0.8"),
        Case(args=(2 * n((6, 6)), 3.0), label="a square 6 x 6 array, T = 3"),
    ]


register(Exercise(
    name="temperature_probs",
    chapter="13_real_text",
    prompt="Return the next-token probabilities at temperature T: softmax(logits / T) along the last axis, "
           "computed stably, for logits of shape (N, V) and T > 0.",
    stub='''def temperature_probs(logits, temperature):
    """Next-character probabilities at a temperature.

    logits: (N, V) NumPy array, N predictions over a vocabulary of V tokens.
    temperature: a float > 0 (small: sharper, large: flatter).
    Returns (N, V): softmax(logits / temperature) along the last axis, each row
    summing to 1, without NaN even at temperature = 0.01; logits must be left
    unchanged. Write the softmax yourself (no ready-made softmax).
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_temperature_reference,
    cases=_temperature_cases,
    mistakes=[
        Mistake("multiplied", "Multiplied by the temperature instead of dividing",
                "You scaled the logits by T instead of 1/T, so a high temperature sharpens the distribution "
                "and a low one flattens it: the opposite of what temperature does. A temperature divides the "
                "logits: T > 1 shrinks the gaps between them (flatter), T < 1 widens them (sharper).",
                fn=lambda x, T: _stable_softmax(f64(x) * T, axis=-1),
                fix="Divide: logits / temperature, not logits * temperature."),
        Mistake("no_max_subtraction", "exp overflows at a low temperature: the maximum is not subtracted",
                "Right at moderate temperatures, NaN at T = 0.01: logits of about 10 divided by 0.01 are "
                "about 1000, exp(1000) is inf in float64 (exp(89) already in float32), and inf / inf is NaN. "
                "The lower the temperature, the larger the exponents. Shift each row by a constant that "
                "keeps every exponent at or below 0: it cancels in the normalisation.",
                fn=_naive, variants=(lambda x, T: _naive(x, T, np.float32),),
                fix="z = logits / temperature; subtract z.max(axis=-1, keepdims=True) before np.exp."),
        Mistake("global_max", "One maximum for the whole array",
                "You subtracted the largest logit of the whole array. A row far below it (here rows 20 "
                "apart, 1000 apart after dividing by T = 0.02) underflows: every exp of that row is 0, and "
                "0 / 0 is NaN. Each row is a distribution of its own and needs its own maximum.",
                fn=_global_max,
                fix="Subtract each row's maximum: z.max(axis=-1, keepdims=True)."),
        Mistake("power_unnormalised", "The probabilities raised to 1/T and not renormalised",
                "You applied the temperature to the probabilities as p to the power 1/T. That has the right "
                "shape (it is proportional to exp(logits / T)), but the rows no longer sum to 1: the "
                "normalisation has to come after the temperature, not before it.",
                fn=_power_unnormalised,
                fix="Divide p ** (1 / temperature) by its sum along the last axis (keepdims=True), or "
                    "apply the softmax to logits / temperature directly."),
        Mistake("wrong_axis", "Normalised over the wrong axis",
                "Your rows do not sum to 1: you normalised down the columns (axis 0, across the N "
                "predictions) or over the whole array. Each row holds one prediction's logits over the V "
                "tokens of the vocabulary; it is its own distribution.",
                fn=lambda x, T: _stable_softmax(f64(x) / T, axis=0), variants=(_whole_array,),
                fix="Take the maximum and the sum along the last axis: axis=-1, keepdims=True."),
        Mistake("no_softmax", "The scaled logits returned instead of probabilities",
                "You returned the logits divided by T: scaled logits, not probabilities (they can be "
                "negative and their rows do not sum to 1). The temperature changes the logits; a softmax "
                "then turns them into the distribution to sample from.",
                fn=lambda x, T: f64(x) / T,
                fix="Apply a stable softmax along the last axis to logits / temperature."),
        Mistake("temperature_cancels", "The temperature has no effect",
                "Your probabilities do not change with T. Dividing the exponentials (or the probabilities) "
                "by T scales every entry of a row by the same factor, and the normalisation removes it "
                "again. The temperature has to act inside the exponent, on the logits.",
                fn=lambda x, T: _stable_softmax(x, axis=-1),
                fix="Divide the logits by the temperature before exp: z = logits / temperature, then "
                    "exp(z - z.max(axis=-1, keepdims=True))."),
        Mistake("mutates", "The caller's logits are changed",
                "Dividing the logits in place (or subtracting their maximum in place) changes the caller's "
                "array: in a generation loop that keeps the logits, the next call would divide them by the "
                "temperature again. Compute into a new array.",
                fn=_divides_in_place, kind="mutates",
                fix="Write z = logits / temperature (a new array) instead of logits /= temperature."),
    ],
    hint="Temperature acts on the logits, before anything is normalised: divide them by T, then take the "
         "softmax of each row. At a low T the divided logits are huge, so keep every exponent at or below 0 "
         "with a constant per row that cancels in the normalisation.",
    hints=("Divide the logits by T first. Each row's maximum of the divided logits is the constant to subtract: "
           "the largest exponent is then 0 and the row sum at least 1, so there is no overflow and no 0 / 0. "
           "Normalise along the last axis.",
           "z = logits / temperature; e = np.exp(z - z.max(axis=-1, keepdims=True)); return e divided by its "
           "sum along axis=-1 (keepdims=True)."),
    # float32 rounds logits / T near 1000 (T = 0.01) by about 6e-5, which exp turns into relative
    # errors near 1e-4: a float32 answer of correct code passes at 1e-3, every mistake differs by far more
    rtol=1e-3, atol=1e-6,
    forbidden=SOFTMAX_SHORTCUTS,
))
