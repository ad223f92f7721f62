"""Strict nbval's comparison, applied to a notebook that ran somewhere else.

The JupyterLab suite (tests/jupyterlab/) runs every chapter and solutions notebook with Run
All on a fresh kernel, as a learner does. This module compares the outputs that run left in
JupyterLab's notebook model with the stored ones **by nbval's own rules**, so that the same
run is also the strict nbval check in the first numerical environment (``make nbval`` runs
it under pytest, on its own kernels, when you want it alone):

- the rule is nbval 0.11's ``IPyNbCell.compare_outputs``, called on a stand-in for its cell
  item (below), after nbval's ``coalesce_streams`` on both sides;
- the cells it leaves out are nbval's: a cell tagged or marked ``nbval-ignore-output`` /
  ``NBVAL_IGNORE_OUTPUT`` or ``nbval-skip``, and a stored cell that never ran;
- the keys it skips are nbval's (metadata, traceback, execution counts, widget model ids,
  PNG images) and the sanitize file is the Makefile's (``tools/nbval_sanitize.cfg``).

One difference: nbval collects a cell's messages as they arrive and ignores
``update_display_data`` and ``clear_output``, while JupyterLab's model holds what the cell
finally shows, as the stored notebook does (nbclient applies both). So a cell that updates
or clears its output is compared here on what it finally shows. The chapters' live figures
(``attnlib.ui.plots.LivePlot``) update a display that holds only a PNG, then clear it for
the finished figure with its alt text: nbval skips the PNG-only outputs and compares the
finished figure, which is what JupyterLab's model and the stored notebook hold, so both
compare the same text.

    differences(stored, ran) -> ["code cell 7 ('x = ...'): mismatch 'stdout': ...", ...]  # [] if all agree
"""
from __future__ import annotations

import json
import pathlib
import types

import nbformat
from nbval.plugin import (IPyNbCell, coalesce_streams, find_comment_markers, find_metadata_tags,
                          get_sanitize_patterns, nocolors)

SANITIZE = pathlib.Path(__file__).resolve().parent / "nbval_sanitize.cfg"
# what nbval 0.11 leaves out of the comparison (IPyNbFile.__init__, without --nbdime)
SKIP_COMPARE = ("metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
                "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg")
# the fields nbformat gives each kind of output (JupyterLab's model may carry more, e.g. transient)
FIELDS = {"stream": ("output_type", "name", "text"),
          "display_data": ("output_type", "data", "metadata"),
          "execute_result": ("output_type", "data", "metadata", "execution_count"),
          "error": ("output_type", "ename", "evalue", "traceback")}


class _Cell:
    """Just enough of nbval's cell item for its own ``compare_outputs`` and ``sanitize``."""

    compare_outputs = IPyNbCell.compare_outputs
    sanitize = IPyNbCell.sanitize
    colors = nocolors

    def __init__(self, patterns: dict):
        self.parent = types.SimpleNamespace(skip_compare=SKIP_COMPARE, sanitize_patterns=patterns)
        self.comparison_traceback: list[str] = []

    def format_output_compare(self, key, left, right):  # nbval's asks pytest for a diff
        self.comparison_traceback.append(f"mismatch {key!r}: stored {_short(left)}, this run {_short(right)}")


def _short(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return repr(text if len(text) <= 300 else text[:300] + "...")


def compared(cell) -> bool:
    """Whether strict nbval compares this code cell's outputs (its tags and comment markers)."""
    options = dict(find_metadata_tags(cell.get("metadata", {})))
    options.update(find_comment_markers(cell.get("source", "")))
    return options.get("check", True) and not options.get("skip", False) and cell.get("execution_count") is not None


def _joined(value):
    """A multiline string as nbformat stores it (a list of lines) joined, as nbformat reads it."""
    return "".join(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else value


def _outputs(outputs) -> list:
    kept = []
    for o in outputs:
        o = {k: o[k] for k in FIELDS.get(o.get("output_type"), o) if o.get(k) is not None}
        if "text" in o:
            o["text"] = _joined(o["text"])
        if "data" in o:
            o["data"] = {mime: _joined(v) for mime, v in o["data"].items()}
        kept.append(nbformat.from_dict(o))
    return coalesce_streams(kept)


def _code_cells(nb) -> list[tuple[str, dict, object, list]]:
    """(source, metadata, execution count, outputs) of each code cell of a notebook node or
    of a notebook as JSON (JupyterLab's ``model.toJSON()``)."""
    return [(_joined(c.get("source", "")), c.get("metadata") or {}, c.get("execution_count"), c.get("outputs") or [])
            for c in nb["cells"] if c.get("cell_type") == "code"]


def differences(stored, ran, sanitize: pathlib.Path = SANITIZE) -> list[str]:
    """The code cells whose outputs in ``ran`` differ from ``stored`` by strict nbval's rules.

    ``stored`` and ``ran`` are notebooks (nbformat nodes, or dicts as JupyterLab's
    ``model.toJSON()`` gives them) with the same cells in the same order."""
    patterns = dict(get_sanitize_patterns(sanitize.read_text())) if sanitize else {}  # as nbval reads it
    code, code_ran = _code_cells(stored), _code_cells(ran)
    if [c[0] for c in code] != [c[0] for c in code_ran]:
        return [f"the notebook that ran does not hold the stored notebook's {len(code)} code cells"]
    problems = []
    for i, ((source, metadata, count, want), (_, _, _, got)) in enumerate(zip(code, code_ran)):
        if not compared({"source": source, "metadata": metadata, "execution_count": count}):
            continue
        item = _Cell(patterns)
        if not item.compare_outputs(_outputs(got), _outputs(want)):
            why = "; ".join(t for t in item.comparison_traceback if t.strip()) or "outputs differ"
            first = source.strip().splitlines()[0][:60] if source.strip() else ""
            problems.append(f"code cell {i} ({first!r}): {why}")
    return problems


def count_compared(stored) -> int:
    return sum(1 for source, metadata, count, _ in _code_cells(stored)
               if compared({"source": source, "metadata": metadata, "execution_count": count}))


__all__ = ["differences", "compared", "count_compared", "SKIP_COMPARE"]
