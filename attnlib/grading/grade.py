"""Grade a class's notebooks: ``python -m attnlib.grading.grade SUBMISSIONS/ --out REPORT/``.

Every notebook in SUBMISSIONS (any file names, sub-folders, or an LMS's zip export; see
:mod:`attnlib.grading.submissions`) runs in a sandbox of its own, in a fresh IPython
shell (:mod:`attnlib.grading.sandbox`); every exercise of its chapter is graded by the
course's checker on the trusted side, from plain data the sandbox sends back
(:mod:`attnlib.grading.judge`), never from the notebook's stored outputs. REPORT gets
``grades.csv`` (student x exercise), ``grades.json`` (everything, with the checker's
messages) and ``report.html`` (offline: pass rates, the mistakes named across the class,
each student's row). Progress is printed while it runs. Notebooks run ``--jobs`` at a
time (default: one per CPU core).

Examples::

    python -m attnlib.grading.grade submissions/ --out report/
    python -m attnlib.grading.grade moodle-export/ --out report/ --lang zh --chapter 2
    python -m attnlib.grading.grade submissions/ --out report/ --students roster.csv --timeout 300
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import queue
import re
import shutil
import sys
import tempfile
import threading
import time
import warnings

import numpy as np

from ..i18n import _, set_language
from . import course
from .notebook import NotebookGrade, SandboxStartError, grade_notebook
from .report import write_csv, write_html, write_json
from .sandbox import Limits, probe
from .submissions import collect, read_mapping

__all__ = ["grade_class", "main"]


def _bytes(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)i?[bB]?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: write e.g. 4G, 512M or 2000000000")
    return int(float(m.group(1)) * {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[m.group(2).lower()])


class Progress:
    """Progress on stderr: a line per graded notebook; on a terminal a live status line,
    elsewhere a status line every ``every`` seconds."""

    def __init__(self, total: int, stream=None, every: float = 15.0, quiet: bool = False):
        self.total, self.done, self.t0 = total, 0, time.monotonic()
        self.stream = stream or sys.stderr
        self.running: dict[int, str] = {}
        self.lock = threading.Lock()
        self.quiet, self.every = quiet, every
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self):
        if not self.quiet:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.tty and not self.quiet:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def _status(self) -> str:
        elapsed = time.monotonic() - self.t0
        eta = ""
        if self.done:
            left = elapsed / self.done * (self.total - self.done)
            eta = " " + _("about {seconds} s left").format(seconds=f"{left:.0f}")
        now = "; ".join(self.running.values())
        return _("{done}/{total} graded, {seconds} s").format(done=self.done, total=self.total,
                                                              seconds=f"{elapsed:.0f}") + eta + (f" | {now}" if now else "")

    def _write(self, line: str) -> None:
        if self.quiet:
            return
        with self.lock:
            if self.tty:
                self.stream.write("\r\x1b[K" + line + "\n" + self._status()[:200])
            else:
                self.stream.write(line + "\n")
            self.stream.flush()

    def _beat(self) -> None:
        while not self._stop.wait(1.0 if self.tty else self.every):
            with self.lock:
                if self.tty:
                    self.stream.write("\r\x1b[K" + self._status()[:200])
                else:
                    self.stream.write("  ... " + self._status() + "\n")
                self.stream.flush()

    def step(self, slot: int, student: str, what: str) -> None:
        with self.lock:
            self.running[slot] = f"{student}: {what}"

    def finished(self, slot: int, g: NotebookGrade) -> None:
        with self.lock:
            self.running.pop(slot, None)
            self.done += 1
        marks = " ".join(
            f"{ {'passed': '✓', 'failed': '✗', 'not_attempted': '…', 'error': '!', 'timed_out': '⏱'}[e.status]}"
            f"{name}" + (f"({e.mistake})" if e.mistake else "") for name, e in g.exercises.items())
        qs = sum(q.correct for q in g.questions.values())
        tail = (" " + _("questions {right}/{n}").format(right=qs, n=len(g.questions))) if g.questions else ""
        problem = f"  {g.problem}" if g.problem and not g.exercises else ""
        self._write(f"[{self.done:>{len(str(self.total))}}/{self.total}] {g.student}: {marks}{tail}"
                    f"{problem}  ({g.seconds:.1f} s)")


def grade_class(submissions: pathlib.Path, out: pathlib.Path, *, students: pathlib.Path | None = None,
                chapter: str | None = None, lang: str = "en", jobs: int | None = None,
                limits: Limits | None = None, require_isolation: bool = False, quiet: bool = False,
                title: str | None = None) -> list[NotebookGrade]:
    """Grade every notebook under ``submissions`` and write the report into ``out``.

    Args:
        submissions: the folder of submitted notebooks (and LMS zip files).
        out: the report folder (created, mode 0700; must not be inside ``submissions``).
        students: optional CSV with columns ``file`` and ``student``. Default: ``None``
            (the student comes from the file's name or folder).
        chapter: grade every notebook as this chapter (``2``, ``02_qkv``). Default:
            ``None`` (each notebook's own, from its metadata or the exercises it checks).
        lang: ``"en"`` or ``"zh"``: the language of the report, of the checker's messages
            and of the notebooks' run. Default: ``"en"``.
        jobs: notebooks graded at a time. Default: ``None`` (the number of CPU cores).
        limits: the sandbox's :class:`~attnlib.grading.sandbox.Limits`. Default: ``None``
            (``Limits()``).
        require_isolation: refuse to run where the sandbox cannot isolate completely.
        quiet: print nothing while it runs.
        title: the report's title. Default: ``None`` ("Grades: <chapter>").

    Returns:
        one :class:`~attnlib.grading.notebook.NotebookGrade` per notebook.
    """
    set_language(lang)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # the checker's catalogued mistakes run here on the cases (overflowing on purpose)
        warnings.simplefilter("ignore", RuntimeWarning)
        return _grade_class(submissions, out, students=students, chapter=chapter, lang=lang, jobs=jobs,
                            limits=limits, require_isolation=require_isolation, quiet=quiet, title=title)


def _grade_class(submissions, out, *, students, chapter, lang, jobs, limits, require_isolation, quiet, title):
    submissions, out = pathlib.Path(submissions).resolve(), pathlib.Path(out).resolve()
    if out == submissions or submissions in out.parents:
        raise ValueError(f"--out {out} is inside the submissions folder {submissions}: the report would be "
                         "graded as a submission; choose a folder elsewhere")
    limits = limits or Limits()
    iso = probe()
    missing = iso.missing()
    say = (lambda text: None) if quiet else (lambda text: print(text, file=sys.stderr, flush=True))
    if missing:
        say(_("Warning: the sandbox cannot isolate the notebooks completely on this machine ({why}):").format(
            why=iso.reason or iso.mode))
        for m in missing:
            say("  - " + _(m))
        if require_isolation:
            raise SystemExit(2)
    chapter = course.chapter_of(chapter) if chapter else None
    mapping = read_mapping(students) if students else {}
    subs = collect(submissions, mapping)
    keys = {stem: course.questions(path) for stem, path in course.chapters().items()}
    jobs = max(1, jobs or len(os.sched_getaffinity(0)))
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = pathlib.Path(tempfile.mkdtemp(prefix="attnlib-grade-"))
    protected = [str(submissions), str(out), str(staging)] + ([str(course.course_root())] if course.course_root() else [])
    say(_("Grading {n} notebooks, {jobs} at a time (sandbox: {mode}).").format(n=len(subs), jobs=jobs, mode=iso.mode))
    t0 = time.monotonic()
    slots: queue.Queue = queue.Queue()
    for s in range(jobs):
        slots.put(s)
    grades: list[NotebookGrade | None] = [None] * len(subs)
    try:
        with Progress(len(subs), quiet=quiet) as progress, \
                concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            def one(i: int) -> None:
                slot = slots.get()
                try:
                    sub = subs[i]
                    progress.step(slot, sub.student, _("starting"))
                    grades[i] = grade_notebook(sub, staging=staging, slot=slot, limits=limits, protected=protected,
                                               chapter=chapter, lang=lang, keys=keys,
                                               on_step=lambda what: progress.step(slot, sub.student, what))
                    progress.finished(slot, grades[i])
                finally:
                    slots.put(slot)
            futures = [pool.submit(one, i) for i in range(len(subs))]
            for f in concurrent.futures.as_completed(futures):
                try:
                    f.result()
                except SandboxStartError as exc:  # this machine's problem, not a student's: stop
                    for other in futures:
                        other.cancel()
                    raise SystemExit(_("The grader could not start its sandbox, so nothing was graded. "
                                       "What the sandbox printed:") + f"\n{str(exc)[-3000:]}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    seconds = time.monotonic() - t0
    done = [g for g in grades if g is not None]
    chapters = sorted({g.chapter for g in done if g.chapter})
    meta = {"seconds": seconds, "jobs": jobs, "isolation": missing, "isolation_mode": iso.mode, "lang": lang,
            "title": title or _("Grades: {chapters}").format(chapters=", ".join(chapters) or "-"),
            "limits": vars(limits)}
    write_csv(done, out / "grades.csv")
    write_json(done, out / "grades.json", meta)
    write_html(done, out / "report.html", meta)
    say(_("Graded {n} notebooks in {seconds} s: {out}").format(n=len(done), seconds=f"{seconds:.0f}",
                                                                 out=out / "report.html"))
    left = [g.student for g in done if g.survivors]
    if left:
        say(_("Warning: processes of these notebooks were still running after their verdict: {students}").format(
            students=", ".join(left)))
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attnlib.grading.grade", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__[__doc__.index("Examples::"):])
    ap.add_argument("submissions", type=pathlib.Path, help="folder of submitted notebooks (and LMS zip files)")
    ap.add_argument("--out", type=pathlib.Path, required=True, help="report folder (grades.csv, report.html)")
    ap.add_argument("--students", type=pathlib.Path, help="CSV with columns file,student")
    ap.add_argument("--chapter", help="grade every notebook as this chapter (e.g. 2 or 02_qkv)")
    ap.add_argument("--lang", default="en", choices=["en", "zh"], help="language of the report (default: en)")
    ap.add_argument("--jobs", type=int, default=None, help="notebooks at a time (default: CPU cores)")
    ap.add_argument("--timeout", type=float, default=Limits.wall, help="seconds per notebook (default: %(default)g)")
    ap.add_argument("--cell-timeout", type=float, default=Limits.cell, help="seconds per cell (default: %(default)g)")
    ap.add_argument("--memory", type=_bytes, default=Limits.memory, help="memory per notebook (default: 4G)")
    ap.add_argument("--require-isolation", action="store_true",
                    help="refuse to grade where the sandbox cannot isolate the notebooks completely")
    ap.add_argument("--quiet", action="store_true", help="print nothing while grading")
    a = ap.parse_args(argv)
    try:
        grade_class(a.submissions, a.out, students=a.students, chapter=a.chapter, lang=a.lang, jobs=a.jobs,
                    limits=Limits(wall=a.timeout, cell=a.cell_timeout, memory=a.memory),
                    require_isolation=a.require_isolation, quiet=a.quiet)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
