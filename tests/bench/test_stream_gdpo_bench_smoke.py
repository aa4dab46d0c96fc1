"""Smoke run of bench/stream_gdpo.py: one seed, every arm, a one-stream test split, a few steps (plumbing only)."""
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "stream_gdpo.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_stream_gdpo", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    assert set(rows) == {"orig", "local"} and all(set(rows[k]) == set(bench.ARMS) for k in rows)
    for arm in bench.ARMS:
        for ids, sub in (("orig", f"eval_{arm}"), ("local", f"eval_{arm}_local")):
            assert 0.0 <= rows[ids][arm]["overall"] <= 1.0 and rows[ids][arm]["vtok"] > 0
            assert (out / "seed0" / sub / "side_by_side.md").exists()
    local = json.loads((out / "seed0" / "ovo_test_local_ids.json").read_text())
    assert [it["id"] for it in local] == list(range(len(local)))
    # both RL arms started from the masked-SFT checkpoint and ran the algorithm they name
    for arm, algo in (("stream_grpo_sum", "grpo"), ("stream_gdpo", "stream_gdpo")):
        cfg = (out / "seed0" / arm / "config.yaml").read_text()
        assert f"name: {algo}" in cfg and str(out / "seed0" / "stream_sft" / "final") in cfg
