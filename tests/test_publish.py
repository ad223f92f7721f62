"""`make publish` against a local bare repository: the gh-pages branch holds the site
(index, every page of the book in English and under zh/ in Chinese, the vendored scripts,
.nojekyll, sitemap, 404 page) and
nothing of the source tree. Runs after the book is built (a site test): `make publish-site`,
the step of `make publish` that pushes, publishes the site that `make test` built (and that
the browser tests read meanwhile: `make publish` would build it again first)."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"


def _toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part.get("chapters", [])]
    return [f"{f}.html" for f in files]


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    if not (SITE / "index.html").is_file():
        if os.environ.get("ATTNLIB_REQUIRE_SITE") == "1":
            pytest.fail("no built site: run `make book` first", pytrace=False)
        pytest.skip("no built site: run `make book` first")
    bare = tmp_path_factory.mktemp("remote") / "course.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    before = subprocess.run(["git", "branch", "--list"], cwd=ROOT, capture_output=True, text=True).stdout
    run = subprocess.run(["make", "--no-print-directory", "publish-site", f"PUBLISH_REMOTE={bare}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    after = subprocess.run(["git", "branch", "--list"], cwd=ROOT, capture_output=True, text=True).stdout
    assert before == after, "make publish changed the source repository's branches"
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", "gh-pages"], cwd=bare,
                           capture_output=True, text=True, check=True).stdout.split()
    return bare, set(files)


def test_gh_pages_holds_every_page_of_the_book(published):
    _, files = published
    missing = [p for p in _toc_pages() if p not in files]
    assert not missing, f"pages missing from gh-pages: {missing}"
    for extra in (".nojekyll", "search.html", "404.html", "sitemap.xml", "_static/favicon.svg"):
        assert extra in files, f"{extra} is not published"


def test_gh_pages_holds_the_chinese_edition(published):
    _, files = published
    missing = [f"zh/{p}" for p in _toc_pages() if f"zh/{p}" not in files]
    assert not missing, f"Chinese pages missing from gh-pages: {missing}"
    for extra in ("zh/search.html", "zh/searchindex.js", "zh/_static/vendor/mathjax/tex-mml-chtml.js"):
        assert extra in files, f"{extra} is not published"


def test_gh_pages_holds_the_vendored_assets(published):
    _, files = published
    for asset in ("_static/vendor/mathjax/tex-mml-chtml.js", "_static/vendor/requirejs/require.js",
                  "_static/vendor/html-manager/embed-amd.js"):
        assert asset in files, f"{asset} is not published: the site would need the network"


def test_gh_pages_holds_nothing_of_the_source_tree(published):
    _, files = published
    top = {f.split("/")[0] for f in files}
    leaked = top & {"attnlib", "tests", "tools", "benchmarks", "Makefile", "README.md", "pyproject.toml",
                    "requirements.txt", "_config.yml", "_toc.yml", ".venv", "node_modules", "site_assets",
                    ".github", "postBuild"}
    assert not leaked, f"source files published: {sorted(leaked)}"
    # the download copies of the notebooks, of each edition, live in _sources/
    assert not [f for f in files if f.endswith(".ipynb") and not re.match(r"(zh/)?_sources/", f)]


def test_the_commit_says_which_source_it_was_built_from(published):
    bare, _ = published
    msg = subprocess.run(["git", "log", "-1", "--format=%s", "gh-pages"], cwd=bare,
                         capture_output=True, text=True, check=True).stdout
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert head in msg, msg
