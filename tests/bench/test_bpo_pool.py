"""Per-seed records of bench/bpo_vs_grpo.py, seeds recovered from a results markdown (bench/bpo_recover.py) and the
table pooled from both (bench/bpo_pool.py): the reader returns the printed per-seed values, catches a markdown
whose means disagree with its per-seed rows, and the pooled table uses every seed for differences and marks the
arm metrics a recovered seed lacks. No model: seed results are built by hand."""
import importlib.util
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
CMD = (".venv/bin/python bench/bpo_vs_grpo.py --seeds {seeds} --jobs 2 --n-train 192 --n-test 64 --sft-steps 200 "
       "--rl-steps 40 --prompts-per-step 8 --cost-tokens 0 --out runs/x")
SETTINGS = dict(n_train=192, n_test=64, sft_steps=200, rl_steps=40, prompts_per_step=8, sft_null_share=0.05,
                prior=None, prior_strength=0.8)
ARMS = ("grpo", "bpo")


def _mod(name):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _result(seed):
    """One seed's result as run_seed returns it; values are k / 13 (the 64-clip world's per-type counts)."""
    ev = {}
    for j, arm in enumerate(("sft",) + ARMS):
        k = (seed + 2 * j) % 7
        pq = {"color": (k + 1) / 13, "direction": k / 13, "order": (k + 3) / 13, "count": 5 / 13, "location": 7 / 12}
        p, r = (0.0, 0.0) if arm != "bpo" else (1.0, 0.25 + 0.2 * seed)
        ev[arm] = {"macro": sum(pq.values()) / 5, "temporal": (pq["direction"] + pq["order"]) / 2, "per_qtype": pq,
                   "abstain_precision": p, "abstain_recall": r, "abstain_f1": 2 * p * r / (p + r) if p + r else 0.0,
                   "stability": (20 + seed + j) / 64, "sensitivity": (30 - seed + j) / 64, "no_look": 1 - r,
                   "null_recall": {"null_black": r, "null_noise": r / 2}, "n": {"anchors": 64, "stability_rate": 64}}
    costs = {a: {"median_step_s": 1.0 + i + 0.1 * seed, "rollout_s": 0.6 + i, "update_s": 0.4 + i / 2,
                 "view_share": 0.001 * i, "prompts": 8 * (1 + 3 * i), "prompt_tokens": 625 * (1 + 3 * i),
                 "response_tokens": 130} for i, a in enumerate(ARMS)}
    return {"seed": seed, "eval": ev, "costs": costs, "budgets": {a: {"color": 8, "order": 8} for a in ARMS},
            "algos": {"grpo": "grpo", "bpo": "bpo"}, "minutes": {"total": 7.0, "sft": 4.0, "rl": 2.0, "eval": 1.0}}


def _markdown(results):
    table = _mod("bpo_table")
    args = SimpleNamespace(**SETTINGS, commands=[CMD.format(seeds=" ".join(str(r["seed"]) for r in results))])
    return table.render(results, args, 10.0, "GRPO (G=8): 8; BPO (2x4): 8", None)


def test_recover_returns_the_printed_per_seed_values():
    recover = _mod("bpo_recover")
    results = [_result(s) for s in (0, 1, 2)]
    recs = recover.recover(_markdown(results))
    assert [r["seed"] for r in recs] == [0, 1, 2]
    for r, rec in zip(results, recs):
        assert rec["settings"] == SETTINGS and rec["command"].startswith(".venv/bin/python bench/bpo_vs_grpo.py")
        assert rec["budgets"] == {"grpo": {"recovered": [8]}, "bpo": {"recovered": [8]}}
        for arm in ("sft",) + ARMS:
            e, got = r["eval"][arm], rec["eval"][arm]
            assert got["macro"] == pytest.approx(round(100 * e["macro"], 1) / 100)
            assert got["per_qtype"]["order"] == pytest.approx(round(100 * e["per_qtype"]["order"], 1) / 100)
            assert got["temporal"] == pytest.approx(e["temporal"], abs=6e-4)  # equal counts: mean of dir and order
            assert got["abstain_f1"] == pytest.approx(e["abstain_f1"], abs=2e-3)
            assert "stability" not in got and "no_look" not in got  # printed only as means / differences
        for k in ("macro", "stability", "no_look", "abstain_f1"):
            want = r["eval"]["bpo"][k] - r["eval"]["grpo"][k]
            assert rec["diffs"]["bpo - grpo"][k] == pytest.approx(round(100 * want, 1) / 100)
        c, g = rec["costs"]["bpo"], r["costs"]
        assert c["median_step_s"] == pytest.approx(g["bpo"]["median_step_s"], abs=1e-3)
        assert c["rollout_ratio"] == pytest.approx(round(g["bpo"]["rollout_s"] / g["grpo"]["rollout_s"], 2))
        assert c["prompt_tokens"] == g["bpo"]["prompt_tokens"]


def test_recover_refuses_a_markdown_whose_means_disagree_with_its_rows():
    recover = _mod("bpo_recover")
    md = _markdown([_result(s) for s in (0, 1, 2)])
    row = next(x for x in md.splitlines() if x.startswith("| 1 | bpo |"))
    cells = row.split(" | ")
    cells[7] = f"{float(cells[7]) + 9:.1f}"  # seed 1's BPO macro, 9 pp off the arm table's mean
    with pytest.raises(ValueError, match="cross-check: BPO \\(2x4\\) / macro acc"):
        recover.recover(md.replace(row, " | ".join(cells)))


def test_pool_recovered_and_new_seeds(tmp_path):
    recover, pool, vs = _mod("bpo_recover"), _mod("bpo_pool"), _mod("bpo_vs_grpo")
    old = [_result(s) for s in (0, 1)]
    for rec in recover.recover(_markdown(old)):
        (tmp_path / "old").mkdir(exist_ok=True)
        rec["origin"] = {"recovered_from": "bench/results/x.md", "commit": "0" * 40, "reader": "bench/bpo_recover.py"}
        (tmp_path / "old" / f"seed{rec['seed']}.json").write_text(json.dumps(rec))
    new = _result(2)
    run = {"argv": CMD.format(seeds="2").split()[2:], "settings": SETTINGS, "cost_long": None}
    pool.write_seed_records([new], tmp_path / "new", run)
    assert json.loads((tmp_path / "new" / "seed2.json").read_text())["command"] == CMD.format(seeds="2")
    recs = pool.load_records([str(tmp_path / "old"), str(tmp_path / "new")])
    assert [r["seed"] for r in recs] == [0, 1, 2]
    report = tmp_path / "pooled.md"
    vs.main(["--pool", str(tmp_path / "old"), str(tmp_path / "new"), "--report", str(report)])
    md = report.read_text()
    assert "seeds [0, 1, 2]" in md and CMD.format(seeds="0 1") in md and CMD.format(seeds="2") in md
    assert "recovered by `bench/bpo_recover.py`" in md
    # differences over all three seeds, the recovered ones as printed
    per_seed = next(x for x in md.splitlines() if x.startswith("| BPO − GRPO | ") and x.count(",") >= 10)
    stab = [new["eval"][a]["stability"] for a in ("bpo", "grpo")]
    assert f"{100 * (stab[0] - stab[1]):+.1f}" in per_seed.split(" | ")[4].split(", ")[2]
    old_stab = [100 * (r["eval"]["bpo"]["stability"] - r["eval"]["grpo"]["stability"]) for r in old]
    assert per_seed.split(" | ")[4].split(", ")[:2] == [f"{x:+.1f}" for x in old_stab]  # the recorded differences
    # arm metrics only seed 2 holds are marked; macro (all seeds) is not
    arm_row = next(x for x in md.splitlines() if x.startswith("| BPO (2x4) | "))
    cells = arm_row.split(" | ")
    assert not cells[1].endswith("†") and cells[4].endswith("†")
    assert "† Over seeds [2] only (stability (changed pixels), sensitivity (vs expected), answer w/o looking)" in md
    # bimodal: seeds 1 and 2 learned (F1 >= 50); answer w/o looking kept by seed 2 only
    learned = next(x for x in md.splitlines() if x.startswith("| BPO (2x4) | 2 / 3"))
    assert "(seeds [2]; not kept for the others)" in learned
    assert "Held-out abstention recall per null canvas (mean over seeds [2]" in md
    assert "| 0 | bpo |" in md and "| 2 | bpo |" in md  # cost rows of every seed
    with pytest.raises(SystemExit):  # a flag --pool would ignore is refused
        vs.main(["--pool", str(tmp_path / "new"), "--seeds", "2"])


def test_pool_refuses_mixed_settings_and_repeated_seeds(tmp_path):
    pool = _mod("bpo_pool")
    run = {"argv": CMD.format(seeds="0").split()[2:], "settings": SETTINGS}
    pool.write_seed_records([_result(0)], tmp_path / "a", run)
    pool.write_seed_records([_result(0)], tmp_path / "b", run)
    with pytest.raises(ValueError, match="seed 0 twice"):
        pool.load_records([str(tmp_path / "a"), str(tmp_path / "b")])
    other = dict(run, settings=dict(SETTINGS, rl_steps=80))
    pool.write_seed_records([_result(1)], tmp_path / "c", other)
    with pytest.raises(ValueError, match="settings differ: rl_steps = 40 in .*, 80 in"):
        pool.load_records([str(tmp_path / "a"), str(tmp_path / "c")])
    assert not math.isnan(pool.load_records([str(tmp_path / "a")])[0]["eval"]["bpo"]["macro"])


def test_disagreements_name_what_a_rerun_changed():
    recover = _mod("bpo_recover")
    results = [_result(s) for s in (0, 1)]
    recs = recover.recover(_markdown(results))
    assert recover.disagreements(recs[1], results[1]) == []
    changed = json.loads(json.dumps(results[1]))
    changed["eval"]["bpo"]["per_qtype"]["order"] += 1 / 13
    changed["eval"]["bpo"]["stability"] += 1 / 64
    bad = recover.disagreements(recs[1], changed)
    assert any(b.startswith("bpo order:") for b in bad)
    assert any(b.startswith("bpo - grpo stability:") for b in bad) and len(bad) == 2


def test_pooled_sources_say_whether_reruns_reproduce_the_earlier_table(tmp_path):
    recover, pool = _mod("bpo_recover"), _mod("bpo_pool")
    results = [_result(s) for s in (0, 1)]
    (tmp_path / "recovered").mkdir()
    for rec in recover.recover(_markdown(results)):
        rec["origin"] = {"recovered_from": "bench/results/x.md", "commit": "a" * 40, "reader": "bench/bpo_recover.py"}
        (tmp_path / "recovered" / f"seed{rec['seed']}.json").write_text(json.dumps(rec))
    run = {"argv": CMD.format(seeds="0 1").split()[2:], "settings": SETTINGS}
    pool.write_seed_records(results, tmp_path, run)
    line = pool.reproduction(tmp_path)[0]
    assert line.startswith("- seeds [0, 1] were run before: `bench/results/x.md` at commit aaaaaaaaaa")
    assert "is reproduced by these records" in line
    results[1]["eval"]["grpo"]["per_qtype"]["color"] += 2 / 13
    pool.write_seed_records(results, tmp_path, run)
    assert "differ from it in seed 1:" in pool.reproduction(tmp_path)[0]
