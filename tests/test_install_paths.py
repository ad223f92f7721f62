"""The ways a learner gets attnlib, simulated in fresh virtual environments (no
system site-packages, no PYTHONPATH, only attnlib's own dependencies (pyproject.toml:
NumPy, array-api-compat, cloudpickle, Babel, psutil) and setuptools):

* **Colab / a JupyterHub without the course**: the setup lines of every chapter's first
  cell (tools/setup_cell.py) find no attnlib, install it quietly (here from a copy of the
  local checkout instead of the published git URL), and the chapter's import and an
  exercise check work in the same process; on Colab (a stand-in ``google.colab`` module)
  they switch on its ipywidgets 8 support. Run again, they install nothing, print
  nothing and take well under a second.
* **Binder**: postBuild (run by repo2docker after requirements.txt) makes attnlib
  importable from any directory.

Needs pip to reach those dependencies (PyPI, or a wheel folder named by
ATTNLIB_WHEELS), and setuptools at the course environment's version to build attnlib.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap
from importlib.metadata import version

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import setup_cell  # noqa: E402

pytestmark = pytest.mark.slow


def _runtime_pins() -> dict:
    """attnlib's own dependencies (pyproject.toml's ``dependencies``) at requirements.txt's
    versions: what repo2docker has installed before postBuild runs, and what the setup
    lines' ``pip install`` would otherwise fetch."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~ \[]", d, maxsplit=1)[0].lower() for d in deps}
    pinned = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M))
    pins = {name: v for name, v in pinned.items() if name.lower() in names}
    assert {n.lower() for n in pins} == names, f"requirements.txt pins none of {sorted(names - {n.lower() for n in pins})}"
    return pins


PINS = _runtime_pins()

GOOD_SOFTMAX = textwrap.dedent("""
    import numpy as np
    import attnlib as al

    def softmax(x, axis=-1):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    result = al.exercises.check("softmax", softmax)
    print("ATTNLIB", al.__file__)
    print("STATUS", result.status)
""")


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PIP_NO_BUILD_ISOLATION"] = "false"  # build with the venv's setuptools: no download
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_COMPILE"] = "1"  # no .pyc written at install: Python compiles what it imports
    return env


def _venv(where: pathlib.Path) -> pathlib.Path:
    """A fresh venv with only attnlib's own dependencies (PINS); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    py = where / "bin" / "python"
    wheels = os.environ.get("ATTNLIB_WHEELS")
    source = ["--no-index", "--find-links", wheels] if wheels else []
    # the setuptools of the course's environment builds attnlib's wheel (the venv's bundled
    # one is too old to build wheels without the `wheel` package)
    pins = [f"{name}=={version}" for name, version in PINS.items()] + [f"setuptools=={version('setuptools')}"]
    res = subprocess.run([str(py), "-m", "pip", "install", "-q", *source, *pins], env=_env(),
                         capture_output=True, text=True, timeout=600)
    if res.returncode:
        pytest.skip(f"cannot install {pins} into a fresh venv (no index reachable?): {res.stderr[-500:]}")
    return py


def _source_copy(dest: pathlib.Path) -> pathlib.Path:
    """What the published repository holds for installing attnlib (a copy, so that building
    it leaves nothing in the worktree)."""
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "postBuild"):
        shutil.copy(ROOT / name, dest / name)
    shutil.copytree(ROOT / "attnlib", dest / "attnlib", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _run(py: pathlib.Path, code: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(py), "-c", code], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)


def test_setup_lines_install_attnlib_where_it_is_missing(tmp_path):
    py = _venv(tmp_path / "venv")
    src = _source_copy(tmp_path / "repo")
    outside = tmp_path / "notebooks"
    outside.mkdir()
    assert "MISSING" in _run(py, "import importlib.util as u; print('MISSING' if u.find_spec('attnlib') is None "
                                 "else 'FOUND')", outside).stdout, "the fresh venv already has attnlib"

    # the template's lines, with the local copy in place of the published git URL
    req = f"attnlib @ {src.as_uri()}"
    lines = setup_cell.setup_lines(req)
    assert lines == setup_cell.variants()[0].replace(setup_cell.requirement(), req)  # the published form
    fake_colab = textwrap.dedent("""
        import sys, types
        calls = []
        google = types.ModuleType("google"); colab = types.ModuleType("google.colab")
        output = types.ModuleType("google.colab.output")
        output.enable_custom_widget_manager = lambda: calls.append("widgets")
        google.colab, colab.output = colab, output
        sys.modules.update({"google": google, "google.colab": colab, "google.colab.output": output})
    """)
    first = _run(py, fake_colab + lines + "\n" + GOOD_SOFTMAX + "\nprint('COLAB', calls)\n", outside)
    assert first.returncode == 0, f"the setup cell failed in a fresh venv:\n{first.stdout[-2000:]}\n{first.stderr[-2000:]}"
    assert "STATUS passed" in first.stdout, first.stdout
    installed = re.search(r"ATTNLIB (.+)", first.stdout).group(1)
    assert str(tmp_path / "venv") in installed, f"attnlib was imported from {installed}, not the venv"
    assert "COLAB ['widgets']" in first.stdout, "on Colab the setup lines did not enable ipywidgets 8"

    # where attnlib is installed: nothing installed, nothing printed, fast
    timed = "import time\nt0 = time.perf_counter()\n" + lines + "\nprint('SECONDS', time.perf_counter() - t0)\n"
    again = _run(py, timed, outside)
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert again.stdout.startswith("SECONDS") and len(again.stdout.splitlines()) == 1, \
        f"the setup lines printed something where attnlib is installed: {again.stdout!r}"
    assert float(again.stdout.split()[1]) < 1.0, f"the setup lines are slow where attnlib is installed: {again.stdout}"


def test_binder_postbuild_makes_attnlib_importable(tmp_path):
    py = _venv(tmp_path / "venv")
    repo = _source_copy(tmp_path / "repo")
    env = _env()
    env["PATH"] = f"{py.parent}{os.pathsep}{env['PATH']}"  # repo2docker's environment comes first
    res = subprocess.run(["bash", str(repo / "postBuild")], cwd=repo, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, f"postBuild failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    out = _run(py, GOOD_SOFTMAX, elsewhere)
    assert out.returncode == 0 and "STATUS passed" in out.stdout, f"{out.stdout[-1500:]}\n{out.stderr[-1500:]}"
