"""Grade one submitted notebook: read it, run it in its sandbox, judge every exercise.

The notebook is read here as JSON: only its code cells' sources are used (never its
stored outputs, which a student can edit). They run in a fresh sandbox
(:mod:`.sandbox`, :mod:`.runner`); then each exercise of the chapter is graded by
:func:`.judge.grade_exercise`, and each concept question by comparing the letter the
student recorded with the key read from the course's chapter.
"""
from __future__ import annotations

import json
import pathlib
import re
import time
from dataclasses import asdict, dataclass, field

from ..exercises import EXERCISES, CheckResult
from ..i18n import N_, _
from . import course
from .judge import grade_exercise, stub_function
from .sandbox import Limits, Sandbox, SandboxError
from .submissions import Submission

__all__ = ["SandboxStartError", "ExerciseGrade", "QuestionGrade", "NotebookGrade", "grade_notebook", "read_notebook", "detect_chapter"]

class SandboxStartError(RuntimeError):
    """The sandbox did not start (a problem of this machine or of the grader, not of the
    notebook): grading stops. The text is what the sandbox printed."""


STATUSES = ("passed", "failed", "not_attempted", "error", "timed_out")


@dataclass
class ExerciseGrade:
    """One exercise of one notebook. ``status`` is one of :data:`STATUSES`; ``mistake``
    the key of the named mistake (a failed answer the checker recognised)."""

    name: str
    status: str
    message: str = ""
    mistake: str | None = None
    problem: str | None = None
    hint: str = ""
    printed: str = ""
    found: str | None = None  # how the function was found: "check", "global" or None

    @property
    def cell(self) -> str:
        """The value in grades.csv (passed, the mistake's key, failed, not_attempted, error or timed_out)."""
        return self.mistake if self.status == "failed" and self.mistake else self.status


@dataclass
class QuestionGrade:
    qid: str
    given: str      # what the student wrote ("" when nothing)
    answer: str     # the key
    correct: bool

    @property
    def cell(self) -> str:
        return "correct" if self.correct else ("not_answered" if not self.given else f"wrong:{self.given}")


@dataclass
class NotebookGrade:
    student: str
    source: str
    chapter: str = ""
    exercises: dict = field(default_factory=dict)
    questions: dict = field(default_factory=dict)
    problem: str = ""        # why the notebook as a whole could not be graded
    cell_errors: list = field(default_factory=list)
    cell_timeouts: list = field(default_factory=list)
    seconds: float = 0.0
    survivors: list = field(default_factory=list)  # processes left after the verdict (should be none)
    output: str = ""

    @property
    def passed(self) -> int:
        return sum(g.status == "passed" for g in self.exercises.values())

    def to_json(self) -> dict:
        d = asdict(self)
        d["exercises"] = {k: {**asdict(v), "cell": v.cell} for k, v in self.exercises.items()}
        d["questions"] = {k: {**asdict(v), "cell": v.cell} for k, v in self.questions.items()}
        return d


def read_notebook(data: bytes) -> tuple[dict | None, str]:
    """``(notebook, "")`` or ``(None, why)`` for bytes that are not a Jupyter notebook (v4)."""
    try:
        nb = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, _("it is not valid JSON ({error})").format(error=type(exc).__name__)
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return None, _("it is JSON but not a Jupyter notebook (no list of cells)")
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            return None, _("a cell of it is not a Jupyter cell")
        src = cell.get("source", "")
        if not (isinstance(src, str) or (isinstance(src, list) and all(isinstance(s, str) for s in src))):
            return None, _("a cell's source is not text")
    return nb, ""


def _sources(nb: dict) -> list[str]:
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"] if c.get("cell_type") == "code"]


def detect_chapter(nb: dict, source: str) -> str:
    """The chapter a notebook is an assignment of: its metadata (written by
    ``attnlib.grading.assignments``), else the exercises its cells check, else its file name."""
    meta = nb.get("metadata", {}).get("attnlib", {}) if isinstance(nb.get("metadata"), dict) else {}
    if isinstance(meta, dict) and isinstance(meta.get("chapter"), str):
        try:
            return course.chapter_of(meta["chapter"])
        except ValueError:
            pass
    counts: dict[str, int] = {}
    for src in _sources(nb):
        for name in re.findall(r"check\(\s*['\"](\w+)['\"]", src):
            if name in EXERCISES:
                counts[EXERCISES[name].chapter] = counts.get(EXERCISES[name].chapter, 0) + 1
    if counts:
        return max(counts, key=counts.get)
    m = re.search(r"(\d\d)_[a-z]+", pathlib.PurePosixPath(source).name)
    if m:
        try:
            return course.chapter_of(m.group(0))
        except ValueError:
            pass
    return ""


def _from_result(name: str, r: CheckResult, printed: str, found: str | None) -> ExerciseGrade:
    problem = (r.details or {}).get("problem")
    status = r.status
    if status == "failed" and problem == "timeout":
        status = "timed_out"
    elif status == "failed" and problem in ("crashed", "garbled", "unsendable"):
        status = "error"  # its process died or broke the protocol: no answer to judge
    return ExerciseGrade(name, status, r.message, r.mistake if status == "failed" else None, problem,
                         r.hint, printed[:2000], found)


_WHY = {"timeout": N_("the notebook used up its time ({seconds} s) before this exercise could be graded"),
        "ended": N_("the notebook's process ended (os._exit, a crash, or the memory limit) before this "
                    "exercise could be graded"),
        "garbage": N_("the notebook's process answered with data that does not follow the grader's "
                      "protocol, so this exercise could not be graded")}


def grade_notebook(sub: Submission, *, staging: pathlib.Path, slot: int, limits: Limits,
                   protected: list, chapter: str | None = None, lang: str = "en",
                   keys: dict | None = None, on_step=None) -> NotebookGrade:
    """Grade one submission in a sandbox of its own (see the module docstring).

    Args:
        sub: the submission.
        staging: the grader's private folder for sandboxes.
        slot: the parallel slot (0 .. jobs - 1).
        limits: the sandbox's :class:`~attnlib.grading.sandbox.Limits`.
        protected: folders the sandbox must not see.
        chapter: the chapter every notebook is graded as (default: detected per notebook).
        lang: the language of the notebook's run (``ATTNLIB_LANG``).
        keys: ``{chapter: [course.Question, ...]}``, the answer keys.
        on_step: called with a short text while it works (progress).
    """
    t0 = time.monotonic()
    g = NotebookGrade(sub.student, sub.source)
    step = on_step or (lambda text: None)
    if sub.problem:
        g.problem = {"too_large": _("the file is larger than 50 MB")}.get(sub.problem, sub.problem)
        return g
    nb, why = read_notebook(sub.data)
    if nb is None:
        g.problem = _("The file could not be graded: {why}.").format(why=why)
        return g
    g.chapter = chapter or detect_chapter(nb, sub.source)
    if not g.chapter:
        g.problem = _("The chapter of this notebook could not be told (no attnlib metadata, no check() of a "
                       "known exercise, no chapter in its file name): grade it with --chapter.")
        return g
    names = course.exercises_of(g.chapter)
    questions = (keys or {}).get(g.chapter, [])
    box = Sandbox(staging, slot, limits, protected=protected)
    deadline = t0 + limits.wall
    try:
        box.prepare({})
        box.start()
        try:
            hello = box.recv(timeout=120)
        except SandboxError:
            hello = None
        if not (isinstance(hello, dict) and hello.get("op") == "ready"):
            raise SandboxStartError(box.output)
        step(_("running its cells"))
        req = {"op": "execute", "cells": _sources(nb), "cell_timeout": limits.cell, "lang": lang,
               "exercises": {n: stub_function(n) for n in names}}
        try:
            box.send(req, timeout=max(deadline - time.monotonic(), 1))
            done = box.recv(timeout=max(deadline - time.monotonic(), 1))
            if not isinstance(done, dict) or done.get("op") != "executed" or not isinstance(done.get("found"), dict):
                raise SandboxError("garbage", "not the answer to 'execute'")
        except SandboxError as exc:
            for n in names:
                g.exercises[n] = ExerciseGrade(n, "timed_out" if exc.kind == "timeout" else "error",
                                               _(_WHY[exc.kind]).format(seconds=f"{limits.wall:g}"))
            g.problem = g.exercises[names[0]].message if names else str(exc)
            done = None
        if done is not None:
            g.cell_errors = [e for e in done.get("errors", []) if isinstance(e, dict)][:50]
            g.cell_timeouts = [i for i in done.get("timeouts", []) if type(i) is int][:50]
            found = done["found"]
            answers = done.get("answers") if isinstance(done.get("answers"), dict) else {}
            for q in questions:
                given = course.normalise_answer(answers.get(q.qid, ""))
                g.questions[q.qid] = QuestionGrade(q.qid, given, q.answer, given == q.answer)
            broken = None
            for n in names:
                step(n)
                how = found.get(n) if found.get(n) in ("check", "global") else None
                if broken is not None:
                    g.exercises[n] = ExerciseGrade(n, "timed_out" if broken == "timeout" else "error",
                                                   _(_WHY[broken]).format(seconds=f"{limits.wall:g}"), found=how)
                    continue
                if how is None:
                    g.exercises[n] = ExerciseGrade(n, "not_attempted", _(
                        "Not attempted: the notebook defines no function {fn} and passes none to "
                        "check({name}, ...).").format(fn=stub_function(n), name=repr(n)))
                    continue

                def call(request: dict, timeout: float) -> dict:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise SandboxError("timeout", "out of time")
                    box.send(request, timeout=min(timeout, left))
                    reply = box.recv(timeout=min(timeout, left))
                    if not isinstance(reply, dict) or reply.get("op") != "ran" or reply.get("exercise") != n:
                        raise SandboxError("garbage", "not the answer to 'run'")
                    return reply
                try:
                    result, printed = grade_exercise(n, call)
                    g.exercises[n] = _from_result(n, result, printed, how)
                except SandboxError as exc:
                    broken = exc.kind
                    g.exercises[n] = ExerciseGrade(n, "timed_out" if exc.kind == "timeout" else "error",
                                                   _(_WHY[exc.kind]).format(seconds=f"{limits.wall:g}"), found=how)
                except (ValueError, TypeError, KeyError) as exc:  # WireError and malformed replies
                    g.exercises[n] = ExerciseGrade(n, "error", _(
                        "The notebook's answers for this exercise could not be read ({error}).").format(
                        error=type(exc).__name__), found=how)
            if broken is None:
                try:
                    box.send({"op": "bye"}, timeout=2)
                except SandboxError:
                    pass
    finally:
        g.survivors = box.close()
        g.output = box.output[-4000:]
    for q in questions:
        g.questions.setdefault(q.qid, QuestionGrade(q.qid, "", q.answer, False))
    g.seconds = time.monotonic() - t0
    return g
