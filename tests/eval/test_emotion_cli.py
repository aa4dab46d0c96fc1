"""``mmrl eval emotion``: the YAML's prompt is the training prompt, the three data layouts load, the scoring of
known responses, and the command end to end on the tiny model over a mood-world test split."""
import json

import numpy as np
import pytest
from PIL import Image

from support import REPO
from mmrl.cli import main
from mmrl.config import load_config
from mmrl.data.affect import EMOTION6
from mmrl.data.synth_mood import make_mood_world
from mmrl.errors import ConfigError
from mmrl.eval.benchmarks.emotion.evaluate import k_of_instruction, load_emotion_samples, score
from mmrl.eval.protocol import load_protocol
from mmrl.rewards.dspo_format import dspo_prompt
from mmrl.rewards.dspo_rewards import get_lexicon


@pytest.fixture(scope="module")
def mood(tmp_path_factory):
    return make_mood_world(str(tmp_path_factory.mktemp("mood")), n_train=2, n_test=3, seed=0)


def test_yaml_prompt_is_the_training_prompt():
    bdef, _ = load_protocol("emotion", {})
    train = load_config([str(REPO / "configs" / "dspo_mood.yaml")]).data.prompt.instruction
    assert bdef.prompt.post_prompt == dspo_prompt(5) == train
    assert k_of_instruction(bdef.prompt.post_prompt) == 5 and k_of_instruction("pick one") is None
    with pytest.raises(ConfigError, match="sampling.max_frames"):  # a key the hooks would ignore is refused
        load_protocol("emotion", {"sampling.max_frames": 4})


def test_scoring_known_responses(mood):
    samples, _ = load_emotion_samples(mood["test"])
    gold = {s.id: s.meta["reference_response"] for s in samples}
    rows = [{"id": sid, "response": r, "truncated": False} for sid, r in gold.items()]
    rows[2] = dict(rows[2], truncated=True)  # a truncated response is malformed whatever its text
    m = score(samples, rows, get_lexicon(""), k=5)
    assert m["n"] == m["n_dist"] == m["n_box"] == 3 and m["well_formed"] == pytest.approx(2 / 3)
    assert m["top1"] == pytest.approx(2 / 3) and m["malformed"] == {"truncated": 1}
    assert m["box_iou"] == pytest.approx(2 / 3, abs=0.02)  # the reference names the cue's box (2 decimals)
    assert m["candidate_diversity"] > 0 and m["kl_to_annotators"] > 0
    m = score(samples, rows[:1], get_lexicon(""), k=5)  # a sample without a response counts, malformed
    assert m["n"] == 3 and m["malformed"] == {"error": 2}


def _img(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(path)


def test_layouts(tmp_path, mood):
    e6 = tmp_path / "Emotion6"
    _img(e6 / "images" / "joy" / "7.jpg")
    head = "[image_filename]\t[valence]\t[arousal]\t" + "\t".join(f"[prob. {c}]" for c in EMOTION6 + ("neutral",))
    (e6 / "ground_truth.txt").write_text(head + "\njoy/7.jpg\t7.0\t5.0\t0\t0\t0\t0.9\t0\t0.1\t0\n")
    samples, _ = load_emotion_samples(str(e6))
    assert [s.answer for s in samples] == ["joy"]
    m = score(samples, [{"id": samples[0].id, "response": "no steps", "truncated": False}], get_lexicon(""), k=5)
    assert m["box_iou"] is None and m["n_box"] == 0 and m["kl_to_annotators"] > 0  # Emotion6 has no boxes
    es = tmp_path / "EmoSet"
    _img(es / "image" / "awe" / "a.jpg")
    (es / "test.json").write_text(json.dumps([["awe", "image/awe/a.jpg", "annotation/awe/a.json"]]))
    assert [s.answer for s in load_emotion_samples(str(es))[0]] == ["awe"]
    with pytest.raises(ConfigError, match="not an annotation file, an Emotion6 folder"):
        load_emotion_samples(str(tmp_path))
    assert len(load_emotion_samples(mood["test"])[0]) == 3


@pytest.mark.slow
def test_eval_emotion_command(tmp_path, mood, capsys):
    out = tmp_path / "ev"
    rc = main(["eval", "emotion", "--model", "tiny", "--data", mood["test"], "--out", str(out), "--max-new-tokens", "6",
               "--device", "cpu", "--no-progress"])
    assert rc == 0
    sc = json.loads((out / "summary.json").read_text())["scores"]
    assert sc["n"] == 3 and sc["errors"] == 0 and sc["well_formed"] == 0.0  # 6 tokens cannot hold four steps
    assert sum(sc["malformed"].values()) == 3 and sc["box_iou"] == 0.0 and sc["top1"] == 0.0
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["truncated"] for r in rows)
    text = capsys.readouterr().out
    assert "| box_iou | 0.0000 | 3 |" in text and text.splitlines()[-1].startswith("top1 0.0000 well-formed 0.0000")
