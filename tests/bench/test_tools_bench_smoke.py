"""Smoke run of bench/tools_vs_no_tools.py: one seed, every arm, a tiny seek world, a few SFT and RL steps (plumbing
only)."""
import json
from pathlib import Path

import pytest
from support import load_bench


@pytest.mark.slow
def test_tools_bench_smoke(tiny_model_path, tmp_path):
    bench = load_bench("tools_vs_no_tools")
    out = tmp_path / "bench"
    table = bench.main(["--seeds", "0", "--out", str(out), "--n-train", "6", "--n-test", "3", "--sft-steps", "2",
                        "--sft-batch", "3", "--rl-steps", "1", "--prompts", "2", "--n", "2", "--n-val", "2",
                        "--rectify-lrs", "1e-4", "1e-3", "--rectify-steps", "1", "--rectify-mix", "0", "1", "--model", tiny_model_path, "--results", str(tmp_path / "table.md")])
    for label in bench.ARM_LABEL.values():
        assert f"| {label} |" in table
    res = json.loads((out / "results_seed0.json").read_text())
    assert all(res[k]["n"] == 3 for k in ("sft_plain", "sft_tools", "a", "b", "b2", "c"))
    assert res["rectify"]["episodes"] == 4 and Path(res["rectify"]["final"]).exists()
    sel = res["rectify"]["selection"]  # (c)'s SFT setting chosen on the 2 validation clips among 2 lr x 2 mixes
    assert [c["tag"] for c in sel["candidates"]] == ["lr0.0001_steps1_mix0", "lr0.0001_steps1_mix1",
                                                     "lr0.001_steps1_mix0", "lr0.001_steps1_mix1"]
    assert sel["n_val"] == 2 and all(c["val"]["n"] == 2 for c in sel["candidates"])
    best = max(c["val"]["accuracy"] for c in sel["candidates"])
    assert next(c for c in sel["candidates"] if c["val"]["accuracy"] == best)["tag"] == sel["chosen"]
    assert res["rectify"]["sft"].endswith(sel["chosen"]) and f"chose `{sel['chosen']}`" in table
    val_ids = {x["id"] for x in json.loads((out / "seed0" / "world" / "val.json").read_text())}
    assert val_ids == {"val-00000", "val-00001"}
    assert 0 < res["chance"] < 1 and (tmp_path / "table.md").read_text().count("| (") == 4
    # (b'): the same candidates and choice rule from (b)'s run on the teacher scripts of the rewritten samples
    ctl = res["rectify"]["control"]
    rewritten = [json.loads(x)["id"] for x in (out / "seed0" / "c" / "rectified.jsonl").read_text().splitlines()]
    assert [json.loads(x)["id"] for x in Path(ctl["scripts"]).read_text().splitlines()] == list(dict.fromkeys(rewritten))
    assert ctl["samples"] == len(set(rewritten)) and Path(ctl["final"]).exists()
    assert [c["tag"] for c in ctl["selection"]["candidates"]] == [c["tag"] for c in sel["candidates"]]
    assert ctl["selection"]["reference"]["model"] == sel["reference"]["model"]
    assert "(c) - (b'), what rectification adds" in table and f"(b') chose `{ctl['selection']['chosen']}`" in table
    # a second call reads the seed's results instead of rerunning it: the same rows
    again = bench.main(["--seeds", "0", "--out", str(out), "--results", str(tmp_path / "again.md")])
    rows = lambda text: [x for x in text.splitlines() if x.startswith("| ")]  # noqa: E731
    assert rows(again) == rows(table)
