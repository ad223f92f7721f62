"""A learner's own progress (``al.exercises.progress()``): a pass of the learner's own
function is noted in a small JSON file, the course's solution never is, and the record
can be switched off or moved with ``ATTNLIB_PROGRESS``."""
from __future__ import annotations

import json
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

import attnlib as al
from attnlib.exercises import tracking as pg
from attnlib.exercises import CheckResult, EXERCISES


@pytest.fixture
def store(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("ATTNLIB_PROGRESS", str(path))
    return path


def test_a_pass_is_recorded_and_shown(store):
    assert pg.record(CheckResult("softmax", "passed", "ok"), force=True)
    assert pg.record(CheckResult("attention", "failed", "no"), force=True) is False
    assert pg.record(CheckResult("attention", "passed", "ok", solution=True), force=True) is False
    data = json.loads(store.read_text())
    assert set(data["passed"]) == {"softmax"} and data["passed"]["softmax"]["first"]
    shown = al.exercises.progress()
    assert shown.passed.keys() == {"softmax"} and shown.total == len(EXERCISES)
    text = repr(shown)
    assert "1 of" in text and "✓ softmax" in text and "· attention" in text
    assert 'attnlib-progress' in shown._repr_html_()


def test_outside_a_kernel_nothing_is_recorded(store):
    assert pg.record(CheckResult("softmax", "passed", "ok")) is False
    assert not store.exists()


def test_the_record_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("ATTNLIB_PROGRESS", "off")
    assert pg.progress_file() is None
    assert pg.record(CheckResult("softmax", "passed", "ok"), force=True) is False
    assert "ATTNLIB_PROGRESS=off" in repr(al.exercises.progress())


def test_a_broken_file_is_not_fatal(store):
    store.write_text("{ not json")
    assert al.exercises.progress().passed == {}
    assert pg.record(CheckResult("softmax", "passed", "ok"), force=True)
    assert "softmax" in json.loads(store.read_text())["passed"]


@pytest.mark.slow
def test_check_in_a_notebook_records_the_learners_pass_only(store, tmp_path):
    cells = ["import attnlib as al\nimport numpy as np",
             "def softmax(x, axis=-1):\n    e = np.exp(x - x.max(axis=axis, keepdims=True))\n"
             "    return e / e.sum(axis=axis, keepdims=True)\nal.exercises.check('softmax', softmax)",
             "def attention_solution(q, k, v, mask=None):\n    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])\n"
             "    s = s if mask is None else np.where(mask, s, -np.inf)\n    e = np.exp(s - s.max(-1, keepdims=True))\n"
             "    return e / e.sum(-1, keepdims=True) @ v\n"
             "al.exercises.check_solution('attention', attention_solution)",
             "al.exercises.progress()"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert set(json.loads(store.read_text())["passed"]) == {"softmax"}
    shown = nb.cells[-1].outputs[0]["data"]["text/plain"]
    assert "✓ softmax" in shown and "· attention" in shown
