"""Find the submitted notebooks and whose each one is.

A submission folder may hold notebooks with any names, in sub-folders or not, and zip
files as a learning-management system exports them (opened in memory, never extracted):

- **Moodle** ("Download all submissions"): ``Ada Lovelace_123456_assignsubmission_file_/02_qkv.ipynb``;
  the student is the folder's name up to the id;
- **Canvas** ("Download submissions"): ``lovelaceada_123456_7890123_02_qkv.ipynb`` (maybe
  with ``_LATE`` after the name); the student is the first part;
- otherwise the student is the notebook's sub-folder (``ada/02_qkv.ipynb``) or, for a
  notebook directly in the folder, its file name without ``.ipynb``.

A CSV given with ``--students`` overrides all of that: columns ``file`` (the path inside
the folder or the zip, or just the file name) and ``student``.
"""
from __future__ import annotations

import csv
import pathlib
import re
import zipfile
from dataclasses import dataclass

__all__ = ["Submission", "collect", "read_mapping", "MAX_NOTEBOOK_BYTES"]

MAX_NOTEBOOK_BYTES = 50 * 2**20
_MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_(?:file|onlinetext)_?$")
_CANVAS = re.compile(r"^(?P<name>[^_]+?)(?:_LATE)?_(?P<id>\d+)_(?P<sub>\d+)_(?P<file>.+)$")


@dataclass
class Submission:
    """One notebook: ``student`` (who), ``source`` (where it came from, shown in the
    report), ``data`` (its bytes) or ``problem`` (why it could not be read)."""

    student: str
    source: str
    data: bytes = b""
    problem: str = ""


def student_of(path: str) -> str:
    """The student a submitted file belongs to, from its path (see the module docstring)."""
    parts = pathlib.PurePosixPath(path).parts
    for folder in parts[:-1]:
        m = _MOODLE.match(folder)
        if m:
            return m.group("name").strip()
    stem = pathlib.PurePosixPath(parts[-1]).name
    stem = stem[:-6] if stem.lower().endswith(".ipynb") else stem
    m = _CANVAS.match(parts[-1])
    if m:
        return m.group("name")
    if len(parts) > 1:
        return parts[-2]
    return stem


def read_mapping(path: pathlib.Path) -> dict[str, str]:
    """``{file: student}`` from a CSV with columns ``file`` and ``student``."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"file", "student"} <= set(rows[0]):
        raise ValueError(f"{path}: a students CSV needs a header with the columns 'file' and 'student' "
                         f"(one row per notebook); found columns {sorted(rows[0]) if rows else []}")
    return {r["file"].strip(): r["student"].strip() for r in rows if r["file"].strip()}


def _who(rel: str, mapping: dict[str, str]) -> str:
    for key in (rel, pathlib.PurePosixPath(rel).name):
        if key in mapping:
            return mapping[key]
    return student_of(rel)


def _from_zip(path: pathlib.Path, rel: str, mapping: dict[str, str]) -> list[Submission]:
    out = []
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                name = info.filename
                if info.is_dir() or not name.lower().endswith(".ipynb") or "__MACOSX" in name \
                        or ".ipynb_checkpoints" in name:
                    continue
                where = f"{rel}:{name}"
                if info.file_size > MAX_NOTEBOOK_BYTES:
                    out.append(Submission(_who(name, mapping), where, problem="too_large"))
                    continue
                with z.open(info) as f:
                    data = f.read(MAX_NOTEBOOK_BYTES + 1)
                out.append(Submission(_who(name, mapping), where, data,
                                      "too_large" if len(data) > MAX_NOTEBOOK_BYTES else ""))
    except (zipfile.BadZipFile, OSError) as exc:
        out.append(Submission(student_of(rel), rel, problem=f"bad_zip: {exc}"))
    return out


def collect(folder: pathlib.Path, mapping: dict[str, str] | None = None) -> list[Submission]:
    """Every notebook under ``folder`` (and in its zip files), sorted by student."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder: give the folder that holds the submitted "
                                "notebooks (or the LMS's zip file inside a folder)")
    mapping = mapping or {}
    subs = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if ".ipynb_checkpoints" in rel or not path.is_file() or path.is_symlink():
            continue
        if path.suffix.lower() == ".zip":
            subs += _from_zip(path, rel, mapping)
        elif path.suffix.lower() == ".ipynb":
            size = path.stat().st_size
            data = path.read_bytes() if size <= MAX_NOTEBOOK_BYTES else b""
            subs.append(Submission(_who(rel, mapping), rel, data, "" if data or size == 0 else "too_large"))
    seen: dict[str, int] = {}
    for s in sorted(subs, key=lambda s: (s.student.lower(), s.source)):
        seen[s.student] = seen.get(s.student, 0) + 1
        if seen[s.student] > 1:  # two notebooks of one student: both graded, told apart
            s.student = f"{s.student} ({seen[s.student]})"
    return sorted(subs, key=lambda s: (s.student.lower(), s.source))
