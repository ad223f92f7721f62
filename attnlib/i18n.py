"""The language of the text attnlib shows: English (default) or Chinese (中文).

Quiz questions and feedback, exercise prompts, checker verdicts and mistake messages,
explorer labels and figure titles are written in English in the code (attnlib's and the
chapters') and translated when they are shown, from the message catalogues in
``attnlib/locales/zh_CN/LC_MESSAGES/*.po``. Code, identifiers and numbers stay as they are.

Choose the language with the environment variable ``ATTNLIB_LANG`` (``en`` or ``zh``,
read at import; the Chinese edition of the book is executed with ``ATTNLIB_LANG=zh``) or
at run time::

    >>> import attnlib as al
    >>> al.set_language("zh")
    >>> al.tr("Not quite.")
    '不对。'

A message is looked up as it is; a message that code builds with an f-string
(``f"head {i}: {name}"``) is found through its catalogue entry, a template with named
fields (``"head {i}: {name}"``, flagged ``python-brace-format``), and the values it
carries are put into the translation's fields (a value that is itself a catalogued
message is translated too).

A message without a translation is never shown in English silently: it raises
:class:`MissingTranslation` when ``ATTNLIB_I18N_STRICT=1`` (the book's Chinese build) and
otherwise warns once and shows the English. ``tools/i18n_extract.py`` (``make gettext``)
collects the messages from attnlib and from the chapters' code cells.

In Chinese, figures are translated as they are drawn (titles, axis labels, legends and
text annotations of every figure a notebook shows or saves) and matplotlib is given a
CJK font when one is installed.
"""
from __future__ import annotations

import ast
import functools
import os
import pathlib
import re
import warnings

__all__ = ["LANGUAGES", "MissingTranslation", "get_language", "set_language", "tr"]

LANGUAGES = {"en": "English", "zh": "中文"}
_LOCALE_DIRS = {"zh": "zh_CN"}
LOCALES = pathlib.Path(__file__).parent / "locales"

# fonts that carry CJK glyphs, tried in this order (Debian: fonts-wqy-microhei, fonts-noto-cjk)
CJK_FONTS = ["WenQuanYi Micro Hei", "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC",
             "Microsoft YaHei", "PingFang SC", "SimHei"]


class MissingTranslation(LookupError):
    """A message has no translation in the current language's catalogue."""


def _normalise(lang: str) -> str:
    code = str(lang).strip().lower().replace("-", "_")
    if code in ("", "en", "en_us", "en_gb", "english"):
        return "en"
    if code in ("zh", "zh_cn", "zh_hans", "chinese", "中文"):
        return "zh"
    raise ValueError(f"language {lang!r} is not available: choose one of "
                     f"{', '.join(repr(k) for k in LANGUAGES)} (English or 中文)")


_state = {"lang": "en", "warned": set()}


def get_language() -> str:
    """The current language code: ``"en"`` or ``"zh"``."""
    return _state["lang"]


def set_language(lang: str) -> None:
    """Show attnlib's text in ``lang`` from now on.

    Args:
        lang: ``"en"`` (English) or ``"zh"`` (Chinese; ``"zh_CN"`` and ``"zh-CN"`` too).

    Raises:
        ValueError: ``lang`` is not one of the available languages.
    """
    _state["lang"] = _normalise(lang)
    if _state["lang"] != "en":
        _install_figure_translation()
        _chinese_font()


def _strict() -> bool:
    return os.environ.get("ATTNLIB_I18N_STRICT", "") not in ("", "0", "false", "no")


# ----------------------------------------------------------------------- catalogues

def _unquote(line: str) -> str:
    return ast.literal_eval(line)  # a PO string is a C string; these escapes are Python's too


def read_po(path: pathlib.Path) -> list[dict]:
    """The entries of a PO file: dicts with ``msgid``, ``msgstr`` and ``flags``.

    Enough of the format for the catalogues here: comments, flags, ``msgctxt``, and
    strings continued on following lines (no plural forms)."""
    entries: list[dict] = []
    cur: dict = {"flags": set()}
    field = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        starts_entry = line.startswith(("#,", "msgctxt", "msgid ")) and "msgstr" in cur
        if starts_entry:  # the previous entry is complete
            entries.append(cur)
            cur, field = {"flags": set()}, None
        if line.startswith("#,"):
            cur["flags"].update(f.strip() for f in line[2:].split(","))
        elif line.startswith(("msgctxt ", "msgid ", "msgstr ")):
            field, _, rest = line.partition(" ")
            cur[field] = _unquote(rest)
        elif line.startswith('"') and field:
            cur[field] += _unquote(line)
    if "msgstr" in cur:
        entries.append(cur)
    return [e for e in entries if e.get("msgid")]


_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Catalogue:
    """The translations of one language: exact messages and f-string templates."""

    def __init__(self, lang: str):
        self.exact: dict[str, str] = {}
        self.templates: list[tuple[re.Pattern, str, int]] = []
        folder = LOCALES / _LOCALE_DIRS[lang] / "LC_MESSAGES"
        for path in sorted(folder.rglob("*.po")):
            for e in read_po(path):
                if not e.get("msgstr") or "fuzzy" in e["flags"]:
                    continue  # untranslated or needing review: treated as missing
                if "python-brace-format" in e["flags"] and _FIELD.search(e["msgid"]):
                    literal = len(_FIELD.sub("", e["msgid"]))
                    self.templates.append((_template_pattern(e["msgid"]), e["msgstr"], literal))
                self.exact[e["msgid"]] = e["msgstr"]
        # the most specific template first: more literal text (fields left out), then fewer fields
        self.templates.sort(key=lambda t: (-t[2], t[0].pattern))

    def lookup(self, text: str, depth: int = 0) -> str | None:
        if text in self.exact:
            return self.exact[text]
        for pattern, msgstr, _literal in self.templates:
            m = pattern.fullmatch(text)
            if m:
                values = {k: self._value(v, depth) for k, v in m.groupdict().items()}
                return _FIELD.sub(lambda f: values.get(f.group(1), f.group(0)), msgstr)
        return None

    def _value(self, value: str, depth: int = 0) -> str:
        """A value filled into a template: translated when it is a catalogued message
        (a word such as "vanishes" kept in a variable); numbers, code and data (token
        strings such as 'apple') pass unchanged. ``ATTNLIB_I18N_REPORT=FILE`` lists the
        words that passed unchanged, to find text that should have been catalogued."""
        found = self.exact.get(value.strip())
        if found is None and depth < 2 and re.search(r"[A-Za-z]{2}", value):
            found = self.lookup(value.strip(), depth + 1)  # a value built from another template
        if found is not None:
            return value.replace(value.strip(), found)
        report = os.environ.get("ATTNLIB_I18N_REPORT")
        if report and re.fullmatch(r"\s*[A-Za-z][A-Za-z '-]{2,}\s*", value):
            with open(report, "a", encoding="utf-8") as f:
                f.write(value.strip() + "\n")
        return value


def _template_pattern(msgid: str) -> re.Pattern:
    parts, seen, pos = [], set(), 0
    for m in _FIELD.finditer(msgid):
        parts.append(re.escape(msgid[pos:m.start()]))
        name = m.group(1)
        parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>.+?)")
        seen.add(name)
        pos = m.end()
    parts.append(re.escape(msgid[pos:]))
    return re.compile("".join(parts), re.DOTALL)


@functools.lru_cache(maxsize=None)
def catalogue(lang: str) -> Catalogue:
    """The loaded catalogue of ``lang`` (cached; :func:`reload` after editing a .po)."""
    return Catalogue(_normalise(lang))


def reload() -> None:
    """Forget the loaded catalogues (after editing a ``.po`` file)."""
    catalogue.cache_clear()


def tr(text: str) -> str:
    """``text`` in the current language.

    Args:
        text: an English message, as written in the code (or built from a catalogued
            f-string template).

    Returns:
        the translation; ``text`` itself in English, or when it has no letters to
        translate (numbers, symbols).

    Raises:
        MissingTranslation: no translation exists and ``ATTNLIB_I18N_STRICT=1``.
    """
    lang = _state["lang"]
    if lang == "en" or not isinstance(text, str) or not re.search(r"[A-Za-z]{2}", text):
        return text
    if lang == "zh" and re.search(r"[\u4e00-\u9fff]", text):
        return text  # already Chinese (a Chinese notebook's quiz or figure text): as it is
    found = catalogue(lang).lookup(text)
    if found is not None:
        return found
    hint = ("add it to the catalogue: run `make gettext` and `sphinx-intl update` (see the README, "
            "'Translating'), then fill in its msgstr in attnlib/locales/zh_CN/LC_MESSAGES/")
    if _strict():
        raise MissingTranslation(f"no {LANGUAGES[lang]} translation of {text!r}: {hint}")
    if text not in _state["warned"]:
        _state["warned"].add(text)
        warnings.warn(f"no {LANGUAGES[lang]} translation of {text!r}; showing the English", stacklevel=2)
    return text


def _(text: str) -> str:  # noqa: N802 - the conventional gettext marker inside attnlib
    return tr(text)


def join_sentences(first: str, second: str) -> str:
    """Two sentences as one text: ``"Title. Message"`` in English, ``"标题。消息"`` in Chinese."""
    return f"{first}{'。' if _state['lang'] == 'zh' else '. '}{second}"


def N_(text: str) -> str:  # noqa: N802 - gettext's "no-op" marker
    """Mark ``text`` for the catalogue without translating it now (it is translated
    where it is shown, e.g. as a value filled into a translated template)."""
    return text


# ----------------------------------------------------------------------- figures

def _figure_texts(fig):
    """The texts of a figure that carry words: titles, axis labels, legends, annotations."""
    if fig._suptitle is not None:
        yield fig._suptitle
    if getattr(fig, "_supxlabel", None) is not None:
        yield fig._supxlabel
    if getattr(fig, "_supylabel", None) is not None:
        yield fig._supylabel
    yield from fig.texts
    for ax in fig.axes:
        yield from (ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label)
        yield from ax.texts
        legend = ax.get_legend()
        if legend is not None:
            yield from legend.get_texts()
            if legend.get_title().get_text():
                yield legend.get_title()
    for legend in getattr(fig, "legends", []):
        yield from legend.get_texts()


def translate_figure(fig) -> None:
    """Translate, in place, every worded text of ``fig`` (see :func:`_figure_texts`), and
    the fixed tick labels that are catalogued (bar names; tick labels that are data, such
    as the tokens of an example sentence, stay as they are)."""
    from matplotlib.ticker import FixedFormatter, FuncFormatter

    for text in _figure_texts(fig):
        s = text.get_text()
        # an axis label survives ax.clear(): translate whatever it says now, unless it is
        # the translation this function put there
        if s and getattr(text, "_attnlib_shown", None) != s:
            shown = tr(s)
            text.set_text(shown)
            text._attnlib_shown = shown
    known = catalogue(_state["lang"]).lookup
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            # tick labels given as text (ax.set_xticks(..., labels=...)) are made by a
            # FixedFormatter or FuncFormatter at every draw: wrap it so that what it returns
            # is translated when the catalogue knows it
            fmt = axis.get_major_formatter()
            if isinstance(fmt, (FixedFormatter, FuncFormatter)) and not getattr(fmt, "_attnlib", False):
                def label(x, pos=None, _fmt=fmt):
                    text = _fmt(x, pos)
                    return (known(text) or text) if isinstance(text, str) and text else text
                wrapped = FuncFormatter(label)
                wrapped._attnlib = True
                axis.set_major_formatter(wrapped)


def use_cjk_font() -> str | None:
    """Put the first installed CJK font in front of matplotlib's sans-serif list.

    Returns:
        the font's name, or ``None`` when none is installed (Chinese labels would then
        be drawn as empty boxes; install fonts-wqy-microhei or fonts-noto-cjk).
    """
    from matplotlib import font_manager, rcParams

    installed = {f.name for f in font_manager.fontManager.ttflist}
    if not installed & set(CJK_FONTS):  # installed after matplotlib cached its font list
        font_manager.fontManager = font_manager._load_fontmanager(try_read_cache=False)
        installed = {f.name for f in font_manager.fontManager.ttflist}
    for name in CJK_FONTS:
        if name in installed:
            rcParams["font.sans-serif"] = [name] + [f for f in rcParams["font.sans-serif"] if f != name]
            # a list, so that matplotlib falls back glyph by glyph: the CJK font for Chinese,
            # DejaVu Sans (shipped with matplotlib) for symbols it lacks (ℒ, −, ‖)
            rcParams["font.family"] = [name, "DejaVu Sans"]
            return name
    return None


def _install_figure_translation() -> None:
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return
    if getattr(FigureCanvasBase.print_figure, "_attnlib", False):
        return
    original = FigureCanvasBase.print_figure

    def print_figure(self, *args, **kwargs):
        if _state["lang"] != "en":
            translate_figure(self.figure)
        return original(self, *args, **kwargs)

    print_figure._attnlib = True
    FigureCanvasBase.print_figure = print_figure


def _chinese_font() -> None:
    try:
        found = use_cjk_font()
    except ImportError:  # no matplotlib: no figures to draw
        return
    if found is None:
        warnings.warn("no CJK font is installed: Chinese figure text will show as boxes "
                      "(Debian: apt-get install fonts-wqy-microhei)", stacklevel=3)


if os.environ.get("ATTNLIB_LANG"):
    set_language(os.environ["ATTNLIB_LANG"])
