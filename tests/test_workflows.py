"""The GitHub workflows and the publishing configuration, checked offline.

The workflow files are validated against GitHub's workflow schema (check-jsonschema's
built-in ``vendor.github-workflows`` copy, no network), and their content is checked for
what the README promises: every push and pull request runs the README's test command;
main is tested, built and deployed with the official Pages actions; downloads are cached.
"""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tomllib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())


def _load(name: str) -> dict:
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as True
    return doc


def _pages_url():
    """tools/sphinxext/attnlib_publish.pages_url (the extension is not a package)."""
    sys.path.insert(0, str(ROOT / "tools" / "sphinxext"))
    try:
        from attnlib_publish import pages_url
    finally:
        sys.path.pop(0)
    return pages_url


def _steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def _uses(job: dict) -> list[str]:
    return [s["uses"].split("@")[0] for s in _steps(job) if "uses" in s]


def test_there_are_a_test_and_a_pages_workflow():
    assert {p.name for p in WORKFLOWS} >= {"test.yml", "pages.yml"}, WORKFLOWS


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_is_valid_against_the_github_schema(path):
    exe = pathlib.Path(sys.executable).parent / "check-jsonschema"
    run = subprocess.run([str(exe), "--builtin-schema", "vendor.github-workflows", str(path)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_schema_check_rejects_a_broken_workflow(tmp_path):
    broken = (ROOT / ".github" / "workflows" / "test.yml").read_text().replace("runs-on:", "runs_on:")
    (tmp_path / "broken.yml").write_text(broken)
    exe = pathlib.Path(sys.executable).parent / "check-jsonschema"
    run = subprocess.run([str(exe), "--builtin-schema", "vendor.github-workflows", str(tmp_path / "broken.yml")],
                         capture_output=True, text=True)
    assert run.returncode != 0 and "runs-on" in run.stdout


def test_every_push_and_pull_request_runs_the_readme_test_command():
    wf = _load("test.yml")
    assert "push" in wf["on"] and "pull_request" in wf["on"]
    assert re.search(r"^make test\s", (ROOT / "README.md").read_text(), re.M)
    runs = [s.get("run", "") for job in wf["jobs"].values() for s in _steps(job)]
    assert "make test" in runs, runs
    assert "actions/checkout" in _uses(wf["jobs"]["test"])


def test_downloads_are_cached_by_their_lock_files():
    for name in ("test.yml", "pages.yml"):
        wf = _load(name)
        caches = [s for job in wf["jobs"].values() for s in _steps(job) if s.get("uses", "").startswith("actions/cache@")]
        assert caches, f"{name} caches nothing"
        text = yaml.safe_dump(caches)
        for lock in ("requirements.txt", "package-lock.json"):
            assert lock in text, f"{name}: the cache key does not depend on {lock}"
        assert ".cache/pip" in text and ".npm" in text


def test_main_is_tested_then_built_then_deployed_with_the_official_pages_actions():
    wf = _load("pages.yml")
    assert wf["on"]["push"]["branches"] == ["main"]
    jobs = wf["jobs"]
    assert jobs["test"]["uses"] == "./.github/workflows/test.yml"
    assert "workflow_call" in _load("test.yml")["on"], "pages.yml reuses test.yml, which must allow workflow_call"
    assert jobs["build"]["needs"] == "test" and jobs["deploy"]["needs"] == "build"
    assert "make book" in [s.get("run") for s in _steps(jobs["build"])]
    assert {"actions/configure-pages", "actions/upload-pages-artifact"} <= set(_uses(jobs["build"]))
    upload = next(s for s in _steps(jobs["build"]) if s.get("uses", "").startswith("actions/upload-pages-artifact"))
    assert upload["with"]["path"] == "_build/html"
    assert _uses(jobs["deploy"]) == ["actions/deploy-pages"]
    assert jobs["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
    assert jobs["deploy"]["environment"]["name"] == "github-pages"


def test_package_urls_follow_the_repository_url():
    repo = CONFIG["repository"]["url"].rstrip("/")
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls["Source"] == repo and urls["Issues"] == repo + "/issues"
    assert urls["Changelog"].startswith(repo + "/")
    pages_url = _pages_url()
    assert urls["Homepage"] == pages_url(repo)


def test_pages_url_of_github_repositories():
    pages_url = _pages_url()
    assert pages_url("https://github.com/Ada/attention-course") == "https://ada.github.io/attention-course/"
    assert pages_url("https://github.com/ada/attention-course.git") == "https://ada.github.io/attention-course/"
    assert pages_url("https://github.com/ada/ada.github.io") == "https://ada.github.io/"
    with pytest.raises(ValueError, match="html_baseurl"):
        pages_url("https://gitlab.com/ada/course")


def test_set_repository_updates_config_and_package_urls(tmp_path):
    import shutil
    for name in ("_config.yml", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from set_repository import set_repository
    finally:
        sys.path.pop(0)
    set_repository("https://github.com/Ada/my-course", root=tmp_path)
    config = yaml.safe_load((tmp_path / "_config.yml").read_text())
    assert config["repository"]["url"] == "https://github.com/Ada/my-course"
    assert config["launch_buttons"] == CONFIG["launch_buttons"]  # nothing else changed
    urls = tomllib.loads((tmp_path / "pyproject.toml").read_text())["project"]["urls"]
    assert urls == {"Homepage": "https://ada.github.io/my-course/", "Source": "https://github.com/Ada/my-course",
                    "Issues": "https://github.com/Ada/my-course/issues",
                    "Changelog": "https://github.com/Ada/my-course/blob/main/CHANGELOG.md"}
    readme = (tmp_path / "README.md").read_text()
    old = CONFIG["repository"]["url"]
    assert "https://ada.github.io/my-course/" in readme and "colab.research.google.com/github/Ada/my-course/" in readme
    assert "mybinder.org/v2/gh/Ada/my-course/" in readme and "/".join(old.split("/")[-2:]) not in readme
