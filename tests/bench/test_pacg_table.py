"""bench/pacg_table.py: arm cells are mean [95% CI] over seeds, differences are paired within seeds, and every
row the README quotes is there (pure rendering on hand-made results, no training)."""
import argparse
import math
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import bpo_table  # noqa: E402
import pacg_table  # noqa: E402


def _eval(acc, pu, ps, pu_f, ps_f):
    return {"accuracy": acc, "correct_with_unsupported": 0.5, "persistence_unsupported": pu, "persistence_supported": ps,
            "persistence_unsupported_full": pu_f, "persistence_supported_full": ps_f, "efs_token_mean": 0.02,
            "claims_per_response": 2.0}


def _results():
    cost = lambda s: {"step_s": s, "rollout_s": s / 2, "update_s": s / 2, "resample_rounds": 0.5}  # noqa: E731
    res = []
    for seed, (a_dapo, a_pacg) in enumerate([(0.40, 0.45), (0.50, 0.52), (0.30, 0.38)]):
        res.append({"seed": seed, "arms": {
            "dapo": {"eval": _eval(a_dapo, 0.9, 0.8, 0.7, 0.5), "cost": cost(1.0), "side_by_side": ["dapo", "dapo+pacg"]},
            "dapo+pacg": {"eval": _eval(a_pacg, 0.9, 0.8, 0.6, 0.5), "cost": cost(1.2 + 0.1 * seed),
                          "side_by_side": ["dapo", "dapo+pacg"],
                          "algo_means": {"algo/pacg/flagged_frac": 0.1, "algo/pacg/claims": 30.0}}}})
    return res


def test_cells_are_t_intervals_and_differences_are_paired():
    m, lo, hi = bpo_table.ci95([1.0, 2.0, 3.0])
    assert pacg_table.ci_cell([1.0, 2.0, 3.0], 1, 2) == f"2.00 [{lo:.2f}, {hi:.2f}]"
    assert math.isclose(hi - m, 4.303 * 1.0 / math.sqrt(3), rel_tol=1e-9)  # t_{0.975, 2} · s / sqrt(n)
    assert pacg_table.ci_cell([0.5], 100, 1) == "50.0" and pacg_table.ci_cell([float("nan")]) == "n/a"
    assert pacg_table.seeds_cell([0.05, -0.02], 100, 1, signed=True) == "+5.0 / -2.0"
    args = argparse.Namespace(n_train=8, n_test=4, unsupported_source="prior", warmup_steps=1, sft_steps=1, rl_steps=1,
                              prompts_per_step=1, n=2, lr=1e-4)
    prep = {"sft": _eval(0.35, 0.95, 0.9, 0.8, 0.6)}
    table = pacg_table.render(prep, _results(), args, ["dapo", "dapo+pacg"])
    diff = [0.05, 0.02, 0.08]  # dapo+pacg − dapo accuracy, seed by seed
    row = next(line for line in table.splitlines() if line.startswith("| dapo+pacg − dapo |"))
    assert row.split(" | ")[1] == pacg_table.ci_cell(diff, 100, 1, signed=True)
    per = table.splitlines()[table.splitlines().index(row) + 1]
    assert per.split(" | ")[1] == "+5.0 / +2.0 / +8.0"
    # the gap column (unsupported − supported persistence, full mask) and the arm − SFT rows
    dapo = next(line for line in table.splitlines() if line.startswith("| dapo | "))
    assert dapo.split(" | ")[8] == "0.200 [0.200, 0.200]"
    assert "| dapo − SFT |" in table and "| vppo − grpo |" not in table  # absent arms give no row
    assert "× dapo (1.200 / 1.300 / 1.400)" in table and "PACG gate activity" in table
