"""bench/vs_trl.py's headline (bench/_speed_headline.py): the best arm per framework, the per-repetition ratios, the
overlap efficiency (bench/async_overlap.py) and peak RSS summed over an arm's processes, on hand-made summaries
(no training)."""
import argparse
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import _speed_headline as sh  # noqa: E402
import async_overlap  # noqa: E402
import vs_trl  # noqa: E402


def _runs(steps_per_s, rss=None, processes=1, threads=1, **phases):
    rss = rss or [1000.0] * len(steps_per_s)
    runs = [{"steps_per_s": s, "peak_rss_mb": r, "processes": processes, "threads": threads}
            for s, r in zip(steps_per_s, rss)]
    for key, values in phases.items():
        for run, v in zip(runs, values):
            run[key] = v
    return runs


def test_best_arm_is_the_highest_median_steps_per_s():
    S = {"mmrl": _runs([1.0, 3.0, 2.0]),          # median 2.0 (the mean, 2.0, would tie; the max, 3.0, would win)
         "mmrl_t2": _runs([2.5, 0.5, 2.4]),       # median 2.4: the best
         "mmrl_async": []}                        # did not run
    assert sh.best_arm(S, ["mmrl", "mmrl_t2", "mmrl_async"]) == "mmrl_t2"
    assert sh.best_arm(S, ["mmrl", "mmrl_async"]) == "mmrl"
    assert sh.best_arm({"a": _runs([2.0]), "b": _runs([2.0])}, ["b", "a"]) == "b"  # a tie: the first listed
    assert sh.best_arm(S, ["trl", "mmrl_async"]) is None


def test_headline_ratios_are_per_repetition_pair_of_the_best_arms():
    S = {"mmrl": _runs([3.0, 3.0]), "mmrl_async": _runs([4.0, 6.0], rss=[900.0, 1100.0], processes=2),
         "trl": _runs([2.0, 2.0], rss=[1000.0, 1000.0]), "trl_t2": _runs([1.0, 1.5])}
    h = sh.headline(S, ["mmrl", "mmrl_async"], ["trl", "trl_t2"])
    assert (h["mmrl"], h["trl"]) == ("mmrl_async", "trl")
    assert h["steps_ratio"] == [2.0, 3.0]          # 4/2, 6/2
    assert h["rss_ratio"] == [0.9, 1.1]            # 900/1000, 1100/1000: median 1.0 <= 1
    assert h["meets"]
    S["mmrl_async"][1]["peak_rss_mb"] = 1200.0     # median RSS ratio 1.05 > 1
    assert not sh.headline(S, ["mmrl", "mmrl_async"], ["trl", "trl_t2"])["meets"]
    assert sh.headline(S, ["mmrl"], ["nothing"]) is None


def test_overlap_efficiency_from_medians_of_the_sync_and_async_runs():
    S = {"mmrl": _runs([1, 1, 1], t_gen=[0.6, 0.4, 0.5], t_update=[0.3, 0.3, 0.4], t_step=[0.9, 0.7, 0.9]),
         "mmrl_async": _runs([1, 1, 1], t_step=[0.6, 0.55, 0.7])}
    o = sh.overlap(S, "mmrl")
    assert o["gen"] == 0.5 and o["update"] == 0.3 and o["async_step"] == 0.6
    assert o["efficiency"] == pytest.approx(1.2)   # 0.6 / max(0.5, 0.3)
    assert o["ceiling"] == pytest.approx(1.8)      # 0.9 / max(0.5, 0.3)
    assert sh.overlap(S, "mmrl_t1") is None
    assert async_overlap.overlap_efficiency(0.45, 0.2, 0.3) == pytest.approx(1.5)  # the update is the max


def test_phases_skip_the_warm_up_steps():
    rows = [{"time/rollout": 5.0, "time/step": 9.0}, {"time/rollout": 1.0, "time/step": 3.0},
            {"time/rollout": 2.0, "time/step": 5.0}]
    assert async_overlap.phases(rows) == (1.5, 2.5, 4.0)             # steps 2-3: gen 1.5, step 4, the rest 2.5
    assert async_overlap.phases(rows, skip=0) == pytest.approx((8 / 3, 3.0, 17 / 3))


def test_summarize_sums_peak_rss_over_the_processes_and_reads_mmrl_phases():
    step = {"step": 2.0, "cpu": 1.0, "gen": 0.5, "score": 0.1, "tokens": 40, "samples": 8,
            "time/rollout": 0.6, "time/step": 1.5}
    res = {"per_step": [dict(step, step=9.0), step, step], "peak_rss_kb": 100 * 1024, "children_peak_rss_kb": 50 * 1024,
           "processes": 2, "threads": 1}
    s = vs_trl.summarize(res, warmup=1)
    assert s["peak_rss_mb"] == 150.0 and s["processes"] == 2
    assert s["steps_per_s"] == 0.5 and s["samples_per_s"] == 4.0   # 2 steps in 4 s, 16 samples
    assert (s["t_gen"], s["t_update"], s["t_step"]) == pytest.approx((0.6, 0.9, 1.5))
    bare = {k: v for k, v in step.items() if not k.startswith("time/")}
    trl = {"per_step": [bare], "peak_rss_kb": 1024}                  # no children recorded, no time/* metrics
    assert vs_trl.summarize(trl, warmup=0)["peak_rss_mb"] == 1.0 and "t_step" not in vs_trl.summarize(trl, 0)


def test_arm_kinds_and_the_threads_each_asks_for():
    a = argparse.Namespace(threads=1, thread_counts=[1, 2], asynchronous=True)
    assert vs_trl._arm_kinds(a) == {"mmrl": ["mmrl", "mmrl_t2", "mmrl_async"], "trl": ["trl", "trl_t2"]}
    assert [vs_trl._asked_threads(a, k) for k in ("mmrl", "mmrl_t2", "trl_t2", "mmrl_async", "floor")] == [1, 2, 2, 1, 1]
    b = argparse.Namespace(threads=2, thread_counts=[1], asynchronous=False)
    assert vs_trl._arm_kinds(b) == {"mmrl": ["mmrl", "mmrl_t1"], "trl": ["trl", "trl_t1"]}
    assert sh.setting(2, 1) == "2 processes x 1 thread" and sh.setting(1, 2) == "1 process x 2 threads"


def test_headline_table_row():
    S = {"mmrl": _runs([3.0] * 3, t_gen=[0.5] * 3, t_update=[0.3] * 3, t_step=[0.9] * 3),
         "mmrl_async": _runs([4.0, 5.0, 9.0], rss=[900.0, 1100.0, 1000.0], processes=2, t_step=[0.6] * 3),
         "trl": _runs([2.0] * 3), "trl_t2": _runs([1.0, 1.5, 1.0], threads=2)}
    table = sh.headline_table([4], {4: S}, ["mmrl", "mmrl_async"], ["trl", "trl_t2"], "mmrl")
    row = [line for line in table.splitlines() if line.startswith("| 4 |")]
    # steps/s ratios 2, 2.5, 4.5: min / median / max (the mean would be 3.0)
    assert row == ["| 4 | mmrl async k=1 (2 processes x 1 thread) | 5.000 | TRL (1 process x 1 thread) | 2.000 | "
                   "2.00 / 2.50 / 4.50 | 1000 / 1000 | 0.90 / 1.00 / 1.10 | yes | 0.500 / 0.300 | 0.600 | 1.20 (1.80) |"]
    assert table.splitlines()[2].count("|") == row[0].count("|")   # header and row have the same columns


def test_vm_hwm_is_read_from_proc_status():
    import _tree_rss

    status = "Name:\tpython\nVmPeak:\t  900000 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\n"
    assert _tree_rss.vm_hwm_kb(status) == 2048        # the high-water mark, not VmPeak (virtual) or VmRSS (now)
    assert _tree_rss.vm_hwm_kb("Name:\tkthreadd\n") == 0


def test_children_hwm_sees_a_live_child_at_its_peak():
    """A child that touched 64 MiB and then freed it: its VmHWM still holds the 64 MiB."""
    import subprocess

    import _tree_rss

    code = "import sys; b = b'x' * (64 << 20); del b; print('ready', flush=True); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        peaks = {}
        _tree_rss.children_hwm_kb(peaks)
        assert peaks[child.pid] >= 64 << 10
    finally:
        child.communicate("")
    _tree_rss.children_hwm_kb(peaks)                  # an ended child keeps its recorded peak
    assert peaks[child.pid] >= 64 << 10
