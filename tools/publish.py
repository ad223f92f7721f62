"""Push the built website (_build/html) to the ``gh-pages`` branch of a repository.

    python tools/publish.py [--remote origin] [--site _build/html]

``make publish`` builds the site first and then runs this. The site is committed with
ghp-import in a throwaway repository (so the source repository's own branches are left
alone) with a ``.nojekyll`` file (GitHub Pages would otherwise hide ``_static/``), and
force-pushed to ``gh-pages`` of the remote: a remote name of the source repository
(``origin``), or a URL or path of any repository.
"""
from __future__ import annotations

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def git(*args: str, cwd: pathlib.Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def remote_url(remote: str) -> str:
    """A remote name of this repository becomes its URL; a URL or a path stays as it is."""
    names = git("remote").split()
    if remote in names:
        return git("remote", "get-url", remote)
    path = pathlib.Path(remote)
    return str(path.resolve()) if path.exists() else remote


def check_site(site: pathlib.Path) -> None:
    missing = [p for p in ("index.html", "search.html", "_static") if not (site / p).exists()]
    if missing:
        sys.exit(f"{site} is not a built site (missing {', '.join(missing)}): run `make book` first")


def publish(site: pathlib.Path, remote: str, branch: str = "gh-pages") -> str:
    check_site(site)
    url = remote_url(remote)
    try:
        source = git("rev-parse", "--short", "HEAD")
        dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    except subprocess.CalledProcessError:
        source, dirty = "unknown", ""
    message = f"Publish the course website built from {source}{dirty}"
    ghp_import = shutil.which("ghp-import", path=str(pathlib.Path(sys.executable).parent)) or "ghp-import"
    with tempfile.TemporaryDirectory(prefix="publish-") as tmp:
        work = pathlib.Path(tmp)
        git("init", "-q", cwd=work)
        git("config", "user.name", git("config", "user.name", cwd=ROOT) if _has_identity() else "course publisher", cwd=work)
        git("config", "user.email", git("config", "user.email", cwd=ROOT) if _has_identity() else "publisher@localhost", cwd=work)
        subprocess.run([ghp_import, "--no-jekyll", "--push", "--force", "--branch", branch,
                        "--remote", url, "--message", message, str(site.resolve())],
                       cwd=work, check=True)
    return url


def _has_identity() -> bool:
    try:
        return bool(git("config", "user.name")) and bool(git("config", "user.email"))
    except subprocess.CalledProcessError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--remote", default="origin", help="remote name, URL or path (default: origin)")
    parser.add_argument("--site", default=str(ROOT / "_build" / "html"), help="the built site")
    parser.add_argument("--branch", default="gh-pages")
    args = parser.parse_args()
    url = publish(pathlib.Path(args.site), args.remote, args.branch)
    print(f"Published {args.site} to {url} (branch {args.branch}).")


if __name__ == "__main__":
    main()
