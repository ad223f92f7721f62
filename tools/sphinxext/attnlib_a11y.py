"""Sphinx extension: what the site's theme and extensions write that a screen reader or
axe-core (tests/browser/test_accessibility.py) finds wrong, fixed where it is written.

- **Names that match the visible text** (axe-core's ``label-content-name-mismatch``): the
  theme's search button was named "Search" while it shows "Search Ctrl+K", the colour-mode
  button's icons carried titles ("Light", "Dark") that Font Awesome turns into text, and
  MyST-NB names the summary of a hidden code cell "Toggle hidden content" while it shows
  "Show code cell source". The two theme components are overridden by
  ``templates/a11y/`` (first on the template path); the summary is written here without
  the ``aria-label``, so its name is what it shows.
- **The bibliography's entries** are list items: docutils gives them the role
  ``doc-biblioentry``, which DPUB-ARIA 1.1 deprecates (axe-core: ``aria-deprecated-role``,
  and its list then "has children which are not allowed", ``aria-required-children``).

It also links the course's PDF in the edition's language (``make pdf``, tools/pdf.py) from
every page's download menu, beside the page's own files.
"""
from __future__ import annotations

import pathlib
from html import escape

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config

TEMPLATES = pathlib.Path(__file__).parent / "templates" / "a11y"
# the course as one PDF per edition, at the root of the edition (tools/pdf.py writes them)
PDF_NAMES = {"en": "self-attention-measured.pdf", "zh": "self-attention-measured-zh.pdf"}
PDF_LABEL = {"en": "The whole course (.pdf)", "zh": "整门课程（.pdf）"}


def use_templates(app: Sphinx, config: Config) -> None:
    config.templates_path = [str(TEMPLATES)] + [p for p in (config.templates_path or []) if p != str(TEMPLATES)]


def visit_hidden_cell(self, node) -> None:
    """MyST-NB's ``visit_HideCellInput`` without ``aria-label="Toggle hidden content"``."""
    classes = " ".join(node["classes"])
    self.body.append(f'<details class="admonition hide {classes}">\n<summary>\n')
    self.body.append(f'<p class="collapsed admonition-title">{escape(node["prompt_show"])}</p>\n')
    self.body.append(f'<p class="expanded admonition-title">{escape(node["prompt_hide"])}</p>\n')
    self.body.append("</summary>\n")


def depart_hidden_cell(self, node) -> None:
    self.body.append("</details>\n")


def visit_citation(self, node) -> None:
    """docutils' ``visit_citation`` with the role ``listitem`` (DPUB-ARIA 1.1 deprecated
    ``doc-biblioentry`` in its favour)."""
    if not isinstance(node.previous_sibling(), type(node)):
        self.body.append('<div role="list" class="citation-list">\n')
    self.body.append(self.starttag(node, "div", classes=[node.tagname], role="listitem"))


def depart_citation(self, node) -> None:
    self.body.append("</div>\n")
    if not isinstance(node.next_node(descend=False, siblings=True), type(node)):
        self.body.append("</div>\n")


def edition(language: str | None) -> str:
    return "zh" if (language or "en").lower().startswith("zh") else "en"


def link_the_pdf(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Add the course's PDF to the download menu (sphinx-book-theme's "download-buttons"
    group, filled at priority 501)."""
    lang = edition(app.config.language)
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            group["buttons"].append({
                "type": "link", "url": context["pathto"](PDF_NAMES[lang], 1), "text": PDF_LABEL[lang],
                "tooltip": PDF_LABEL[lang], "icon": "fas fa-book", "label": "download-course-pdf-button",
            })


def setup(app: Sphinx) -> dict:
    from myst_nb.sphinx_ import HideCodeCellNode

    app.setup_extension("myst_nb")
    app.connect("config-inited", use_templates)
    app.connect("html-page-context", link_the_pdf, priority=502)
    app.add_node(HideCodeCellNode, override=True, html=(visit_hidden_cell, depart_hidden_cell))
    app.add_node(nodes.citation, override=True, html=(visit_citation, depart_citation))
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
