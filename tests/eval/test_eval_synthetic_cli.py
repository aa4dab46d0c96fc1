"""``mmrl eval synthetic`` through the registry and the generic runner: its YAML budgets reach the metrics code."""
import json

from mmrl.cli import main
from mmrl.eval.report import read_jsonl


def test_synthetic_through_the_runner(tmp_path, video_world, capsys):
    out = tmp_path / "syn"
    rc = main(["eval", "synthetic", "--model", "tiny", "--data", str(video_world / "test.json"), "--out", str(out),
               "--limit", "4", "--nframes", "2", "--device", "cpu", "--no-progress"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    sc = summary["scores"]
    assert sc["n"] == 4 and 0.0 <= sc["accuracy"] <= 1.0 and set(sc["per_qtype"])
    assert summary["meta"]["protocol"]["sampling.max_frames"] == "2"   # --nframes overrode the YAML's 4
    assert summary["meta"]["overrides"] == {"sampling.max_frames": 2}
    assert len(read_jsonl(out / "predictions.jsonl")) == 4
    text = capsys.readouterr().out
    assert "| **accuracy** (n=4, errors 0) |" in text and text.splitlines()[-1].startswith("accuracy ")


def test_yaml_budgets_map_to_the_data_config():
    from mmrl.eval.benchmarks.synthetic.hooks import data_config
    from mmrl.eval.protocol import load_protocol

    bdef, _ = load_protocol("synthetic", {"sampling.max_frames": 6, "pixels.max_pixels": 3136, "data.on_error": "raise"})
    cfg = data_config(bdef)
    assert (cfg.nframes, cfg.min_pixels, cfg.max_pixels, cfg.on_error) == (6, 784, 3136, "raise")


def test_viewset_run_explains_the_abstention_option(tmp_path, video_world, capsys):
    """--viewset with an abstain role adds its option to every prompt: the output says so beside the accuracy."""
    from support import REPO

    out = tmp_path / "syn"
    rc = main(["eval", "synthetic", "--model", "tiny", "--data", str(video_world / "test.json"), "--out", str(out),
               "--limit", "2", "--nframes", "2", "--device", "cpu", "--no-progress",
               "--viewset", str(REPO / "views" / "bpo_video.yaml")])
    assert rc == 0
    text = capsys.readouterr().out
    assert "Every prompt, the original view's too, carries the view set's abstention option 'cannot be determined'" in text
    assert text.splitlines()[-1].endswith("; with the abstention option 'cannot be determined' on every prompt (see the table)")
    assert json.loads((out / "summary.json").read_text())["scores"]["abstain_option"] == "cannot be determined"
