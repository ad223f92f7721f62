"""The grader's outputs: ``grades.csv``, ``grades.json`` and ``report.html``.

``grades.csv`` has one row per notebook and one column per exercise and per concept
question. An exercise's cell says ``passed``, the key of the mistake the checker named
(``no_max_shift``), ``failed`` (wrong, no catalogued mistake), ``not_attempted``,
``error`` or ``timed_out``; a question's cell ``correct``, ``wrong:B`` or
``not_answered``.

``report.html`` is one self-contained file (inline CSS and SVG, no script, nothing
fetched) that a teacher opens offline: the pass rate of each exercise, a chart of the
mistakes the checker named across the class, the concept questions, and each student's
row with the checker's messages. Its text is in the grader's language (``--lang``).
"""
from __future__ import annotations

import csv
import datetime
import html
import json
import pathlib

from ..exercises import EXERCISES
from ..i18n import N_, _, get_language
from ..ui import colours
from .notebook import STATUSES, NotebookGrade

__all__ = ["write_csv", "write_json", "write_html", "exercise_columns", "question_columns"]

COLOURS = {**colours.STATUS, "timed_out": "#8250df"}  # text and bars: attnlib.ui.colours (and a purple)
LABELS = {"passed": N_("passed"), "failed": N_("wrong"), "not_attempted": N_("not attempted"),
          "error": N_("error"), "timed_out": N_("timed out")}
ICONS = {"passed": "✓", "failed": "✗", "not_attempted": "…", "error": "!", "timed_out": "⏱"}


def exercise_columns(grades: list[NotebookGrade]) -> list[str]:
    """The exercises that appear, in the course's order."""
    seen = {n for g in grades for n in g.exercises}
    return [n for n in EXERCISES if n in seen]


def question_columns(grades: list[NotebookGrade]) -> list[tuple[str, str]]:
    """``(chapter, qid)`` of the questions that appear, in order."""
    seen = sorted({(g.chapter, q) for g in grades for q in g.questions}, key=lambda cq: (cq[0], int(cq[1][1:])))
    return seen


def _qname(chapter: str, qid: str, many: bool) -> str:
    return f"{chapter}:{qid}" if many else qid


def _cell(text: str) -> str:
    """A text cell that a spreadsheet will not run: a name such as ``=HYPERLINK(...)``
    (a file name is the student's choice) gets a leading apostrophe."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def write_csv(grades: list[NotebookGrade], path: pathlib.Path) -> None:
    exs = exercise_columns(grades)
    qs = question_columns(grades)
    many = len({c for c, _ in qs}) > 1
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "file", "chapter", "passed", "exercises", *exs,
                    *[_qname(c, q, many) for c, q in qs], "problem"])
        for g in grades:
            w.writerow([_cell(g.student), _cell(g.source), g.chapter, g.passed, len(g.exercises),
                        *[g.exercises[n].cell if n in g.exercises else "" for n in exs],
                        *[g.questions[q].cell if (g.chapter == c and q in g.questions) else "" for c, q in qs],
                        _cell(g.problem)])


def write_json(grades: list[NotebookGrade], path: pathlib.Path, meta: dict) -> None:
    path.write_text(json.dumps({"meta": meta, "notebooks": [g.to_json() for g in grades]},
                               ensure_ascii=False, indent=1), encoding="utf-8")


# --------------------------------------------------------------------------- charts (inline SVG)

def _esc(s) -> str:
    return html.escape(str(s), quote=True)


def _text_width(text: str, size: int = 11) -> int:
    """About how wide ``text`` is drawn (CJK characters are square, Latin ones narrower)."""
    return int(sum(size if "\u2e80" <= ch <= "\uffef" else 0.6 * size for ch in text))


def _stacked_bars(rows: list[tuple[str, dict]], total: int) -> str:
    """Horizontal bars, one per exercise, split by status."""
    label_w, bar_w, h = 190, 420, 22
    height = h * len(rows) + 34
    out = [f'<svg class="chart" role="img" width="{label_w + bar_w + 60}" height="{height}" '
           f'viewBox="0 0 {label_w + bar_w + 60} {height}" xmlns="http://www.w3.org/2000/svg">']
    for i, (name, counts) in enumerate(rows):
        y = 6 + i * h
        out.append(f'<text x="{label_w - 8}" y="{y + 14}" text-anchor="end" font-size="12">{_esc(name)}</text>')
        x = label_w
        for st in STATUSES:
            n = counts.get(st, 0)
            if not n or not total:
                continue
            w = bar_w * n / total
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{h - 6}" fill="{COLOURS[st]}">'
                       f'<title>{_esc(_(LABELS[st]))}: {n}</title></rect>')
            x += w
        pct = 100 * counts.get("passed", 0) / total if total else 0
        out.append(f'<text x="{label_w + bar_w + 6}" y="{y + 14}" font-size="12">{pct:.0f}%</text>')
    y = 6 + len(rows) * h + 6
    x = label_w
    for st in STATUSES:
        out.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{COLOURS[st]}"/>'
                   f'<text x="{x + 14}" y="{y + 9}" font-size="11">{_esc(_(LABELS[st]))}</text>')
        x += 14 + _text_width(_(LABELS[st])) + 18
    out.append("</svg>")
    return "".join(out)


def _mistake_bars(items: list[tuple[str, int]], total: int) -> str:
    """Horizontal bars: how many notebooks made each named mistake."""
    label_w, bar_w, h = 330, 300, 22
    height = h * len(items) + 10
    top = max([n for _, n in items] + [1])
    out = [f'<svg class="chart" role="img" width="{label_w + bar_w + 90}" height="{height}" '
           f'viewBox="0 0 {label_w + bar_w + 90} {height}" xmlns="http://www.w3.org/2000/svg">']
    for i, (label, n) in enumerate(items):
        y = 5 + i * h
        short = label if len(label) <= 46 else label[:44] + "…"
        out.append(f'<text x="{label_w - 8}" y="{y + 14}" text-anchor="end" font-size="12">'
                   f'<title>{_esc(label)}</title>{_esc(short)}</text>')
        w = bar_w * n / top
        out.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{h - 6}" fill="#cf222e"/>')
        out.append(f'<text x="{label_w + w + 6:.1f}" y="{y + 14}" font-size="12">{n} / {total}</text>')
    out.append("</svg>")
    return "".join(out)


# --------------------------------------------------------------------------- the page

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI","Noto Sans","Noto Sans CJK SC","WenQuanYi Micro Hei",sans-serif;
margin:1.5em auto;max-width:72em;padding:0 1em;color:#1f2328;line-height:1.45}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #d0d7de;padding:.25em .5em;vertical-align:top}
th{background:#f6f8fa;text-align:left}.st{font-weight:600;white-space:nowrap}
.warn{border-left:4px solid #9a6700;background:#fff8c5;padding:.4em .8em}
.bad{border-left:4px solid #cf222e;background:#ffebe9;padding:.4em .8em}
.note{color:#59636e;font-size:.92em}details{margin:.2em 0}summary{cursor:pointer}
.msg{white-space:pre-wrap;margin:.2em 0 .4em 1em}code{background:#f6f8fa;padding:0 .2em}
"""


def _status_cell(grade) -> str:
    st = grade.status
    text = grade.mistake if (st == "failed" and grade.mistake) else _(LABELS[st])
    return (f'<td class="st" style="color:{COLOURS[st]}" title="{_esc(grade.message)}">'
            f'{ICONS[st]} {_esc(text)}</td>')


def write_html(grades: list[NotebookGrade], path: pathlib.Path, meta: dict) -> None:
    """Write ``report.html`` (see the module docstring). ``meta`` holds ``seconds``,
    ``jobs``, ``isolation`` (sentences of what is missing) and ``title``."""
    lang = get_language()
    exs = exercise_columns(grades)
    qs = question_columns(grades)
    many = len({c for c, _ in qs}) > 1
    n = len(grades)
    graded = [g for g in grades if not g.problem or g.exercises]
    title = _esc(meta.get("title") or _("Grades"))
    parts = [f'<!DOCTYPE html><html lang="{"zh-CN" if lang == "zh" else "en"}"><head><meta charset="utf-8">'
             f'<meta name="viewport" content="width=device-width, initial-scale=1">'
             f'<title>{title}</title><style>{_CSS}</style></head><body>']
    parts.append(f'<h1>{title}</h1>')
    parts.append('<p class="note">' + _esc(_(
        "{n} notebooks, graded on {date} in {seconds} s ({jobs} at a time). Every exercise was graded by "
        "running the student's function on new cases in a sandbox and checking it with the course's "
        "checker; what the notebooks had stored as output was not read.").format(
        n=n, date=datetime.date.today().isoformat(), seconds=f"{meta.get('seconds', 0):.0f}",
        jobs=meta.get("jobs", 1))) + "</p>")
    missing = meta.get("isolation") or []
    if missing:
        parts.append('<div class="warn"><b>' + _esc(_("Isolation missing on this machine:")) + "</b><ul>"
                     + "".join(f"<li>{_esc(_(m))}</li>" for m in missing) + "</ul></div>")
    left = [g for g in grades if g.survivors]
    if left:
        parts.append('<div class="bad">' + _esc(_(
            "Processes started by these notebooks were still running after their verdict: {students}."
        ).format(students=", ".join(g.student for g in left))) + "</div>")

    # ---- pass rates
    parts.append("<h2>" + _esc(_("Exercises")) + "</h2>")
    rows = []
    for name in exs:
        counts = {st: sum(1 for g in grades if name in g.exercises and g.exercises[name].status == st)
                  for st in STATUSES}
        rows.append((name, counts))
    total = max([sum(c.values()) for _, c in rows] + [0])
    if rows:
        parts.append(_stacked_bars(rows, total))
        parts.append("<table><tr><th>" + "</th><th>".join(_esc(x) for x in (
            _("exercise"), *[_(LABELS[s]) for s in STATUSES], _("pass rate"))) + "</th></tr>")
        for name, counts in rows:
            t = sum(counts.values())
            parts.append(f"<tr><td><code>{_esc(name)}</code></td>"
                         + "".join(f"<td>{counts[s]}</td>" for s in STATUSES)
                         + f"<td>{(100 * counts['passed'] / t if t else 0):.0f}%</td></tr>")
        parts.append("</table>")

    # ---- named mistakes
    parts.append("<h2>" + _esc(_("Mistakes the checker named")) + "</h2>")
    mistakes: dict[tuple[str, str], list[str]] = {}
    for g in grades:
        for name, eg in g.exercises.items():
            if eg.status == "failed" and eg.mistake:
                mistakes.setdefault((name, eg.mistake), []).append(g.student)
    if mistakes:
        order = sorted(mistakes.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        labels = []
        for (name, key), who in order:
            title = _mistake_title(name, key)
            labels.append((f"{name}: {title}", len(who)))
        parts.append(_mistake_bars(labels, len(graded)))
        parts.append("<table><tr><th>" + "</th><th>".join(_esc(x) for x in (
            _("exercise"), _("mistake"), _("what the checker tells the student"), _("students"))) + "</th></tr>")
        for (name, key), who in order:
            parts.append(f"<tr><td><code>{_esc(name)}</code></td><td><code>{_esc(key)}</code><br>"
                         f"{_esc(_mistake_title(name, key))}</td><td>{_esc(_mistake_message(name, key))}</td>"
                         f"<td>{len(who)}: {_esc(', '.join(who))}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<p>" + _esc(_("No catalogued mistake was found in these notebooks.")) + "</p>")

    # ---- questions
    if qs:
        parts.append("<h2>" + _esc(_("Concept questions")) + "</h2><table><tr><th>"
                     + "</th><th>".join(_esc(x) for x in (_("question"), _("right answer"), _("correct"), _("answers given")))
                     + "</th></tr>")
        for c, q in qs:
            given = [g.questions[q] for g in grades if g.chapter == c and q in g.questions]
            right = sum(x.correct for x in given)
            dist: dict[str, int] = {}
            for x in given:
                k = x.given or "—"
                dist[k] = dist.get(k, 0) + 1
            key = given[0].answer if given else ""
            parts.append(f"<tr><td>{_esc(_qname(c, q, many))}</td><td>{_esc(key)}</td><td>{right} / {len(given)}</td><td>"
                         + _esc(", ".join(f"{k}: {v}" for k, v in sorted(dist.items()))) + "</td></tr>")
        parts.append("</table>")

    # ---- students
    parts.append("<h2>" + _esc(_("Students")) + "</h2>")
    parts.append("<table><tr><th>" + "</th><th>".join(
        [_esc(_("student")), _esc(_("passed"))] + [f"<code>{_esc(e)}</code>" for e in exs]
        + [_esc(_qname(c, q, many)) for c, q in qs]) + "</th></tr>")
    for g in grades:
        cells = [f"<td>{_esc(g.student)}</td>", f"<td>{g.passed} / {len(g.exercises)}</td>"]
        for e in exs:
            cells.append(_status_cell(g.exercises[e]) if e in g.exercises else "<td></td>")
        for c, q in qs:
            x = g.questions.get(q) if g.chapter == c else None
            if x is None:
                cells.append("<td></td>")
            else:
                colour = COLOURS["passed"] if x.correct else COLOURS["failed" if x.given else "not_attempted"]
                cells.append(f'<td class="st" style="color:{colour}">{_esc(x.given or "—")}</td>')
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts.append("</table>")

    # ---- each student's messages
    parts.append("<h2>" + _esc(_("What the checker said, per student")) + "</h2>")
    for g in grades:
        parts.append(f'<details class="student"><summary><b>{_esc(g.student)}</b> '
                     f'<span class="note">{_esc(g.source)} · {_esc(g.chapter)} · {g.seconds:.1f} s</span></summary>')
        if g.problem:
            parts.append(f'<div class="bad">{_esc(g.problem)}</div>')
        for name, eg in g.exercises.items():
            label = eg.mistake if (eg.status == "failed" and eg.mistake) else _(LABELS[eg.status])
            parts.append(f'<div><span class="st" style="color:{COLOURS[eg.status]}">{ICONS[eg.status]} '
                         f'<code>{_esc(name)}</code>: {_esc(label)}</span>'
                         f'<div class="msg">{_esc(eg.message)}</div>'
                         + ('<div class="msg">' + _esc(_("Hint: {hint}").format(hint=eg.hint)) + "</div>"
                            if eg.hint else "")
                         + ('<div class="msg note">' + _esc(_("It printed:")) + f" {_esc(eg.printed[:500])}</div>"
                            if eg.printed else "") + "</div>")
        if g.cell_errors or g.cell_timeouts:
            # the runner counts the notebook's code cells from 0; a teacher counts them from 1
            items = [_("code cell {n} (counting from 1): {error}").format(
                n=e["cell"] + 1 if isinstance(e.get("cell"), int) else "?", error=str(e.get("error", ""))[:300])
                for e in g.cell_errors]
            items += [_("code cell {n} (counting from 1): stopped after the time limit of a cell").format(n=i + 1)
                      for i in g.cell_timeouts]
            parts.append('<div class="note">' + _esc(_("Cells that failed when the notebook ran:")) + "<ul>"
                         + "".join(f"<li>{_esc(t)}</li>" for t in items[:20]) + "</ul></div>")
        parts.append("</details>")
    parts.append("</body></html>")
    path.write_text("".join(parts), encoding="utf-8")


def _mistake(name: str, key: str):
    ex = EXERCISES.get(name)
    if ex is None:
        return None
    return next((m for m in ex.mistakes if m.key == key), None)


def _mistake_title(name: str, key: str) -> str:
    m = _mistake(name, key)
    if m is not None:
        return _(m.title)
    return {"library_shortcut": _("calls the library's own answer"),
            "mutates_input": _("changes its input in place"),
            "too_slow": _("correct but far too slow")}.get(key, key)


def _mistake_message(name: str, key: str) -> str:
    m = _mistake(name, key)
    return _(m.message) if m is not None else ""
