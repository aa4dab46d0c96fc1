"""bench/pacg_protocol.py and pacg_protocol_table.py: the per-claim paired statistics and readings, the pre-flight's
stop (and a smoke run that goes on), and the results file rendered from seed records alone (hand records, no model)."""
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import load_bench

ARMS = ("sft", "coin_flip", "dapo", "dapo+pacg", "vppo", "vppo+pacg")


def _claims(flag_unsup: bool):
    """Claim rows: 8 supported at content persistence 0.2-0.29; 2 unsupported at 0.25 and 0.95 (or all at 0.25: no
    spread, nothing flagged)."""
    rows = [{"supported": True, "claim_patch": 0.99, "claim_full": 0.97, "content_patch": 0.6,
             "content_full": 0.2 + 0.0125 * i if flag_unsup else 0.25} for i in range(8)]
    rows += [{"supported": False, "claim_patch": 0.99, "claim_full": 0.97, "content_patch": 0.9,
              "content_full": v if flag_unsup else 0.25} for v in (0.25, 0.95)]
    return rows


def _preflight(seed: int, can_act: bool = True, cut: int = 0):
    return {"seed": seed, "plan": [10000 + seed, 20000 + seed, 30000 + seed], "test": "/nonexistent/test.json",
            "test_items": [["color", 4], ["location", 4]] * 4, "per_qtype": {"color": 1.0, "location": 1.0},
            "claims": {"sampled": _claims(can_act), "greedy": _claims(can_act)}, "sampled_accuracy": 0.8,
            "truncated": {"greedy": [False] * 20, "sampled": [i < cut for i in range(20)]},
            "groups": {"rewards": [[1, 0], [1, 1]], "correct": [[1, 0], [1, 1]], "qtypes": ["color", "location"],
                       "components": {}, "truncated": [[False, False], [False, False]]},
            "longest_trace": 50, "sft_steps": 300, "sft_lr": 3e-4, "max_new_tokens": 128,
            "minutes": {"sft": 1.0, "diagnose": 0.5, "rollout": 0.1, "total": 1.6}}


def _eval(cwu: float, acc: float, pers: float):
    one = {"correct_with_unsupported": cwu, "unsupported_share": cwu / 2, "accuracy": acc,
           "persistence_unsupported_full": pers, "persistence_supported_full": 0.3, "truncated": 0.0,
           "per_qtype": {"color": acc, "location": acc}}
    return {"sampled": one, "greedy": dict(one, accuracy=1.0)}


# per seed: (correct with an unsupported claim, accuracy, persistence of unsupported) per arm
TABLE = {
    0: {"sft": (0.30, 0.80, 0.70), "coin_flip": (0.31, 0.78, 0.70), "dapo": (0.32, 0.85, 0.75),
        "dapo+pacg": (0.22, 0.86, 0.65), "vppo": (0.30, 0.84, 0.74), "vppo+pacg": (0.35, 0.84, 0.74)},
    1: {"sft": (0.28, 0.79, 0.72), "coin_flip": (0.29, 0.77, 0.71), "dapo": (0.30, 0.86, 0.77),
        "dapo+pacg": (0.21, 0.85, 0.66), "vppo": (0.31, 0.83, 0.73), "vppo+pacg": (0.37, 0.84, 0.75)},
    2: {"sft": (0.29, 0.81, 0.71), "coin_flip": (0.30, 0.80, 0.72), "dapo": (0.31, 0.87, 0.76),
        "dapo+pacg": (0.20, 0.87, 0.67), "vppo": (0.29, 0.85, 0.75), "vppo+pacg": (0.34, 0.86, 0.73)},
}


def _record(seed: int, smoke: bool = False, arms=ARMS, stopped: str = ""):
    cmd = f"python bench/pacg_protocol.py --seeds 0 1 2 --only {seed}" + (" --smoke" if smoke else "")
    evals = {a: _eval(*TABLE[seed][a]) for a in arms}
    rec = {"seed": seed, "command": cmd, "plan": {}, "preflight": _preflight(seed),
           "settings": {"n_train": 1024, "n_test": 512, "n_val": 64, "sft_steps": 300, "sft_lr": 3e-4, "rl_steps": 200,
                        "prompts_per_step": 8, "n": 8, "group_size": 8, "max_new_tokens": 128, "select_on": "sampled",
                        "lr_grid": [1e-6, 1e-5], "kl_grid": [0.0], "model": "base", "overrides": []},
           "grid": {"lr1e-06_kl0": 0.9 + 0.01 * seed, "lr1e-05_kl0": 0.95}, "evals": evals, "stopped": stopped,
           "selection": {"lr": 1e-5, "kl": 0.0, "seeds": [0, 1, 2]},
           "costs": {a: {"median_step_s": 7.0 + seed, "cpu_step_s": 2.0} for a in arms if a != "sft"},
           "cpu_minutes": {"preflight": 3.0, "grid_lr1e-05_kl0": 10.0, "this_run": 13.0},
           "algo_means": {a: {"algo/pacg/claims": 120.0, "algo/pacg/flagged_frac": 0.2, "algo/pacg/gain_flagged_mean": 0.7,
                              "algo/pacg/persistence_mean": 0.4} for a in arms if "+pacg" in a},
           "minutes": {"preflight": 12.0, "grid_lr1e-05_kl0": 30.0, "rl_dapo+pacg": 40.0, "eval_dapo+pacg": 1.0},
           "dropped": {}}
    if stopped:
        for k in ("grid", "evals", "costs", "algo_means"):
            rec[k] = {}
        rec.pop("selection")
    return rec


def _recs(**kw):
    return {s: _record(s, **kw) for s in (0, 1, 2)}


def test_claim_rows_pair_within_seeds_and_read_the_papers_sign():
    t = load_bench("pacg_protocol_table")
    rows = {(r["a"], r["b"], r["key"]): r for r in t.claim_rows(_recs(), [0, 1, 2])}
    r = rows[("dapo+pacg", "dapo", "correct_with_unsupported")]
    assert r["diffs"] == pytest.approx([-0.10, -0.09, -0.11])
    # mean -10.0 pp, s = 1.0, t(0.975, 2) = 4.303: half-width 2.48
    assert r["mean"] == pytest.approx(-10.0) and r["hi"] == pytest.approx(-10.0 + 4.303 / math.sqrt(3), abs=1e-3)
    assert r["reading"] == "reproduced"  # the paper's sign is minus and the interval lies below 0
    assert rows[("vppo+pacg", "vppo", "correct_with_unsupported")]["reading"] == "reversed"  # +5, +6, +5
    assert rows[("dapo+pacg", "dapo", "accuracy")]["reading"] == "not resolved"  # +1, -1, 0
    assert rows[("dapo", "sft", "persistence_unsupported_full")]["reading"] == "reproduced"
    assert rows[("dapo+pacg", "dapo", "persistence_unsupported_full")]["reading"] == "reproduced"
    assert rows[("dapo", "coin_flip", "accuracy")]["reading"] == "reproduced"
    no_vppo = {s: _record(s, arms=("sft", "coin_flip", "dapo", "dapo+pacg")) for s in (0, 1, 2)}
    rows = {(r["a"], r["b"], r["key"]): r for r in t.claim_rows(no_vppo, [0, 1, 2])}
    assert rows[("vppo+pacg", "vppo", "accuracy")]["reading"] == "not run (vppo+pacg has no seed)"
    two = {s: _record(s) for s in (0,)}
    rows = t.claim_rows(two, [0])
    assert rows[0]["reading"] == "not resolved (fewer than 2 seeds)"


def _write(tmp_path: Path, recs):
    d = tmp_path / "records"
    d.mkdir(parents=True)
    for s, r in recs.items():
        (d / f"seed{s}.json").write_text(json.dumps(r))
    return d


def test_render_builds_the_results_file_from_the_records_alone(tmp_path):
    b = load_bench("pacg_protocol")
    d = _write(tmp_path, _recs())
    report = tmp_path / "pacg.md"
    b.main(["--seeds", "0", "1", "2", "--render", "--seed-dir", str(d), "--report", str(report)])
    text = report.read_text()
    assert text.startswith("# PACG over DAPO and VPPO on the tiny base, under the miniature protocol\n\nCommand: `for s "
                           "in 0 1 2; do OMP_NUM_THREADS=1 python bench/pacg_protocol.py --seeds 0 1 2 --only $s & done;")
    assert "SMOKE RUN" not in text and "**Reduced grid**: lr [1e-06, 1e-05] x KL [0.0]" in text
    # the pre-flight from the records (no world on disk): start vs chance, the gate, can act
    assert "| 0 | 100.0 vs 25.0 | 100.0 vs 25.0 |" in text and "## Can PACG act?" in text
    assert "PACG (content, full): can act on seed(s) [0, 1, 2]" in text
    assert "## The grid, per seed (validation accuracy %, sampled at temperature 1, rollout.n per prompt, the DAPO arm)" in text
    assert "| 1e-05 | 95.0 **(chosen)** |" in text and "Chosen: lr 1e-05, KL 0, from the mean over seeds [0, 1, 2]" in text
    assert "| dapo+pacg | 21.0 [18.5, 23.5] | 22.0 | 21.0 | 20.0 |" in text  # arms table, sampled
    assert "| dapo+pacg − dapo | -10.0 [-12.5, -7.5] (CI below 0) | -10.0 | -9.0 | -11.0 | 0/3 |" in text
    assert ("| PACG lowers the share of correct responses with an unsupported claim, over DAPO | dapo+pacg − dapo | "
            "correct_with_unsupported | − | -10.0 [-12.5, -7.5] | -10.0, -9.0, -11.0 | **reproduced** |") in text
    assert "| DAPO+PACG | 120.000 [120.000, 120.000] | 0.200 [0.200, 0.200] | 0.700 [0.700, 0.700] |" in text
    assert "Median wall seconds per RL step (mean over seeds): DAPO, coin-flip reward 8.00" in text
    assert "CPU seconds per RL step (mean over seeds): DAPO, coin-flip reward 2.00" in text
    assert "| 0 | 12.0 | 30.0 | 0.0 | 41.0 | 83.0 | 13.0 |" in text  # CPU: preflight + grid (this_run not added)
    assert "## Earlier runs" in text and "pacg_random_init.md" in text
    assert "What would have stopped" not in text and "## Stopped before RL" not in text
    recs = {s: dict(_record(s, smoke=True), smoke_would_stop="protocol: 9.0% of 20 sampled ...") for s in (0, 1)}
    b.main(["--seeds", "0", "1", "--render", "--seed-dir", str(_write(tmp_path / "s", recs)), "--report", str(report)])
    text = report.read_text()
    assert "**SMOKE RUN: below the protocol's minimums" in text
    assert "## What would have stopped a full run (smoke run: it went on)\n\n- seed 0: protocol: 9.0% of 20" in text


def test_a_stopped_seed_renders_the_reason_and_no_arm(tmp_path):
    b = load_bench("pacg_protocol")
    recs = {s: _record(s, stopped="PACG (content, full) cannot act: the gate flags 0.0% of the claims (< 5%)")
            for s in (0, 1, 2)}
    report = tmp_path / "pacg.md"
    b.main(["--seeds", "0", "1", "2", "--render", "--seed-dir", str(_write(tmp_path, recs)), "--report", str(report)])
    text = report.read_text()
    assert "## Stopped before RL" in text and "- seed 2: PACG (content, full) cannot act" in text
    assert "No seed finished the grid: no setting was chosen." in text and "## Sampled: accuracy %" not in text


def _stage(tmp_path, pf, smoke: bool):
    b = load_bench("pacg_protocol")
    from bpo_protocol import SeedState

    sd = tmp_path / ("smoke" if smoke else "full")
    sd.mkdir(parents=True)
    (sd / "preflight.json").write_text(json.dumps(pf))
    st = SeedState(sd / "state.json")
    b.preflight_stage(0, SimpleNamespace(smoke=smoke), sd, st)
    return json.loads((sd / "state.json").read_text())


def test_the_preflight_stops_a_seed_where_the_gate_cannot_act_or_responses_are_cut(tmp_path):
    assert _stage(tmp_path / "a", _preflight(0), smoke=False)["stopped"] == ""  # flags 1 of 10 claims, gain 0.76
    st = _stage(tmp_path / "b", _preflight(0, can_act=False, cut=2), smoke=False)
    assert st["stopped"].startswith("PACG (content, full) cannot act: the gate flags 0.0% of the claims (< 5%)")
    assert "10.0% of 20 sampled test responses were cut at max_new_tokens = 128, above the 5% limit" in st["stopped"]
    st = _stage(tmp_path / "c", _preflight(0, cut=1), smoke=False)
    assert st["stopped"] == ""  # 5.0% is at the limit, not above it
    st = _stage(tmp_path / "d", _preflight(0, can_act=False), smoke=True)  # a smoke run goes on, the reason is kept
    assert st["stopped"] == "" and "cannot act" in st["smoke_would_stop"]


def test_the_committed_record_keeps_the_test_items_and_rounds_the_claims():
    b = load_bench("pacg_protocol")
    pf = _preflight(0)
    pf["claims"]["sampled"][0]["content_full"] = 0.123456789
    pf["lengths"] = {"greedy": [1] * 20}
    out = b.compact_preflight(pf)
    assert out["claims"]["sampled"][0]["content_full"] == 0.12346 and "lengths" not in out
    assert out["test_items"] == [("color", 4), ("location", 4)] * 4
    assert pf["claims"]["sampled"][0]["content_full"] == 0.123456789  # the stage's own record is untouched


def test_arm_configs_pacg_with_content_persistence_under_full_mask_and_the_coin_flip_without_dynamic_sampling(tmp_path):
    b = load_bench("pacg_protocol")
    from _protocol import Selection

    args = b.build_parser().parse_args(["--only", "0", "--rl-steps", "3"])
    cfgs = {n: b.arm_config(n, tmp_path / "seed0", args, 0, Selection(1e-5, 0.01)) for n in b.ARMS}
    for n in ("dapo+pacg", "vppo+pacg"):
        p = cfgs[n].algorithm.params
        assert cfgs[n].algorithm.name == "pacg" and p["persistence"] == "content" and p["intervention"] == "full_mask"
        assert p["base"]["name"] == n.split("+")[0]
    assert [r.name for r in cfgs["coin_flip"].rewards] == ["coin_flip"]
    assert cfgs["coin_flip"].algorithm.params["dynamic_sampling"] is False
    assert {(c.train.lr, c.algorithm.kl_coef, c.train.steps, c.rollout.n, c.train.prompts_per_step)
            for c in cfgs.values()} == {(1e-5, 0.01, 3, 8, 8)}
    assert len({c.train.seed for c in cfgs.values()}) == 1 and str(cfgs["dapo"].model.path).endswith("seed0/sft/final")


@pytest.mark.slow
def test_one_smoke_seed_runs_every_stage_on_the_tiny_model_then_renders(tiny_model_path, tmp_path):
    b = load_bench("pacg_protocol")
    out, recs = tmp_path / "out", tmp_path / "records"
    run = ["--smoke", "--seeds", "0", "--n-train", "4", "--n-val", "2", "--n-test", "4", "--sft-steps", "1",
           "--group-size", "2", "--rl-steps", "1", "--prompts-per-step", "2", "--n", "2", "--lr-grid", "1e-5",
           "--kl-grid", "0.0", "--wait-min", "0.01", "--model", tiny_model_path, "--out", str(out),
           "--seed-dir", str(recs)]
    b.main(run + ["--only", "0"])
    rec = json.loads((recs / "seed0.json").read_text())
    assert set(rec["evals"]) == set(ARMS) and rec["stopped"] == ""
    assert "cannot act" in rec["smoke_would_stop"]  # the untrained model writes no claim: a full run would stop
    assert set(rec["grid_both"]["lr1e-05_kl0"]) == {"greedy", "sampled"} and rec["selection"]["lr"] == 1e-5
    assert all(rec["costs"][a]["cpu_step_s"] > 0 for a in ARMS if a not in ("sft", "dapo"))
    assert rec["evals"]["dapo"]["sampled"]["n_responses"] == 4.0 and "test_items" in rec["preflight"]
    report = tmp_path / "pacg.md"
    b.main(["--seeds", "0", "--render", "--seed-dir", str(recs), "--report", str(report)])
    text = report.read_text()
    assert "**SMOKE RUN" in text and "## The paper's direction, per claim" in text and "| dapo+pacg |" in text
