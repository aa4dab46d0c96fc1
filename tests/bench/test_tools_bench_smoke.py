"""Smoke run of bench/tools_vs_no_tools.py under the protocol's --smoke: one seed, every arm (the warm-ups, the
coin-flip control, (a), (b), (b'), (c)), the pre-flight, the RL setting chosen on validation, a tiny seek world, a
few SFT and RL steps (plumbing only: no claim can be read from these sizes)."""
import json
from pathlib import Path

import pytest
from support import load_bench


def _args(out, model, results, *extra):
    return ["--smoke", "--seeds", "0", "--out", str(out), "--model", model, "--results", str(results),
            "--n-train", "6", "--n-test", "3", "--n-val", "2", "--sft-steps", "2", "--sft-batch", "3",
            "--rl-steps", "1", "--select-steps", "1", "--prompts", "2", "--n", "2", "--preflight-groups", "2",
            "--lr-grid", "1e-4", "3e-4", "--kl-grid", "0", "--rectify-lrs", "1e-4", "1e-3", "--rectify-steps", "1",
            "--rectify-mix", "0", "1", *extra]


@pytest.mark.slow
def test_tools_bench_smoke(tiny_model_path, tmp_path):
    bench = load_bench("tools_vs_no_tools")
    out = tmp_path / "bench"
    # --prepare-only: the world, both warm-ups and the pre-flight, no RL arm
    bench.main(_args(out, tiny_model_path, tmp_path / "prep.md", "--prepare-only"))
    assert (out / "preflight_seed0.json").exists() and not (out / "selection_seed0.json").exists()
    assert not (out / "seed0" / "c").exists() and not (tmp_path / "prep.md").exists()
    # --only 0: the seed's grid and arms in their own process, no results file; the call without it renders
    assert bench.main(_args(out, tiny_model_path, tmp_path / "table.md", "--only", "0")) == ""
    assert (out / "results_seed0.json").exists() and not (tmp_path / "table.md").exists()
    text = bench.main(_args(out, tiny_model_path, tmp_path / "table.md"))
    assert text.startswith("# Tools: video seek") and "SMOKE RUN" in text and text == (tmp_path / "table.md").read_text()
    for head in ("## Pre-flight (SFT start, before any RL)", "## RL setting, chosen on the validation split",
                 "## held-out accuracy % (greedy", "## call validity %", "## seek IoU x 100",
                 "## held-out accuracy: paired differences", "## The claims, direction per claim",
                 "## RL on the training prompts (mean of the first / last 10 steps)"):
        assert head in text, head
    for row in ("| coin_flip | 0 |", "| b | 0 |", "| b2 | 0 |", "| c | 0 |", "| a | 0 |"):
        assert row in text.split("## RL on the training prompts")[1], row
    for row in ("| sft |", "| coin_flip |", "| a |", "| b |", "| b2 |", "| c |", "| c − b2 |", "| b − coin_flip |"):
        assert row in text, row
    grid = json.loads((out / "selection_seed0.json").read_text())
    assert grid.keys() == {"0.0001,0", "0.0003,0", "_select_steps"} and grid["_select_steps"] == 1
    with pytest.raises(SystemExit, match="scored the grid after 1 RL steps, not --select-steps 2"):
        bench.main(_args(out, tiny_model_path, tmp_path / "other.md", "--select-steps", "2"))
    res = json.loads((out / "results_seed0.json").read_text())
    assert all(res[k]["n"] == 3 for k in ("sft_overview", "sft", "coin_flip", "a", "b", "b2", "c"))
    assert (res["lr"], res["kl"]) in {(1e-4, 0.0), (3e-4, 0.0)}
    # the arms train at the chosen setting with the seed's RL seed; the warm-ups with its SFT seed (seed_plan)
    coin_cfg = (out / "seed0" / "coin_flip" / "config.yaml").read_text()
    assert f"lr: {res['lr']}" in coin_cfg and "seed: 30000" in coin_cfg and "name: coin_flip" in coin_cfg
    assert "seed: 20000" in (out / "seed0" / "sft_tools" / "config.yaml").read_text()
    assert "(b) - (a): **not resolved** (mean" in text and "one seed, no interval" in text
    assert res["rectify"]["episodes"] == 4 and Path(res["rectify"]["final"]).exists()
    sel = res["rectify"]["selection"]  # (c)'s SFT setting chosen on the 2 validation clips among 2 lr x 2 mixes
    assert [c["tag"] for c in sel["candidates"]] == ["lr0.0001_steps1_mix0", "lr0.0001_steps1_mix1",
                                                     "lr0.001_steps1_mix0", "lr0.001_steps1_mix1"]
    assert sel["n_val"] == 2 and all(c["val"]["n"] == 2 for c in sel["candidates"])
    best = max(c["val"]["accuracy"] for c in sel["candidates"])
    assert next(c for c in sel["candidates"] if c["val"]["accuracy"] == best)["tag"] == sel["chosen"]
    assert res["rectify"]["sft"].endswith(sel["chosen"]) and f"(c) chose `{sel['chosen']}`" in text
    # (b'): the same candidates and choice rule from (b)'s run on the teacher scripts of the rewritten samples
    ctl = res["rectify"]["control"]
    rewritten = [json.loads(x)["id"] for x in (out / "seed0" / "c" / "rectified.jsonl").read_text().splitlines()]
    assert [json.loads(x)["id"] for x in Path(ctl["scripts"]).read_text().splitlines()] == list(dict.fromkeys(rewritten))
    assert ctl["samples"] == len(set(rewritten)) and Path(ctl["final"]).exists()
    assert [c["tag"] for c in ctl["selection"]["candidates"]] == [c["tag"] for c in sel["candidates"]]
    assert ctl["selection"]["reference"]["model"] == sel["reference"]["model"]
    assert f"(b') chose `{ctl['selection']['chosen']}`" in text
    val_ids = {x["id"] for x in json.loads((out / "seed0" / "world" / "val.json").read_text())}
    assert val_ids == {"val-00000", "val-00001"} and 0 < res["chance"] < 1
    # a second call reads every stage instead of rerunning it: the same tables
    again = bench.main(_args(out, tiny_model_path, tmp_path / "again.md"))
    rows = lambda text: [x for x in text.splitlines() if x.startswith("| ")]  # noqa: E731
    assert rows(again) == rows(text)


def test_train_curve_reads_the_true_accuracy_and_invalid_calls(tmp_path):
    bench = load_bench("tools_vs_no_tools")
    assert bench.train_curve(tmp_path) == {}
    rows = [{"reward/accuracy": 0.1 * i, "tools/invalid_frac": 0.5 - 0.01 * i} for i in range(12)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    c = bench.train_curve(tmp_path, window=3)
    assert c["steps"] == 12 and c["acc_first"] == pytest.approx(0.1) and c["acc_last"] == pytest.approx(1.0)
    assert c["invalid_first"] == pytest.approx(0.49) and c["invalid_last"] == pytest.approx(0.40)
    # the coin-flip control: its true accuracy, not the coin it was paid
    coin = [{"reward/accuracy": 1.0, "reward/coin_flip/true_accuracy": 0.25} for _ in range(4)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in coin))
    assert bench.train_curve(tmp_path)["acc_last"] == pytest.approx(0.25)
