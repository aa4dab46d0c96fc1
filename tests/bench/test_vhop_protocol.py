"""bench/vhop_protocol.py and vhop_protocol_table.py: world seeds, pooled hop rates, the section rendered from hand
records (CIs, paired differences per level, the rest of the results file kept), and a slow smoke run on the tiny
model that writes a record the render reads."""
import json
import math
from pathlib import Path

import pytest
from support import load_bench

LV = ("L1", "L2", "L3", "L4", "L5")
# per seed: success per level (L1..L5) of single_step, sft, imitate, rl
SUCCESS = {
    0: {"single_step": (0.50, 0.10, 0.0, 0.0, 0.0), "sft": (0.60, 0.20, 0.10, 0.0, 0.0),
        "imitate": (0.60, 0.25, 0.10, 0.05, 0.0), "rl": (0.65, 0.30, 0.15, 0.05, 0.0)},
    1: {"single_step": (0.40, 0.10, 0.05, 0.0, 0.0), "sft": (0.50, 0.20, 0.10, 0.0, 0.0),
        "imitate": (0.55, 0.20, 0.10, 0.0, 0.0), "rl": (0.60, 0.25, 0.10, 0.05, 0.0)},
    2: {"single_step": (0.45, 0.05, 0.0, 0.0, 0.0), "sft": (0.55, 0.15, 0.05, 0.0, 0.0),
        "imitate": (0.55, 0.20, 0.10, 0.0, 0.0), "rl": (0.55, 0.25, 0.10, 0.0, 0.0)},
}


def _eval(levels, signal=0.5):
    ev = {f"success/{lv}": x for lv, x in zip(LV, levels)}
    ev.update(success=sum(levels) / 5, n=400.0, train_signal=signal, hops=4.0)
    return ev


def _hops(h1, h2):
    return {"hop1": h1, "hop2": h2, "n_hop1": 400, "n_hop2": 320, "hop1_chance": 0.002, "hop1_scene_only": 0.043,
            "hop2_scene_only": 0.046}


def _record(seed, smoke=False, arms=("single_step", "sft", "imitate", "rl")):
    probe = lambda acc, ch: {"acc": acc, "chance": ch, "n": 1500, "classes": 40, "se": 0.005}  # noqa: E731
    return {"seed": seed, "command": f"python bench/vhop_protocol.py --seeds 0 1 2 --only {seed}"
                                     + (" --smoke" if smoke else ""),
            "plan": {"seed": seed, "world_seed": 10000 + seed, "sft_seed": 20000 + seed, "rl_seed": 30000 + seed},
            "settings": {"model": "base", "pooling": "last", "train_worlds": 4, "n_train": 50, "heldout_worlds": 4,
                         "n_test": 100, "size": 56, "pretrain_steps": 500, "pretrain_lr": 3e-4, "wd": 1e-3,
                         "sft_steps": 300, "il_steps": 40, "rl_steps": 15, "sft_lr": 1e-4, "il_lr": 1e-4, "rl_lr": 1e-4,
                         "max_hops": 6,
                         "overrides": []},
            "levels": {**{lv: 80 for lv in LV}, "all": 400},
            "preflight": {"probes": {"emblem": probe(0.61 + 0.01 * seed, 0.045), "main": probe(0.7, 0.04),
                                     "scene": probe(0.6, 0.05)}, "hops": _hops(0.0, 0.01 * seed)},
            "after_sft": {"hops": _hops(0.20 + 0.02 * seed, 0.10)},
            "evals": {a: _eval(SUCCESS[seed][a]) for a in arms},
            "minutes": {"preflight": 5.0, "sft": 20.0, "after_sft": 1.0}, "cpu_minutes": {"preflight": 2.0, "sft": 9.0,
                                                                                           "after_sft": 0.5},
            "grid": {}, "costs": {}, "dropped": {}}


def _write(tmp_path: Path, recs):
    d = tmp_path / "records"
    d.mkdir(parents=True)
    for s, r in recs.items():
        (d / f"seed{s}.json").write_text(json.dumps(r))
    return d


def test_world_seeds_are_distinct_within_and_across_protocol_seeds():
    b = load_bench("vhop_protocol")
    seen = []
    for s in (0, 1, 2):
        tr, ho = b.world_seeds(b.seed_plan(s).world_seed, 4, 4)
        assert ho[0] == b.seed_plan(s).world_seed  # the pre-flight's held-out world
        seen += tr + ho
    assert len(seen) == len(set(seen)) == 24
    with pytest.raises(ValueError, match="at most 49 train and 50 held-out worlds"):
        b.world_seeds(10000, 50, 1)


def test_pooled_hops_weight_each_world_by_its_queries():
    b = load_bench("vhop_protocol")
    a = {"hop1": 1.0, "n_hop1": 30, "hop1_chance": 0.01, "hop1_scene_only": 0.1, "hop2": 0.0, "n_hop2": 10,
         "hop2_scene_only": 0.2}
    c = {"hop1": 0.0, "n_hop1": 10, "hop1_chance": 0.03, "hop1_scene_only": 0.3, "hop2": 1.0, "n_hop2": 30,
         "hop2_scene_only": 0.4}
    p = b.pooled_hops([a, c])
    assert p["hop1"] == pytest.approx(0.75) and p["hop2"] == pytest.approx(0.75)
    assert p["hop1_chance"] == pytest.approx(0.015) and p["hop2_scene_only"] == pytest.approx(0.35)
    assert (p["n_hop1"], p["n_hop2"]) == (40, 40)


def test_render_builds_the_section_from_records_and_keeps_the_rest_of_the_file(tmp_path):
    b = load_bench("vhop_protocol")
    t = load_bench("vhop_protocol_table")
    d = _write(tmp_path, {s: _record(s) for s in (0, 1, 2)})
    report = tmp_path / "vhop.md"
    report.write_text("# VHOP router: multi-hop visual retrieval\n\n## Pre-flight on the base\n\nold table\n")
    b.main(["--seeds", "0", "1", "2", "--render", "--seed-dir", str(d), "--report", str(report)])
    text = report.read_text()
    assert text.startswith("# VHOP router: multi-hop visual retrieval\n\n## VHOP-Router from the pre-trained embedder")
    assert "Command: `for s in 0 1 2; do OMP_NUM_THREADS=1 nice -n 10 python bench/vhop_protocol.py --seeds 0 1 2 " \
           "--only $s; done; python bench/vhop_protocol.py --seeds 0 1 2 --render" in text
    assert "SMOKE RUN" not in text and "400 test items per seed" in text
    assert text.index(t.MARK) < text.index("## Pre-flight on the base\n\nold table")  # the old content kept below
    # the pre-flight row of seed 1 and hop-1 after SFT: 20, 22, 24 -> mean 22.0, half-width 4.303 * 2 / sqrt(3)
    row = "| 1 | 62.0 (4.5; 1500) | 70.0 (4.0) | 60.0 (5.0) | 0.0 | 1.0 | 22.0 | 10.0 | 4.3 / 4.6 (400 / 320) |"
    assert row in text
    half = 4.303 * 2 / math.sqrt(3)
    assert f"| hop-1 top-1, after SFT | 22.0 [{22 - half:.1f}, {22 + half:.1f}] (20.0, 22.0, 24.0) |" in text
    # L2: rl - single_step = +20, +15, +20 on every seed; the row says so
    l2 = text.split("### success L2 (%): paired differences")[1]
    row = next(x for x in l2.splitlines() if x.startswith("| rl − single_step"))
    assert "+18.3" in row and "(CI above 0)" in row and row.endswith("| +20.0 | +15.0 | +20.0 | 3/3 |")
    assert "coin_flip: not run (no coin-flip arm" in text and "| L1 (n=80) |" in text
    assert "| router: +RL | 60.0 [47.6, 72.4] (65.0, 60.0, 55.0) |" in text  # L1 of the RL router
    assert "| 4.00 [4.00, 4.00] (4.00, 4.00, 4.00) | 50.0 [" in text  # its mean hops and training signal
    assert "| single-step top-k (SFT embedder) | 45.0 [" in text and "| k = 6 images | — |" in text
    assert "the base embedder (last-token pooling)" in text and "(model.pooling=last: the saved embedder's)" in text
    # a second render replaces the section, keeps what is below the mark once
    b.main(["--seeds", "0", "1", "2", "--render", "--seed-dir", str(d), "--report", str(report)])
    again = report.read_text()
    assert again == text and again.count(t.MARK) == 1 and again.count("old table") == 1


def test_render_labels_a_smoke_run_and_a_missing_seed(tmp_path):
    b = load_bench("vhop_protocol")
    d = _write(tmp_path, {s: _record(s, smoke=True, arms=("single_step", "sft")) for s in (0, 1)})
    report = tmp_path / "vhop.md"
    b.main(["--seeds", "0", "1", "2", "--render", "--seed-dir", str(d), "--report", str(report)])
    text = report.read_text()
    assert "**SMOKE RUN" in text and "**Incomplete: no record for seed(s) [2].**" in text
    assert "router: +RL" not in text.split("## Retrieval success by hop level")[1].split("Training signal")[0]
    assert "| sft − single_step |" in text and "| rl − single_step |" not in text


def test_a_full_run_without_a_validation_split_needs_smoke():
    from _protocol import ProtocolError

    with pytest.raises(ProtocolError, match="validation split"):
        load_bench("vhop_protocol").main(["--seeds", "0", "1", "2", "--only", "0", "--out", "/nonexistent"])


@pytest.mark.slow
def test_smoke_run_on_the_tiny_model_writes_a_record_the_render_reads(tmp_path):
    b = load_bench("vhop_protocol")
    common = ["--seeds", "0", "--smoke", "--seed-dir", str(tmp_path / "rec")]
    rec = b.main(common + ["--only", "0", "--model", "tiny", "--train-worlds", "2", "--n-train", "6",
                           "--heldout-worlds", "2", "--n-test", "5", "--pretrain-steps", "2", "--sft-steps", "2",
                           "--il-steps", "1", "--rl-steps", "1", "--out", str(tmp_path / "run")])
    assert set(rec["evals"]) == {"single_step", "sft", "imitate", "rl"}
    assert rec["levels"]["all"] == 10 and rec["preflight"]["hops"]["n_hop1"] == 10
    assert set(rec["preflight"]["probes"]) == {"emblem", "main", "scene"} and "hops" in rec["after_sft"]
    assert (tmp_path / "run" / "seed0" / "pretrained" / "embedder.json").exists()
    cfg = json.loads((tmp_path / "run" / "seed0" / "pretrained" / "embedder.json").read_text())
    assert cfg["pooling"] == "last" and rec["settings"]["pooling"] == "last"  # the stage configs' pooling
    assert 0.0 <= rec["evals"]["rl"]["success"] <= 1.0 and set(rec["cpu_minutes"]) >= {"preflight", "sft", "rl"}
    again = b.main(common + ["--only", "0", "--model", "tiny", "--train-worlds", "2", "--n-train", "6",
                             "--heldout-worlds", "2", "--n-test", "5", "--pretrain-steps", "2", "--sft-steps", "2",
                             "--il-steps", "1", "--rl-steps", "1", "--out", str(tmp_path / "run")])
    assert again["evals"] == rec["evals"]  # a rerun resumes: nothing is trained again
    report = tmp_path / "vhop.md"
    b.main(common + ["--render", "--report", str(report)])
    assert "**SMOKE RUN" in report.read_text() and "| 0 |" in report.read_text()


def test_the_pre_flight_rewrite_keeps_the_router_section_above_it(tmp_path):
    t = load_bench("vhop_protocol_table")
    pre = load_bench("vhop_preflight_table")
    f = tmp_path / "vhop.md"
    f.write_text("# VHOP router\n\n## Pre-flight\nfirst\n" + pre.MARK + "\nearlier\n")
    t.write_section(f, "## Router\nrows")
    pre.write_results(f, ["## Pre-flight", "second"])
    text = f.read_text()
    assert text == f"# VHOP router\n\n## Router\nrows\n\n{t.MARK}\n\n## Pre-flight\nsecond\n{pre.MARK}\nearlier\n"
    t.write_section(f, "## Router\nnew rows")
    assert f.read_text() == text.replace("rows", "new rows")
