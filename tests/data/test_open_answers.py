"""Open answers: annotation answer types, verifiers on hand cases, the accuracy and format rewards' dispatch."""
import json

import pytest
import torch

from mmrl.data.annotations import load_samples, sample_to_item
from mmrl.data.schema import Sample, Trajectory
from mmrl.errors import DataError
from mmrl.rewards import RewardContext, compute_rewards
from mmrl.rewards.base import RewardSpec
from mmrl.rewards.verifiers import extract_answer, list_exact, list_f1, normalize, number, text_exact, verify


def _write(tmp_path, items):
    (tmp_path / "img.png").write_bytes(b"x")
    p = tmp_path / "a.json"
    p.write_text(json.dumps([{"image": "img.png", "question": "q", **it} for it in items]))
    return str(p)


def test_answer_types_load_and_round_trip(tmp_path):
    path = _write(tmp_path, [
        {"answer_type": "text", "answer": "a red ball"},
        {"answer_type": "number", "answer": 3},
        {"answer_type": "list", "answer": ["cat", "dog"], "candidates": ["cat", "dog", "cow"]},
        {"candidates": ["x", "y"], "answer": "y"},
    ])
    s, skipped = load_samples(path)
    assert not skipped
    assert [x.answer_type for x in s] == ["text", "number", "list", "choice"]
    assert s[1].answer == 3.0 and s[2].answer == ["cat", "dog"] and s[0].candidates == []
    assert s[3].expected_letter == "B" and s[0].expected_letter is None
    with pytest.raises(ValueError, match="text answer"):
        s[0].answer_index
    item = sample_to_item(s[1], str(tmp_path))
    assert item["answer_type"] == "number" and item["answer"] == 3.0
    assert "answer_type" not in sample_to_item(s[3], str(tmp_path))


@pytest.mark.parametrize("item, field", [
    ({"answer_type": "essay", "answer": "x"}, "answer_type"),
    ({"answer_type": "number", "answer": "three"}, "answer"),
    ({"answer_type": "number", "answer": True}, "answer"),
    ({"answer_type": "list", "answer": []}, "answer"),
    ({"answer_type": "text", "answer": "  "}, "answer"),
    ({"answer_type": "text"}, "answer"),
    ({"answer": "x"}, "candidates"),
])
def test_bad_open_answers_name_the_field(tmp_path, item, field):
    with pytest.raises(DataError, match=field):
        load_samples(_write(tmp_path, [item]))


def test_verifiers_on_hand_cases():
    assert extract_answer("think <answer> Blue </answer>") == "Blue"
    assert extract_answer(r"so \boxed{1} then \boxed{42}") == "42"
    assert normalize("The  Red, ball!") == "red ball"
    assert text_exact("<answer>the red ball.</answer>", "Red ball") == 1.0
    assert text_exact("red balls", "red ball") == 0.0 and text_exact("", "x") == 0.0
    assert number("about 3.02 objects", 3) == 1.0 and number("3.1", 3) == 0.0
    assert number("1,000", 1000) == 1.0 and number("none", 3) == 0.0
    assert number("3.1", 3, rel_tol=0.05) == 1.0
    assert list_f1("cat, dog", ["dog", "cat"]) == 1.0
    assert list_f1("cat; cow", ["cat", "dog"]) == pytest.approx(0.5)
    assert list_f1("bird", ["cat"]) == 0.0
    assert list_exact("cat\ndog", ["cat", "dog"]) == 1.0 and list_exact("cat", ["cat", "dog"]) == 0.0


def _ctx(sample, text, truncated=False, expected=None):
    t = Trajectory(sample_id=sample.id, group_id=0, view="original", role="anchor", prompt_ids=torch.zeros(1),
                   response_ids=torch.ones(2, dtype=torch.long), logprobs=torch.zeros(2),
                   loss_mask=torch.ones(2, dtype=torch.bool), text=text, truncated=truncated)
    return RewardContext(sample=sample, trajectory=t, candidates=list(sample.candidates), expected=expected)


def test_accuracy_and_format_dispatch_on_answer_type():
    num = Sample(id="n", question="q", candidates=[], answer=4.0, answer_type="number")
    lst = Sample(id="l", question="q", candidates=[], answer=["cat", "dog"], answer_type="list")
    mc = Sample(id="c", question="q", candidates=["x", "y"], answer="y")
    ctx = [_ctx(num, "<answer>4</answer>"), _ctx(num, "5"), _ctx(lst, "cat"), _ctx(mc, "B", expected="B"),
           _ctx(num, "<answer>4</answer>", truncated=True)]
    comps, total = compute_rewards([RewardSpec("accuracy", 1.0, {}), RewardSpec("format", 0.1, {})], ctx)
    assert comps["accuracy"] == [1.0, 0.0, pytest.approx(2 / 3), 1.0, 1.0]
    assert comps["format"] == [1.0, 1.0, 1.0, 1.0, 0.0]
    strict, _ = compute_rewards([RewardSpec("accuracy", 1.0, {"verifier": "list_exact"})], [_ctx(lst, "cat")])
    assert strict["accuracy"] == [0.0]
    assert verify(None, "B", mc, letters="AB", expected="B") == 1.0
