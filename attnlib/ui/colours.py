"""The colours of the HTML attnlib shows (checker verdicts, hints, quizzes, progress,
student answers), in one place.

Text in these colours keeps a contrast of at least 4.5:1 (WCAG 2 AA for normal text) on the
two backgrounds a notebook output is read on: white (JupyterLab, Colab, the website's light
mode) and ``#ced6dd``, the light grey the website's dark mode puts behind every notebook
output (pydata-sphinx-theme's ``--pst-color-text-base``). GitHub's Primer greens, reds and
greys (``#1a7f37``, ``#cf222e``, ``#6e7781``) fell to 3.1-3.6:1 on that grey.
tests/test_colours.py measures every colour attnlib writes, and axe-core checks the pages
(tests/browser/test_accessibility.py).
"""
from __future__ import annotations

__all__ = ["PASSED", "FAILED", "MUTED", "WARNING", "BORDER", "STATUS", "BACKGROUNDS", "contrast"]

PASSED = "#116329"   # green: a check passed, a right answer
FAILED = "#a40e26"   # red: a check failed, a wrong answer
MUTED = "#4d5560"    # grey: not attempted yet, instructions, the next step
WARNING = "#7d4e00"  # amber: the learner's code raised, a hint
BORDER = "#d0d7de"   # the line around a box (not text)

# a check's status (attnlib.exercises) -> the colour of its verdict
STATUS = {"passed": PASSED, "failed": FAILED, "not_attempted": MUTED, "error": WARNING}
# what a notebook output is read on: white, and the website's dark mode's output background
BACKGROUNDS = ("#ffffff", "#ced6dd")


def _luminance(colour: str) -> float:
    rgb = [int(colour.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(foreground: str, background: str) -> float:
    """WCAG 2 contrast ratio of two ``#rrggbb`` colours, from 1 (none) to 21.

    Example::

        >>> round(contrast("#000000", "#ffffff"), 1)
        21.0
    """
    hi, lo = sorted((_luminance(foreground), _luminance(background)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)
