"""Printed tables that line up in both editions: padding by display width.

Python's format specs (``f"{name:12s}"``, ``str.ljust``) pad to a number of *characters*,
but a Chinese character takes two columns of a monospaced font (a notebook's output, a
terminal, the site's ``<pre>``), so a column of Chinese labels padded that way comes out
ragged. :func:`width` counts columns; :func:`pad` pads to a number of columns::

    from attnlib.ui.columns import pad
    print(f"{pad(name, 24)} {loss:6.3f}")      # instead of f"{name:24s} {loss:6.3f}"

Widths follow Unicode's East Asian Width property (``unicodedata``, no dependency): wide
and full-width characters (汉字, ：, （）) take two columns, combining marks and format
characters none, everything else one; "ambiguous" characters (–, ×, √, …) count as one,
as Latin fonts draw them.
"""
from __future__ import annotations

import unicodedata

ALIGNS = ("<", ">", "^")


def char_width(ch: str) -> int:
    """Columns one character takes: 2 (wide, full-width), 0 (combining, format), else 1."""
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def width(text: str) -> int:
    """The number of columns ``text`` (one line) takes in a monospaced font.

    >>> width("loss"), width("损失"), width("头 0：前一 token")
    (4, 4, 16)
    """
    return sum(char_width(ch) for ch in str(text))


def pad(text, columns: int, align: str = "<", fill: str = " ") -> str:
    """``text`` padded with ``fill`` to ``columns`` display columns: ``align`` is ``"<"``
    (left, the default), ``">"`` (right) or ``"^"`` (centred), as in a format spec. Text
    already wider is returned unchanged (as a format spec does), never cut.

    >>> pad("均匀", 6) + "|", pad("uniform", 6) + "|", pad("头 0", 6, ">") + "|"
    ('均匀  |', 'uniform|', '  头 0|')
    """
    if align not in ALIGNS:
        raise ValueError(f"align={align!r}: use one of {ALIGNS} (left, right, centred)")
    if width(fill) != 1:
        raise ValueError(f"fill={fill!r} takes {width(fill)} columns: use one narrow character, such as ' ' or '.'")
    text = str(text)
    gap = max(0, int(columns) - width(text))
    if align == "<":
        return text + fill * gap
    if align == ">":
        return fill * gap + text
    return fill * (gap // 2) + text + fill * (gap - gap // 2)


QUOTE = "│ "   # the mark of a quoted line


def quote(text: str) -> str:
    """``text`` as a quotation: each line prefixed with the mark ``│`` and a space. Data
    printed as it is, such as the plays' text or a generated sample, is shown this way in both
    editions; the Chinese notebooks' check for English (tools/zh_notebooks.py) leaves quoted
    lines alone.

    >>> print(quote("Ham.\\nTo be"))
    │ Ham.
    │ To be
    """
    return "\n".join(QUOTE + line for line in str(text).split("\n"))
