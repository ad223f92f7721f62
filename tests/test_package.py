"""attnlib as a package: the sdist and wheel that ``python -m build`` makes, their metadata,
and the wheel installed into a fresh environment outside the repository, where a
chapter's imports run and an exercise is checked.
"""
from __future__ import annotations

import email
import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import textwrap
import tomllib
import venv
import zipfile

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
VERSION = PYPROJECT["project"]["version"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: build with the environment's setuptools (no download at test time)
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                   check=True, capture_output=True, text=True, cwd=out)
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    return wheels[0], sdists[0]


def _metadata(wheel: pathlib.Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_string(z.read(name).decode())


def test_version_is_one_plain_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), f"pyproject version {VERSION!r} is not X.Y.Z"


def test_changelog_has_an_entry_for_this_version():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(VERSION)}\b", changelog, re.M), (
        f"CHANGELOG.md has no '## {VERSION}' section: add one before releasing")


@pytest.mark.slow  # builds the sdist and wheel (python -m build)
def test_wheel_metadata_is_complete(dist):
    wheel, sdist = dist
    assert wheel.name == f"attnlib-{VERSION}-py3-none-any.whl"
    assert sdist.name == f"attnlib-{VERSION}.tar.gz"
    meta = _metadata(wheel)
    assert meta["Name"] == "attnlib" and meta["Version"] == VERSION
    assert meta["Summary"] and len(meta["Summary"]) > 30
    assert meta["License-Expression"] == "MIT"
    assert meta["Requires-Python"] == ">=3.10"
    classifiers = meta.get_all("Classifier")
    assert any(c.startswith("Programming Language :: Python :: 3.11") for c in classifiers)
    assert "Intended Audience :: Education" in classifiers
    extras = set(meta.get_all("Provides-Extra"))
    assert {"torch", "notebook"} <= extras, extras
    requires = meta.get_all("Requires-Dist")
    assert any(r.startswith("numpy") for r in requires)
    assert any(r.startswith("torch") and 'extra == "torch"' in r for r in requires)
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    repo = CONFIG["repository"]["url"].rstrip("/")
    assert urls["Source"] == repo, f"Project-URL Source {urls['Source']} != _config.yml repository url {repo}"
    assert urls["Issues"] == repo + "/issues"
    owner, name = repo.split("/")[-2:]
    assert urls["Homepage"] == f"https://{owner.lower()}.github.io/{name}/"  # Pages hosts are lower case
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert "attnlib/__init__.py" in names and "attnlib/exercises/_core.py" in names
    # the Chinese catalogues: al.set_language("zh") works wherever the wheel is installed
    assert "attnlib/i18n/locales/zh_CN/LC_MESSAGES/attnlib.po" in names
    assert "attnlib/i18n/locales/zh_CN/LC_MESSAGES/exercises/ch02_qkv.po" in names
    assert any(n.endswith("licenses/LICENSE") for n in names), "the licence file is not in the wheel"
    assert not [n for n in names if n.startswith(("tests/", "chapters/", "benchmarks/"))]


@pytest.mark.slow  # builds the sdist and wheel (python -m build)
def test_sdist_carries_the_package_and_not_the_course(dist):
    with tarfile.open(dist[1]) as t:
        names = t.getnames()
    top = f"attnlib-{VERSION}"
    assert f"{top}/pyproject.toml" in names and f"{top}/LICENSE" in names
    assert f"{top}/attnlib/kernels/attention.py" in names
    assert f"{top}/attnlib/i18n/locales/zh_CN/LC_MESSAGES/attnlib.po" in names
    assert not [n for n in names if n.startswith((f"{top}/tests/", f"{top}/chapters/"))]


@pytest.mark.slow
def test_wheel_installed_in_a_fresh_environment_runs_a_chapter(dist, tmp_path):
    """Install the wheel (with its dependencies from the package index) into a new venv
    outside the repository; run chapter 2's setup cell and check one exercise there."""
    env_dir = tmp_path / "fresh-env"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    # --no-compile: no .pyc for every installed file (torch has thousands); what runs is compiled on import
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    subprocess.run(pip + [f"{dist[0]}[notebook]"], check=True, cwd=tmp_path)
    # torch 2.13.0 is the pinned CPU build (a newer, unpinned torch would pull a CUDA build)
    torch_pin = next(line for line in (ROOT / "requirements.txt").read_text().splitlines()
                     if line.startswith("torch=="))
    subprocess.run(pip + [torch_pin], check=True, cwd=tmp_path)

    nb = json.loads((ROOT / "chapters" / "02_qkv.ipynb").read_text())
    setup = next("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    script = textwrap.dedent("""
        import sys
        from IPython.core.inputtransformer2 import TransformerManager
        setup = sys.argv[1]
        # %pip and other magics become get_ipython() calls; attnlib is installed, so the
        # install branch must not run (get_ipython is not defined in a plain interpreter)
        exec(TransformerManager().transform_cell(setup))
    """) + textwrap.dedent("""
        import pathlib
        assert pathlib.Path(al.__file__).resolve().is_relative_to(pathlib.Path(sys.prefix).resolve()), al.__file__

        def softmax(x, axis=-1):
            e = np.exp(x - np.max(x, axis=axis, keepdims=True))
            return e / np.sum(e, axis=axis, keepdims=True)

        result = al.exercises.check("softmax", softmax)
        print(result)
        assert result.passed
        print("attnlib", al.__name__, "from", al.__file__)

        # in Chinese, from the catalogues inside the wheel (strict: nothing falls back)
        al.set_language("zh")
        wrong = al.exercises.check("softmax", lambda x, axis=-1: np.exp(x) / np.exp(x).sum(axis=axis, keepdims=True))
        print(wrong)
        assert not wrong.passed and wrong.mistake == "no_max_subtraction"
        assert any("\u4e00" <= ch <= "\u9fff" for ch in wrong.message), wrong.message
    """)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["MPLBACKEND"] = "Agg"
    env["ATTNLIB_I18N_STRICT"] = "1"
    run = subprocess.run([str(py), "-c", script, setup], cwd=work, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "✓ softmax: passed" in run.stdout, run.stdout
    assert str(env_dir) in run.stdout


def test_attnlib_and_its_exercises_import_without_torch():
    """torch is an optional extra (``attnlib[torch]``): the package, its checker and every
    exercise's registration import without it (a catalogue that imported torch at the top
    broke the Binder and setup-line installs, found only by their slow tests)."""
    code = ("import sys; sys.modules['torch'] = None\n"  # (an import of torch now raises ImportError)
            "import attnlib as al\n"
            "print(len(al.exercises.EXERCISES))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    import attnlib as al

    assert int(run.stdout.split()[-1]) == len(al.exercises.EXERCISES)
