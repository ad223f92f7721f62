"""Sphinx extension of the course book: pages generated from attnlib itself.

``attnlib-api`` (appendix/api.md) documents the package: the top-level API and then one
section per public module, found by walking the package, so a new module appears in the
reference without anyone editing the page. Functions re-exported by ``attnlib`` are
documented once, under their public name (``attnlib.softmax``), and skipped in their
module's section. Cross-references in docstrings written the short way
(:func:`softmax`, :class:`Question`) resolve to the documented object; references to
private helpers (``_attention``) are shown as code without a link instead of failing the
nitpicky build.

``{section}`text <chapters/04_masking#the-causal-mask>``` links to a section (or any
element) of another page by its HTML id, and warns when the id does not exist.

``attnlib-mistakes`` (appendix/misconceptions.md) ::

    ```{attnlib-mistakes}
    ```

renders every registered exercise (:data:`attnlib.exercises.EXERCISES`), grouped by
chapter in book order, with a link to the chapter's "Self-test exercises" section and
every catalogued mistake (its title and the message the checker gives). The page is
built from the same objects the checker uses, so it cannot drift from the notebooks.
A chapter named by an exercise that is not in the book is a build warning (an error
under ``-W``).
"""
from __future__ import annotations

import importlib
import pathlib
import pkgutil

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import ReferenceRole, SphinxDirective
from sphinx.util.nodes import make_refnode

logger = logging.getLogger(__name__)

EXERCISE_SECTION = "Self-test exercises"


class chapter_link(nodes.Inline, nodes.TextElement):
    """Placeholder for a link to a chapter's exercise section, resolved after reading."""


class MistakeCatalogue(SphinxDirective):
    """``attnlib-mistakes``: every exercise and its catalogued mistakes, by chapter."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        # in the Chinese edition attnlib's catalogue supplies the text (attnlib_i18n sets
        # attnlib's language); Sphinx's own catalogue is not asked (no source = not extracted)
        from attnlib.i18n import join_sentences, tr
        exercises_mod = importlib.import_module("attnlib.exercises")
        for path in pathlib.Path(exercises_mod.__file__).parent.glob("*.py"):
            self.env.note_dependency(str(path))  # rebuild the page when a catalogue changes
        by_chapter: dict[str, list] = {}
        for ex in exercises_mod.EXERCISES.values():
            by_chapter.setdefault(ex.chapter, []).append(ex)
        if not by_chapter:
            para = nodes.paragraph(text=tr("No exercise is registered yet."))
            return [para]
        out: list[nodes.Node] = []
        for chapter in sorted(by_chapter):
            head = nodes.paragraph(classes=["attnlib-mistakes-chapter"])
            head += nodes.strong(text=tr("Exercises of "))
            link = chapter_link(chapter=chapter, source_doc=self.env.docname)
            link.source, link.line = self.get_source_info()
            head += link
            out.append(head)
            exercises = nodes.bullet_list(classes=["attnlib-mistakes"])
            for ex in by_chapter[chapter]:
                item = nodes.list_item(ids=[nodes.make_id(f"exercise-{ex.name}")])
                intro = nodes.paragraph()
                intro += nodes.literal(text=ex.name)
                intro += nodes.Text(f": {tr(ex.prompt)} (")
                where = chapter_link(chapter=chapter, exercise=ex.name)
                where.source, where.line = self.get_source_info()
                intro += where
                intro += nodes.Text(")")
                item += intro
                if ex.mistakes:
                    mistakes = nodes.bullet_list()
                    for m in ex.mistakes:
                        mi = nodes.list_item()
                        p = nodes.paragraph()
                        # the title in bold, then the message, joined as the checker joins them
                        title = tr(m.title).rstrip(".。")
                        p += nodes.strong(text=title)
                        p += nodes.Text(join_sentences(title, tr(m.message))[len(title):])
                        mi += p
                        mistakes += mi
                    item += mistakes
                else:
                    item += nodes.paragraph(text=tr("(No catalogued mistake yet.)"))
                exercises += item
            out.append(exercises)
        return out


def _exercise_anchor(env, docname: str, exercise: str = "") -> tuple[str, str]:
    """``(id, title)`` of the section holding the code cell that checks ``exercise``
    (``al.exercises.check("name", ...)``), else of the chapter's "Self-test exercises"
    section, else ``("", "")``."""
    doctree = env.get_doctree(docname)
    if exercise:
        calls = (f'check("{exercise}"', f"check('{exercise}'")
        for block in doctree.findall(nodes.literal_block):
            if any(c in block.astext() for c in calls):
                parent = block.parent
                while parent is not None and not isinstance(parent, nodes.section):
                    parent = parent.parent
                if parent is not None and parent["ids"]:
                    return parent["ids"][0], parent.next_node(nodes.title).astext()
    for section in doctree.findall(nodes.section):
        title = section.next_node(nodes.title)
        # by its title, or by the id made from the English title (the Chinese edition
        # translates the title but keeps the ids)
        if title is not None and section["ids"] and (title.astext().strip() == EXERCISE_SECTION or
                                                     nodes.make_id(EXERCISE_SECTION) in section["ids"]):
            return section["ids"][0], title.astext()
    return "", ""


def resolve_chapter_links(app: Sphinx, doctree: nodes.document, fromdocname: str) -> None:
    env = app.builder.env
    for node in list(doctree.findall(chapter_link)):
        docname = f"chapters/{node['chapter']}"
        if docname not in env.found_docs:
            logger.warning("an exercise names chapter %r but %s is not in the book",
                           node["chapter"], docname, location=node)
            node.replace_self(nodes.Text(node["chapter"]))
            continue
        title = env.titles[docname].astext() if docname in env.titles else docname
        anchor, section = _exercise_anchor(env, docname, node.get("exercise", ""))
        if node.get("exercise"):
            title = section or title  # the exercise's own section, e.g. "Exercise 1: ..."
        uri = app.builder.get_relative_uri(fromdocname, docname) + (f"#{anchor}" if anchor else "")
        ref = nodes.reference("", "", internal=True, refuri=uri)
        ref += nodes.Text(title)
        node.replace_self(ref)


# ----------------------------------------------------------------------------- API pages

PACKAGE = "attnlib"


def public_modules() -> list[str]:
    """Every importable public module of attnlib (no ``_private`` part, no per-chapter
    exercise catalogues, which the misconceptions page renders), in a stable order."""
    pkg = importlib.import_module(PACKAGE)
    names = []
    for info in pkgutil.walk_packages(pkg.__path__, PACKAGE + "."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts):
            continue
        if parts[:2] == [PACKAGE, "exercises"] and len(parts) > 2:
            continue
        names.append(info.name)
    return sorted(names)


class ApiReference(SphinxDirective):
    """``attnlib-api``: the package's reference, one section per public module."""

    has_content = False

    def _automodule(self, modname: str, exclude: list[str], parent: nodes.Element,
                    no_index: bool = False) -> None:
        # autodoc emits reStructuredText, so its directive runs inside an eval-rst block
        # (this page is MyST Markdown)
        lines = ["```{eval-rst}", f".. automodule:: {modname}", "   :members:"]
        if exclude:
            lines.append(f"   :exclude-members: {', '.join(sorted(exclude))}")
        if no_index:
            lines.append("   :no-index:")
        lines.append("```")
        self.state.nested_parse(StringList(lines, source=f"<attnlib-api {modname}>"),
                                self.content_offset, parent)

    def run(self) -> list[nodes.Node]:
        pkg = importlib.import_module(PACKAGE)
        out: list[nodes.Node] = []
        top = nodes.section(ids=[nodes.make_id(PACKAGE)])
        top += nodes.title(text=f"{PACKAGE} (import attnlib as al)")
        self._automodule(PACKAGE, [], top)
        out.append(top)
        for modname in public_modules():
            mod = importlib.import_module(modname)
            self.env.note_dependency(mod.__file__)
            # objects re-exported at the top level are documented there, once
            exported = [n for n in getattr(pkg, "__all__", []) if getattr(mod, n, None) is getattr(pkg, n)
                        and not isinstance(getattr(pkg, n), type(pkg))]
            sec = nodes.section(ids=[nodes.make_id(modname)])
            sec += nodes.title(text=modname)
            if exported:
                para = nodes.paragraph()
                para += nodes.Text("Documented above as ")
                for i, n in enumerate(exported):
                    if i:
                        para += nodes.Text(", ")
                    para += nodes.literal(text=f"{PACKAGE}.{n}")
                para += nodes.Text(".")
                sec += para
            # attnlib.softmax is both a module and the function re-exported as
            # attnlib.softmax: index only the function (the name readers call)
            clash = modname.rsplit(".", 1)[-1] in getattr(pkg, "__all__", []) and \
                not isinstance(getattr(pkg, modname.rsplit(".", 1)[-1]), type(pkg))
            # a layer's package (attnlib.kernels, attnlib.models, ...) re-exports what its
            # modules define: those members are documented once, in their own module's section
            if hasattr(mod, "__path__"):
                exported += [n for n in getattr(mod, "__all__", [])
                             if getattr(getattr(mod, n, None), "__module__", modname) != modname]
            self._automodule(modname, sorted(set(exported)), sec, no_index=clash)
            out.append(sec)
        # the reference is the code's own documentation (what help() prints): the Chinese
        # edition keeps it in English, so none of it goes into the message catalogues
        for node in out:
            for text in node.findall(nodes.TextElement):
                text["translatable"] = False
        return out


def resolve_short_names(app: Sphinx, env, node, contnode):
    """Resolve ``:func:`softmax``` written inside any attnlib module to the documented
    object (e.g. ``attnlib.softmax``); show references to private helpers as plain code."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip(".~")
    if not target:
        return None
    domain = env.get_domain("py")
    last = target.rsplit(".", 1)[-1]
    candidates = [f"{PACKAGE}.{target}", f"{PACKAGE}.exercises.{target}"]
    modname = node.get("py:module") or ""
    if modname:
        candidates.insert(0, f"{modname}.{target}")
    for name in candidates:
        if name in domain.objects:
            obj = domain.objects[name]
            return make_refnode(app.builder, node["refdoc"], obj.docname, obj.node_id, contnode, name)
    matches = [n for n in domain.objects if n.startswith(PACKAGE + ".") and n.endswith("." + target)]
    if len(matches) == 1:
        obj = domain.objects[matches[0]]
        return make_refnode(app.builder, node["refdoc"], obj.docname, obj.node_id, contnode, matches[0])
    in_attnlib = modname.startswith(PACKAGE) or target.startswith(PACKAGE + ".")
    if not in_attnlib:
        return None
    if any(part.startswith("_") for part in target.split(".")):
        return contnode  # a private helper of attnlib: named in prose, deliberately not documented
    # a module attribute without its own entry (e.g. the EXERCISES dict): link to its module
    for owner in dict.fromkeys(filter(None, [modname, PACKAGE, f"{PACKAGE}.exercises"])):
        try:
            mod = importlib.import_module(owner)
        except ImportError:
            continue
        if hasattr(mod, last) and owner in domain.modules:
            entry = domain.modules[owner]
            return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, owner)
    return None


def dedupe_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    """Drop repeated <script> entries (sphinx-thebe registers its inline configuration
    twice under Jupyter Book, and the second `const` declaration is a page error)."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        # an inline script has filename None or "" depending on who registered it
        key = (getattr(js, "filename", js) or "", tuple(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique  # in place: later handlers and the template share this list


class section_link(nodes.Inline, nodes.TextElement):
    """Placeholder for ``{section}`text <doc#id>``` , resolved once every doc is read."""


class SectionRole(ReferenceRole):
    """``{section}`text <chapters/04_masking#numerics-1e9-and-half-precision>```: a link to
    the element with that HTML id in that document. Unlike a Markdown link with a heading
    slug it also works for headings that contain math; a missing document or id is a
    build warning (an error under ``-W``), so renamed sections cannot rot silently."""

    def run(self):
        docname, _, anchor = self.target.partition("#")
        node = section_link(self.rawtext, docname=docname.strip().lstrip("/"), anchor=anchor.strip(),
                            title=self.title if self.has_explicit_title else "")
        node.source, node.line = self.get_source_info()
        return [node], []


def resolve_section_links(app: Sphinx, doctree: nodes.document, fromdocname: str) -> None:
    env = app.builder.env
    for node in list(doctree.findall(section_link)):
        docname, anchor = node["docname"], node["anchor"]
        if docname not in env.found_docs:
            logger.warning("{section} link to a document that is not in the book: %s", docname, location=node)
            node.replace_self(nodes.Text(node["title"] or docname))
            continue
        ids = {i for n in env.get_doctree(docname).findall(nodes.Element) for i in n.get("ids", [])}
        if anchor and anchor not in ids:
            logger.warning("{section} link: %s has no id %r (ids of its sections: %s)", docname, anchor,
                           ", ".join(sorted(i for i in ids if not i.startswith(("id", "index-"))))[:400],
                           location=node)
        text = node["title"] or (env.titles[docname].astext() if docname in env.titles else docname)
        uri = app.builder.get_relative_uri(fromdocname, docname) + (f"#{anchor}" if anchor else "")
        ref = nodes.reference("", "", internal=True, refuri=uri)
        ref += nodes.Text(text)
        node.replace_self(ref)


def setup(app: Sphinx) -> dict:
    # Load MathJax on every page, not only on pages whose body has math: a chapter title
    # with math ("Why divide by $\\sqrt{d_k}$?") appears in every page's navigation.
    app.set_html_assets_policy("always")
    app.connect("html-page-context", dedupe_scripts, priority=900)  # after every other handler
    app.add_node(chapter_link)
    app.add_directive("attnlib-mistakes", MistakeCatalogue)
    app.add_directive("attnlib-api", ApiReference)
    app.connect("doctree-resolved", resolve_chapter_links)
    app.add_node(section_link)
    app.add_role("section", SectionRole())
    app.connect("doctree-resolved", resolve_section_links)
    app.connect("missing-reference", resolve_short_names)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
