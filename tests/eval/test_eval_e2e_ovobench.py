"""OVO-Bench end to end on the tiny model (prefix cut on the fly or pre-chunked), resume, and --score-only."""
import json
import math
import os

import pytest

from mmrl.cli import main
from mmrl.eval.benchmark_def import load_benchmark
from mmrl.eval.frame_rules import FRAME_RULES
from mmrl.eval.hooks import EvalInputs
from mmrl.eval.protocol import load_protocol
from mmrl.eval.report import read_jsonl
from mmrl.eval.runner import EvalSettings, run_benchmark
from mmrl.eval.synth_bench import make_ovobench_set
from mmrl.media.decode import probe
from eval_support import CountingEngine

SMALL = {"sampling.max_frames": 4, "pixels.min_pixels": 28 * 28, "pixels.max_pixels": 56 * 56,
         "generation.max_new_tokens": 4}


@pytest.fixture(scope="module")
def ovodata(tmp_path_factory):
    root = tmp_path_factory.mktemp("ovo")
    return make_ovobench_set(str(root), seed=0, n_per_task=1, chunked=True)


def run_ovobench(anno, videos, out, processor, engine, chunked=False, **kw):
    bdef, hooks = load_protocol("ovobench", {**SMALL, "chunking.chunked": chunked})
    settings = EvalSettings(out_dir=str(out), batch=4, progress=False, model_name="tiny", **kw)
    return run_benchmark(bdef, hooks, EvalInputs(anno=anno, video_root=videos), settings, processor, engine)[0]


def test_prefix_frames_never_reach_the_end(ovodata):
    """QWen2VL.py: nframes = min(max_frames, len(chunk) - 2) over the chunk [0, ceil(t)), qwen-vl-utils rounding."""
    info = probe(os.path.join(ovodata["video_root"], "synth", "EPM_0.mp4"), "x")
    assert (info.num_frames, info.fps) == (24, 4.0)
    bdef = load_benchmark("ovobench")
    rule = FRAME_RULES.get("ovo_qwen2_vl")
    small = load_benchmark("ovobench", overrides={"sampling.max_frames": 4}).sampling

    def idx(end, s):
        return rule(info, {"end": end}, s, bdef.pixels)[0]

    assert idx(2.0, small) == [0, 2, 5, 7]  # frames 0..7 have t < 2.0 s; linspace(0, 7, 4).round()
    assert idx(2.0, bdef.sampling) == [0, 1, 3, 4, 6, 7]  # min(64, 8 - 2) = 6 frames
    assert idx(99.0, small)[-1] == 23 and idx(None, small) == [0, 8, 15, 23]  # capped at the last frame
    assert rule(info, {"end": 2.0}, bdef.sampling, bdef.pixels)[1:] == (100352, 151200)


def test_ovobench_end_to_end(tmp_path, tiny, ovodata):
    processor, engine = tiny
    anno = json.loads(open(ovodata["annotations"]).read())
    src = os.path.join(ovodata["video_root"], "synth", "SSR_0.mp4")
    hidden = str(tmp_path / "hidden.mp4")
    os.replace(src, hidden)  # the SSR item's video is missing: both its probes are errors
    try:
        out = tmp_path / "run"
        eng = CountingEngine(engine)
        summary = run_ovobench(ovodata["annotations"], ovodata["video_root"], out, processor, eng)
    finally:
        os.replace(hidden, src)
    bdef = load_benchmark("ovobench")
    assert summary["protocol"] == bdef.protocol
    assert summary["parser"]["REC"] == "ovo_rec" and summary["parser"]["EPM"] == "ovo_mcq"
    sc = summary["scores"]
    assert {t: v["n"] for t, v in sc["tasks"].items()} == {"EPM": 1, "ASI": 1, "OCR": 1, "STU": 1, "REC": 2,
                                                         "SSR": 2, "CRR": 2}
    assert set(sc["modes"]) == {"backward", "realtime", "forward"}
    assert summary["n_errors"] == 2 and {e["id"] for e in summary["errors"]} == {"5_0", "5_1"}
    assert sc["tasks"]["SSR"]["none"] == 2 and sc["tasks"]["SSR"]["correct"] == 0
    assert (eng.calls, eng.prompts) == (3, 8)  # 10 queries in chunks of 4, 2 without a video
    rows = read_jsonl(out / "predictions.jsonl")
    assert len(rows) == ovodata["n_queries"] == 10 and len({r["id"] for r in rows}) == 10
    realtime = {str(it["id"]): it["realtime"] for it in anno if "realtime" in it}
    realtime.update({f"{it['id']}_{j}": p["realtime"] for it in anno for j, p in enumerate(it.get("test_info", []))})
    for r in rows:
        if r.get("error"):
            continue
        end = min(math.ceil(realtime[r["id"]]), ovodata["duration"])
        assert r["prefix_end"] == end and r["last_frame_t"] < end and len(r["frames"]) <= 4
    results = json.loads((out / "results.json").read_text())
    assert [len(results[m]) for m in ("backward", "realtime", "forward")] == [2, 2, 3]
    assert all("response" in p for it in results["forward"] for p in it["test_info"])
    md = (out / "summary.md").read_text()
    assert f"- protocol: {bdef.protocol}" in md and "- errors: 2" in md
    assert "**Total (official)**" in md and "**Weighted overall**" in md
    results_list = [p["response"] for it in results["forward"] if it["task"] == "SSR" for p in it["test_info"]]
    assert results_list == [None, None]
    saved = [r["response"] for r in results["backward"]]  # list mode: saved as the wrapper's one-element lists
    assert all(isinstance(x, list) and len(x) == 1 for x in saved)
    assert all(isinstance(p["response"], str) for it in results["forward"] if it["task"] == "REC"
               for p in it["test_info"])

    eng2 = CountingEngine(engine)  # rerun: resumes, generates nothing, writes no duplicates
    again = run_ovobench(ovodata["annotations"], ovodata["video_root"], out, processor, eng2)
    assert eng2.calls == 0 and len(read_jsonl(out / "predictions.jsonl")) == 10
    assert again["scores"]["total"] == sc["total"] and again["n_errors"] == 2


def test_ovobench_prechunked(tmp_path, tiny, ovodata):
    processor, engine = tiny
    out = tmp_path / "chunked"
    summary = run_ovobench(ovodata["annotations"], ovodata["chunk_dir"], out, processor, engine, chunked=True)
    assert summary["n_errors"] == 0 and summary["meta"]["protocol"]["chunking.chunked"] == "true"
    rows = {r["id"]: r for r in read_jsonl(out / "predictions.jsonl")}
    assert len(rows) == 10
    # the item whose realtime is past the clip sees the whole clip; a chunk never holds more than its prefix
    assert rows["2"]["video_duration"] == ovodata["duration"]
    assert rows["0"]["video_duration"] == 2.0 and rows["0"]["prefix_end"] is None  # [0, ceil(1.8)): 8 frames


def test_ovobench_cli_end_to_end(tmp_path, ovodata, capsys):
    out = tmp_path / "cli"
    rc = main(["eval", "ovobench", "--model", "tiny", "--anno", ovodata["annotations"], "--video-root",
               ovodata["video_root"], "--out", str(out), "--nframes", "4", "--min-pixels", "784", "--max-pixels",
               str(56 * 56), "--max-new-tokens", "4", "--batch", "8", "--tasks", "EPM,rec", "--no-progress",
               "--device", "cpu"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["scores"]["tasks"]) == {"EPM", "REC"}
    assert summary["meta"]["protocol"]["sampling.max_frames"] == "4"
    assert summary["meta"]["overrides"]["sampling.max_frames"] == 4
    # two of three modes: no "official total", a labelled partial mean instead
    assert summary["scores"]["total"] is None and summary["scores"]["partial_mean"] is not None
    text = capsys.readouterr().out
    assert "not computed, the official total needs all three modes" in text
    assert "; partial mean " in text.splitlines()[-1] and "; total " not in text


def test_score_only_cli_gemini(ovo_dir, capsys):
    files = sorted(str(p) for p in ovo_dir.glob("Gemini_*_offline*.json"))
    assert main(["eval", "ovobench", "--score-only", *files]) == 0
    out = capsys.readouterr().out
    assert "BT 62.54" in out and "RT 69.32" in out and "FT 57.15" in out and "total 63.00" in out
    assert "| BT | **BT mean** | 62.54 |" in out and "**Total (official)**: 63.00" in out
    assert "**Weighted overall**" in out


def test_score_only_needs_files(capsys):
    assert main(["eval", "ovobench", "--score-only"]) == 2
    assert "--score-only needs result files" in capsys.readouterr().err
