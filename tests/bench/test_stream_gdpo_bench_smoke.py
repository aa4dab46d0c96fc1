"""Smoke run of bench/stream_gdpo.py: one seed, every arm, a one-stream test split, a few steps (plumbing only)."""
import json
from pathlib import Path

import pytest
from support import load_bench


def _load():
    return load_bench("stream_gdpo")


@pytest.mark.slow
def test_stream_gdpo_bench_smoke(tiny_model_path, tmp_path, capsys):
    bench = _load()
    out = tmp_path / "bench"
    bench.main(["--seeds", "0", "--n-train", "2", "--n-test", "1", "--sft-steps", "2", "--rl-steps", "1",
                "--offline-sft-steps", "2", "--prompts-per-step", "1", "--n", "2", "--out", str(out),
                "--report", str(tmp_path / "report.md")])
    table = (tmp_path / "report.md").read_text()
    for arm in bench.ARMS:
        assert f"| {bench.LABEL[arm]} |" in table
    rows = json.loads((out / "seed0" / "rows.json").read_text())
    assert set(rows) == set(bench.ARMS)
    for arm in bench.ARMS:
        assert 0.0 <= rows[arm]["overall"] <= 1.0 and rows[arm]["vtok"] > 0
        assert (out / "seed0" / f"eval_{arm}" / "side_by_side.md").exists()
    # the stream arms trained on stream-local question ids (the world's OVO item ids are never the handles)
    turns = (out / "seed0" / "world" / "teacher.jsonl").read_text()
    assert "response(q0," in turns and "response(q1000" not in turns
    # a rerun reusing the offline arm of the same world: same offline row, stream arms retrained
    out2 = tmp_path / "bench2"
    bench.main(["--seeds", "0", "--n-train", "2", "--n-test", "1", "--sft-steps", "2", "--rl-steps", "1",
                "--prompts-per-step", "1", "--n", "2", "--out", str(out2), "--reuse-offline", str(out),
                "--report", str(tmp_path / "report2.md")])
    again = json.loads((out2 / "seed0" / "rows.json").read_text())
    assert again["offline_grpo"] == rows["offline_grpo"] and not (out2 / "seed0" / "offline_sft").exists()
    # both RL arms started from the masked-SFT checkpoint and ran the algorithm they name
    for arm, algo in (("stream_grpo_sum", "grpo"), ("stream_gdpo", "stream_gdpo")):
        cfg = (out / "seed0" / arm / "config.yaml").read_text()
        assert f"name: {algo}" in cfg and str(out / "seed0" / "stream_sft" / "final") in cfg


def test_no_tracking_reference_row(tmp_path):
    """The no-model row: forward questions answered once with their first probe's gold score some FT, never BT/RT."""
    from mmrl.data.synth_stream import make_stream_world

    world = make_stream_world(str(tmp_path), 1, 2, seed=0)
    row = _load().no_tracking_row(Path(world["ovo_test"]))
    assert row["bt"] == row["rt"] == 0.0 and 0.0 < row["ft"] < 1.0 and row["overall"] == row["ft"] / 2
