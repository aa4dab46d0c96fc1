"""Hand-written cases for every answer rule (specs/benchmarks.md: MVBench check_ans, lmms-eval mcq_acc, OVO)."""
import pytest

from mmrl.eval.benchmark_def import ResponseDef
from mmrl.eval.parsers import PARSERS, check_ans, postprocess, score_answer

GT = "(A) Ate the medicine."
NOTEBOOK = ResponseDef(strip=True, first_line_only=True, prefix="(")  # eval/mvbench.yaml's response section


@pytest.mark.parametrize("pred,gt,ok", [
    ("(A) Ate the medicine.", GT, True),
    ("(a)", GT, True),
    ("a", "(a) x", True),              # "a" is a substring of "(a)"
    ("(A).", GT, True),                # dots removed from the prediction's first token
    ("(A)something", GT, True),        # gt_option in pred_option
    ("((a)", GT, True),
    ("(B) Tidied up the blanket.", GT, False),
    ("", GT, True),                    # empty first token: a substring of anything
    (" (B) Tidied", GT, True),         # leading space -> empty first token -> correct
    ("(AB)", GT, False),
])
def test_check_ans_raw(pred, gt, ok):
    assert check_ans(pred, gt) is ok


@pytest.mark.parametrize("response,score", [
    ("A) Ate the medicine.", 1),
    ("A", 1),            # "(A" -> "(a" in "(a)"
    ("A.", 1),
    ("a)", 1),
    ("B) Tidied up the blanket.", 0),
    ("B", 0),
    ("", 1),             # only the prefilled "(" is left, a substring of "(a)"
    ("   ", 1),
    ("\nB)", 0),         # stripped first
    ("A)\nB) no", 1),    # first line only
    ("B)\nA)", 0),
    ("Apple", 0),        # "(apple"
    (None, 0),
])
def test_mvbench_check_ans(response, score):
    assert score_answer("mvbench_check_ans", response, GT, post=NOTEBOOK) == score


def test_postprocess_fields_each_matter():
    assert postprocess("  B) x\nmore ", strip=True, first_line_only=True, prefix="(") == "(B) x"
    assert postprocess("  B) x\nmore ", strip=True, first_line_only=False, prefix="(") == "(B) x\nmore"
    assert postprocess("  B) x\nmore ", strip=False, first_line_only=True, prefix="(") == "(  B) x"
    assert postprocess("B) x\nmore", prefix="") == "B) x\nmore"
    assert postprocess(None, strip=True, prefix="(") is None
    # without the prefix the notebook's "(" is missing: "a)" alone is still a substring of "(a)", "b" is not
    assert score_answer("mvbench_check_ans", "B) x", GT, post=ResponseDef(prefix="")) == 0
    assert score_answer("mvbench_check_ans", "\nA) x", GT, post=ResponseDef(first_line_only=True, prefix="(")) == 1


def test_list_mode_is_exact_element_match():
    assert score_answer("ovo_mcq", "B. A man", "A") == 1  # substring, right for Gemini's string outputs
    assert score_answer("ovo_mcq", "B. A man", "A", as_list=True) == 0  # the Qwen2-VL wrapper's list
    assert score_answer("ovo_mcq", "A", "A", as_list=True) == 1
    assert score_answer("ovo_yes_no", "No.", 0, as_list=True) == 0 and score_answer("ovo_yes_no", "No.", 0) == 1


@pytest.mark.parametrize("response,gold,score", [
    ("A", "A", 1),
    ("A. The man", "A", 1),
    ("B. A man", "A", 0),              # the ^[A-E]\. rule wins
    ("a", "A", 1),
    ("(A)", "A", 1),
    ("B", "A", 0),
    ("The answer is A", "A", 1),
    ("I think a man runs", "A", 1),    # lenient: the article "a" matches as "A"
    ("I think a man runs", "B", 0),
    ("Best option: (C)", "C", 1),
    ("E. none of them", "E", 1),
    ("", "A", 0),
    (None, "A", 0),
])
def test_lmms_mcq_acc(response, gold, score):
    assert score_answer("lmms_mcq_acc", response, gold) == score


@pytest.mark.parametrize("response,gold,score", [
    ("A", "A", 1),
    ("A \n", "A", 1),
    ("B. A man", "A", 1),   # substring test: the option text contains the gold letter
    ("b", "B", 0),          # case-sensitive
    ("D. \n", "C", 0),
    (None, "A", 0),
    (["A", "B"], "A", 1),   # list responses (official Qwen2-VL files): exact element test
    (["A. x"], "A", 0),
])
def test_ovo_mcq(response, gold, score):
    assert score_answer("ovo_mcq", response, gold) == score


@pytest.mark.parametrize("response,gold,score", [
    ("3", 3, 1),
    ("3 times", 3, 1),
    ("There are 3.", 3, 1),
    ("1 or 2", 12, 1),      # every digit run joined
    ("13", 3, 0),
    ("03", 3, 0),
    ("three", 3, 0),
    ("", 0, 0),
    (None, 3, 0),
])
def test_ovo_rec(response, gold, score):
    assert score_answer("ovo_rec", response, gold) == score


@pytest.mark.parametrize("response,gold,score", [
    ("N", 0, 1), ("No", 0, 1), ("No.", 0, 1), ("Not sure", 0, 1),   # "Not" contains "No"
    ("no", 0, 0), ("Yes", 0, 0), ("Y", 0, 0), (None, 0, 0),
    ("Y", 1, 1), ("Yes", 1, 1), ("Yes, he is", 1, 1),
    ("yes", 1, 0), ("N", 1, 0), ("", 1, 0), (None, 1, 0),
])
def test_ovo_yes_no(response, gold, score):
    assert score_answer("ovo_yes_no", response, gold) == score


@pytest.mark.parametrize("response,score", [
    ("A", 1), ("(A)", 1), ("A.", 1), (" A) x", 1), ("A: x", 1),
    ("B", 0), ("AB", 0), ("The answer is A", 0), ("", 0), (None, 0),
])
def test_strict_letter(response, score):
    assert score_answer("strict_letter", response, "A") == score


def test_registry():
    assert {"mvbench_check_ans", "lmms_mcq_acc", "ovo_mcq", "ovo_rec", "ovo_yes_no", "strict_letter"} <= set(
        PARSERS.names())
    with pytest.raises(KeyError, match="known: .*ovo_mcq"):
        PARSERS.get("nope")
    assert PARSERS.get("mmrl.eval.parsers:ovo_mcq")("A", "A") == 1


def test_rec_list_response_is_an_error():
    from mmrl.errors import DataError

    with pytest.raises(DataError, match="REC response must be a string"):
        score_answer("ovo_rec", ["3"], 3)
