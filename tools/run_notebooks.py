"""Execute chapter notebooks top to bottom on a fresh kernel and save them with outputs.

    python tools/run_notebooks.py chapters/02_qkv.ipynb [...]   # or no args: every chapter and
                                                                 #   solutions notebook
    python tools/run_notebooks.py --clean-only [...]             # only the metadata, no run

Outputs and widget state are stored (nbval compares them; the website needs the state);
volatile metadata (timings, execution ids) is stripped so diffs stay small. Quiz cells
(their source holds the answer key) are hidden: on the site (remove-input) and in
JupyterLab and Colab (``jupyter.source_hidden``). An evidence block (a cell that runs
``with al.evidence(...)``) gets the tag ``evidence`` and starts collapsed: ``hide-input`` on
the site, ``jupyter.source_hidden`` in JupyterLab, ``cellView: form`` on Colab (what it
prints is one closed ``<details>`` element everywhere). (Solutions are not in the chapters
at all: they are in ``solutions/``, a notebook per chapter, shown as they are.) Prints each
notebook's wall time and size; fails if a cell raises or a notebook exceeds --max-seconds.
``--clean-only`` applies that metadata to the stored notebooks without executing them.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]


def clean(nb: nbformat.NotebookNode) -> None:
    nb.metadata = nbformat.NotebookNode({
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        **({"widgets": nb.metadata["widgets"]} if "widgets" in nb.metadata else {}),
    })
    for cell in nb.cells:
        if cell.cell_type == "code" and "al.quiz.question(" in cell.source:
            # the source would give the answer away: removed from the site (remove-input),
            # collapsed in JupyterLab and Colab (source_hidden)
            tags = cell.metadata.setdefault("tags", [])
            if "remove-input" not in tags:
                tags.append("remove-input")
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
        if cell.cell_type == "code" and "al.evidence(" in cell.source:
            # an evidence block: the checks under a finding, collapsed wherever it is read
            tags = cell.metadata.setdefault("tags", [])
            for tag in ("evidence", "hide-input"):
                if tag not in tags:
                    tags.append(tag)
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
            cell.metadata["cellView"] = "form"
        elif cell.cell_type == "code" and "evidence" in cell.metadata.get("tags", []):
            # was an evidence block, is not any more (a cell split in two): shown again
            cell.metadata["tags"] = [t for t in cell.metadata["tags"] if t not in ("evidence", "hide-input")]
            if not cell.metadata["tags"]:
                del cell.metadata["tags"]
            if "al.quiz.question(" not in cell.source:
                cell.metadata.get("jupyter", {}).pop("source_hidden", None)
            if not cell.metadata.get("jupyter", True):
                del cell.metadata["jupyter"]
            cell.metadata.pop("cellView", None)
        cell.metadata.pop("execution", None)
        cell.metadata.pop("ExecuteTime", None)
        cell.pop("id", None)
    nb.nbformat, nb.nbformat_minor = 4, 4


def run(path: pathlib.Path, timeout: int) -> tuple[float, int]:
    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("widgets", None)  # a fresh run stores its own (none, when no explorer is left)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    secs = time.perf_counter() - t0
    clean(nb)
    nbformat.write(nb, path)
    return secs, path.stat().st_size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=pathlib.Path)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="fail a notebook slower than this")
    ap.add_argument("--clean-only", action="store_true", help="only set the metadata; execute nothing")
    a = ap.parse_args()
    paths = a.notebooks or sorted((ROOT / "chapters").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))
    if a.clean_only:
        for p in paths:
            nb = nbformat.read(p, as_version=4)
            clean(nb)
            nbformat.write(nb, p)
        return 0
    bad = 0
    for p in paths:
        secs, size = run(p, a.timeout)
        flag = "" if secs <= a.max_seconds else f"  <-- slower than {a.max_seconds:g} s"
        print(f"{p.name:32s} {secs:6.1f} s  {size / 1e3:7.0f} kB{flag}", flush=True)
        bad += secs > a.max_seconds or size > 1_000_000
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
