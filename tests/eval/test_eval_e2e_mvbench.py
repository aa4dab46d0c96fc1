"""MVBench end to end on the tiny model: synthetic official / hf_video sets, both protocols, errors, resume."""
import json
import os

import pytest

from mmrl.cli import main
from mmrl.errors import ConfigError
from mmrl.eval.benchmark_def import load_benchmark
from mmrl.eval.hooks import EvalInputs
from mmrl.eval.protocol import load_protocol
from mmrl.eval.report import read_jsonl
from mmrl.eval.runner import EvalSettings, run_benchmark
from mmrl.eval.synth_bench import make_mvbench_set
from mmrl.media.decode import decode_indices, probe
from mmrl.media.sampling import get_index
from eval_support import CountingEngine

SMALL = {"pixels.min_pixels": 28 * 28, "pixels.max_pixels": 56 * 56, "generation.max_new_tokens": 4}


@pytest.fixture(scope="module")
def mvdata(tmp_path_factory):
    root = tmp_path_factory.mktemp("mvbench")
    info = make_mvbench_set(str(root), seed=0, n_per_task=3)
    return root, info


def run_mvbench(root, out, processor, engine, name="mvbench", overrides=None, **kw):
    """The generic runner on an MVBench YAML with small CPU budgets (overrides as the CLI passes them)."""
    bdef, hooks = load_protocol(name, {**SMALL, **(overrides or {})})
    settings = EvalSettings(out_dir=str(out), batch=4, progress=False, model_name="tiny", **kw)
    return run_benchmark(bdef, hooks, EvalInputs(data_root=str(root)), settings, processor, engine)[0]


def test_frame_folder_decodes_exact_indices(mvdata):
    root, _ = mvdata
    folder = root / "video" / "tvqa" / "frames_fps3_hq" / "episodic_reasoning_000"
    info = probe(str(folder), "x", frame_fps=3.0)
    assert (info.num_frames, info.fps, info.is_folder) == (16, 3.0, True)
    media = decode_indices(info, [0, 3, 15], "x", max_pixels=56 * 56)   # files 00001, 00004, 00016
    assert tuple(media.frames.shape) == (3, 3, 56, 56)
    assert media.timestamps == [0.0, 1.0, 5.0]


@pytest.mark.slow  # five runs of the evaluator; 8-20 s on a shared 2-core machine
def test_mvbench_original_end_to_end(tmp_path, tiny, mvdata, capsys):
    processor, engine = tiny
    root, _ = mvdata
    missing = root / "video" / "ssv2_video" / "action_antonym_001.mp4"
    hidden = tmp_path / "hidden.mp4"
    os.replace(missing, hidden)
    try:
        out = tmp_path / "run"
        eng = CountingEngine(engine)
        summary = run_mvbench(root, out, processor, eng)
        bdef = load_benchmark("mvbench")
        assert summary["protocol"] == bdef.protocol and summary["parser"] == "mvbench_check_ans"
        assert summary["scores"]["n"] == 9 and summary["scores"]["aggregate"] == "micro"
        assert {t: v["n"] for t, v in summary["scores"]["tasks"].items()} == {
            "action_sequence": 3, "action_antonym": 3, "episodic_reasoning": 3}
        assert summary["n_errors"] == 1 and summary["errors"][0]["id"] == "action_antonym/1"
        assert "not found" in summary["errors"][0]["error"]
        assert "episodic_reasoning" not in summary["meta"]["missing_tasks"]
        # 9 queries in chunks of 4; the missing video leaves 8 prompts -> 3 generate calls
        assert (eng.calls, eng.prompts) == (3, 8)
        rows = read_jsonl(out / "predictions.jsonl")
        assert len(rows) == 9 and len({r["id"] for r in rows}) == 9
        by_id = {r["id"]: r for r in rows}
        assert by_id["action_antonym/1"]["response"] is None and by_id["action_antonym/1"]["score"] == 0
        # exact get_index frames: the bound MP4 task and the JPEG-folder task (fps 3, numbered from 1)
        anno = json.loads((root / "json" / "action_sequence.json").read_text())[0]
        assert by_id["action_sequence/0"]["frames"] == get_index(16, 8.0, (anno["start"], anno["end"]), 0, 16)
        anno = json.loads((root / "json" / "episodic_reasoning.json").read_text())[0]
        er = get_index(16, 3.0, (anno["start"], anno["end"]), 1, 16)   # file numbers from 1 -> positions
        assert by_id["episodic_reasoning/0"]["frames"] == [i - 1 for i in er]
        assert by_id["action_antonym/0"]["frames"] == get_index(16, 8.0, None, 0, 16)
        assert by_id["action_antonym/0"]["pixels"] == [784, 3136]
        # the report records every resolved value, and the overrides given
        proto = summary["meta"]["protocol"]
        assert proto["sampling.num_segments"] == "16" and proto["pixels.max_pixels"] == "3136"
        assert proto["prompt.system_placement"] == '"system_and_user"'
        assert summary["meta"]["overrides"] == {} and summary["meta"]["layout"] == "official"
        md = (out / "summary.md").read_text()
        assert f"- protocol: {bdef.protocol}" in md and "- parser: mvbench_check_ans" in md
        assert "- errors: 1" in md and "| **Avg** (total correct / total)" in md
        assert json.loads((out / "summary.json").read_text())["n_errors"] == 1
        assert "| action_antonym/1 | action_antonym |" in md

        # rerun: nothing left to generate, no duplicate rows
        eng2 = CountingEngine(engine)
        again = run_mvbench(root, out, processor, eng2)
        assert eng2.calls == 0 and len(read_jsonl(out / "predictions.jsonl")) == 9
        assert again["scores"] == summary["scores"] and again["meta"]["run"]["resumed"] == 9

        # interrupted run: keep 5 rows plus a torn line -> only the other 4 are generated
        lines = (out / "predictions.jsonl").read_text().splitlines(keepends=True)
        (out / "predictions.jsonl").write_text("".join(lines[:5]) + lines[5][:20])
        eng3 = CountingEngine(engine)
        resumed = run_mvbench(root, out, processor, eng3)
        rows = read_jsonl(out / "predictions.jsonl")
        assert len(rows) == 9 and len({r["id"] for r in rows}) == 9
        # rows 0-4 hold the error record of action_antonym/1 (written before its chunk generates)
        assert resumed["meta"]["run"]["resumed"] == 5 and eng3.prompts == 4 and resumed["n_errors"] == 1
    finally:
        os.replace(hidden, missing)
    # the video is back: --retry-errors regenerates only the failed query
    eng4 = CountingEngine(engine)
    fixed = run_mvbench(root, out, processor, eng4, retry_errors=True)
    assert (eng4.prompts, fixed["n_errors"], fixed["scores"]["n"]) == (1, 0, 9)


def test_resume_refuses_other_settings(tmp_path, tiny, mvdata):
    processor, engine = tiny
    root, _ = mvdata
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="unknown MVBench task"):
        run_mvbench(root, out, processor, engine, tasks=["no_such_task"])
    run_mvbench(root, out, processor, engine, tasks=["action_antonym"], limit=1)
    with pytest.raises(ConfigError, match="other settings.*pixels.max_pixels"):
        run_mvbench(root, out, processor, engine, overrides={"pixels.max_pixels": 28 * 28 * 8},
                    tasks=["action_antonym"], limit=1)


def test_mvbench_lmms_eval_hf_video_cli(tmp_path, mvdata, capsys):
    root, _ = mvdata
    out = tmp_path / "lmms"
    rc = main(["eval", "mvbench", "--model", "tiny", "--data-root", str(root), "--protocol", "lmms-eval",
               "--layout", "hf_video", "--out", str(out), "--min-pixels", "784", "--max-pixels", str(56 * 56),
               "--max-new-tokens", "4", "--batch", "4", "--no-progress", "--device", "cpu"])
    assert rc == 0
    bdef = load_benchmark("mvbench_lmms")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["protocol"] == bdef.protocol and summary["parser"] == "lmms_mcq_acc"
    assert summary["scores"]["aggregate"] == "lmms_answered" and summary["scores"]["n"] == 9
    assert summary["meta"]["layout"] == "hf_video" and summary["n_errors"] == 0
    assert summary["meta"]["overrides"] == {"pixels.min_pixels": 784, "pixels.max_pixels": 3136,
                                            "generation.max_new_tokens": 4, "data.layout": "hf_video"}
    rows = {r["id"]: r for r in read_jsonl(out / "predictions.jsonl")}
    # qwen-vl-utils at 2 fps over the whole pre-cut clip, then the wrapper's <= 32 (+ last):
    # 16 frames at 8 fps -> 2 s * 2 fps = 4 frames, linspace(0, 15, 4).round()
    assert rows["action_sequence/0"]["frames"] == [0, 5, 10, 15]
    # the TVQA segment at 3 fps: 16/3*2 = 10.67 -> 10 frames (floor to even), linspace(0, 15, 10).round()
    assert rows["episodic_reasoning/0"]["frames"] == [0, 2, 3, 5, 7, 8, 10, 12, 13, 15]
    assert "no prefill" in capsys.readouterr().out


def test_lmms_eval_on_the_official_layout(tmp_path, tiny, mvdata):
    """lmms-eval's frames from the main-branch layout: a bound applied to the source when the _segment folder is
    absent (action_sequence), the segment clips when present (TVQA here), the whole source otherwise."""
    processor, engine = tiny
    root, _ = mvdata
    summary = run_mvbench(root, tmp_path / "lmms_official", processor, engine, name="mvbench_lmms",
                          overrides={"data.layout": "official"})
    assert summary["meta"]["bound_tasks"] == {"action_sequence": "star/Charades_v1_480 + item start/end",
                                              "action_antonym": "ssv2_video (whole)",
                                              "episodic_reasoning": "tvqa/video_fps3_hq_segment (clips read whole)"}
    rows = {r["id"]: r for r in read_jsonl(tmp_path / "lmms_official" / "predictions.jsonl")}
    # bound [0.25, 1.625] s at 8 fps: frames ceil(2.0)..floor(13.0) = 2..13; 1.5 s * 2 fps -> 4 (the minimum)
    assert rows["action_sequence/0"]["frames"] == [2, 6, 9, 13]
    assert rows["action_antonym/0"]["frames"] == [0, 5, 10, 15]
    assert rows["episodic_reasoning/0"]["frames"] == [0, 2, 3, 5, 7, 8, 10, 12, 13, 15]
    assert summary["n_errors"] == 0
