"""tools/strict_outputs.py: strict nbval's comparison of a notebook that ran in JupyterLab.

The JupyterLab suite uses it as the strict nbval check of the English notebooks, so it must
fail where nbval would (a changed digit, a missing or an extra output) and pass where nbval
passes (an ignored cell, a stream printed in pieces, other PNG bytes, JupyterLab's extra
fields)."""
from __future__ import annotations

import copy
import pathlib
import sys

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import strict_outputs  # noqa: E402

CHAPTER = ROOT / "chapters" / "07_cost.ipynb"  # prints digits in compared cells and in a timing cell


@pytest.fixture()
def stored():
    return nbformat.read(CHAPTER, as_version=4)


def _code(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _printing_cell(nb, *, ignored: bool):
    """Index (among code cells) of a cell that prints digits and is (or is not) ignored."""
    for i, c in enumerate(_code(nb)):
        tags = c.metadata.get("tags", [])
        if ("nbval-ignore-output" in tags) == ignored and any(
                o.output_type == "stream" and any(ch.isdigit() for ch in o.text) for o in c.outputs):
            return i
    kind = "ignored" if ignored else "compared"
    raise AssertionError(f"{CHAPTER.name} has no {kind} cell that prints a digit: choose another chapter")


def _change_a_digit(cell):
    out = next(o for o in cell.outputs if o.output_type == "stream" and any(ch.isdigit() for ch in o.text))
    j = next(k for k, ch in enumerate(out.text) if ch.isdigit())
    out.text = out.text[:j] + str((int(out.text[j]) + 1) % 10) + out.text[j + 1:]


def test_the_stored_notebook_agrees_with_itself(stored):
    assert strict_outputs.count_compared(stored) > 10
    assert strict_outputs.differences(stored, copy.deepcopy(stored)) == []


def test_one_changed_digit_fails_and_names_the_cell(stored):
    ran = copy.deepcopy(stored)
    i = _printing_cell(ran, ignored=False)
    _change_a_digit(_code(ran)[i])
    problems = strict_outputs.differences(stored, ran)
    assert len(problems) == 1 and problems[0].startswith(f"code cell {i} "), problems


def test_a_cell_tagged_nbval_ignore_output_is_not_compared(stored):
    ran = copy.deepcopy(stored)
    _change_a_digit(_code(ran)[_printing_cell(ran, ignored=True)])
    assert strict_outputs.differences(stored, ran) == []


def test_missing_and_extra_outputs_fail(stored):
    i = _printing_cell(stored, ignored=False)
    ran = copy.deepcopy(stored)
    _code(ran)[i].outputs = []
    assert strict_outputs.differences(stored, ran)
    ran = copy.deepcopy(stored)
    _code(ran)[i].outputs.append(nbformat.v4.new_output("stream", name="stderr", text="a warning\n"))
    assert strict_outputs.differences(stored, ran)


def test_a_stream_in_pieces_png_bytes_and_jupyterlab_fields_do_not_count():
    def nb(outputs):
        cell = nbformat.v4.new_code_cell("x", execution_count=1, outputs=outputs)
        return nbformat.v4.new_notebook(cells=[cell])

    stored = nb([nbformat.v4.new_output("stream", name="stdout", text="a 1\nb 2\n"),
                 nbformat.v4.new_output("display_data", data={
                     "image/png": "AAAA", "text/plain": "<Figure>",
                     "text/html": '<img alt="loss falls" src="data:image/png;base64,AAAA">'})])
    ran = nb([nbformat.v4.new_output("stream", name="stdout", text="a 1\n"),
              nbformat.v4.new_output("display_data", data={
                  "image/png": "BBBB", "text/plain": "<Figure>",
                  "text/html": '<img alt="loss falls" src="data:image/png;base64,BBBB">'}),
              nbformat.v4.new_output("stream", name="stdout", text="b 2\n")])
    ran_json = nbformat.from_dict(copy.deepcopy(ran))
    ran_json.cells[0].outputs[1]["transient"] = {"display_id": "abc"}  # as JupyterLab's model may hold
    assert strict_outputs.differences(stored, ran) == []
    assert strict_outputs.differences(stored, dict(ran_json)) == []
    # ... but the figure's alt text is compared
    ran.cells[0].outputs[1].data["text/html"] = '<img alt="loss rises" src="data:image/png;base64,BBBB">'
    assert strict_outputs.differences(stored, ran)


def test_a_different_notebook_is_refused(stored):
    ran = copy.deepcopy(stored)
    _code(ran)[0].source += "\nprint('edited')"
    assert strict_outputs.differences(stored, ran) == [
        f"the notebook that ran does not hold the stored notebook's {len(_code(stored))} code cells"]
