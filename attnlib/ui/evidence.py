"""Evidence blocks: a claim's per-seed table, bounds and asserts, collapsed under its finding.

A chapter tells its story in the cells a learner reads: each measuring cell prints the
finding in words and one number. What proves the finding (the range over every seed, the
bound that was asserted, the outside reference) is still printed and checked, but in a
collapsed **evidence block** right under it: a code cell whose body runs inside
``with al.evidence(...)``::

    with al.evidence("the ratio in each of the five seeds"):
        print(per_seed_table)
        assert (ratio > 2).all()

Everything the block prints is shown as one closed ``<details>`` element, "Evidence: <what
it holds>", which every front end renders collapsed: JupyterLab, Colab, GitHub and the
website (and its plain-text form, which strict nbval compares, holds the same lines). If
the block raises (an assert fails), what it printed so far is shown in plain view and the
exception goes on, so the cell fails as it would without the block.

The cell itself is tagged ``evidence`` and starts collapsed too (``tools/run_notebooks.py``
sets this): ``hide-input`` on the site, ``jupyter.source_hidden`` in JupyterLab and
``cellView: form`` on Colab. ``tools/chapter_time.py`` does not count it in a chapter's
reading time, and ``tests/test_notebooks.py`` counts the check lines a chapter prints
outside such blocks (CONTRIBUTING.md, "Evidence blocks").
"""
from __future__ import annotations

import contextlib
import html
import io
import sys

from ..i18n import _

__all__ = ["evidence", "Evidence", "EvidenceView", "CSS_CLASS"]

CSS_CLASS = "attnlib-evidence"


class EvidenceView:
    """What an evidence block shows: a closed ``<details>`` holding the printed lines
    (HTML), and the same lines under their title (plain text)."""

    def __init__(self, text: str, title: str = ""):
        self.text, self.title = text, title

    def _summary(self) -> str:
        return _("Evidence: {what}").format(what=self.title) if self.title else _("Evidence")

    def __repr__(self) -> str:
        return f"{self._summary()}\n{self.text.rstrip()}"

    def _repr_html_(self) -> str:
        # pre-wrap: a long line wraps instead of being clipped on a narrow page
        return (f'<details class="{CSS_CLASS}"><summary>{html.escape(self._summary())}</summary>'
                f'<pre style="white-space: pre-wrap; overflow-wrap: anywhere; margin: 0.4em 0 0 0">'
                f"{html.escape(self.text.rstrip())}</pre></details>")


class Evidence(contextlib.AbstractContextManager):
    """The context manager behind :func:`evidence`: collects what its body prints."""

    def __init__(self, title: str = ""):
        if not isinstance(title, str):
            raise TypeError(f"title must be a short text (what the block holds), got {type(title).__name__}")
        self.title = title
        self._buffer = io.StringIO()
        self._redirect = contextlib.redirect_stdout(self._buffer)

    def __enter__(self):
        self._redirect.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._redirect.__exit__(exc_type, exc, tb)
        text = self._buffer.getvalue()
        if exc_type is not None:  # a failed check: everything in plain view, and the exception goes on
            sys.stdout.write(text)
            return False
        view = EvidenceView(text, self.title)
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:  # no IPython: a terminal shows the plain text
            print(repr(view))
            return False
        if get_ipython() is None:
            print(repr(view))
        else:
            display(view)
        return False


def evidence(title: str = ""):  # -> Evidence, a context manager
    """Collect what a block prints into one collapsed "Evidence" element.

    Args:
        title: what the block holds, a few words ("the range over the five seeds"); shown
            after "Evidence:" in the closed element, in the notebook's language. Default:
            ``""`` (just "Evidence").

    Returns:
        a context manager: ``with al.evidence("..."):`` then the printing and asserting
        lines. On leaving it, the lines are displayed as one closed ``<details>`` element
        (plain text where there is no notebook); if the body raised, they are printed as
        they are and the exception propagates.

    Raises:
        TypeError: ``title`` is not a string.

    Example::

        >>> with al.evidence("every seed"):
        ...     print("seed 0: 1.02")
    """
    return Evidence(title)
