"""Sphinx extension: the English and the Chinese edition of the book, from one source.

The Chinese edition is the same book built with ``language = "zh_CN"``: Sphinx replaces
every paragraph, heading, table cell and caption with its translation from
``locales/zh_CN/LC_MESSAGES/<page>.po`` (``tools/editions.py`` runs both builds). This
extension adds what Sphinx does not do by itself:

- **A link to the other edition** in every page's header (the button left of the
  download button), pointing at the same page in the other language, plus a
  ``<link rel="alternate" hreflang=...>`` for search engines. English pages live at the
  site's root, Chinese ones under ``zh/``.
- **Addresses per edition**: ``html_baseurl`` (and so the sitemap and ``og:url``) and the
  404 page's prefix gain ``zh/`` in the Chinese edition.
- **The API reference stays in English**: docstrings are the code's documentation, the
  same text ``help()`` shows in a notebook, so the entries that autodoc generates are not
  offered for translation (the page's own prose is).
- **Raw HTML blocks** (the ``<details><summary>Answer</summary>`` of a hidden answer) are
  translated here, by looking the block up in the page's catalogue. Sphinx's own
  translation of raw nodes (``gettext_additional_targets = ["raw"]``) re-parses them as
  reStructuredText literal blocks (``::``), which MyST pages render as a stray "::"; so the
  setting is used only to *extract* the blocks (``make gettext``) and switched off for the
  HTML build.
- **Search** in Chinese: a query typed without spaces is cut into the words of the index
  (``site_assets/attnlib-search-zh.js``). In both editions a page is listed once in the
  results (``site_assets/attnlib-search.js``: the glossary was listed twice, for a term and
  for its text).
- **The themes' own words** (buttons, tooltips, labels of the page's frame): Sphinx reads
  ``locales/zh_CN/LC_MESSAGES/sphinx.po`` ahead of its own and the pydata theme's
  catalogues; ``booktheme.po`` there is put ahead of sphinx-book-theme's (whose zh_CN
  catalogue predates its current strings); and the attributes the themes write without a
  translation call (``title="Toggle primary sidebar"``, ``aria-label="Main"``, myst-nb's
  ``<summary aria-label="Toggle hidden content">``) are translated from ``sphinx.po`` in
  the written pages. Settings that are text (the author, the search box's placeholder,
  the hidden cells' buttons, the sidebar's captions) are the edition's, from
  ``tools/editions.py``.
- **No punctuation orphaned by maths**: a browser may break a line between an inline
  formula and the full-width punctuation after it, so that "。" starts a line (or "（"
  ends one). In the Chinese edition each inline formula is kept together with the
  punctuation that touches it (``<span class="attnlib-nobr">``, ``white-space: nowrap``
  in ``site_assets/attnlib-edition.css``).
- **Text that attnlib generates at build time** (the mistake catalogue of the
  misconceptions page) is rendered in the edition's language:
  :func:`attnlib.i18n.set_language` is called with it.
"""
from __future__ import annotations

import gettext
import html
import io
import pathlib
import re

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.locale import init as init_locale
from sphinx.transforms import SphinxTransform
from sphinx.util import logging
from sphinx.util.i18n import docname_to_domain

# language code -> (path of the edition under the site's root, label of the link to it)
EDITIONS = {
    "en": ("", "English"),
    "zh_CN": ("zh/", "中文"),
}
TEMPLATES = pathlib.Path(__file__).parent / "templates"
logger = logging.getLogger(__name__)


def edition(language: str | None) -> str:
    """``"zh_CN"`` for a Chinese build, ``"en"`` otherwise."""
    return "zh_CN" if (language or "en").lower().replace("-", "_").startswith("zh") else "en"


def counterpart(language: str | None) -> str:
    return "en" if edition(language) == "zh_CN" else "zh_CN"


def counterpart_url(pagename: str, language: str | None) -> str:
    """Relative URL, from page ``pagename`` of this edition, of the same page in the other.

    >>> counterpart_url("chapters/01_motivation", "en")
    '../zh/chapters/01_motivation.html'
    >>> counterpart_url("chapters/01_motivation", "zh_CN")
    '../../chapters/01_motivation.html'
    >>> counterpart_url("index", "zh_CN")
    '../index.html'
    """
    here, there = EDITIONS[edition(language)][0], EDITIONS[counterpart(language)][0]
    to_site_root = "../" * (pagename.count("/") + here.count("/"))
    return f"{to_site_root}{there}{pagename}.html"


class KeepApiInEnglish(SphinxTransform):
    """Mark the text autodoc generates (inside ``desc`` nodes) as not translatable.

    Runs before Sphinx's ``Locale`` transform (priority 20), so these paragraphs are
    neither extracted by ``make gettext`` nor replaced in the Chinese build.
    """

    default_priority = 10

    def apply(self, **kwargs) -> None:
        for desc in self.document.findall(addnodes.desc):
            for node in desc.findall(nodes.TextElement):
                node["translatable"] = False


class TranslateRawHtml(SphinxTransform):
    """Replace each raw HTML block by its translation from the page's catalogue."""

    default_priority = 21  # just after Sphinx's Locale transform

    def apply(self, **kwargs) -> None:
        if edition(self.config.language) == "en" or not self.config.locale_dirs:
            return
        domain = docname_to_domain(self.env.docname, self.config.gettext_compact)
        dirs = [str(pathlib.Path(self.env.srcdir) / d) for d in self.config.locale_dirs]
        catalog, has_catalog = init_locale(dirs, self.config.language, domain)
        if not has_catalog:
            return
        for node in list(self.document.findall(nodes.raw)):
            if "html" not in node.get("format", "").split():
                continue
            source = node.astext()
            msgstr = catalog.gettext(source)
            if msgstr and msgstr != source:
                node.replace(node.children[0], nodes.Text(msgstr)) if node.children else node.append(nodes.Text(msgstr))
                node.rawsource = msgstr


# full-width punctuation that must not start a line (after a formula) or end one (before it)
CLOSING = "，。、；：！？）」』”’》…"
OPENING = "（「『“‘《"


class KeepMathWithPunctuation(SphinxTransform):
    """In the Chinese edition, wrap each inline formula together with the full-width
    punctuation that touches it (``$x$。``, ``（$x$``) in ``<span class="attnlib-nobr">``,
    so that a line never starts with "。" or ends with "（" because of a formula."""

    default_priority = 800   # after the Locale transform: the Chinese text is in place

    def apply(self, **kwargs) -> None:
        if edition(self.config.language) == "en":
            return
        for math in list(self.document.findall(nodes.math)):
            parent = math.parent
            if parent is None or isinstance(parent, nodes.inline) and "attnlib-nobr" in parent["classes"]:
                continue
            i = parent.index(math)
            after = parent[i + 1] if i + 1 < len(parent) else None
            before = parent[i - 1] if i > 0 else None
            tail = head = ""
            if isinstance(after, nodes.Text):
                tail = re.match(f"[{CLOSING}]*", after.astext()).group(0)
            if isinstance(before, nodes.Text):
                head = re.search(f"[{OPENING}]*$", before.astext()).group(0)
            if not tail and not head:
                continue
            group = nodes.inline(classes=["attnlib-nobr"])
            if head:
                rest = before.astext()[:-len(head)]
                parent.replace(before, nodes.Text(rest)) if rest else parent.remove(before)
                group += nodes.Text(head)
            i = parent.index(math)
            parent.remove(math)
            group += math
            if tail:
                rest = after.astext()[len(tail):]
                parent.replace(after, nodes.Text(rest)) if rest else parent.remove(after)
                group += nodes.Text(tail)
            parent.insert(i, group)


def untranslated_outputs(app: Sphinx, doctree) -> None:
    """Warn (an error under ``-W``) about a notebook output that says attnlib found no
    translation: a ``MissingTranslation`` raised while a figure was flushed after its cell
    does not stop the notebook, but it shows in the output."""
    if edition(app.config.language) == "en":
        return
    for output in doctree.findall(lambda n: isinstance(n, nodes.Element) and "cell_output" in n.get("classes", [])):
        text = output.astext()
        if "no 中文 translation of" in text:
            line = next((s for s in text.splitlines() if "translation of" in s), text[:200])
            logger.warning(f"untranslated text in an output: {line.strip()[:300]}",
                           location=(app.env.docname, output.line))
            return


def extract_raw_only_for_gettext(app: Sphinx) -> None:
    """``gettext_additional_targets = ["raw"]`` for ``make gettext``; off otherwise (see
    :class:`TranslateRawHtml`)."""
    if app.builder.name != "gettext" and "raw" in app.config.gettext_additional_targets:
        app.config.gettext_additional_targets = [t for t in app.config.gettext_additional_targets
                                                 if t != "raw"]


def per_edition_addresses(app: Sphinx, config: Config) -> None:
    if edition(config.language) != "zh_CN":
        return
    path = EDITIONS["zh_CN"][0]
    if config.html_baseurl and not config.html_baseurl.rstrip("/").endswith(path.rstrip("/")):
        config.html_baseurl = config.html_baseurl.rstrip("/") + "/" + path
        if "ogp_site_url" in config:
            config.ogp_site_url = config.html_baseurl
    if "notfound_urls_prefix" in config and config.notfound_urls_prefix:
        config.notfound_urls_prefix = config.notfound_urls_prefix.rstrip("/") + "/" + path


def header_link_style(app: Sphinx) -> None:
    if app.builder.format == "html":
        app.add_css_file("attnlib-edition.css")  # site_assets/: the link on the buttons' row


def header_link(app: Sphinx, config: Config) -> None:
    config.templates_path = [str(TEMPLATES)] + list(config.templates_path or [])
    options = config.html_theme_options
    end = options.get("article_header_end", ["article-header-buttons.html"])
    end = [end] if isinstance(end, str) else list(end)
    if "attnlib-edition-switch.html" not in end:
        options["article_header_end"] = ["attnlib-edition-switch.html"] + end


class _Terms(set):
    """A set that takes a list's ``extend``: what Sphinx's Chinese search calls on it."""

    extend = set.update


def _chinese_search_language():
    """Sphinx 7.4's Chinese search language with the Latin words it has seen in a set.

    Its ``stem`` asks whether each word is among every Latin word split so far, which it keeps
    in a list: a scan per word, and the list grows with the book. A set answers the same
    question at once, and the index is the same (compared byte for byte); the Chinese
    edition's Sphinx build took 36 s of CPU instead of 53 s."""
    from sphinx.search.zh import SearchChinese

    class SearchChineseTermsInASet(SearchChinese):
        def init(self, options: dict) -> None:
            super().init(options)
            self.latin_terms = _Terms()  # (the class's list is shared and never emptied)

    return SearchChineseTermsInASet


def chinese_search(app: Sphinx) -> None:
    """The Chinese edition's query splitter (site_assets/attnlib-search-zh.js): a phrase
    typed without spaces is cut into the words the search index holds. Both editions: each
    page once in the results (site_assets/attnlib-search.js)."""
    if app.builder.format != "html":
        return
    if edition(app.config.language) == "zh_CN":
        app.add_js_file("attnlib-search-zh.js", priority=150)  # before searchtools.js
    app.add_js_file("attnlib-search.js", priority=150)


def _po(app: Sphinx, domain: str):
    """The project's ``<locale_dir>/<language>/LC_MESSAGES/<domain>.po`` (Babel's catalogue),
    or None."""
    from babel.messages.pofile import read_po

    for d in app.config.locale_dirs:
        po = pathlib.Path(app.srcdir, d, app.config.language, "LC_MESSAGES", f"{domain}.po")
        if po.is_file():
            with po.open("rb") as f:
                return read_po(f)
    return None


def theme_catalogue_first(app: Sphinx) -> None:
    """sphinx-book-theme translates its buttons with its own catalogue ("booktheme"), whose
    zh_CN entries predate the strings it shows: the project's ``booktheme.po`` goes first,
    the theme's stays as the fallback."""
    if edition(app.config.language) == "en":
        return
    from sphinx import locale

    from babel.messages.mofile import write_mo

    catalog = _po(app, "booktheme")
    if catalog is None:
        return
    mo = io.BytesIO()
    write_mo(mo, catalog, use_fuzzy=False)
    mo.seek(0)
    ours = gettext.GNUTranslations(mo)
    key = ("general", "booktheme")
    theirs = locale.translators.get(key)
    if theirs is not None and theirs is not ours:
        ours.add_fallback(theirs)
    locale.translators[key] = ours


_ATTRIBUTE = re.compile(r'\b(title|aria-label|alt|placeholder|data-bs-title)="([^"<>]+)"')


def translate_attributes(text: str, catalogue: dict[str, str]) -> str:
    """``text`` (a written page) with each attribute whose value ``catalogue`` has replaced
    by its translation.

    >>> translate_attributes('<nav aria-label="Main"><a title="Main menu">', {"Main": "主导航"})
    '<nav aria-label="主导航"><a title="Main menu">'
    """
    def swap(m: re.Match) -> str:
        new = catalogue.get(html.unescape(m.group(2)))
        return f'{m.group(1)}="{html.escape(new, quote=True)}"' if new else m.group(0)
    return _ATTRIBUTE.sub(swap, text)


def untranslated_attributes(app: Sphinx, exception: Exception | None) -> None:
    """The themes write some attributes in English without a translation call: translate
    them in every written page from the project's ``sphinx.po``."""
    if exception is not None or edition(app.config.language) == "en" or app.builder.format != "html":
        return
    catalog = _po(app, "sphinx")
    if catalog is None:
        return
    catalogue = {m.id: m.string for m in catalog if m.id and m.string and not m.fuzzy}
    for page in pathlib.Path(app.outdir).rglob("*.html"):
        if "_static" in page.relative_to(app.outdir).parts:
            continue
        text = page.read_text(encoding="utf-8")
        new = translate_attributes(text, catalogue)
        if new != text:
            page.write_text(new, encoding="utf-8")


def set_attnlib_language(app: Sphinx, config: Config) -> None:
    import attnlib.i18n

    attnlib.i18n.set_language("zh" if edition(config.language) == "zh_CN" else "en")


def page_context(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    other = counterpart(app.config.language)
    url = counterpart_url(pagename, app.config.language)
    context["attnlib_edition_url"] = url
    context["attnlib_edition_label"] = EDITIONS[other][1]
    context["attnlib_edition_lang"] = "zh-CN" if other == "zh_CN" else "en"
    context["metatags"] = context.get("metatags", "") + (
        f'\n<link rel="alternate" hreflang="{context["attnlib_edition_lang"]}" href="{url}" />')


def setup(app: Sphinx) -> dict:
    app.add_transform(KeepApiInEnglish)
    app.add_transform(TranslateRawHtml)
    app.add_transform(KeepMathWithPunctuation)
    app.connect("builder-inited", extract_raw_only_for_gettext)
    app.connect("doctree-read", untranslated_outputs)
    app.connect("builder-inited", chinese_search)
    app.add_search_language(_chinese_search_language())
    app.connect("builder-inited", header_link_style)
    app.connect("config-inited", per_edition_addresses, priority=110)  # after attnlib_publish
    app.connect("config-inited", header_link)
    app.connect("config-inited", set_attnlib_language)
    app.connect("html-page-context", page_context)
    app.connect("builder-inited", theme_catalogue_first)
    app.connect("build-finished", untranslated_attributes)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
