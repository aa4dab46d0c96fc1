"""`mmrl rectify --config` (RL -> rectify -> SFT -> RL from one config) and `mmrl rectify --run` on the tiny model
and a small seek world, the trajectories a tool run saves, and `mmrl tools preview` drawing one of them (or a
checkpoint's greedy rollout)."""
import json

import pytest

from mmrl.cli import main
from mmrl.data.synth_seek import make_seek_world

from support import REPO

SUITE = str(REPO / "tools" / "video_seek.yaml")


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, tiny_model_path):
    root = tmp_path_factory.mktemp("rectify_pipeline")
    make_seek_world(str(root / "world"), 4, 2, seed=0, duration=8.0, fps=4.0, flash_frames=2, overview=4)
    cfg = root / "cfg.yaml"
    cfg.write_text(f"""
model: {{path: {tiny_model_path}}}
data: {{train: {root / 'world' / 'train.json'}, test: {root / 'world' / 'test.json'}, max_pixels: 3136}}
rollout: {{agent_loop: multi_turn, tools: {SUITE}, max_new_tokens: 6, n: 2}}
rewards: [{{name: accuracy, weight: 1.0}}, {{name: seek_iou, weight: 0.5}}]
sft: {{steps: 1, batch_size: 2}}
train: {{out_dir: {root / 'run'}, steps: 1, prompts_per_step: 2, micro_batch: 4, eval_every: 1, eval_limit: 2}}
""")
    assert main(["rectify", "--config", str(cfg), "--quiet"]) == 0
    return root


@pytest.mark.slow
def test_pipeline_stages_and_counts(pipeline, capsys):
    run = pipeline / "run"
    for stage in ("rl1", "sft", "rl2"):
        assert (run / stage / "final").exists(), stage
    recs = [json.loads(x) for x in (run / "rl1" / "trajectories.jsonl").read_text().splitlines()]
    assert len(recs) == 4 and {r["step"] for r in recs} == {1}  # 2 prompts x 2 episodes of step 1
    assert all({"turns", "correct", "seek_iou", "rewards", "tokens"} <= set(r) for r in recs)
    counts = json.loads((run / "rectify.json").read_text())
    assert counts["episodes"] == 4 and counts["right_and_seen"] + counts["wrong_answer"] + counts["no_evidence"] \
        + counts["both"] == 4 and counts["rewritten"] + counts["duplicates"] <= 4
    scripts = [json.loads(x) for x in (run / "rectified.jsonl").read_text().splitlines()]
    assert len(scripts) == counts["rewritten"] > 0 and all(s["turns"][-1] in "ABCD" for s in scripts)
    m = [json.loads(x) for x in (run / "rl1" / "metrics.jsonl").read_text().splitlines()]
    assert "eval/tools/call_validity" in m[-1] and "eval/accuracy" in m[-1]  # held-out eval with tools
    # stages with a final model are not run again; --run rewrites the same episodes into the same scripts
    capsys.readouterr()
    assert main(["rectify", "--run", str(run / "rl1"), "--out", str(pipeline / "again.jsonl")]) == 0
    assert json.loads(capsys.readouterr().out)["rewritten"] == counts["rewritten"]
    assert (pipeline / "again.jsonl").read_text() == (run / "rectified.jsonl").read_text()
    # --seek whole: the added evidence seeks are 2 s windows of whole seconds
    assert main(["rectify", "--run", str(run / "rl1"), "--out", str(pipeline / "whole.jsonl"), "--seek", "whole"]) == 0
    added = [json.loads(t[len("<tool_call>"):-len("</tool_call>")])["arguments"]
             for x in (pipeline / "whole.jsonl").read_text().splitlines() for t in json.loads(x)["turns"][:-1]
             if t not in {r["model_text"] for rec in recs for r in rec["turns"]}]
    assert added and all(set(a) == {"start", "end"} and a["end"] - a["start"] == 2 for a in added)


@pytest.mark.slow
def test_rectify_cli_errors(pipeline, capsys):
    assert main(["rectify"]) == 2 and "give --run" in capsys.readouterr().err
    assert main(["rectify", "--run", str(pipeline / "run" / "rl1"), "--nframes", "3"]) == 2
    assert "--nframes" in capsys.readouterr().err
    assert main(["rectify", "--run", str(pipeline / "world")]) == 2 and "no config.yaml" in capsys.readouterr().err


@pytest.mark.slow
def test_tools_preview_from_a_run_and_from_a_checkpoint(pipeline, tiny_model_path, capsys):
    rec = json.loads((pipeline / "run" / "rl1" / "trajectories.jsonl").read_text().splitlines()[0])
    capsys.readouterr()
    png = pipeline / "episode.png"
    assert main(["tools", "preview", "--run", str(pipeline / "run" / "rl1"), "--sample", rec["id"], "--out", str(png),
                 "--cell", "32"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert png.exists() and info["id"] == rec["id"] and [t["model_text"] for t in info["turns"]] == \
        [t["model_text"] for t in rec["turns"]]
    png2 = pipeline / "rollout.png"
    assert main(["tools", "preview", "--model", tiny_model_path, "--suite", SUITE, "--data",
                 str(pipeline / "world" / "test.json"), "--sample", "test-00000", "--out", str(png2),
                 "--max-new-tokens", "4", "--cell", "32"]) == 0
    assert png2.exists() and json.loads(capsys.readouterr().out)["turns"]
    assert main(["tools", "preview", "--sample", "x", "--out", str(png2)]) == 2
    assert "give --run" in capsys.readouterr().err
    assert main(["tools", "preview", "--run", str(pipeline / "run" / "rl1"), "--sample", "nope", "--out", str(png2)]) == 2
    assert "--sample 'nope' is not in" in capsys.readouterr().err
    seen = {json.loads(x)["id"] for x in (pipeline / "run" / "rl1" / "trajectories.jsonl").read_text().splitlines()}
    unseen = next(f"train-{i:05d}" for i in range(4) if f"train-{i:05d}" not in seen)  # 2 of the 4 were drawn
    assert main(["tools", "preview", "--run", str(pipeline / "run" / "rl1"), "--sample", unseen, "--out", str(png2)]) == 2
    assert f"no saved episode of sample '{unseen}'" in capsys.readouterr().err


@pytest.mark.slow
def test_pipeline_chooses_the_sft_setting_on_validation_and_resumes(pipeline, capsys):
    """rectify.val with two candidate lrs: both fine-tuned from rl1/final and scored on the val clips, rl2 starts
    from the winner; a second call trains nothing again and keeps the scores."""
    import shutil

    make_seek_world(str(pipeline / "valworld"), 4, 2, seed=0, duration=8.0, fps=4.0, flash_frames=2, overview=4,
                    n_val=2)
    run = pipeline / "run_select"
    shutil.copytree(pipeline / "run" / "rl1", run / "rl1")  # rl1 has a final model: not run again
    args = ["rectify", "--config", str(pipeline / "cfg.yaml"), "--quiet", f"train.out_dir={run}",
            f"rectify.val={pipeline / 'valworld' / 'val.json'}", "rectify.lr=[1e-4,1e-3]"]
    capsys.readouterr()
    assert main(args) == 0
    text = capsys.readouterr().out  # progress lines, then the result as JSON
    assert "validation accuracy" in text and json.loads(text[text.index("{\n"):])["selection"]["chosen"] in \
        {"lr0.0001_steps1_mix0", "lr0.001_steps1_mix0"}
    sel = json.loads((run / "select.json").read_text())
    assert [c["tag"] for c in sel["candidates"]] == ["lr0.0001_steps1_mix0", "lr0.001_steps1_mix0"]
    assert sel["n_val"] == 2 and sel["reference"]["model"] == str(run / "rl1" / "final")
    assert all(c["val"]["n"] == 2 and (run / "sft" / c["tag"] / "final").exists() for c in sel["candidates"])
    best = max(c["val"]["accuracy"] for c in sel["candidates"])
    assert sel["chosen"] == next(c["tag"] for c in sel["candidates"] if c["val"]["accuracy"] == best)
    rl2_cfg = (run / "rl2" / "config.yaml").read_text()
    assert f"path: {run / 'sft' / sel['chosen'] / 'final'}" in rl2_cfg and (run / "rl2" / "final").exists()
    stamps = {p: p.stat().st_mtime_ns for p in run.glob("**/final/*")}
    assert main(args) == 0
    assert {p: p.stat().st_mtime_ns for p in run.glob("**/final/*")} == stamps
    assert json.loads((run / "select.json").read_text()) == sel
    # the test split as validation is refused before anything runs
    assert main(args[:-2] + [f"rectify.val={pipeline / 'world' / 'test.json'}", "rectify.lr=[1e-4]"]) == 2
    assert "rectify.val" in capsys.readouterr().err
