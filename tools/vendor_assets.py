"""Copy the JavaScript the website serves itself from node_modules/ into site_assets/vendor/.

    python tools/vendor_assets.py          # after `npm ci` (the Makefile's `assets` target)

The built site must load nothing from another host, so MathJax 3, require.js and the
Jupyter widgets HTML manager are installed from npm (versions pinned in package.json and
package-lock.json) and served from ``_build/html/_static/vendor/``. Only the files a page
can ask for are copied (MathJax's CHTML output with its fonts and lazily loaded TeX
extensions, menu and accessibility components; the widget manager's AMD bundle and the
icon fonts it references), about 15 MB instead of the 150 MB in node_modules. Each
package's package.json (its version and licence) is copied along. axe-core (the
accessibility checker of the browser tests) is vendored here too, but not published.
"""
from __future__ import annotations

import json
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
NODE = ROOT / "node_modules"
VENDOR = ROOT / "site_assets" / "vendor"

# (package, files or folders inside it, destination folder under vendor/)
COPY = [
    ("requirejs", ["require.js", "package.json"], "requirejs"),
    ("@jupyter-widgets/html-manager", ["dist/embed-amd.js", "dist/*.woff2", "dist/*.woff",
                                       "dist/*.ttf", "dist/*.eot", "dist/*.svg", "package.json"], "html-manager"),
    ("mathjax", ["es5/tex-mml-chtml.js", "es5/input", "es5/output/chtml.js", "es5/output/chtml",
                 "es5/ui", "es5/a11y", "es5/sre", "es5/adaptors", "LICENSE", "package.json"], "mathjax"),
    # for the browser tests only (tests/browser/test_accessibility.py injects it into each
    # page); _config.yml's exclude_patterns keeps it out of the built site
    ("axe-core", ["axe.min.js", "LICENSE", "package.json"], "axe-core"),
]


def version(pkg: str) -> str:
    return json.loads((NODE / pkg / "package.json").read_text())["version"]


def main() -> int:
    missing = [pkg for pkg, _, _ in COPY if not (NODE / pkg / "package.json").is_file()]
    if missing:
        print(f"node_modules lacks {missing}: run `npm ci` first (make assets does)", file=sys.stderr)
        return 1
    if VENDOR.exists():
        shutil.rmtree(VENDOR)
    for pkg, patterns, dest in COPY:
        src_root = NODE / pkg
        for pattern in patterns:
            sources = sorted(src_root.glob(pattern))
            if not sources:
                print(f"{pkg}: nothing matches {pattern!r}", file=sys.stderr)
                return 1
            for src in sources:
                # keep the path below the package's es5/ or dist/ folder
                rel = src.relative_to(src_root)
                rel = pathlib.Path(*rel.parts[1:]) if rel.parts[0] in ("es5", "dist") else rel
                out = VENDOR / dest / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                if src.is_dir():
                    shutil.copytree(src, out)
                else:
                    shutil.copy2(src, out)
    versions = {pkg: version(pkg) for pkg, _, _ in COPY}
    (VENDOR / "VERSIONS.json").write_text(json.dumps(versions, indent=1) + "\n")
    size = sum(p.stat().st_size for p in VENDOR.rglob("*") if p.is_file())
    print(f"site_assets/vendor: {size / 1e6:.1f} MB from {versions}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
