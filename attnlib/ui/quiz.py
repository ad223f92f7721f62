"""Concept questions that work in Jupyter *and* on the static website.

Each choice is a ``<details>`` element: clicking it reveals its own feedback, so the
quiz needs no kernel and no JavaScript. The plain-text form (what nbval compares) lists
the question and the choices without giving the answer away.

Example::

    >>> al.quiz.question("Why scale by 1/sqrt(d_k)?", [
    ...     ("To keep the variance of the scores near 1", True, "Var(q.k) = d_k."),
    ...     ("To make the scores positive", False, "Scaling by a positive number keeps signs."),
    ... ])
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass

from ..i18n import _, get_language
from . import colours

__all__ = ["Question", "question"]

_LETTERS = "ABCDEFGH"

# a verdict word at the start of a feedback text: the quiz prints its own verdict first
_VERDICT = re.compile(r"^\s*(?:right|correct|wrong|incorrect|not quite|yes|no)\b[\s.:;,!—–-]*",
                      re.IGNORECASE)


def _without_verdict(feedback: str) -> str:
    """``feedback`` without a leading "Right." / "Correct:" / "No:" (the quiz already says
    "Correct." or "Not quite." before it), with its first letter capitalised."""
    rest = _VERDICT.sub("", feedback, count=1)
    if rest == feedback or not rest.strip():  # no verdict word, or nothing but one: keep it
        return feedback                       # (never capitalise code or maths: "e^x", "torch.where")
    return rest[:1].upper() + rest[1:]


@dataclass
class Question:
    """A multiple-choice question. ``choices`` holds ``(text, correct, feedback)`` triples."""

    prompt: str
    choices: list
    qid: str = ""

    def __post_init__(self):
        # shown in the current language (attnlib.i18n): the English is the catalogue's key
        if get_language() != "en":
            self.prompt = _(self.prompt)
            self.choices = [(_(t), ok, _(fb)) + tuple(rest) for t, ok, fb, *rest in self.choices]
        if not self.choices or not any(c[1] for c in self.choices):
            raise ValueError(f"question {self.prompt[:40]!r} needs at least one correct choice")
        if len(self.choices) > len(_LETTERS):
            raise ValueError(f"at most {len(_LETTERS)} choices, got {len(self.choices)}")

    @property
    def answer(self) -> str:
        """The letters of the correct choices, e.g. ``"B"``."""
        return "".join(_LETTERS[i] for i, c in enumerate(self.choices) if c[1])

    def __repr__(self) -> str:
        lines = [_("Question: {prompt}").format(prompt=self.prompt)]
        lines += [f"  {_LETTERS[i]}. {c[0]}" for i, c in enumerate(self.choices)]
        lines.append("  " + _("(Click a choice on the page to see whether it is right and why.)"))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        items = []
        for i, (text, correct, feedback) in enumerate(self.choices):
            verdict = _("Correct.") if correct else _("Not quite.")
            feedback = _without_verdict(feedback) if get_language() == "en" else feedback
            cls = "attnlib-quiz-right" if correct else "attnlib-quiz-wrong"
            colour = colours.PASSED if correct else colours.FAILED
            items.append(
                f'<details class="attnlib-quiz-choice {cls}" style="margin:.25em 0">'
                f'<summary style="cursor:pointer"><b>{_LETTERS[i]}.</b> {html.escape(text)}</summary>'
                f'<div class="attnlib-quiz-feedback" style="border-left:3px solid {colour};'
                f'padding:.2em .6em;margin:.2em 0 .4em 1.2em"><b style="color:{colour}">{verdict}</b> '
                f'{html.escape(feedback)}</div></details>')
        qid = f' id="{html.escape(self.qid)}"' if self.qid else ""
        question, click = _("Question."), _("Click a choice to see feedback.")
        return (f'<div class="attnlib-quiz"{qid} style="border:1px solid {colours.BORDER};border-radius:6px;'
                f'padding:.6em .9em;margin:.5em 0"><p class="attnlib-quiz-prompt" style="margin:0 0 .4em 0">'
                f'<b>{question}</b> {html.escape(self.prompt)}</p>{"".join(items)}'
                f'<p style="margin:.4em 0 0 0;font-size:90%;color:{colours.MUTED}">{click}</p></div>')


def question(prompt: str, choices: list, qid: str = "") -> Question:
    """Build a :class:`Question`; display it as the last expression of a cell.

    Args:
        prompt: the question (plain text; write maths in Unicode, e.g. √d_k).
        choices: ``(text, correct, feedback)`` triples, at most 8; at least one is correct.
            The page prints "Correct." or "Not quite." before each feedback, so the
            feedback starts with the reason; a leading "Right." or "No:" is dropped.
        qid: optional HTML id. Default: ``""``.

    Returns:
        a :class:`Question`, shown as clickable choices in HTML and as a plain list of the
        choices (without the answer) in text.

    Raises:
        ValueError: no choice is correct, or more than 8 choices.

    Example::

        >>> al.quiz.question("Is softmax(x + c) = softmax(x)?", [("Yes", True, "c cancels."), ("No", False, "Try it.")])
    """
    return Question(prompt, list(choices), qid)
