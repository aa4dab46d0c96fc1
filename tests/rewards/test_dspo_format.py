"""DSPO's four-step parser: well-formed responses and every malformed case, counted by reason, never raising."""
import pytest

from mmrl.rewards.dspo_format import REASONS, count_reasons, dspo_prompt, parse_dspo

GOOD = (r"<step1>the dark sky \bboxed{[0.1, 0.2, 0.5, 0.6]}</step1><step2>a viewer feels low</step2>"
        r"<step3>\list{Sadness, fear, gloom}</step3><step4>\boxed{sadness}</step4>")


def test_well_formed():
    p = parse_dspo(GOOD, k=3)
    assert p.ok and p.reason is None
    assert p.box == (0.1, 0.2, 0.5, 0.6)
    assert p.candidates == ["sadness", "fear", "gloom"]
    assert [GOOD[a:b] for a, b in p.candidate_spans] == ["Sadness", "fear", "gloom"]
    assert p.choice == "sadness" and p.evidence == "the dark sky" and p.reflection == "a viewer feels low"
    assert "\\list{" in dspo_prompt(5) and "5 candidate" in dspo_prompt(5)


@pytest.mark.parametrize("text,reason", [
    (GOOD.replace("<step2>", "<stepX>"), "missing_step"),
    ("<step2>r</step2>" + GOOD.replace("<step2>a viewer feels low</step2>", ""), "step_order"),
    (GOOD.replace(r"\bboxed{[0.1, 0.2, 0.5, 0.6]}", ""), "no_box"),
    (GOOD.replace("0.5, 0.6", "0.5"), "bad_box"),
    (GOOD.replace("0.5, 0.6", "1.5, 0.6"), "bad_box"),
    (GOOD.replace("0.1, 0.2, 0.5", "0.5, 0.2, 0.1"), "bad_box"),
    (GOOD.replace("0.1, 0.2", "a, b"), "bad_box"),
    (GOOD.replace(r"\list{Sadness, fear, gloom}", "sadness fear"), "no_list"),
    (GOOD.replace("fear, gloom", "fear"), "bad_list_size"),
    (GOOD.replace("fear, gloom", "fear, "), "bad_list_size"),
    (GOOD.replace("fear, gloom", "fear, sadness"), "duplicate_candidate"),
    (GOOD.replace(r"\boxed{sadness}", "sadness"), "no_choice"),
    (GOOD.replace(r"\boxed{sadness}", r"\boxed{ }"), "no_choice"),
    ("", "missing_step"),
    ("<step1>" * 50, "missing_step"),
])
def test_malformed_reasons(text, reason):
    p = parse_dspo(text, k=3)
    assert p.ok is False and p.reason == reason and reason in REASONS


def test_truncated_and_counting():
    ps = [parse_dspo(GOOD, 3, truncated=True), parse_dspo("", 3), parse_dspo("junk", 3), parse_dspo(GOOD, 3)]
    assert count_reasons(ps) == {"truncated": 1, "missing_step": 2}
    assert ps[0].ok is False
    assert parse_dspo(GOOD).ok  # k not required


@pytest.mark.parametrize("box,ok", [
    ("0.1, 0.2, 0.5, 0.6", True),
    ("0.5, 0.2, 0.5, 0.6", False),  # zero height (ymin == ymax)
    ("0.1, 0.6, 0.5, 0.6", False),  # zero width (xmin == xmax)
    ("0.3, 0.3, 0.3, 0.3", False),  # a point
    ("0, 0, 1, 1", True), ("0.0, 0.999, 1.0, 1.0", True),  # the whole image; a sliver
    ("0.6, 0.2, 0.5, 0.6", False), ("0.1, 0.7, 0.5, 0.6", False),  # reversed
])
def test_a_box_needs_a_positive_area(box, ok):
    p = parse_dspo(GOOD.replace("0.1, 0.2, 0.5, 0.6", box), k=3)
    assert p.ok == ok and (ok or p.reason == "bad_box")
