"""Write (or refresh) the setup lines at the top of every chapter's first code cell.

    python tools/setup_cell.py                  # every chapter in chapters/ and solutions/
    python tools/setup_cell.py chapters/02_qkv.ipynb
    python tools/setup_cell.py --check          # exit 1 (and say which) if any is stale

The lines make ``attnlib`` importable wherever the notebook runs. Where it is installed
(the course's environment, Binder through postBuild) they only look it up: no output,
a few milliseconds. Where it is missing (Colab, a JupyterHub without the course) they
install the course's own version, quietly, from the published repository:
``attnlib[notebook,torch] @ git+<repository url>@v<version>``, with the URL from
_config.yml (``repository: url``) and the version from pyproject.toml. On Colab they also
turn on its support for ipywidgets 8 (the explorers).

Until a publisher sets the repository (``tools/set_repository.py``; ``_config.yml`` ships with
the placeholder ``https://github.com/OWNER/...``) there is nothing to install from, so the
lines hold no install command: where attnlib is missing they stop with a message that says
what to do. ``set_repository.py`` rewrites them with the install line.

The lines sit between two marker comments; running the tool again replaces what is
between them and keeps the chapter's own imports below. Only the source changes: the
stored outputs stay valid, since the lines print nothing where attnlib is installed.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import sys
import tomllib

import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[1]
BEGIN = "# --- setup: makes attnlib importable on Colab and JupyterHub (tools/setup_cell.py) ---"
END = "# --- end of setup ---"

TEMPLATE = '''{begin}
import importlib.util, subprocess, sys
if importlib.util.find_spec("attnlib") is None:  # not installed here: install the course's version
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "{requirement}"], check=True)
if "google.colab" in sys.modules:  # Colab shows ipywidgets 8 (the explorers) through this
    importlib.import_module("google.colab.output").enable_custom_widget_manager()
{end}'''
# before the repository is set: nothing to install from yet
TEMPLATE_UNPUBLISHED = '''{begin}
import importlib.util, sys
if importlib.util.find_spec("attnlib") is None:  # not installed, and nothing published to install from
    raise ModuleNotFoundError("attnlib is not installed: run this notebook in the course's environment (make venv), "
                              "or publish the course first (tools/set_repository.py adds an install line here)")
if "google.colab" in sys.modules:  # Colab shows ipywidgets 8 (the explorers) through this
    importlib.import_module("google.colab.output").enable_custom_widget_manager()
{end}'''


def repository_url(root: pathlib.Path = ROOT) -> str:
    """``repository: url`` of _config.yml (without a trailing ``.git`` or ``/``)."""
    import yaml

    url = yaml.safe_load((root / "_config.yml").read_text())["repository"]["url"]
    return url.rstrip("/").removesuffix(".git")


def version(root: pathlib.Path = ROOT) -> str:
    """The course's version, ``project.version`` of pyproject.toml."""
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def requirement(root: pathlib.Path = ROOT) -> str:
    """What the setup lines install: the package at the release tag ``v<version>``."""
    return f"attnlib[notebook,torch] @ git+{repository_url(root)}@v{version(root)}"


def published(root: pathlib.Path = ROOT) -> bool:
    """Whether _config.yml names the course's real repository (not the placeholder)."""
    sys.path.insert(0, str(ROOT / "tools" / "sphinxext"))
    try:
        from attnlib_publish import published as named
    finally:
        sys.path.pop(0)
    return named(repository_url(root))


def setup_lines(req: str | None = None) -> str:
    """The setup lines (no trailing newline): with the install line when the repository is
    set, or when ``req`` gives the requirement (tests install from the local checkout this
    way); without it before publication."""
    if req is None and not published():
        return TEMPLATE_UNPUBLISHED.format(begin=BEGIN, end=END)
    return TEMPLATE.format(begin=BEGIN, end=END, requirement=req or requirement())


def variants() -> list[str]:
    """Both forms of the setup lines (before and after publication): the Chinese catalogue
    holds the text of both (tools/zh_notebooks.py)."""
    return [TEMPLATE.format(begin=BEGIN, end=END, requirement=requirement()),
            TEMPLATE_UNPUBLISHED.format(begin=BEGIN, end=END)]


def split_setup(source: str) -> tuple[str | None, str]:
    """``(setup block or None, the rest of the cell)`` of a first code cell."""
    m = re.match(rf"\s*{re.escape(BEGIN)}\n.*?^{re.escape(END)}[^\n]*\n?", source, re.S | re.M)
    if not m:
        return None, source
    return m.group(0).strip(), source[m.end():].lstrip("\n")


def with_setup(source: str, req: str | None = None) -> str:
    """The cell's source with fresh setup lines on top and its own code below them."""
    _, rest = split_setup(source)
    return setup_lines(req) + "\n\n" + rest.lstrip("\n")


def first_code_cell(nb) -> dict:
    return next(c for c in nb.cells if c.cell_type == "code" and c.source.strip())


def refresh(path: pathlib.Path, *, check: bool = False) -> bool:
    """Put the setup lines into ``path``; return whether it changed (or, with ``check``,
    would change; the file is then left alone)."""
    nb = nbformat.read(path, as_version=4)
    cell = first_code_cell(nb)
    new = with_setup(cell.source)
    if new == cell.source:
        return False
    if not check:
        cell.source = new
        nbformat.write(nb, path)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=pathlib.Path)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a chapter is stale")
    a = ap.parse_args(argv)
    paths = a.notebooks or sorted((ROOT / "chapters").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))
    stale = [p for p in paths if refresh(p, check=a.check)]
    for p in stale:
        print(f"{p}: {'setup lines missing or stale' if a.check else 'setup lines written'}")
    if a.check and stale:
        print("run: python tools/setup_cell.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
