"""The chapters as a learner sees them in JupyterLab 4 (headless Chromium, no network).

A JupyterLab server on 127.0.0.1 serves a temporary copy of the chapters (and the markup
sample of markup.py); Playwright drives Chromium. For every chapter:

* before running, each explorer shows its still picture and "Run this cell to explore",
  never "Error displaying widget"; no MyST directive or role shows raw; no quiz shows its
  source (the answer key: ``True`` beside the right choice);
* Run All on a fresh kernel (the same command as the Run menu) leaves no error output, and
  every output it leaves agrees with the stored one by strict nbval's rules (tools/strict_outputs.py:
  nbval's own comparison, tags and sanitize file): this run is the strict nbval check of the
  English notebooks in the first numerical environment (``make nbval`` does the same on its own);
* the explorers are live (the still is hidden) and each responds to its control;
* every evidence block (``with al.evidence(...)``) shows neither its code nor its lines, only
  its closed "Evidence" element, before and after Run All;
* no exercise shows "passed" (a chapter holds no solution: each stub says "not attempted"
  and is followed by a link to the chapter's solutions notebook);
* each solutions notebook (solutions/, opened from the same server) runs, its outputs agree
  with the stored ones (as above), and every verdict in it says "the course's solution passed";
* in the chapter with the softmax exercise, a wrong answer typed into the stub gets the
  catalogued mistake's message; screenshots of that exercise and of a quiz with its
  answer open go to _build/screenshots/.

Also: a trusted notebook saved without widget state shows the still, not the error; the
markup sample renders math inside an opened <details>, tables and citation links
(plain JupyterLab: jupyterlab-myst 2.6 and 2.7 leave math inside <details> raw).

Runs from `make jupyterlab` (ATTNLIB_JUPYTERLAB=1). ATTNLIB_CHAPTERS=DIR tests the
notebooks in DIR instead of chapters/. Waits are on the kernel and the notebook model
(no fixed sleeps), with generous limits for a loaded 2-core machine.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest

import attnlib as al
from markup import sample_notebook

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import strict_outputs  # noqa: E402
SOURCE = pathlib.Path(os.environ.get("ATTNLIB_CHAPTERS", ROOT / "chapters"))
CHAPTERS = sorted(SOURCE.glob("*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = os.environ.get("ATTNLIB_CHROMIUM", "/usr/bin/chromium")
RUN_ALL_LIMIT_MS = 420_000  # one chapter on a loaded 2-core machine (about 30 s when idle)

# the most common slip: no maximum subtracted (catalogued as "no_max_subtraction")
WRONG_SOFTMAX = '''def softmax(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)

al.exercises.check("softmax", softmax)
'''

# ---------------------------------------------------------------------- JavaScript helpers
NOTEBOOK = "jupyterapp.shell.currentWidget"
READY = f"""() => {{
    const w = window.jupyterapp && {NOTEBOOK};
    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return !!(w && w.content && w.context.isReady && k && k.status === 'idle' && w.content.widgets.length);
}}"""
# done when every code cell ran (or one failed, which stops Run All) and the kernel is idle
RUN_DONE = f"""() => {{
    const w = {NOTEBOOK};
    const k = w.sessionContext.session && w.sessionContext.session.kernel;
    const code = w.content.widgets.filter(c => c.model.type === 'code' && c.model.sharedModel.getSource().trim());
    const failed = code.some(c => c.model.outputs.toJSON().some(o => o.output_type === 'error'));
    return k && k.status === 'idle' && (failed || code.every(c => c.model.executionCount !== null));
}}"""
ERRORS = f"""() => {NOTEBOOK}.content.widgets.flatMap(c => c.model.type !== 'code' ? [] :
    c.model.outputs.toJSON().filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue
        + ' (cell: ' + c.model.sharedModel.getSource().slice(0, 80) + ')'))"""
MARKDOWN_TEXT = "() => Array.from(document.querySelectorAll('.jp-MarkdownCell')).map(e => e.innerText)"
# quiz cells whose source (with the answer key) is on screen: JupyterLab takes the editor
# of a cell with jupyter.source_hidden out of the page and shows a placeholder instead
VISIBLE_QUIZ_KEYS = f"""() => {NOTEBOOK}.content.widgets.filter(c => c.model.type === 'code'
        && c.model.sharedModel.getSource().includes('al.quiz.question(')).map(c => {{
    const src = c.model.sharedModel.getSource();
    const editor = c.node.querySelector('.jp-InputArea-editor');
    const shown = !!(editor && editor.offsetParent !== null && editor.getBoundingClientRect().height > 0);
    return {{shown: shown && /\\bTrue\\b/.test(src), start: src.trim().slice(0, 80)}};
}})"""
# evidence cells (``with al.evidence(...)``): is the editor on screen, and is each evidence
# element (a <details>) closed
EVIDENCE = f"""() => {NOTEBOOK}.content.widgets.filter(c => c.model.type === 'code'
        && c.model.sharedModel.getSource().includes('al.evidence(')).map(c => {{
    const editor = c.node.querySelector('.jp-InputArea-editor');
    const details = Array.from(c.node.querySelectorAll('details.attnlib-evidence'));
    return {{shown: !!(editor && editor.offsetParent !== null && editor.getBoundingClientRect().height > 0),
             details: details.length, open: details.filter(d => d.open).length,
             start: c.model.sharedModel.getSource().trim().slice(0, 60)}};
}})"""
VERDICTS = """() => Array.from(document.querySelectorAll('.attnlib-check')).map(
    e => ({cls: e.className, text: e.innerText.split('\\n')[0]}))"""
RAW_MARKUP = ("```{", "{dropdown}", "{cite}", "{prf:", "{note}", ":::", "{numref}", "{eq}")
EXPLORERS = """() => {
    const boxes = Array.from(document.querySelectorAll('.attnlib-explorer'));
    const stills = Array.from(document.querySelectorAll('.attnlib-explorer-still'));
    const visible = e => !!(e.offsetParent !== null && e.getBoundingClientRect().height > 0);
    return {live: boxes.length, stills: stills.length, stills_visible: stills.filter(visible).length,
            still_images: stills.filter(s => visible(s) && s.querySelector('img') &&
                                         s.querySelector('img').naturalWidth > 0).length,
            hint: stills.filter(s => visible(s) && s.innerText.includes('Run this cell to explore')).length,
            errors: (document.body.innerText.match(/Error displaying widget/g) || []).length};
}"""
SHOWN_IMAGE = """(box) => {
    const img = Array.from(box.querySelectorAll('img')).find(i => i.offsetParent !== null);
    return img ? img.src.length + ':' + img.src.slice(-64) : '';
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_json(path: pathlib.Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(base url, notebook folder, environment) of a JupyterLab server on a temp copy."""
    if not CHAPTERS:
        pytest.fail(f"no notebooks in {SOURCE}")
    base = tmp_path_factory.mktemp("jupyterlab")
    work = base / "work"
    (work / "chapters").mkdir(parents=True)   # as in the repository: a chapter links to ../solutions/
    (work / "solutions").mkdir()
    for p in CHAPTERS:
        shutil.copy(p, work / "chapters" / p.name)
    for p in SOLUTIONS:
        shutil.copy(p, work / "solutions" / p.name)
    nbformat.write(sample_notebook(), work / "markup_sample.ipynb")
    settings = base / "settings"
    # every cell stays in the page (no windowing), no news or update pop-ups
    _write_json(settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings",
                {"windowingMode": "none"})
    _write_json(settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings",
                {"fetchNews": "false", "checkForUpdates": False})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "JUPYTER_CONFIG_DIR": str(base / "config"), "JUPYTER_DATA_DIR": str(base / "data"),
           "JUPYTER_RUNTIME_DIR": str(base / "runtime"), "PYTHONHASHSEED": "0"}
    port = _free_port()
    log = open(base / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--allow-root", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={work}",
         f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={base / 'workspaces'}",
         "--LabApp.expose_app_in_browser=True", "--ServerApp.open_browser=False"],
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"JupyterLab did not start:\n{(base / 'lab.log').read_text()[-3000:]}")
        time.sleep(0.5)
    try:
        yield url, work, env
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


# No CSS animation or transition: JupyterLab's busy indicators animate while a cell runs,
# and Chromium drew every frame of them through a whole Run All (chapters 10 and 11:
# Chromium's CPU 18.6 s with them, 14.7 s without)
STILL = ("document.addEventListener('DOMContentLoaded', () => { const s = document.createElement('style');"
         " s.textContent = '*, *::before, *::after { animation: none !important; transition: none !important; }';"
         " document.head.appendChild(s); })")


def _open(browser, url: str, name: str):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.add_init_script(STILL)
    # nothing but the local server: the notebooks must work offline
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(("http://127.0.0.1", "data:", "blob:"))
               else r.abort())
    # ?reset: a fresh workspace, so the notebooks of earlier tests are not reopened beside it
    page.goto(f"{url}/lab/tree/{name}?reset", wait_until="domcontentloaded")
    page.wait_for_function(READY, timeout=180_000, polling=500)
    # the outputs of the cells (and markdown) are rendered once the notebook is revealed
    page.wait_for_function(f"() => {NOTEBOOK}.content.isVisible && {NOTEBOOK}.isRevealed", timeout=60_000)
    return page


@pytest.fixture(scope="module")
def lab_page(lab, browser):
    """The JupyterLab page the chapter tests of this worker share, one chapter after another
    (:func:`_show`): a page load of JupyterLab is ~5 s of Chromium's CPU. A test that fails
    closes it, so the next one starts on a fresh page."""
    holder: dict = {"page": None}
    yield holder
    if holder["page"] is not None:
        _close(holder["page"])


def _show(holder: dict, browser, url: str, name: str):
    """Open notebook ``name`` in the shared page (in place of the one it shows), or in a new
    page when there is none or the shared one does not answer."""
    page = holder["page"]
    if page is not None:
        try:
            _open_next(page, name)
            return page
        except Exception:  # noqa: BLE001 - whatever went wrong, a fresh page follows
            with contextlib.suppress(Exception):
                page.close()
            holder["page"] = None
    holder["page"] = _open(browser, url, name)
    return holder["page"]


def _close(page) -> None:
    page.evaluate(f"async () => {{ const w = {NOTEBOOK}; await w.sessionContext.shutdown(); w.dispose(); }}")
    page.close()


def _run_all(page) -> None:
    page.evaluate("() => jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(RUN_DONE, timeout=RUN_ALL_LIMIT_MS, polling=1000)


def _strict_nbval(page, path: pathlib.Path) -> tuple[list[str], int]:
    """Where the outputs Run All left in the notebook shown differ from ``path``'s stored ones,
    by strict nbval's rules (tools/strict_outputs.py), and how many cells were compared."""
    ran = page.evaluate(f"() => {NOTEBOOK}.model.toJSON()")
    stored = nbformat.read(path, as_version=4)
    differ = [f"{path.parent.name}/{path.name}: {d}" for d in strict_outputs.differences(stored, ran)]
    return differ, strict_outputs.count_compared(stored)


def _cell_with(page, text: str):
    """The notebook cell whose source contains ``text`` (a Playwright locator)."""
    index = page.evaluate(f"""(t) => {{
        const i = {NOTEBOOK}.content.widgets.findIndex(c => c.model.sharedModel.getSource().includes(t));
        if (i >= 0) {{ {NOTEBOOK}.content.widgets[i].node.setAttribute('data-attnlib-test', 'cell-' + i); }}
        return i; }}""", text)
    assert index >= 0, f"no cell contains {text!r}"
    return index, page.locator(f'[data-attnlib-test="cell-{index}"]')


def _raw_markup(page) -> list[str]:
    return [f"{m!r} in: {t.strip()[:100]!r}" for t in page.evaluate(MARKDOWN_TEXT) for m in RAW_MARKUP if m in t]


def _explorer_cells(path: pathlib.Path) -> int:
    """Explorers of the chapter: precomputed ones (al.widgets.explorer) and chapter 13's text
    box, which needs the kernel (sentence_explorer)."""
    nb = json.loads(path.read_text())
    return sum("al.widgets.explorer(" in "".join(c["source"]) or "sentence_explorer(" in "".join(c["source"])
               for c in nb["cells"] if c["cell_type"] == "code")


def _quiz_cells(path: pathlib.Path) -> int:
    nb = json.loads(path.read_text())
    return sum("al.quiz.question(" in "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


def _move_each_explorer(page) -> list[str]:
    problems = []
    boxes = page.locator(".attnlib-explorer")
    for b in range(boxes.count()):
        box = boxes.nth(b)
        box.scroll_into_view_if_needed()
        before = box.evaluate(SHOWN_IMAGE)
        if not before:
            problems.append(f"explorer {b + 1} shows no image")
            continue
        if box.locator(".widget-text input").count():   # a text box: a new sentence, sent with Enter
            field = box.locator(".widget-text input").first
            field.fill("Now is the winter of our discontent")
            field.press("Enter")
            how = "typing a new sentence"
        elif box.locator(".widget-toggle-button").count() > 1:
            box.locator(".widget-toggle-button").nth(1).click()
            how = "clicking its second button"
        elif box.locator(".noUi-handle").count():
            box.locator(".noUi-handle").first.focus()
            page.keyboard.press("ArrowRight")
            how = "moving its slider one step"
        else:
            problems.append(f"explorer {b + 1} has no slider or buttons")
            continue
        try:
            page.wait_for_function(f"([box, before]) => ({SHOWN_IMAGE})(box) !== before",
                                   arg=[box.element_handle(), before], timeout=30_000)
        except Exception:
            problems.append(f"explorer {b + 1}: {how} did not change the image")
    return problems


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_in_jupyterlab(lab, browser, lab_page, path):
    url, work, _ = lab
    n_explorers = _explorer_cells(path)
    page = _show(lab_page, browser, url, f"chapters/{path.name}")
    done = False
    try:
        # ---- as opened (untrusted, outputs as stored): stills, no raw markup
        raw = _raw_markup(page)
        assert not raw, f"{path.name}: MyST markup shows raw in JupyterLab: {raw[:5]}"
        quizzes = page.evaluate(VISIBLE_QUIZ_KEYS)
        assert len(quizzes) == _quiz_cells(path), f"{path.name}: JupyterLab shows {len(quizzes)} quiz cells"
        keys = [q["start"] for q in quizzes if q["shown"]]
        assert not keys, (
            f"{path.name}: {len(keys)} quiz cells show their source, with the answer key, in JupyterLab "
            f'(no "jupyter": {{"source_hidden": true}} in their metadata; tools/run_notebooks.py sets it): '
            f"{keys[:3]}")
        if n_explorers:
            page.wait_for_function("(n) => document.querySelectorAll('.attnlib-explorer-still img').length >= n",
                                   arg=n_explorers, timeout=60_000)
            state = page.evaluate(EXPLORERS)
            assert state["still_images"] == n_explorers and state["hint"] == n_explorers and not state["errors"], (
                f"{path.name} before running: {n_explorers} explorers should each show a still picture and "
                f"'Run this cell to explore', and no widget error: {state}")

        _evidence_collapsed(page, path)

        # ---- Run All on a fresh kernel
        started = time.monotonic()
        _run_all(page)
        seconds = time.monotonic() - started
        errors = page.evaluate(ERRORS)
        assert not errors, f"{path.name}: Run All stopped on an error: {errors[0]}"
        differ, compared = _strict_nbval(page, path)
        assert not differ, ("outputs of Run All differ from the stored ones (strict nbval's rules; re-execute "
                            "the chapter with tools/run_notebooks.py if the change is meant):\n" + "\n".join(differ))
        print(f"{path.name}: Run All {seconds:.0f} s, {compared} cells' outputs as stored")

        # ---- explorers live, stills hidden, each responds to its control
        if n_explorers:
            page.wait_for_function("(n) => document.querySelectorAll('.attnlib-explorer').length >= n",
                                   arg=n_explorers, timeout=60_000)
            state = page.evaluate(EXPLORERS)
            assert state["live"] == n_explorers and state["stills_visible"] == 0 and not state["errors"], (
                f"{path.name} after Run All: every explorer should be live with its still hidden: {state}")
            problems = _move_each_explorer(page)
            assert not problems, f"{path.name}: {problems}"

        _evidence_collapsed(page, path)

        # ---- verdicts: nothing passed (no solution in a chapter); a link to the solutions
        verdicts = page.evaluate(VERDICTS)
        stubs = [v for v in verdicts if "attnlib-check-not_attempted" in v["cls"]]
        assert stubs, f"{path.name}: no stub says 'not attempted' after Run All: {verdicts}"
        posing = [v["text"] for v in verdicts if "passed" in v["text"]]
        assert not posing, f"{path.name}: a verdict says 'passed' in a chapter, which holds no solution: {posing}"
        links = page.evaluate(f"""() => Array.from(document.querySelectorAll('.jp-MarkdownCell a'))
            .map(a => a.getAttribute('href')).filter(h => h && h.includes('solutions/{path.name}'))""")
        assert len(links) == len(stubs), (
            f"{path.name}: {len(stubs)} exercises but {len(links)} links to solutions/{path.name} in JupyterLab")
        assert not _raw_markup(page)

        # ---- a wrong answer in the softmax stub gets its catalogued message; screenshots
        has_softmax = page.evaluate(f"""() => {NOTEBOOK}.content.widgets.some(
            c => c.model.sharedModel.getSource().includes('al.exercises.check("softmax", softmax)'))""")
        if has_softmax:
            _wrong_answer_and_screenshots(page, path)
        done = True
    finally:
        if not done:  # the next chapter starts on a fresh page
            lab_page["page"] = None
            with contextlib.suppress(Exception):  # (the failure above is the one to report)
                _close(page)
            with contextlib.suppress(Exception):
                page.close()


def _evidence_collapsed(page, path) -> None:
    blocks = page.evaluate(EVIDENCE)
    wanted = sum("al.evidence(" in "".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                 if c["cell_type"] == "code")
    assert len(blocks) == wanted, f"{path.name}: JupyterLab shows {len(blocks)} evidence cells, the notebook has {wanted}"
    wrong = [b for b in blocks if b["shown"] or b["details"] != 1 or b["open"]]
    assert not wrong, (f"{path.name}: evidence blocks not collapsed in JupyterLab (their code on screen, or their "
                       f"element missing or open): {wrong[:3]}")


def _open_next(page, name: str) -> None:
    """Close the notebook shown (its kernel shut down) and open ``name`` in the same
    JupyterLab page, as a learner opens the next file (no new page load)."""
    page.evaluate(f"async () => {{ const w = {NOTEBOOK}; await w.sessionContext.shutdown(); w.dispose(); }}")
    page.evaluate("async (p) => { await jupyterapp.commands.execute('docmanager:open', {path: p}); }", name)
    page.wait_for_function(f"(p) => {NOTEBOOK} && {NOTEBOOK}.context && {NOTEBOOK}.context.path === p",
                           arg=name, timeout=60_000)
    page.wait_for_function(READY, timeout=180_000, polling=500)
    page.wait_for_function(f"() => {NOTEBOOK}.content.isVisible && {NOTEBOOK}.isRevealed", timeout=60_000)


def test_solutions_notebooks_in_jupyterlab(lab, browser):
    """The solutions of every chapter, as a learner opens them from its link: Run All on a
    fresh kernel, no error, and every verdict says it checked the course's solution. One
    JupyterLab page opens them in turn (a page load of JupyterLab is ~5 s of Chromium's CPU;
    a solutions notebook runs in about one)."""
    url, _, _ = lab
    assert SOLUTIONS, "no solutions notebook"
    page = _open(browser, url, f"solutions/{SOLUTIONS[0].name}")
    problems = []
    try:
        for i, path in enumerate(SOLUTIONS):
            name = f"solutions/{path.name}"
            if i:
                _open_next(page, name)
            _run_all(page)
            errors = page.evaluate(ERRORS)
            if errors:
                problems.append(f"{name}: Run All stopped on an error: {errors[0]}")
                continue
            problems += _strict_nbval(page, path)[0]
            verdicts = page.evaluate(VERDICTS)
            names = [n for n, ex in al.exercises.EXERCISES.items() if ex.chapter == path.stem]
            if not (len(verdicts) == len(names) and all("the course's solution passed" in v["text"]
                                                        for v in verdicts)):
                problems.append(f"{name}: every one of the {len(names)} exercises should say \"the course's "
                                f"solution passed\": {verdicts}")
    finally:
        _close(page)
    assert not problems, "\n".join(problems)


def _wrong_answer_and_screenshots(page, path) -> None:
    import numpy as np

    namespace = {"np": np, "al": al}
    exec(WRONG_SOFTMAX.split("\nal.exercises")[0], namespace)
    expected = al.exercises.check("softmax", namespace["softmax"])
    assert expected.status == "failed" and expected.mistake, "the planted wrong softmax is not a catalogued mistake"

    index, cell = _cell_with(page, 'al.exercises.check("softmax", softmax)')
    # type the wrong answer into the stub's editor, as a learner would
    cell.locator(".cm-content").click()
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.insert_text(WRONG_SOFTMAX)
    assert page.evaluate(f"(i) => {NOTEBOOK}.content.widgets[i].model.sharedModel.getSource()", index).strip() \
        == WRONG_SOFTMAX.strip(), "the wrong answer was not typed into the stub as written"
    page.keyboard.press("Shift+Enter")
    page.wait_for_function(f"""(i) => {{ const c = {NOTEBOOK}.content.widgets[i];
        return c.model.executionCount !== null && c.model.outputs.length > 0 && {NOTEBOOK}.sessionContext.session.kernel.status === 'idle'; }}""",
                           arg=index, timeout=120_000, polling=500)
    shown = cell.locator(".jp-OutputArea").inner_text()
    assert "✗ softmax: not yet" in shown, f"the wrong answer's verdict: {shown[:300]!r}"
    assert expected.message[:80] in " ".join(shown.split()), (
        f"the verdict does not give the catalogued message {expected.mistake!r}: {shown[:400]!r}")

    SHOTS.mkdir(parents=True, exist_ok=True)
    cell.scroll_into_view_if_needed()
    cell.screenshot(path=str(SHOTS / f"jupyterlab-exercise-{path.stem}.png"))
    # a quiz with one choice opened, and its answer (<details>) opened below it
    quiz = page.locator(".jp-Cell").filter(has=page.locator(".attnlib-quiz-choice")).first
    quiz.scroll_into_view_if_needed()
    quiz.locator(".attnlib-quiz-choice summary").first.click()
    answer = quiz.locator("xpath=following-sibling::div[contains(@class,'jp-MarkdownCell')][1]")
    answer.locator("details summary").first.click()
    box_q, box_a = quiz.bounding_box(), answer.bounding_box()
    page.screenshot(path=str(SHOTS / f"jupyterlab-quiz-{path.stem}.png"), clip={
        "x": box_q["x"], "y": box_q["y"], "width": max(box_q["width"], box_a["width"]),
        "height": box_a["y"] + box_a["height"] - box_q["y"]})


def test_trusted_notebook_without_widget_state_shows_the_still(lab, browser):
    """A notebook the learner ran and saved (trusted) but without widget state: the widget
    renderer finds no model; the still must show instead of 'Error displaying widget'."""
    url, work, env = lab
    source = next((p for p in CHAPTERS if _explorer_cells(p)), None)
    if source is None:
        pytest.skip("no chapter has an explorer")
    nb = json.loads(source.read_text())
    nb["metadata"].pop("widgets", None)
    target = work / f"trusted_{source.name}"
    target.write_text(json.dumps(nb))
    subprocess.run([sys.executable, "-m", "jupyter", "trust", str(target)], env=env, check=True,
                   capture_output=True)
    page = _open(browser, url, target.name)
    try:
        n = _explorer_cells(source)
        page.wait_for_function("(n) => document.querySelectorAll('.attnlib-explorer-still img').length >= n",
                               arg=n, timeout=60_000)
        page.wait_for_function("""() => Array.from(document.querySelectorAll(
            '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.widget-view+json"]'))
            .every(e => e.textContent !== 'Loading widget...')""", timeout=60_000)
        state = page.evaluate(EXPLORERS)
        shown = page.evaluate("""() => Array.from(document.querySelectorAll(
            '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.widget-view+json"]'))
            .filter(e => e.offsetParent !== null && e.innerText.trim()).map(e => e.innerText.trim())""")
        assert state["still_images"] == n and state["hint"] == n, f"the stills do not show: {state}"
        assert not shown, f"a widget output without its model shows text: {shown[:3]}"
    finally:
        _close(page)


def test_markup_sample_renders_in_jupyterlab(lab, browser):
    url, _, _ = lab
    page = _open(browser, url, "markup_sample.ipynb")
    try:
        assert not _raw_markup(page)
        page.wait_for_function("() => document.querySelectorAll('.jp-MarkdownCell details').length >= 1",
                               timeout=30_000)
        details = page.locator(".jp-MarkdownCell details").first
        details.locator("summary").click()
        try:
            page.wait_for_function("""() => { const d = document.querySelector('.jp-MarkdownCell details');
                return d.open && d.querySelectorAll('mjx-container').length >= 2; }""", timeout=60_000)
        except Exception:
            inside = page.locator(".jp-MarkdownCell details").first.inner_html()[:400]
            raise AssertionError(
                "math inside an opened <details> is not rendered by JupyterLab's MathJax (jupyterlab-myst "
                f"2.6/2.7 leaves it as raw TeX; it must not be installed): {inside}") from None
        state = page.evaluate("""() => {
            const md = Array.from(document.querySelectorAll('.jp-MarkdownCell'));
            const text = md.map(e => e.innerText).join('\\n');
            return {math: document.querySelectorAll('.jp-MarkdownCell mjx-container').length,
                    tables: document.querySelectorAll('.jp-MarkdownCell table').length,
                    table_math: document.querySelectorAll('.jp-MarkdownCell table mjx-container').length,
                    cite: Array.from(document.querySelectorAll('.jp-MarkdownCell a')).map(a => a.getAttribute('href')),
                    dollars: (text.match(/\\$/g) || []).length, kbd: document.querySelectorAll('.jp-MarkdownCell kbd').length,
                    quote: document.querySelectorAll('.jp-MarkdownCell blockquote strong').length};
        }""")
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "jupyterlab-markup-sample.png"), full_page=True)
    finally:
        _close(page)
    assert state["math"] >= 6 and state["dollars"] == 0, f"math is not rendered everywhere: {state}"
    assert state["tables"] == 1 and state["table_math"] >= 4, f"the table (with math) is not rendered: {state}"
    assert any(h and "bibliography.md" in h and h.endswith("#vaswani2017attention") for h in state["cite"]), \
        f"the citation link is not a link to the bibliography entry: {state['cite']}"
    assert state["kbd"] == 2 and state["quote"] == 1, f"HTML or the note block quote is not rendered: {state}"


def test_a_chapter_has_the_softmax_stub_the_wrong_answer_is_typed_into():
    stub = 'al.exercises.check("softmax", softmax)'
    sources = ["".join(c["source"]) for p in CHAPTERS for c in json.loads(p.read_text())["cells"]]
    assert any(stub in src for src in sources), (
        f"no chapter has the stub line {stub!r}: the wrong-answer check and the screenshots above did not run")
