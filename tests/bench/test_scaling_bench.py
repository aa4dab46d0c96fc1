"""bench/scaling.py: the growth fits and tables on synthetic numbers (fast), and its --quick path end to end (slow)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from support import load_bench

REPO = Path(__file__).resolve().parents[2]


def test_loglog_slope_recovers_powers():
    rep = load_bench("scaling_report")
    xs = [4, 16, 64, 256, 1024]
    assert rep.loglog_slope(xs, [3 * x for x in xs]) == pytest.approx(1.0)
    assert rep.loglog_slope(xs, [0.5 * x * x for x in xs]) == pytest.approx(2.0)
    assert rep.loglog_slope(xs, [7.0] * 5) == pytest.approx(0.0)
    assert math.isnan(rep.loglog_slope([4], [1.0]))
    assert math.isnan(rep.loglog_slope([4, 8], [0.0, 1.0]))  # log of a non-positive cost is skipped
    # a fixed cost plus a linear part: sub-linear over the whole range, ~linear between the last two points
    ys = [100 + x for x in xs]
    assert rep.loglog_slope(xs, ys) < 0.5 < 0.8 < rep.loglog_slope(xs[-2:], ys[-2:]) < 1.0


def test_growth_names():
    rep = load_bench("scaling_report")
    assert [rep.growth_name(s) for s in (0.3, 1.0, 1.5, 2.0, 2.6)] == [
        "sub-linear", "~linear", "between linear and quadratic", "~quadratic", "super-quadratic"]
    assert rep.growth_name(float("nan")) == "-"


def _summary(cpu, peak, delta, tokens=16.0):
    return {"cpu_s": cpu, "wall_s": 2 * cpu, "peak_mb": peak, "delta_mb": delta, "tokens_per_response": tokens,
            "samples_per_step": 8.0, "process_cpu_s": 10.0, "threads": 1}


def test_fits_and_tables_on_synthetic_points(tmp_path):
    rep = load_bench("scaling_report")
    L = [4, 16, 64, 256]
    S = {"length": {"mmrl": {f"{x}": [_summary(0.01 * x, 900 + x, x), _summary(0.03 * x, 900 + x, x)] for x in L},
                    "trl": {f"{x}": [_summary(1e-4 * x * x, 1000 + x, 2 * x)] for x in L}},
         "turns": {"mmrl": {f"{x}": [_summary(0.5 * x, 950, 10)] for x in (1, 2, 4)}}}
    rows = {(r["axis"], r["arm"], r["metric"]): r for r in rep.fits(S)}
    assert rows[("length", "mmrl", "CPU s / step")]["slope_all"] == pytest.approx(1.0)  # median of 0.01x, 0.03x
    assert rows[("length", "trl", "CPU s / step")]["growth"] == "~quadratic"
    assert rows[("length", "mmrl", "RSS growth over load, MB")]["slope_tail"] == pytest.approx(1.0)
    assert rows[("turns", "mmrl", "peak RSS MB")]["growth"] == "sub-linear"
    assert ("turns", "trl", "CPU s / step") not in rows
    assert rep.growth_summary(rep.fits(S)) == ("response length (new tokens): mmrl 1.00 (~linear), TRL 2.00 (~quadratic); "
                                               "turns per episode: mmrl 1.00 (~linear).")
    table = rep.fits_table(rep.fits(S))
    assert "| response length (new tokens) | TRL | CPU s / step | 4-256 | 2.00 | 2.00 | ~quadratic |" in table
    axis = rep.axis_table(S, "length")
    row = next(l for l in axis.splitlines() if l.startswith("| 256 |"))
    assert row.split(" | ")[1] == "5.120 (2.560-7.680)" and row.endswith("| 1.28 |")  # mmrl: median 0.02 x 256; TRL / mmrl = 6.5536 / 5.12
    assert "no path" in rep.axis_table(S, "turns", "no path: x")
    rep.plot(S, str(tmp_path / "p.png"), "synthetic")
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_summarize_skips_warmup_and_takes_medians():
    bench = load_bench("scaling")
    res = {"per_step": [{"cpu": 9.0, "step": 9.0, "tokens": 8, "samples": 2}] +
                        [{"cpu": c, "step": 2 * c, "tokens": 32, "samples": 2} for c in (1.0, 3.0, 2.0)],
           "ru_maxrss_kb": 2048 * 1024, "pre_kb": 1024 * 1024, "process_cpu_s": 20.0, "threads": 1}
    s = bench.summarize(res, warmup=1)
    assert (s["cpu_s"], s["wall_s"], s["peak_mb"], s["delta_mb"], s["tokens_per_response"]) == (2.0, 4.0, 2048, 1024, 16)


@pytest.mark.slow
def test_scaling_quick_runs_end_to_end(tiny_model_path, tmp_path):
    """--quick on the two mmrl-only axes, one repetition (each point a fresh process: minutes on a loaded box)."""
    doc = tmp_path / "doc" / "scaling"
    cmd = [sys.executable, str(REPO / "bench" / "scaling.py"), "--quick", "--steps", "2", "--reps", "1", "--axes",
           "frames", "turns", "--no-trl", "--out", str(tmp_path / "out"), "--doc", str(doc)]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    md = doc.with_suffix(".md").read_text()
    assert md.startswith("Command: `OMP_NUM_THREADS=1 .venv/bin/python bench/scaling.py --quick --steps 2")
    assert "| frames per clip | mmrl | CPU s / step | 4-8 |" in md and "| turns per episode | mmrl |" in md
    assert doc.with_suffix(".png").exists()
    res = json.loads((tmp_path / "out" / "results.json").read_text())["results"]
    two_turns = res["turns"]["mmrl"]["2"][0]["per_step"]
    assert all(s["tokens"] == 2 * 16 * s["samples"] for s in two_turns)  # forced length: 2 turns x 16 tokens each
    assert res["frames"]["mmrl"]["8"][0]["ru_maxrss_kb"] > 0
