"""The answer-letter parser and the format rule, table-driven (rule in ``mmrl/rewards/parsing.py``)."""
import pytest

from mmrl.rewards.parsing import is_well_formed, parse_choice

PARSE_CASES = [
    # text, letters, expected
    ("B", "ABCD", "B"),
    ("The answer is B.", "ABCD", "B"),
    ("B, not C", "ABCD", "B"),  # the first standing letter, not the last
    ("C or maybe B", "ABCD", "C"),
    ("(C)", "ABCD", "C"),
    ("C)", "ABCD", "C"),
    ("C:", "ABCD", "C"),
    ("Because", "ABCD", None),  # a letter inside a word is not an answer
    ("AB", "ABCD", None),
    ("B2", "ABCD", None),
    ("2B", "ABCD", None),
    ("b", "ABCD", None),  # lower case does not count
    ("E", "ABCD", None),  # not an option of this question
    ("D", "ABC", None),
    ("", "ABCD", None),
    ("nothing here", "ABCD", None),
    ("A", "", None),
    ("I think A. <answer>C</answer>", "ABCD", "C"),  # only the tag's content is read
    ("<answer>C</answer> because A", "ABCD", "C"),
    ("<answer>none</answer> A", "ABCD", None),  # the tag holds no letter: no answer, even if one follows
    ("<answer>\nB\n</answer>", "ABCD", "B"),
    ("<answer>B</answer><answer>C</answer>", "ABCD", "B"),
    ("Option [D] it is", "ABCD", "D"),
]


@pytest.mark.parametrize("text,letters,expected", PARSE_CASES)
def test_parse_choice(text, letters, expected):
    assert parse_choice(text, letters) == expected


WELL_FORMED_CASES = [
    ("B", "ABCD", True),
    ("  B  ", "ABCD", True),
    ("(B)", "ABCD", True),
    ("B.", "ABCD", True),
    ("<answer>B</answer>", "ABCD", True),
    ("<answer> (B). </answer>\n", "ABCD", True),
    ("E", "ABCD", False),  # a capital that is not an option
    ("Z", "ABCD", False),
    ("b", "ABCD", False),
    ("B C", "ABCD", False),
    ("BC", "ABCD", False),
    ("The answer is B", "ABCD", False),
    ("B because", "ABCD", False),
    ("", "ABCD", False),
    ("<answer></answer>", "ABCD", False),
]


@pytest.mark.parametrize("text,letters,expected", WELL_FORMED_CASES)
def test_is_well_formed(text, letters, expected):
    assert is_well_formed(text, letters) is expected
