"""Smoke run of bench/multiturn_cost.py: two seeds of one small setting, every arm (plumbing and table only)."""
import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "multiturn_cost.py"


def test_multiturn_cost_smoke(tiny_model_path, tmp_path):
    spec = importlib.util.spec_from_file_location("bench_multiturn_cost", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "multiturn_cost.md"
    table = bench.main(["--turns", "2", "--per-turn", "3", "--seeds", "0", "1", "--n", "1", "--repeats", "1",
                        "--out", str(out)])  # raises SystemExit if the arms generated unequal token counts
    assert out.read_text().strip() == table.strip()
    assert "--turns 2 --per-turn 3 --seeds 0 1 --n 1 --repeats 1" in table
    row = next(line for line in table.splitlines() if line.startswith("| 2 | 3 |"))
    assert row.count("[") == 9  # four step times and five overhead columns, each with its interval
