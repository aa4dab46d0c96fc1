"""Smoke run of bench/multiturn_cost.py: two seeds of one small setting, every arm (plumbing and table only)."""
from support import load_bench


def test_multiturn_cost_smoke(tiny_model_path, tmp_path):
    bench = load_bench("multiturn_cost")
    out = tmp_path / "multiturn_cost.md"
    table = bench.main(["--turns", "2", "--per-turn", "3", "--seeds", "0", "1", "--n", "1", "--repeats", "1",
                        "--out", str(out)])  # raises SystemExit if the arms generated unequal token counts
    assert out.read_text().strip() == table.strip()
    assert "--turns 2 --per-turn 3 --seeds 0 1 --n 1 --repeats 1" in table
    row = next(line for line in table.splitlines() if line.startswith("| 2 | 3 |"))
    assert row.count("[") == 9  # four step times and five overhead columns, each with its interval
