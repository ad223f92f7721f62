"""Build the book's editions and extract its message catalogues.

    python tools/editions.py gettext       # _build/gettext/**/*.pot: the book's prose
                                           #   and attnlib's printed text (make gettext)
    python tools/editions.py update-po     # merge them into the Chinese catalogues
    python tools/editions.py zh [-- ARGS]  # the Chinese edition into _build/html/zh/
    python tools/editions.py en-stored [-- ARGS]  # the English edition from the stored outputs

The English edition is the plain ``jupyter-book build .`` (``make book`` runs it first).
``en-stored`` builds it without executing the notebooks, from the outputs stored in them
(``make test`` does, after strict nbval has shown that a fresh run reproduces them).
The Chinese edition is the same book with ``language: zh_CN``: Sphinx takes every
paragraph, heading, table cell and caption from ``locales/zh_CN/LC_MESSAGES/``. Its chapters
are the Chinese notebooks ``zh/chapters/*.ipynb`` (``tools/zh_notebooks.py`` writes them;
comments and printed text in Chinese, executed with ``ATTNLIB_LANG=zh``, outputs stored and
checked by strict nbval), rendered from their stored outputs without executing anything.
Each page is built from its Chinese notebook's code cells and outputs with the English
chapter's markdown cells, which Sphinx translates from the same catalogues that wrote the
notebook's prose, so that section ids (the links into a chapter) are the English edition's.
The page's launch buttons (Binder, Colab, JupyterHub) open ``zh/chapters/...`` in the
repository (``repository: path_to_book: zh``) and its download button gives the Chinese
notebook itself. ``ATTNLIB_I18N_STRICT=1`` makes a text without a translation an error, so
the build (``-W``) fails instead of showing English.

Both builds read the same ``_config.yml``; this script writes a derived copy under
``_build/`` (paths made absolute, the edition's settings added) and passes it to
``jupyter-book build --config``.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"

# the Chinese edition's settings on top of _config.yml
ZH = {
    "title": "自注意力：用代码实测",
    "language": "zh_CN",
    "path": "zh",              # under _build/html/
    "notebooks": "zh",         # the Chinese notebooks: zh/chapters/*.ipynb in the repository
    "author": "attnlib 课程组",  # the footer's 作者：...
    # theme text that comes from settings, not from a catalogue (the themes' strings that
    # go through gettext are in locales/zh_CN/LC_MESSAGES/sphinx.po and booktheme.po)
    "sphinx": {
        "html_theme_options": {"search_bar_text": "搜索本书……"},
        # the button of a cell tagged hide-input (the chapters use no hide-output)
        "nb_code_prompt_show": "显示代码",
        "nb_code_prompt_hide": "隐藏代码",
        "togglebutton_hint": "点击显示",
        "togglebutton_hint_hide": "点击隐藏",
    },
}
# what the Chinese build's source tree links to (everything of the book but the chapters)
STAGE_SKIP = {".git", ".venv", "_build", "node_modules", "chapters", "solutions", ZH["notebooks"]}
NOTEBOOK_DIRS = ("chapters", "solutions")   # each has its Chinese notebooks under zh/


def _merge(into: dict, new: dict) -> None:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def derived_config(*, execute: str | None = None, language: str | None = None,
                   title: str | None = None, name: str | None = None,
                   path_to_book: str | None = None, author: str | None = None,
                   sphinx_config: dict | None = None) -> pathlib.Path:
    """Write ``_build/_config.<name>.yml``: ``_config.yml`` with absolute paths (a config
    file outside the book's root resolves relative paths from its own folder) and the
    given overrides (``sphinx_config``: merged into ``sphinx: config:``). ``name`` defaults to the
    language, or "gettext" when not executing (builds that may run at the same time need
    names of their own). Returns its path."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    absolute = lambda p: str(ROOT / p)  # noqa: E731
    sphinx = config["sphinx"]
    sphinx["local_extensions"] = {k: absolute(v) for k, v in sphinx["local_extensions"].items()}
    config["bibtex_bibfiles"] = [absolute(p) for p in config["bibtex_bibfiles"]]
    if config.get("html", {}).get("favicon"):
        config["html"]["favicon"] = absolute(config["html"]["favicon"])
    cfg = sphinx["config"]
    cfg["html_static_path"] = [absolute(p) for p in cfg.get("html_static_path", [])]
    cfg["locale_dirs"] = [absolute(p) for p in cfg.get("locale_dirs", [])]
    if execute is not None:
        config["execute"]["execute_notebooks"] = execute
    if language is not None:
        cfg["language"] = language
    if title is not None:
        config["title"] = title
    if author is not None:
        config["author"] = author
    if sphinx_config:
        _merge(cfg, sphinx_config)
    if path_to_book is not None:   # where the launch buttons find a page's notebook
        config.setdefault("repository", {})["path_to_book"] = path_to_book
    name = name or language or ("gettext" if execute == "off" else "custom")
    path = BUILD / f"_config.{name}.yml"
    BUILD.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def jupyter_book() -> str:
    exe = pathlib.Path(sys.executable).with_name("jupyter-book")
    return str(exe) if exe.exists() else "jupyter-book"


def gettext() -> int:
    """Extract the book's prose (Sphinx ``gettext`` builder, notebooks not executed) and
    attnlib's printed text (``tools/i18n_extract.py``) into ``_build/gettext/``."""
    out = BUILD / "gettext"
    shutil.rmtree(out, ignore_errors=True)
    work = BUILD / "gettext-build"
    config = derived_config(execute="off")
    rc = subprocess.call([jupyter_book(), "build", str(ROOT), "--config", str(config),
                          "--path-output", str(work), "--builder", "custom",
                          "--custom-builder", "gettext", "-q"], cwd=ROOT)
    if rc:
        return rc
    shutil.move(str(work / "_build" / "gettext"), str(out / "book"))
    shutil.rmtree(work, ignore_errors=True)
    return subprocess.call([sys.executable, str(ROOT / "tools" / "i18n_extract.py"),
                            "--out", str(out / "attnlib")], cwd=ROOT)


CATALOGUES = {"book": ROOT / "locales", "attnlib": ROOT / "attnlib" / "i18n" / "locales"}
HEADER_DEFAULTS = {
    '"PO-Revision-Date: YEAR-MO-DA HO:MI+ZONE\\n"': '"PO-Revision-Date: 2026-12-01 00:00+0000\\n"',
    '"Last-Translator: FULL NAME <EMAIL@ADDRESS>\\n"': '"Last-Translator: attnlib course team\\n"',
    '"Report-Msgid-Bugs-To: EMAIL@ADDRESS\\n"': '"Report-Msgid-Bugs-To: \\n"',
}


def tidy_catalogue(path: pathlib.Path) -> None:
    """After ``sphinx-intl update``: no fuzzy header, no placeholder header fields, and no
    ``python-format`` flag (Babel guesses it from a "%" in prose, such as "25% from", and
    msgfmt --check then demands a format directive in the translation)."""
    text = path.read_text(encoding="utf-8")
    new = text.replace('#, fuzzy\nmsgid ""\nmsgstr ""', 'msgid ""\nmsgstr ""', 1)
    for old, value in HEADER_DEFAULTS.items():
        new = new.replace(old, value)
    lines = []
    for line in new.split("\n"):
        if line.startswith("#,"):
            flags = [f.strip() for f in line[2:].split(",") if f.strip() not in ("python-format", "no-python-format")]
            if not flags:
                continue
            line = "#, " + ", ".join(flags)
        lines.append(line)
    new = "\n".join(lines)
    if new != text:
        path.write_text(new, encoding="utf-8")


# Hand-written catalogues of the theme's words (locales/zh_CN/LC_MESSAGES/sphinx.po,
# booktheme.po): their entries are not in the templates Sphinx's gettext builder writes, so
# `sphinx-intl update` would delete them as obsolete.
HAND_WRITTEN = ("sphinx.pot", "booktheme.pot")


def update_po() -> int:
    """``sphinx-intl update`` of both catalogue trees from ``_build/gettext/``; new
    messages come in untranslated, changed ones as fuzzy (tests/test_i18n.py names them)."""
    for name, locales in CATALOGUES.items():
        pot = BUILD / "gettext" / name
        if not pot.is_dir():
            print(f"no {pot.relative_to(ROOT)}: run `make gettext` first", file=sys.stderr)
            return 1
        for hand in HAND_WRITTEN:
            (pot / hand).unlink(missing_ok=True)
        rc = subprocess.call([str(pathlib.Path(sys.executable).with_name("sphinx-intl")), "update",
                              "-p", str(pot), "-l", "zh_CN", "-d", str(locales)], cwd=ROOT)
        if rc:
            return rc
        for po in sorted(locales.rglob("*.po")):
            tidy_catalogue(po)
    return 0


def translated_toc(text: str) -> str:
    """``_toc.yml`` with each part's caption in Chinese, from the root page's catalogue
    (``make gettext`` extracts the captions there; Sphinx translates them in the root
    page's toctree, but the sidebar shows the captions of ``_toc.yml``). A caption without
    a translation is an error: it would show in English."""
    from babel.messages.pofile import read_po

    toc = yaml.safe_load(text)
    with open(ROOT / "locales" / "zh_CN" / "LC_MESSAGES" / f"{toc['root']}.po", "rb") as f:
        catalogue = {m.id: m.string for m in read_po(f) if m.id and m.string and not m.fuzzy}
    for part in toc.get("parts", []):
        if "caption" in part:
            if part["caption"] not in catalogue:
                raise SystemExit(f"_toc.yml: the caption {part['caption']!r} has no translation in "
                                 f"locales/zh_CN/LC_MESSAGES/{toc['root']}.po: run `make update-po`")
            part["caption"] = catalogue[part["caption"]]
    return yaml.safe_dump(toc, allow_unicode=True, sort_keys=False)


def stage_zh_sources() -> pathlib.Path:
    """``_build/zh-src/``: the book's sources (links to them) with each chapter replaced by
    its Chinese notebook's code cells and stored outputs under the English chapter's
    markdown cells (translated by Sphinx, with the English edition's section ids)."""
    src = BUILD / "zh-src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for entry in sorted(ROOT.iterdir()):
        if entry.name == "_toc.yml":   # the parts' captions in Chinese
            (src / entry.name).write_text(translated_toc(entry.read_text(encoding="utf-8")), encoding="utf-8")
        elif entry.name not in STAGE_SKIP:
            (src / entry.name).symlink_to(entry)
    for en_path in [p for folder in NOTEBOOK_DIRS for p in sorted((ROOT / folder).glob("*.ipynb"))]:
        (src / en_path.parent.name).mkdir(exist_ok=True)
        zh_path = ROOT / ZH["notebooks"] / en_path.parent.name / en_path.name
        en = json.loads(en_path.read_text(encoding="utf-8"))
        nb = json.loads(zh_path.read_text(encoding="utf-8")) if zh_path.exists() else {"cells": []}
        kinds = lambda book: [c["cell_type"] for c in book["cells"]]  # noqa: E731
        if kinds(en) != kinds(nb):
            raise SystemExit(f"{zh_path.relative_to(ROOT)} does not match {en_path.relative_to(ROOT)}: "
                             f"run `make notebooks` (tools/zh_notebooks.py, then execute it)")
        for zh_cell, en_cell in zip(nb["cells"], en["cells"]):
            if zh_cell["cell_type"] == "markdown":
                zh_cell["source"] = en_cell["source"]
        (src / en_path.parent.name / en_path.name).write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    return src


def build_zh(extra: list[str]) -> int:
    """Build the Chinese edition into ``_build/html/zh`` from the Chinese notebooks'
    stored outputs (executing nothing)."""
    config = derived_config(execute="off", language=ZH["language"], title=ZH["title"],
                            path_to_book=ZH["notebooks"], author=ZH["author"], sphinx_config=ZH["sphinx"])
    src = stage_zh_sources()
    work = BUILD / "zh-build"
    env = dict(os.environ, ATTNLIB_LANG="zh")
    env.setdefault("ATTNLIB_I18N_STRICT", "1")  # a missing translation fails the build
    rc = subprocess.call([jupyter_book(), "build", str(src), "--config", str(config),
                          "--path-output", str(work), *extra], cwd=ROOT, env=env)
    if rc:
        return rc
    target = BUILD / "html" / ZH["path"]
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(work / "_build" / "html", target)
    # the download button gives the page's source: the Chinese notebook itself (prose and all)
    for nb in [p for folder in NOTEBOOK_DIRS for p in sorted((ROOT / ZH["notebooks"] / folder).glob("*.ipynb"))]:
        shutil.copyfile(nb, target / "_sources" / nb.parent.name / nb.name)
    # GitHub Pages serves the site's root 404.html for every missing address, zh/ included;
    # a second one under zh/ would never be served (and its absolute links are the root's)
    (target / "404.html").unlink(missing_ok=True)
    print(f"\nThe Chinese edition is in {target.relative_to(ROOT)}/")
    return 0


def build_en_stored(extra: list[str]) -> int:
    """Build the English edition into ``_build/html`` from the notebooks' stored outputs
    and widget state, executing nothing."""
    config = derived_config(execute="off", name="en-stored")
    return subprocess.call([jupyter_book(), "build", str(ROOT), "--config", str(config), *extra], cwd=ROOT)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["gettext", "update-po", "zh", "en-stored"])
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="arguments for jupyter-book build")
    a = ap.parse_args()
    if a.what == "gettext":
        return gettext()
    if a.what == "update-po":
        return update_po()
    extra = [x for x in a.extra if x != "--"]
    if a.what == "en-stored":
        return build_en_stored(extra)
    return build_zh(extra)


if __name__ == "__main__":
    sys.exit(main())
