"""The reasoning span for the synthetic video world's SFT targets and its format reward (FastRL's bench world)."""
import json

import pytest
import torch

from mmrl.data.reasoning import add_reasoning_targets, reasoning_target
from mmrl.rewards.parsing import parse_choice


def test_every_qtype_reasons_then_answers_its_gold_letter(video_world, tiny_model_path, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    items = json.loads((video_world / "train.json").read_text())
    assert {it["qtype"] for it in items} == {"color", "count", "location", "direction", "order"}
    for it in items:
        text = reasoning_target(it)
        letter = "ABCDEFGH"[it["candidates"].index(it["answer"])]
        assert text.endswith(f"<answer>{letter}</answer>") and parse_choice(text, "ABCD") == letter
        assert it["answer"] in text or it["qtype"] == "count"  # counts are spelled out
        assert len(tok.encode(text)) >= 32, text
    path = tmp_path / "train.json"
    path.write_text(json.dumps(items))
    assert add_reasoning_targets(str(path)) == len(items)
    stored = json.loads(path.read_text())
    assert all(s["meta"]["sft_response"] == reasoning_target(it) for s, it in zip(stored, items))
    assert stored[0]["meta"]["seed"] == items[0]["meta"]["seed"]  # the world's own meta is kept


def test_answer_first_opens_with_the_gold_letter_and_still_ends_with_the_tag(video_world, tiny_model_path, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    items = json.loads((video_world / "train.json").read_text())
    for it in items:
        text = reasoning_target(it, answer_first=True)
        letter = "ABCDEFGH"[it["candidates"].index(it["answer"])]
        assert text == f"{letter}. {reasoning_target(it)}"
        assert tok.decode(tok.encode(text)[:1]) == letter  # the first token is the decision
        assert parse_choice(text, "ABCD") == letter and len(tok.encode(text)) >= 32
    path = tmp_path / "train.json"
    path.write_text(json.dumps(items))
    add_reasoning_targets(str(path), answer_first=True)
    assert [s["meta"]["sft_response"][:2] for s in json.loads(path.read_text())] == [
        "ABCDEFGH"[it["candidates"].index(it["answer"])] + "." for it in items]


def test_bad_answer_names_the_sample():
    with pytest.raises(ValueError, match="sample 'x-1'"):
        reasoning_target({"id": "x-1", "qtype": "color", "candidates": ["red"], "answer": "blue", "meta": {}})


@pytest.mark.parametrize("text,truncated,want", [
    ("I watch the video. So the answer is option B. <answer>B</answer>", False, 1.0),
    ("I watch. <answer> (C) </answer>  ", False, 1.0),
    ("<answer>B</answer>", False, 0.0),  # no reasoning before the answer
    ("I watch. <answer>B</answer>", True, 0.0),  # truncated
    ("I watch. <answer>E</answer>", False, 0.0),  # not an option
    ("I watch. <answer>A</answer> <answer>B</answer>", False, 0.0),  # two answers
    ("I watch. <answer>B</answer> and more", False, 0.0),  # not at the end
])
def test_answer_tag_format(text, truncated, want):
    from mmrl.data.schema import Sample, Trajectory
    from mmrl.rewards import REWARDS, RewardContext

    sample = Sample(id="s", question="?", candidates=["a", "b", "c", "d"], answer="b")
    traj = Trajectory(sample_id="s", group_id=0, view="original", role="anchor", prompt_ids=torch.zeros(1, dtype=torch.long),
                      response_ids=torch.tensor([1]), logprobs=torch.zeros(1), loss_mask=torch.ones(1, dtype=torch.bool),
                      text=text, truncated=truncated, expected="B")
    ctx = RewardContext(sample=sample, trajectory=traj, candidates=sample.candidates, expected="B")
    assert REWARDS.get("answer_tag_format")([ctx]) == [want]


def test_every_style_reasons_then_answers_its_gold_letter(video_world):
    """Each reasoning style ends with the gold letter's tag, names the clip's content, and differs from the others."""
    from mmrl.data.reasoning import STYLES

    items = json.loads((video_world / "train.json").read_text())
    for it in items:
        letter = "ABCDEFGH"[it["candidates"].index(it["answer"])]
        texts = [reasoning_target(it, answer_first=True, style=k) for k in range(len(STYLES))]
        assert texts[0] == reasoning_target(it, answer_first=True)  # style 0 is the original text
        assert len(set(texts)) == len(STYLES)
        for t in texts:
            assert t.startswith(f"{letter}. ") and t.endswith(f"<answer>{letter}</answer>")
            assert parse_choice(t, "ABCD") == letter
            assert it["answer"] in t or it["qtype"] == "count"
    with pytest.raises(ValueError, match=r"sample '.*': reasoning style 4 is not in 0\.\.3"):
        reasoning_target(items[0], style=len(STYLES))


def test_styles_are_drawn_per_item_from_the_seed(video_world, tmp_path):
    from mmrl.data.reasoning import style_of

    items = json.loads((video_world / "train.json").read_text())
    draws = [style_of(it, 4, seed=3) for it in items]
    assert draws == [style_of(it, 4, seed=3) for it in items]  # fixed by (seed, id)
    assert list(reversed(draws)) == [style_of(it, 4, seed=3) for it in reversed(items)]  # not by position
    assert set(draws) == {0, 1, 2, 3} and {style_of(it, 1, seed=3) for it in items} == {0}
    assert [style_of(it, 4, seed=4) for it in items] != draws
    with pytest.raises(ValueError, match=r"reasoning styles must be in 1\.\.4, got 5"):
        style_of(items[0], 5)
    path = tmp_path / "train.json"
    path.write_text(json.dumps(items))
    add_reasoning_targets(str(path), answer_first=True, styles=4, seed=3)
    stored = json.loads(path.read_text())
    assert [s["meta"]["sft_response"] for s in stored] == [
        reasoning_target(it, True, style_of(it, 4, seed=3)) for it in items]
