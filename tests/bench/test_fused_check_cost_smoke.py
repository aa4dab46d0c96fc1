"""Smoke run of bench/fused_check_cost.py on the tiny model: one table row, a verdict and positive costs."""
from support import load_bench


def test_fused_check_cost_smoke(tiny_model_path):
    table = load_bench("fused_check_cost").main(["--models", "tiny", "--reps", "1"])
    rows = [[c.strip() for c in line.strip("| ").split("|")] for line in table.splitlines()
            if line.startswith("| tiny |")]
    assert len(rows) == 1
    verdict, *costs = rows[0][3:]
    assert verdict.startswith("fused (") or verdict == "transformers' forward"
    assert all(float(c) > 0 for c in costs)
