"""The exercise data model and registry: :class:`Case`, :class:`Mistake`, :class:`Exercise`,
:data:`EXERCISES` (filled by the chapters' modules in :mod:`attnlib.exercises.catalogue`
through :func:`register`) and :class:`CheckResult`, what a check returns.

:mod:`attnlib.exercises._core` runs a check with these (its docstring tells how).
"""
from __future__ import annotations

import html
import inspect
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .. import kernels
from ..i18n import N_, _
from ..ui import colours
from ._rules import parse_rule

__all__ = ["Case", "Mistake", "Exercise", "CheckResult", "EXERCISES", "register",
           "SOFTMAX_SHORTCUTS", "ATTENTION_SHORTCUTS", "MULTIHEAD_SHORTCUTS"]

# Library answers of a kind of exercise (``Exercise.borrowed``; rules: see _judge.parse_rule).
# A dotted name whose module is not imported is resolved once it is; an ``aten::`` rule
# catches the torch operator whatever Python name reached it.
SOFTMAX_SHORTCUTS = ("attnlib.softmax", "attnlib.instruments.scaling.softmax_np", "torch.softmax",
                     "torch.nn.functional.softmax", "torch.special.softmax", "torch.Tensor.softmax",
                     "scipy.special.softmax", "torch.log_softmax", "torch.nn.functional.log_softmax",
                     "torch.Tensor.log_softmax", "torch.special.log_softmax", "scipy.special.log_softmax",
                     "aten::_softmax", "aten::softmax", "aten::_log_softmax", "aten::log_softmax",
                     "aten::_safe_softmax", "aten::special_softmax", "aten::special_log_softmax")
ATTENTION_SHORTCUTS = ("attnlib.scaled_dot_product_attention", "attnlib.flash_attention",
                       "attnlib.multi_head_attention", "attnlib.attention_state",
                       "attnlib.sliding_window_attention", "attnlib.ring_attention_simulated",
                       "torch.nn.functional.scaled_dot_product_attention",
                       "torch.nn.functional.multi_head_attention_forward",
                       "torch.nn.MultiheadAttention.forward",
                       "aten::*scaled_dot_product*", "aten::_safe_softmax", "aten::_fused_sdp_choice",
                       "aten::_native_multi_head_attention", "aten::_transformer_encoder_layer_fwd",
                       "aten::_flash_attention_forward", "aten::_efficient_attention_forward")
MULTIHEAD_SHORTCUTS = ("attnlib.multi_head_attention", "attnlib.models.transformer.self_attention",
                       "torch.nn.functional.multi_head_attention_forward",
                       "torch.nn.MultiheadAttention.forward", "aten::_native_multi_head_attention")


@dataclass(frozen=True)
class Case:
    """One input to an exercise: ``fn(*args, **kwargs)``; ``label`` says what it probes."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    label: str = ""


@dataclass(frozen=True)
class Mistake:
    """A known wrong answer.

    ``fn`` is a working implementation *of the mistake*. The checker recognises the
    mistake when, on every case, the learner's output equals ``fn``'s output, or both
    raise (a mistake such as ``weights.T @ v`` only fails with an error when L != S);
    ``fn`` must give a value on at least one case. ``variants`` are other ways learners
    write the same mistake (e.g. ``softmax(scores, axis=0)`` next to ``axis=-2``), tried
    after ``fn`` with the same message.

    ``message`` names the mistake and the idea that fixes it (level 1 of the hint ladder,
    shown with every failure that matches); ``fix`` is the concrete fix (level 2), shown
    only when the learner asks: a second check with the same mistake, or
    ``al.exercises.hint(name)``. Neither is ever the whole solution.

    With ``kind="slow"`` the mistake is recognised by time instead (see
    ``Exercise.perf_case``), with ``kind="mutates"`` by the input being changed in place,
    with ``kind="custom"`` by ``Exercise.extra_check`` returning its ``key``, and with
    ``kind="borrowed"`` by a call that matches one of its ``calls`` rules (the syntax of
    ``Exercise.borrowed``), e.g. ``calls=("attnlib.causal_mask(align='lower_right')",)``.
    """

    key: str
    title: str
    message: str
    fn: Callable
    kind: str = "output"  # "output" | "slow" | "mutates" | "custom" | "borrowed"
    variants: tuple = ()
    fix: str = ""
    calls: tuple = ()


def _takes_rng(cases: Callable) -> bool:
    try:
        params = inspect.signature(cases).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


@dataclass
class Exercise:
    """An exercise: a stub to fill in, a reference, the cases and the mistake catalogue.

    Args:
        name: the key used by ``check(name, fn)``.
        chapter: the chapter file stem, e.g. ``"02_qkv"``.
        prompt: one sentence saying what ``fn`` must compute.
        stub: source code of the stub the learner starts from.
        reference: a correct implementation.
        cases: ``cases(rng) -> list[Case]``, called with a fresh ``np.random.Generator``
            for every check (so memorised answers fail), or (older form) ``cases()`` with
            fixed cases. :meth:`all_cases` calls it with an explicit seed.
        mistakes: the catalogue of known wrong answers, checked in order.
        hint: the idea, shown with any failure of the values that matches no catalogued
            mistake (and after a time-out). **A hint gives the idea, in words, never the
            solution**: the checker does not display a hint, or the part of it from the
            first sentence on, that looks like code (an assignment, a function or method
            call such as ``np.exp(...)``, ``return``, ``lambda``); see :func:`displayed_hint`.
        hints: the ladder :func:`attnlib.exercises.hint` walks after a failure, from the
            idea to a near-solution (never a full solution). Default: ``()`` (the idea of
            ``hint`` only).
        rtol, atol: tolerances of the comparison (done in float64, whatever the answer's
            dtype): ``rtol`` relative to each expected entry, ``atol`` relative to the
            scale of the expected output (its largest finite magnitude, 1 when 0).
            Default: ``rtol=1e-4, atol=1e-6``, which any correct float32 or float64
            answer meets; a float16 / bfloat16 answer does not, and is told why.
        output_kind: ``"float"`` (arrays of reals), ``"bool"`` (bool arrays), ``"int"``
            (integers) or ``"any"`` (compared with ``==`` after conversion).
        time_limit: CPU seconds one call may take before it is stopped (CPU time, so that
            a busy machine does not fail a correct answer; three times this plus a second
            on the clock stops a call that waits: :mod:`attnlib.runtime.limits`). Default: 5.
        perf_case: an optional larger case that is only timed.
        slow_limit: CPU seconds ``perf_case`` may take before the answer is called too slow.
        extra_check: ``extra_check(fn) -> str | None``, run in the worker after the value
            checks pass (e.g. a peak-memory limit); a string is the failure message, or the
            key of a ``kind="custom"`` mistake, which is then reported with its title and
            message. Calls of ``fn`` inside it are watched for borrowed answers.
        total_time_limit: CPU seconds all cases together may take (the clock's backstop
            as for ``time_limit``). Default: ``None`` (three times ``time_limit``).
        borrowed: what counts as the library's own answer of this exercise, one rule per
            entry (a call of any fails the check, named in the message): a public dotted
            name (``"attnlib.softmax"``, ``"torch.Tensor.softmax"``), a module and
            qualified name pattern (``"torch.nn.attention.bias:*"``), either with the
            argument values that make it the answer
            (``"attnlib.causal_mask(align='lower_right')"``), or a torch operator
            (``"aten::_softmax"``), recognised whatever name reached it. Always added: an
            attnlib function of the exercise's own name and the course's answer key (the
            exercise modules). See :data:`SOFTMAX_SHORTCUTS`, :data:`ATTENTION_SHORTCUTS`.
        forbidden: the older name of ``borrowed`` (the two are joined).
        memory_limit: bytes of memory the worker may add while running the function
            (an allocation beyond fails as the learner's MemoryError). Default: 2 GiB.
    """

    name: str
    chapter: str
    prompt: str
    stub: str
    reference: Callable
    cases: Callable
    mistakes: list = field(default_factory=list)
    hint: str = ""
    rtol: float = 1e-4
    atol: float = 1e-6
    output_kind: str = "float"
    time_limit: float = 5.0
    perf_case: Case | None = None
    slow_limit: float = 2.0
    extra_check: Callable | None = None
    total_time_limit: float | None = None
    forbidden: tuple = ()
    borrowed: tuple = ()
    hints: tuple = ()
    memory_limit: int | None = 2 * 2**30

    def mistake(self, key: str) -> Mistake:
        for m in self.mistakes:
            if m.key == key:
                return m
        raise KeyError(f"exercise {self.name!r} has no mistake {key!r}; known: "
                       f"{[m.key for m in self.mistakes]}")

    @property
    def varies(self) -> bool:
        """Whether the cases depend on the seed (``cases(rng)``)."""
        return callable(self.cases) and _takes_rng(self.cases)

    def all_cases(self, seed: int = 0) -> list:
        """The cases as a list, made with ``np.random.default_rng(seed)`` (``cases`` may
        also take no argument, or be a plain list)."""
        if not callable(self.cases):
            return list(self.cases)
        if _takes_rng(self.cases):
            return list(self.cases(np.random.default_rng(seed)))
        return list(self.cases())

    def shortcuts(self) -> tuple:
        """The borrowed-answer rules: ``attnlib.<name>`` if it exists, ``forbidden`` and
        ``borrowed``."""
        # the kernels' public functions are attnlib's own answers (re-exported as al.<name>)
        own = (f"attnlib.{self.name}",) if callable(getattr(kernels, self.name, None)) else ()
        return tuple(dict.fromkeys((*own, *self.forbidden, *self.borrowed)))

    def signature(self) -> str:
        """The ``def ...:`` line of the stub, e.g. ``def softmax(x, axis=-1):``."""
        m = re.search(r"^def \w+\(.*?\)\s*(?:->[^:\n]*)?:[ \t]*$", self.stub, flags=re.M | re.S)
        if not m:
            return f"def {self.name}(...):"
        return re.sub(r"\(\s+", "(", " ".join(m.group(0).split()))


EXERCISES: dict[str, Exercise] = {}

_KINDS = ("output", "slow", "mutates", "custom", "borrowed")


def register(ex: Exercise) -> Exercise:
    """Add ``ex`` to :data:`EXERCISES` (names must be unique)."""
    if ex.name in EXERCISES:
        raise ValueError(f"exercise {ex.name!r} is registered twice")
    keys = [m.key for m in ex.mistakes]
    if len(set(keys)) != len(keys):
        raise ValueError(f"exercise {ex.name!r} has duplicate mistake keys: {keys}")
    bad = [m.key for m in ex.mistakes if m.kind not in _KINDS]
    if bad:
        raise ValueError(f"exercise {ex.name!r}: mistakes {bad} have an unknown kind; use one of {_KINDS}")
    for what in ("forbidden", "borrowed"):
        rules = getattr(ex, what)
        try:
            if isinstance(rules, str):
                raise ValueError("a tuple is needed")
            for r in rules:
                parse_rule(r)
        except (ValueError, SyntaxError) as exc:
            raise ValueError(f"exercise {ex.name!r}: {what} must be a tuple of rules such as 'attnlib.softmax', "
                             f"'torch.nn.attention.bias:*' or 'aten::_softmax' (dotted names); got {rules!r}: {exc}") from None
    for m in ex.mistakes:
        if m.kind == "borrowed" and not m.calls:
            raise ValueError(f"exercise {ex.name!r}: mistake {m.key!r} of kind 'borrowed' needs its calls")
        for r in m.calls:
            parse_rule(r)
    if isinstance(ex.hints, str):
        raise ValueError(f"exercise {ex.name!r}: hints must be a tuple of steps, not one string")
    if ex.output_kind not in ("float", "bool", "int", "any"):
        raise ValueError(f"exercise {ex.name!r}: output_kind={ex.output_kind!r}; use float, bool, int or any")
    EXERCISES[ex.name] = ex
    return ex


# --------------------------------------------------------------------------- results

_ICON = {"passed": "✓", "failed": "✗", "not_attempted": "…", "error": "!"}
_HEAD = {"passed": N_("passed"), "failed": N_("not yet"), "not_attempted": N_("not attempted"),
         "error": N_("could not check")}


_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def _html_text(text: str) -> str:
    """``text`` for HTML: escaped, with each `code span` of a message set as <code> (the
    messages mark code the Markdown way; in a notebook the backticks would show)."""
    return _CODE_SPAN.sub(r"<code>\1</code>", html.escape(text))


@dataclass
class CheckResult:
    """What :func:`check` found. ``status`` is passed, failed, not_attempted or error.

    ``mistake`` is the key of the recognised mistake (or None; ``"library_shortcut"`` /
    ``"answer_key"`` for a borrowed answer, ``"tampered"`` for a switched-off watch);
    ``details["problem"]`` names the kind of failure (``"raised"``, ``"none"``, ``"type"``,
    ``"shape"``, ``"dtype"``, ``"nan"``, ``"inf"``, ``"value"``, ``"timeout"``,
    ``"signature"``, ``"mutates"``, ``"slow"``, ``"mistake"``, ``"extra"``, ``"crashed"``,
    ``"forbidden"``, ``"borrowed"``, ``"tampered"``, ``"garbled"``, ``"unsendable"``);
    ``details["printed"]`` holds the start of what the learner's function printed (stdout
    and stderr), ``details["called"]`` the library answer it called, ``details["seed"]``
    the seed of the check's cases. ``hint`` is the idea (level 1), ``fix`` the concrete
    fix once the learner asked for it (level 2).
    """

    name: str
    status: str
    message: str
    hint: str = ""
    mistake: str | None = None
    details: dict = field(default_factory=dict)
    solution: bool = False  # True when it checked the course's solution, not the learner's answer
    fix: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def __bool__(self) -> bool:
        return self.passed

    def _printed(self) -> str:
        return self.details.get("printed", "") if isinstance(self.details, dict) else ""

    def _title(self) -> str:
        if self.solution:
            return f"{_ICON[self.status]} {self.name}: " + _(
                "the course's solution {verdict} (this checks the solution above, not your answer)"
            ).format(verdict=_(_HEAD[self.status]))
        return f"{_ICON[self.status]} {self.name}: {_(_HEAD[self.status])}"

    def _next_step(self) -> str:
        if self.status != "failed" or self.solution:
            return ""
        return _("Stuck? al.exercises.hint(\"{name}\") shows the next step.").format(name=self.name)

    def __str__(self) -> str:
        lines = [self._title(), f"  {self.message}"]
        if self.hint:
            lines.append("  " + _("Hint: {hint}").format(hint=self.hint))
        if self.fix:
            lines.append("  " + _("How to fix it: {fix}").format(fix=self.fix))
        if self._printed():
            lines.append("  " + _("Your function printed (first lines):"))
            lines += ["    " + s for s in self._printed().splitlines()]
        if self._next_step():
            lines.append("  " + self._next_step())
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        c = colours.STATUS[self.status]
        hint_word, fix_words = _("Hint:"), html.escape(_("How to fix it:"))
        printed_words = _("Your function printed (first lines):")
        hint = (f'<div style="margin-top:.3em"><b>{hint_word}</b> {_html_text(self.hint)}</div>'
                if self.hint else "")
        fix = (f'<div style="margin-top:.3em"><b>{fix_words}</b> {_html_text(self.fix)}</div>'
               if self.fix else "")
        printed = (f'<div style="margin-top:.3em"><b>{printed_words}</b>'
                   f'<pre style="margin:.2em 0">{html.escape(self._printed())}</pre></div>'
                   if self._printed() else "")
        step = (f'<div style="margin-top:.3em;color:{colours.MUTED}">{html.escape(self._next_step())}</div>'
                if self._next_step() else "")
        title = self._title()
        return (f'<div class="attnlib-check attnlib-check-{self.status}" '
                f'style="border-left:4px solid {c};padding:.4em .8em;margin:.3em 0">'
                f'<b style="color:{c}">{html.escape(title)}</b>'
                f'<div style="white-space:pre-wrap">{_html_text(self.message)}</div>{hint}{fix}{printed}{step}</div>')
