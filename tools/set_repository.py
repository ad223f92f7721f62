"""Point the course at the repository it is published from.

    python tools/set_repository.py https://github.com/OWNER/REPO

Sets ``repository: url`` in ``_config.yml`` (launch buttons, repository button, and the
site's address https://OWNER.github.io/REPO/ derived from it), the project URLs of
``pyproject.toml`` and the README's links (the site, the Colab and Binder badges), and
refreshes the notebooks' setup cell when the tool for it exists.
"""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "sphinxext"))
from attnlib_publish import pages_url  # noqa: E402


def set_repository(url: str, root: pathlib.Path = ROOT) -> None:
    url = url.rstrip("/").removesuffix(".git")
    home = pages_url(url)  # also validates the URL
    config = root / "_config.yml"
    old = re.search(r"(?m)^repository:\s*\n(?:[ \t]+#.*\n)*[ \t]+url:[ \t]*(\S+)", config.read_text())
    text, n = re.subn(r"(?m)^(repository:\s*\n(?:[ \t]+#.*\n)*[ \t]+url:[ \t]*)\S+", rf"\g<1>{url}", config.read_text())
    if n != 1:
        sys.exit("could not find `repository: url:` in _config.yml")
    config.write_text(text)
    pyproject = root / "pyproject.toml"
    urls = {"Homepage": home, "Source": url, "Issues": f"{url}/issues", "Changelog": f"{url}/blob/main/CHANGELOG.md"}
    text = pyproject.read_text()
    for key, value in urls.items():
        text, n = re.subn(rf'(?m)^{key} = ".*"$', f'{key} = "{value}"', text)
        if n != 1:
            sys.exit(f"could not find {key} = ... in pyproject.toml's [project.urls]")
    pyproject.write_text(text)
    readme = root / "README.md"
    if old and readme.exists():  # the old repository's address and site, wherever the README links them
        old_url = old.group(1).rstrip("/").removesuffix(".git")
        text = readme.read_text()
        text = text.replace(pages_url(old_url), home)
        text = text.replace("/".join(old_url.split("/")[-2:]), "/".join(url.split("/")[-2:]))
        readme.write_text(text)
    setup_cell = root / "tools" / "setup_cell.py"
    if setup_cell.exists():
        subprocess.run([sys.executable, str(setup_cell)], cwd=root, check=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    set_repository(sys.argv[1])
    print(f"repository: {sys.argv[1]}; site: {pages_url(sys.argv[1].rstrip('/'))}")
