"""Sphinx extension: each bibliography entry is a link target named after its BibTeX key.

A chapter notebook cites with a portable Markdown link that Colab and JupyterLab show as
a plain link, ``[Vaswani et al., 2017](../appendix/bibliography.md#vaswani2017attention)``.
sphinxcontrib-bibtex gives each entry the HTML id ``{key}`` (``bibtex_cite_id`` in
_config.yml); this extension tells MyST about those ids, so that such a link resolves
under ``-n -W`` like a link to a heading, and a link to a key that is not in
references.bib is a build warning (``local id not found``) instead of a dead anchor.
"""
from __future__ import annotations

from docutils import nodes
from sphinx.application import Sphinx


def register_citation_ids(app: Sphinx, doctree: nodes.document) -> None:
    """Add the id of every entry that a ``bibliography`` directive on this page lists to
    the page's MyST slugs (the targets MyST accepts after ``#`` in ``[text](page.md#id)``).

    The entries' citation nodes are only inserted when the page is written, but their
    ids are fixed when the directive runs; the cite domain keeps them.
    """
    env = app.env
    domain = env.get_domain("cite")
    found = {}
    for bib_key, bibliography in domain.bibliographies.items():
        if bib_key.docname != env.docname:
            continue
        for key, node in bibliography.citation_nodes.items():
            for id_ in node["ids"]:
                found[id_] = (bibliography.line, id_, key)
    if found:
        env.metadata[env.docname].setdefault("myst_slugs", {}).update(found)


def setup(app: Sphinx) -> dict:
    app.setup_extension("sphinxcontrib.bibtex")
    app.connect("doctree-read", register_citation_ids)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
