"""A learner's own progress: which exercises of the course they have passed.

When ``al.exercises.check(name, your_function)`` passes in a notebook, the exercise is
noted in a small JSON file; ``al.exercises.progress()`` shows every exercise of the course,
chapter by chapter, with the ones passed so far ticked. The course's solutions
(``check_solution``) never count, nor does a check run outside an IPython kernel (a
script or a test suite), nor anything while a grader runs a notebook.

The file is ``$ATTNLIB_PROGRESS`` when that is set (``off`` switches the record off), else
``$XDG_DATA_HOME/attnlib/progress.json`` (``~/.local/share/attnlib/progress.json``; on
Windows ``%APPDATA%\\attnlib\\progress.json``). It holds, per exercise, when it was first
and last passed: no code, no answers.
"""
from __future__ import annotations

import datetime
import html
import json
import os
import pathlib
import sys
import tempfile

from ..i18n import _
from ..ui import colours

__all__ = ["progress", "record", "progress_file", "reset", "Progress"]


def progress_file() -> pathlib.Path | None:
    """Where the progress is kept, or ``None`` when ``ATTNLIB_PROGRESS=off``."""
    env = os.environ.get("ATTNLIB_PROGRESS", "").strip()
    if env.lower() in ("off", "0", "no", "false"):
        return None
    if env:
        return pathlib.Path(env).expanduser()
    if sys.platform == "win32" and os.environ.get("APPDATA"):
        base = pathlib.Path(os.environ["APPDATA"])
    else:
        base = pathlib.Path(os.environ.get("XDG_DATA_HOME") or pathlib.Path.home() / ".local" / "share")
    return base / "attnlib" / "progress.json"


def _load(path: pathlib.Path | None) -> dict:
    if path is None or not path.is_file():
        return {"version": 1, "passed": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"version": 1, "passed": {}}
    if not isinstance(data, dict) or not isinstance(data.get("passed"), dict):
        return {"version": 1, "passed": {}}
    return data


def _in_kernel() -> bool:
    shell = sys.modules.get("IPython")
    try:
        return shell is not None and shell.get_ipython() is not None
    except Exception:  # noqa: BLE001
        return False


def record(result, *, force: bool = False) -> bool:
    """Note a passed check of the learner's own answer (called by ``al.exercises.check``).

    Args:
        result: the :class:`~attnlib.exercises.CheckResult`.
        force: record outside an IPython kernel too (tests). Default: ``False``.

    Returns:
        whether it was written. Never raises: a read-only home only means no record.
    """
    try:
        if not getattr(result, "passed", False) or getattr(result, "solution", False):
            return False
        if not (force or _in_kernel()) or os.environ.get("ATTNLIB_SANDBOX"):
            return False
        path = progress_file()
        if path is None:
            return False
        data = _load(path)
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        entry = data["passed"].get(result.name) or {"first": now}
        entry["last"] = now
        data["passed"][result.name] = entry
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp",
                                         encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(f.name, path)  # never a half-written file
        return True
    except Exception:  # noqa: BLE001 - progress is a convenience: the verdict matters, not this
        return False


def reset() -> None:
    """Forget every passed exercise (deletes the progress file)."""
    path = progress_file()
    if path is not None and path.is_file():
        path.unlink()


class Progress:
    """The course's exercises, chapter by chapter, with the passed ones ticked."""

    def __init__(self, passed: dict):
        from ._model import EXERCISES
        self.passed = {k: v for k, v in passed.items() if k in EXERCISES}
        self.chapters: dict[str, list[str]] = {}
        for name, ex in EXERCISES.items():
            self.chapters.setdefault(ex.chapter, []).append(name)

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.chapters.values())

    def _head(self) -> str:
        return _("Your progress: {done} of {total} exercises passed").format(done=len(self.passed), total=self.total)

    def __repr__(self) -> str:
        lines = [self._head()]
        for chapter, names in sorted(self.chapters.items()):
            done = sum(n in self.passed for n in names)
            marks = "  ".join(("✓ " if n in self.passed else "· ") + n for n in names)
            lines.append(f"  {chapter:15s} {done}/{len(names)}  {marks}")
        path = progress_file()
        lines.append("  " + (_("(kept in {path})").format(path=path) if path else
                             _("(not kept: ATTNLIB_PROGRESS=off)")))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = []
        for chapter, names in sorted(self.chapters.items()):
            cells = "".join(
                f'<span style="margin-right:1em;color:{colours.PASSED if n in self.passed else colours.MUTED}">'
                f'{"✓" if n in self.passed else "·"} <code>{html.escape(n)}</code></span>' for n in names)
            done = sum(n in self.passed for n in names)
            rows.append(f"<tr><td>{html.escape(chapter)}</td><td>{done}/{len(names)}</td><td>{cells}</td></tr>")
        return (f'<div class="attnlib-progress"><b>{html.escape(self._head())}</b>'
                f'<table style="margin-top:.3em">{"".join(rows)}</table></div>')


def progress() -> Progress:
    """Which exercises of the course you have passed so far (in any notebook on this machine).

    Returns:
        a ``Progress`` that shows itself as a table in a notebook (and as text).

    Example::

        >>> al.exercises.progress()
    """
    return Progress(_load(progress_file()).get("passed", {}))


def recording(check):
    """``check`` that also notes a pass of the learner's own function (see :func:`record`)."""
    import functools

    @functools.wraps(check)
    def check_and_record(name, fn, *args, **kwargs):
        result = check(name, fn, *args, **kwargs)
        record(result)
        return result
    check_and_record.__wrapped__ = check
    return check_and_record
