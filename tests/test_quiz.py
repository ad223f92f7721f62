"""The concept-question widget: one verdict per choice, never a repeated one."""
from __future__ import annotations

import re

import pytest

import attnlib as al


def _feedbacks(page: str) -> list[str]:
    """The text after each verdict, as the reader sees it."""
    return re.findall(r'<b style="color:#[0-9a-f]+">(Correct\.|Not quite\.)</b> ([^<]*)</div>', page)


@pytest.mark.parametrize("lead", ["Right. ", "Right: ", "Correct. ", "correct: ", "Wrong. ", "Not quite. ",
                                  "No: ", "No, ", "Yes. "])
def test_a_verdict_at_the_start_of_the_feedback_is_not_repeated(lead):
    q = al.quiz.question("Is softmax(x + c) = softmax(x)?",
                         [("Yes", True, lead + "the constant cancels."), ("No", False, lead + "try it.")])
    got = _feedbacks(q._repr_html_())
    assert got == [("Correct.", "The constant cancels."), ("Not quite.", "Try it.")]


def test_feedback_that_only_starts_with_a_similar_word_is_kept():
    q = al.quiz.question("Q?", [("a", True, "Nothing changes: c cancels."), ("b", False, "Rightly so, it does not.")])
    assert [f for _, f in _feedbacks(q._repr_html_())] == ["Nothing changes: c cancels.", "Rightly so, it does not."]


def test_text_form_lists_choices_without_the_answer():
    q = al.quiz.question("Pick one", [("first", False, "because."), ("second", True, "since.")])
    text = repr(q)
    assert "A. first" in text and "B. second" in text
    assert "since." not in text and "Correct" not in text
    assert q.answer == "B"


def test_question_without_a_correct_choice_is_refused():
    with pytest.raises(ValueError, match="correct choice"):
        al.quiz.question("Q?", [("a", False, "x"), ("b", False, "y")])


def test_feedback_without_a_verdict_word_is_not_capitalised():
    # "e^x", "torch.where", "tanh" are maths and code: capitalising them changes their meaning
    q = al.quiz.question("Which?", [("a", True, "e^(x - c) / Σ e^(x_j - c) is the same."),
                                    ("b", False, "torch.where stores −∞."),
                                    ("c", False, "No: tanh is elementwise.")])
    page = q._repr_html_()
    assert "e^(x - c)" in page and "E^(x" not in page
    assert "torch.where stores" in page and "Torch.where" not in page
    assert "Tanh is elementwise" in page  # a verdict word was dropped: the rest starts the sentence
