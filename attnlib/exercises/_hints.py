"""Hints that lead to the idea, and the ladder from the idea to the fix (COURSE.md,
"Exercise contract").

Level 1 is what every failed check shows: a catalogued mistake's title and ``message``
(the mistake and the idea that fixes it), or for a failure that matches no mistake the
part of ``Exercise.hint`` that is not code (:func:`displayed_hint`).

Level 2 comes only when the learner asks for it:

- a second check in this kernel that makes the **same** mistake shows ``Mistake.fix``
  (the concrete fix) under the message;
- :func:`hint` (``al.exercises.hint(name)``) shows the next step for the last failure of
  that exercise in this kernel: the mistake's ``fix`` first, then ``Exercise.hints`` one by
  one (from the idea to a near-solution, never a full solution). A failure that matches no
  mistake starts at ``Exercise.hints``.

A mistake without a ``fix`` (yet) shows nothing extra on a repeated check and lets
:func:`hint` go straight to ``Exercise.hints``; an exercise without ``hints`` falls back to
the idea of its ``hint``.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from ..i18n import N_, _
from ..ui import colours

__all__ = ["hint", "displayed_hint", "shown_part_of_hint", "Hint"]

_CODE = re.compile(r"(?:\b(?:return|lambda|def|for|while)\b\s*[\w(]"      # statements
                   r"|(?:^|[\s;(])[A-Za-z_][\w\[\]:, ]*\s(?:[+\-*/@]?=)\s*[^=\s]"  # x = ..., x += ...
                   r"|[A-Za-z_][\w\]\)]*\.[A-Za-z_]\w*\("                   # np.exp(, x.max(
                   r"|\b[A-Za-z_]\w*\((?:[^()]*[,=][^()]*)\)"              # f(a, b) / f(axis=1)
                   r"|\b[A-Za-z_]\w*\[[^\]]*\]"                              # x[None, :], k[j:j + b]
                   r"|\w\)?\s*[@&|]\s*\(?\w)")                                # a @ b, m1 & m2

_GENERIC_HINT = N_("Work through the first failing case by hand, on paper, and compare each step with "
                   "the chapter's formula and the shapes in the stub's docstring.")


def _looks_like_code(text: str) -> bool:
    return bool(_CODE.search(text))


def displayed_hint(hint: str) -> str:
    """The part of ``hint`` the checker shows, in the current language: its sentences up
    to the first one that looks like code (hints give the idea, never the solution)."""
    shown = shown_part_of_hint(hint)
    return _(shown) if shown else _(_GENERIC_HINT)


def idea_of_hint(hint: str) -> str:
    """The shown part of ``hint`` (translated), or '' when it has none: no generic text."""
    shown = shown_part_of_hint(hint)
    return _(shown) if shown else ""


def shown_part_of_hint(hint: str) -> str:
    """The English sentences of ``hint`` before the first one that looks like code, or
    ``""`` when that leaves too little (the generic hint is shown instead). The message
    catalogue holds this part (tools/i18n_extract.py calls this function)."""
    shown = []
    for sentence in re.split(r"(?<=[.!?;:])\s+", (hint or "").strip()):
        if not sentence or _looks_like_code(sentence):
            break
        shown.append(sentence)
    while shown and shown[-1].endswith(":"):  # "For example:" only introduced the code
        shown.pop()
    text = " ".join(shown).rstrip(";:,")
    return text if len(text) >= 12 else ""


# --------------------------------------------------------------------------- the ladder

@dataclass
class _State:
    """The last failure of one exercise in this kernel and how far the ladder went."""

    status: str                 # "failed" or "passed"
    mistake: str | None = None  # the catalogued mistake of the last failure
    repeats: int = 1            # checks in a row that made this mistake
    shown: list = field(default_factory=list)  # ladder steps shown so far


_LADDER: dict[str, _State] = {}


def record(ex, result) -> None:
    """Note a learner's check (never the course's solution) and, on a second check in a
    row with the same mistake, add its fix to ``result`` (level 2)."""
    if result.solution or result.status not in ("passed", "failed"):
        return
    if result.status == "passed":
        _LADDER[ex.name] = _State("passed")
        return
    key = result.mistake
    old = _LADDER.get(ex.name)
    if old is not None and old.status == "failed" and key is not None and old.mistake == key:
        old.repeats += 1
        state = old
    else:
        state = _LADDER[ex.name] = _State("failed", key)
    m = _mistake(ex, key)
    if state.repeats >= 2 and m is not None and m.fix:
        result.fix = _(m.fix)
        if "fix" not in state.shown:
            state.shown.append("fix")


def _mistake(ex, key):
    for m in ex.mistakes:
        if m.key == key:
            return m
    return None


def ladder(ex, mistake_key: str | None) -> list[tuple[str, str]]:
    """The steps :func:`hint` walks after a failure with ``mistake_key`` (None: no
    catalogued mistake): ``[(step id, English text), ...]``, in order."""
    steps = []
    m = _mistake(ex, mistake_key)
    if m is not None and m.fix:
        steps.append(("fix", m.fix))
    hints = tuple(ex.hints) or ((shown_part_of_hint(ex.hint),) if shown_part_of_hint(ex.hint) else ())
    steps += [(f"hint{i}", h) for i, h in enumerate(hints)]
    return steps


@dataclass
class Hint:
    """What :func:`hint` shows: the step (its text) and where it stands on the ladder."""

    name: str
    text: str
    step: int = 0       # 1-based position on the ladder; 0: not a ladder step
    steps: int = 0

    def _head(self) -> str:
        if self.step:
            return _("Hint {step} of {steps} for {name}").format(step=self.step, steps=self.steps, name=self.name)
        return _("Hint for {name}").format(name=self.name)

    def __str__(self) -> str:
        return f"💡 {self._head()}\n  {self.text}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return (f'<div class="attnlib-hint" style="border-left:4px solid {colours.WARNING};padding:.4em .8em;margin:.3em 0">'
                f'<b>💡 {html.escape(self._head())}</b>'
                f'<div style="white-space:pre-wrap">{html.escape(self.text)}</div></div>')


def next_hint(name: str) -> Hint:
    """The next step for the last failure of exercise ``name`` (see :func:`hint`)."""
    from ._model import EXERCISES

    ex = EXERCISES.get(name)
    if ex is None:
        import difflib
        close = difflib.get_close_matches(str(name), list(EXERCISES), n=1)
        return Hint(str(name), _("There is no exercise called {name}.").format(name=repr(name))
                    + (_(" Did you mean {close}?").format(close=repr(close[0])) if close else ""))
    state = _LADDER.get(name)
    if state is None:
        return Hint(name, _("Check your function first, with al.exercises.check(\"{name}\", your_function): the "
                            "hint then gives the next step for what that check found.").format(name=name))
    if state.status == "passed":
        return Hint(name, _("Your last check of {name} passed: there is nothing to fix.").format(name=name))
    steps = ladder(ex, state.mistake)
    for i, (step, text) in enumerate(steps):
        if step not in state.shown:
            state.shown.append(step)
            return Hint(name, _(text), i + 1, len(steps))
    if steps:
        return Hint(name, _("That was the last hint ({steps} of {steps}). Compare your function with them "
                            "step by step, on the first case that fails.").format(steps=len(steps)),
                    len(steps), len(steps))
    return Hint(name, _(_GENERIC_HINT))


def hint(name: str) -> None:
    """Show the next hint for exercise ``name``: the concrete fix of the mistake your last
    check of it made, then the exercise's hints one by one, from the idea towards the
    solution (never the whole solution).

    Args:
        name: an exercise name (a key of :data:`attnlib.exercises.EXERCISES`).

    In a notebook it is displayed; elsewhere printed. Each call shows one more step.

    Example::

        >>> al.exercises.check("softmax", my_softmax)   # not yet: names the mistake
        >>> al.exercises.hint("softmax")                # the concrete fix
    """
    h = next_hint(name)
    try:
        from IPython import get_ipython
        if get_ipython() is not None:
            from IPython.display import display
            display(h)
            return None
    except ImportError:
        pass
    print(h)
    return None
