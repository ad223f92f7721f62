"""attnlib.ui.columns: padding by display width, so that printed tables line up in Chinese."""
from __future__ import annotations

import doctest

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnlib.ui import columns
from attnlib.ui.columns import pad, width


@pytest.mark.parametrize("text, columns_", [
    ("", 0), ("loss", 4), ("损失", 4), ("（种子）", 8), ("头 0：前一 token", 16),
    ("e\u0301", 1),                 # e + a combining acute accent: one column
    ("a\u200bb", 2),                # a zero-width space takes none
    ("1.5–2 ×√d_k…", 12),           # ambiguous-width symbols draw narrow in a Latin font
    ("ｑｋ", 4),                     # full-width Latin letters are wide
])
def test_width_counts_display_columns(text, columns_):
    assert width(text) == columns_


@pytest.mark.parametrize("align, want", [("<", "均匀  |"), (">", "  均匀|"), ("^", " 均匀 |")])
def test_pad_aligns_by_columns(align, want):
    assert pad("均匀", 6, align) + "|" == want


def test_pad_leaves_wider_text_whole_and_refuses_bad_arguments():
    assert pad("第 1 层的另一个头", 4) == "第 1 层的另一个头"
    with pytest.raises(ValueError, match="align"):
        pad("x", 4, "left")
    with pytest.raises(ValueError, match="fill"):
        pad("x", 4, fill="。")


def test_a_table_of_chinese_labels_lines_up_where_a_format_spec_does_not():
    """The motivating case (chapter 7's ablation table): the value column starts at one
    display column for every row with pad, at several with the format spec."""
    labels = ["无", "前一 token 头", "第 1 层的另一个头", "第 2 层的头 0"]
    by_pad = [f"{pad(s, 20)} 消融后：0.4–0.7" for s in labels]
    by_spec = [f"{s:20s} 消融后：0.4–0.7" for s in labels]
    start = lambda line: width(line[:line.index("消融后")])  # noqa: E731
    assert {start(line) for line in by_pad} == {21}
    assert len({start(line) for line in by_spec}) > 1


@given(st.text(alphabet=st.sampled_from("ab 0注意力：（）–ᵀ\u0301"), max_size=12),
       st.integers(min_value=0, max_value=30), st.sampled_from(["<", ">", "^"]))
def test_padded_text_takes_the_columns_asked_for(text, n, align):
    out = pad(text, n, align)
    assert width(out) == max(n, width(text)) and text in out


def test_doctests():
    assert doctest.testmod(columns).failed == 0


def test_quote_marks_every_line_of_data():
    from attnlib.ui.columns import QUOTE, quote
    assert quote("Ham.\nTo be\n") == f"{QUOTE}Ham.\n{QUOTE}To be\n{QUOTE}"
    assert quote("") == QUOTE
