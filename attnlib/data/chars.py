"""Characters as tokens: the vocabulary of chapter 13's model.

A :class:`CharTokenizer` maps each character of a fixed alphabet to its index in the
alphabet (sorted, so the ids do not depend on the order the text was read in). A character
outside the alphabet raises, naming it, unless ``unknown`` names a character to use instead.
"""
from __future__ import annotations

__all__ = ["CharTokenizer"]


class CharTokenizer:
    """Characters <-> token ids over a fixed alphabet.

    Args:
        alphabet: the characters, each once (a string); ids follow its order.
        unknown: a character of the alphabet used for characters outside it, or ``None`` to
            raise on them. Default: ``None``.

    Example::

        >>> tok = CharTokenizer.from_text("to be or not")
        >>> tok.decode(tok.encode("not to be"))
        'not to be'
    """

    def __init__(self, alphabet: str, *, unknown: str | None = None):
        if len(set(alphabet)) != len(alphabet):
            raise ValueError("alphabet has repeated characters: each character must appear once")
        if unknown is not None and unknown not in alphabet:
            raise ValueError(f"unknown={unknown!r} is not in the alphabet")
        self.alphabet, self.unknown = alphabet, unknown
        self._id = {c: i for i, c in enumerate(alphabet)}

    @classmethod
    def from_text(cls, text: str, **kwargs) -> "CharTokenizer":
        """The tokenizer of every character in ``text``, sorted by code point."""
        return cls("".join(sorted(set(text))), **kwargs)

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet)

    def unknown_chars(self, text: str) -> list[str]:
        """The characters of ``text`` outside the alphabet, each once, in order of appearance."""
        return list(dict.fromkeys(c for c in text if c not in self._id))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, one per character."""
        bad = self.unknown_chars(text)
        if bad and self.unknown is None:
            raise ValueError(f"text has characters outside the model's alphabet: {''.join(bad)!r}; "
                             f"the alphabet is {self.alphabet!r}")
        fallback = self._id.get(self.unknown)
        return [self._id.get(c, fallback) for c in text]

    def decode(self, ids) -> str:
        """The characters of token ids (an iterable of ints, a list, an array or a tensor)."""
        return "".join(self.alphabet[int(i)] for i in ids)

    def __repr__(self) -> str:
        return f"CharTokenizer({self.vocab_size} characters)"
