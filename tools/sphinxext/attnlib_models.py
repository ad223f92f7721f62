"""Sphinx extension: the shipped models' weights on the site, for chapter 13's sentence explorer.

The explorer (``site_assets/attnlib-sentence-explorer.js``, with the forward pass in
``site_assets/attnlib-text-model.js``) runs the model in the reader's browser, so the page
fetches the same two files :func:`attnlib.models.pretrained.load` reads:
``<name>.json`` and ``<name>.bin`` of the installed attnlib's ``models/weights/`` (where
:func:`~attnlib.models.pretrained.load` looks, whatever folder the book is built from) are copied to
``_static/models/`` of every HTML build, the English edition's (``_build/html``) and the
Chinese one's (``tools/editions.py`` builds it with the same extensions and moves it to
``_build/html/zh``), so a chapter's ``../_static/models/shakespeare`` works in both.
They are not listed in ``html_static_path``, which copies a folder's content to the root
of ``_static/``, and they are loaded by that one page only.
"""
from __future__ import annotations

import pathlib
import shutil

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

MODELS = ("shakespeare",)


def copy_weights(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from attnlib.models.pretrained import WEIGHTS
    target = pathlib.Path(app.outdir) / "_static" / "models"
    target.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        for suffix in (".json", ".bin"):
            source = WEIGHTS / (name + suffix)
            if not source.is_file():
                logger.warning(f"{source} is missing: the sentence explorer cannot load the model "
                               f"(`make model` writes it)", type="attnlib", subtype="models")
                continue
            shutil.copyfile(source, target / source.name)


def setup(app: Sphinx) -> dict:
    app.connect("build-finished", copy_weights)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
