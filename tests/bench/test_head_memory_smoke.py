"""Smoke run of bench/head_memory.py at a tiny setting: one row, both modes measured, the same gradients (the bench
checks them), positive costs and ratios."""
import pytest

from support import load_bench


def test_head_memory_smoke():
    table = load_bench("head_memory").main(["--settings", "600:64:16", "--chunk", "256"])
    rows = [[c.strip() for c in line.strip("| ").split("|")] for line in table.splitlines()
            if line.startswith("| 600 |")]
    assert len(rows) == 1
    _, vocab, hidden, full_mb, part_mb, growth, ratio, full_s, part_s, cpu_ratio = rows[0]
    assert (vocab, hidden) == ("64", "16") and " / " in growth
    assert all(float(x) > 0 for x in (full_mb, part_mb, cpu_ratio))
    assert min(float(full_s), float(part_s), float(ratio)) >= 0


@pytest.mark.parametrize("argv, msg", [(["--settings", "600:64"], "T:V:H"), (["--settings", "0:64:16"], "positive"),
                                       (["--chunk", "0"], "--chunk must be >= 1")])
def test_head_memory_bad_arguments_fail_in_one_line(argv, msg):
    with pytest.raises(SystemExit, match=msg):
        load_bench("head_memory").main(argv)
