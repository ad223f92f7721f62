"""The language of the text attnlib shows: English (default) or Chinese (中文).

Quiz questions and feedback, exercise prompts, checker verdicts and mistake messages,
explorer labels and figure titles are written in English in attnlib and translated where
they are shown, from the gettext catalogues ``attnlib/i18n/locales/zh_CN/LC_MESSAGES/*.po``
(read with Babel). Code, identifiers and numbers stay as they are.

Choose the language with the environment variable ``ATTNLIB_LANG`` (``en`` or ``zh``,
read at import) or at run time::

    >>> import attnlib as al
    >>> al.set_language("zh")
    >>> al.tr("Not quite.")
    '不对。'

Inside attnlib a message is marked the gettext way: ``_("case {i} of {n}").format(i=..., n=...)``
where it is shown (the template is looked up, then filled in), ``N_("...")`` where a text
is defined but shown later through ``_()``/``tr()``. The lookup is exact. A text already
in the target language (Chinese characters, not an English message: a Chinese
notebook's own quiz or figure title) passes unchanged. An English text without a
translation raises :class:`MissingTranslation` when ``ATTNLIB_I18N_STRICT=1`` (the book's
Chinese build) and otherwise warns once and shows the English. ``tools/i18n_extract.py``
(``make gettext``) extracts the messages with Babel (docs/translating.md).

In Chinese, figures are translated as they are drawn (titles, axis labels, legends and
text annotations of every figure a notebook shows or saves, looked up exactly) and
matplotlib is given a CJK font when one is installed.
"""
from __future__ import annotations

import functools
import os
import pathlib
import re
import warnings

__all__ = ["LANGUAGES", "MissingTranslation", "data_text", "get_language", "set_language", "tr"]

LANGUAGES = {"en": "English", "zh": "中文"}
_LOCALE_DIRS = {"zh": "zh_CN"}
LOCALES = pathlib.Path(__file__).parent / "locales"
_SCRIPT = {"zh": re.compile(r"[\u3400-\u9fff]")}   # a text in this script is already translated

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

def translations(path: pathlib.Path) -> dict[str, str]:
    """The translated entries of one ``.po`` file, ``{msgid: msgstr}`` (untranslated and
    fuzzy entries left out, as msgfmt leaves them out of a ``.mo``)."""
    from babel.messages.pofile import read_po

    with open(path, "rb") as f:
        catalog = read_po(f)
    return {m.id: m.string for m in catalog if m.id and m.string and not m.fuzzy}


class Catalogue(dict):
    """The translations of one language, ``{msgid: msgstr}``, from all its ``.po`` files."""

    lookup = dict.get


@functools.lru_cache(maxsize=None)
def catalogue(lang: str) -> Catalogue:
    """The loaded catalogue of ``lang`` (cached; :func:`reload` after editing a ``.po``)."""
    found = Catalogue()
    for path in sorted((LOCALES / _LOCALE_DIRS[_normalise(lang)] / "LC_MESSAGES").rglob("*.po")):
        found.update(translations(path))
    return found


def reload() -> None:
    """Forget the loaded catalogues (after editing a ``.po`` file)."""
    catalogue.cache_clear()


def tr(text: str) -> str:
    """``text`` in the current language: its entry in the catalogue.

    Args:
        text: an English message exactly as the catalogue has it (a template such as
            ``"case {i} of {n}"`` before ``.format``).

    Returns:
        the translation; ``text`` itself in English, when it has no letters to translate
        (numbers, symbols), or when it is already in the current language.

    Raises:
        MissingTranslation: no translation exists and ``ATTNLIB_I18N_STRICT=1``.
    """
    lang = _state["lang"]
    if lang == "en" or not isinstance(text, str) or not re.search(r"[A-Za-z]{2}", text):
        return text
    found = catalogue(lang).get(text)
    if found is not None:
        return found
    if _SCRIPT[lang].search(text):
        return text  # already translated (a Chinese notebook's own text)
    hint = ("mark it with _() or N_() in attnlib, run `make gettext update-po` and fill in its msgstr "
            "(docs/translating.md)")
    if _strict():
        raise MissingTranslation(f"no {LANGUAGES[lang]} translation of {text!r}: {hint}")
    if text not in _state["warned"]:
        _state["warned"].add(text)
        warnings.warn(f"no {LANGUAGES[lang]} translation of {text!r}; showing the English", stacklevel=2)
    return text


_ = tr  # the conventional gettext name inside attnlib: _("...").format(...)


def N_(text: str) -> str:  # noqa: N802 - gettext's "no-op" marker
    """Mark ``text`` for extraction without translating it now (it is translated where it
    is shown, by ``_()``/``tr()``)."""
    return text


def join_sentences(first: str, second: str) -> str:
    """Two sentences as one text: ``"Title. Message"`` in English, ``"标题。消息"`` in Chinese."""
    return f"{first}{'。' if _state['lang'] == 'zh' else '. '}{second}"


# the locale whose conventions (list separators) a language follows (Babel's CLDR data)
_LOCALES = {"en": "en", "zh": "zh_CN"}


def join_list(items) -> str:
    """``items`` (as text) listed the current language's way, without a final "and":
    ``1, 2, 4`` in English, ``1、2、4`` in Chinese (CLDR's list separator, from Babel)."""
    from babel import Locale

    middle = Locale.parse(_LOCALES[_state["lang"]]).list_patterns["standard"]["middle"]
    return middle.format("", "").join(str(item) for item in items)


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


def data_text(artist):
    """Mark a matplotlib text ``artist`` as data, drawn as it is in every language (a quoted
    passage, a generated sample); :func:`translate_figure` leaves it alone. Returns it.

    Example::

        >>> al.i18n.data_text(ax.text(0, 1, sample))
    """
    artist._attnlib_data = True
    return artist


def translate_figure(fig) -> None:
    """Translate, in place, every worded text of ``fig`` (see :func:`_figure_texts`), and
    the fixed tick labels that are catalogued (bar names; tick labels that are data, such
    as the tokens of an example sentence, stay as they are)."""
    from matplotlib.ticker import FixedFormatter, FuncFormatter

    for text in _figure_texts(fig):
        if getattr(text, "_attnlib_data", False):
            continue   # data drawn as it is (a generated sample): see data_text
        s = text.get_text()
        # an axis label survives ax.clear(): translate whatever it says now, unless it is
        # the translation this function put there
        if s and getattr(text, "_attnlib_shown", None) != s:
            shown = tr(s)
            text.set_text(shown)
            text._attnlib_shown = shown
    known = catalogue(_state["lang"]).get
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
