"""MVBench end to end on the tiny model: synthetic official / hf_video sets, both protocols, errors, resume."""
import json
import os

import pytest

from mmrl.cli import main
from mmrl.errors import ConfigError
from mmrl.eval.benchmark_def import load_benchmark
from mmrl.eval.cli_bench import EvalSettings
from mmrl.eval.frames import decode_indices, probe
from mmrl.eval.mvbench_protocol import get_index
from mmrl.eval.mvbench_runner import run_mvbench
from mmrl.eval.report import read_jsonl
from eval_support import CountingEngine
from mmrl.eval.synth_bench import make_mvbench_set


@pytest.fixture(scope="module")
def mvdata(tmp_path_factory):
    root = tmp_path_factory.mktemp("mvbench")
    info = make_mvbench_set(str(root), seed=0, n_per_task=3)
    return root, info


def _settings(out, **kw):
    base = dict(out_dir=str(out), batch=4, max_pixels=56 * 56, max_new_tokens=4, progress=False, model_name="tiny")
    base.update(kw)
    return EvalSettings(**base)


def test_frame_folder_decodes_exact_indices(mvdata):
    root, _ = mvdata
    folder = root / "video" / "tvqa" / "frames_fps3_hq" / "episodic_reasoning_000"
    info = probe(str(folder), "x", frame_fps=3.0)
    assert (info.num_frames, info.fps, info.first_idx) == (16, 3.0, 1)
    media = decode_indices(info, [1, 4, 16], "x", max_pixels=56 * 56)
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
        summary = run_mvbench(str(root), _settings(out), processor, eng, protocol="original")
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
        assert by_id["episodic_reasoning/0"]["frames"] == get_index(16, 3.0, (anno["start"], anno["end"]), 1, 16)
        assert by_id["action_antonym/0"]["frames"] == get_index(16, 8.0, None, 0, 16)
        md = (out / "summary.md").read_text()
        assert f"- protocol: {bdef.protocol}" in md and "- parser: mvbench_check_ans" in md
        assert "- errors: 1" in md and "| **Avg** (total correct / total)" in md
        assert json.loads((out / "summary.json").read_text())["n_errors"] == 1
        assert "| action_antonym/1 | action_antonym |" in capsys.readouterr().out

        # rerun: nothing left to generate, no duplicate rows
        eng2 = CountingEngine(engine)
        again = run_mvbench(str(root), _settings(out), processor, eng2, protocol="original")
        assert eng2.calls == 0 and len(read_jsonl(out / "predictions.jsonl")) == 9
        assert again["scores"] == summary["scores"] and again["meta"]["run"]["resumed"] == 9

        # interrupted run: keep 5 rows plus a torn line -> only the other 4 are generated
        lines = (out / "predictions.jsonl").read_text().splitlines(keepends=True)
        (out / "predictions.jsonl").write_text("".join(lines[:5]) + lines[5][:20])
        eng3 = CountingEngine(engine)
        resumed = run_mvbench(str(root), _settings(out), processor, eng3, protocol="original")
        rows = read_jsonl(out / "predictions.jsonl")
        assert len(rows) == 9 and len({r["id"] for r in rows}) == 9
        # rows 0-4 hold the error record of action_antonym/1 (written before its chunk generates)
        assert resumed["meta"]["run"]["resumed"] == 5 and eng3.prompts == 4 and resumed["n_errors"] == 1
    finally:
        os.replace(hidden, missing)
    # the video is back: --retry-errors regenerates only the failed query
    eng4 = CountingEngine(engine)
    fixed = run_mvbench(str(root), _settings(out, retry_errors=True), processor, eng4, protocol="original")
    assert (eng4.prompts, fixed["n_errors"], fixed["scores"]["n"]) == (1, 0, 9)


def test_resume_refuses_other_settings(tmp_path, tiny, mvdata):
    processor, engine = tiny
    root, _ = mvdata
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="unknown MVBench task"):
        run_mvbench(str(root), _settings(out, tasks=["no_such_task"]), processor, engine)
    run_mvbench(str(root), _settings(out, tasks=["action_antonym"], limit=1), processor, engine)
    with pytest.raises(ConfigError, match="other settings"):
        run_mvbench(str(root), _settings(out, tasks=["action_antonym"], limit=1, max_pixels=28 * 28 * 8),
                    processor, engine)


def test_mvbench_lmms_eval_hf_video_cli(tmp_path, mvdata, capsys):
    root, _ = mvdata
    out = tmp_path / "lmms"
    rc = main(["eval", "mvbench", "--model", "tiny", "--data-root", str(root), "--protocol", "lmms-eval",
               "--layout", "hf_video", "--out", str(out), "--max-pixels", str(56 * 56), "--max-new-tokens", "4",
               "--batch", "4", "--no-progress", "--device", "cpu"])
    assert rc == 0
    bdef = load_benchmark("mvbench_lmms")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["protocol"] == bdef.protocol and summary["parser"] == "lmms_mcq_acc"
    assert summary["scores"]["aggregate"] == "lmms_answered" and summary["scores"]["n"] == 9
    assert summary["meta"]["layout"] == "hf_video" and summary["n_errors"] == 0
    rows = {r["id"]: r for r in read_jsonl(out / "predictions.jsonl")}
    # whole video, uniform: the bound is ignored and the frame task is read as its MP4 segment
    assert rows["action_sequence/0"]["frames"] == list(range(16))
    assert rows["episodic_reasoning/0"]["frames"] == list(range(16))
    assert "no prefill" in capsys.readouterr().out
