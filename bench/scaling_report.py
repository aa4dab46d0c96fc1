"""Tables, growth fits and the plot of ``bench/scaling.py`` (pure functions of its per-point records).

Growth of a cost ``y`` along an axis ``x``: the least-squares slope ``b`` of ``log y = a + b log x`` over the
axis's points (``slope_all``), and the slope between its last two points (``slope_tail``, the growth once the
fixed part of the cost, process and model, no longer dominates: ``y = c + d x^k`` has a log-log slope that rises
towards ``k`` as ``x`` grows). Names: < 0.8 sub-linear, 0.8-1.3 ~linear, 1.3-1.7 between, 1.7-2.3 ~quadratic,
> 2.3 super-quadratic.
"""
from __future__ import annotations

import math
import statistics
from typing import Dict, List, Optional, Sequence

AXIS_LABELS = {"responses": "responses per prompt", "length": "response length (new tokens)",
               "frames": "frames per clip", "turns": "turns per episode"}
METRICS = (("cpu_s", "CPU s / step"), ("peak_mb", "peak RSS MB"), ("delta_mb", "RSS growth over load, MB"))


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log(y) on log(x); NaN with fewer than two usable points (x, y > 0)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return float("nan")
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def growth_name(slope: float) -> str:
    if slope != slope:
        return "-"
    if slope < 0.8:
        return "sub-linear"
    if slope < 1.3:
        return "~linear"
    if slope < 1.7:
        return "between linear and quadratic"
    if slope <= 2.3:
        return "~quadratic"
    return "super-quadratic"


def medians(runs: List[Dict]) -> Dict[str, float]:
    """Median over repetitions of each per-run number."""
    return {k: statistics.median(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], (int, float))}


def series(results: Dict, axis: str, arm: str) -> List[tuple]:
    """[(x, medians)] of one arm along one axis, in x order; ``results[axis][arm][str(x)]`` = list of runs."""
    pts = results.get(axis, {}).get(arm, {})
    return sorted((float(x), medians(runs)) for x, runs in pts.items() if runs)


def fits(results: Dict) -> List[Dict]:
    """One row per (axis, arm, metric): the two slopes and their names."""
    rows = []
    for axis in AXIS_LABELS:
        for arm in ("mmrl", "trl"):
            s = series(results, axis, arm)
            if len(s) < 2:
                continue
            xs = [x for x, _ in s]
            for key, label in METRICS:
                ys = [m[key] for _, m in s]
                b_all, b_tail = loglog_slope(xs, ys), loglog_slope(xs[-2:], ys[-2:])
                rows.append({"axis": axis, "arm": arm, "metric": label, "slope_all": b_all, "slope_tail": b_tail,
                             "growth": growth_name(b_tail), "range": f"{xs[0]:g}-{xs[-1]:g}"})
    return rows


def growth_summary(rows: List[Dict]) -> str:
    """One clause per axis: each arm's CPU-time slope between the last two points and its name."""
    parts = []
    for axis in AXIS_LABELS:
        cells = [f"{'TRL' if r['arm'] == 'trl' else 'mmrl'} {r['slope_tail']:.2f} ({r['growth']})" for r in rows
                 if r["axis"] == axis and r["metric"] == METRICS[0][1]]
        if cells:
            parts.append(f"{AXIS_LABELS[axis]}: " + ", ".join(cells))
    return "; ".join(parts) + "."


def fits_table(rows: List[Dict]) -> str:
    lines = ["| axis | arm | cost | points | log-log slope (all points) | slope (last two points) | growth (last two) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {AXIS_LABELS[r['axis']]} | {'TRL' if r['arm'] == 'trl' else 'mmrl'} | {r['metric']} | "
                     f"{r['range']} | {r['slope_all']:.2f} | {r['slope_tail']:.2f} | {r['growth']} |")
    return "\n".join(lines)


def axis_table(results: Dict, axis: str, no_trl: Optional[str] = None) -> str:
    """Per point: mmrl and TRL CPU s/step (median, min-max over repetitions), wall s/step, peak RSS, RSS growth over the loaded model, tokens/response."""
    arms = [a for a in ("mmrl", "trl") if series(results, axis, a)]
    head = "| " + AXIS_LABELS[axis] + " | " + " | ".join(
        f"{n} CPU s/step (min-max) | {n} wall s/step | {n} peak RSS MB | {n} RSS growth MB | {n} tokens/response | {n} reps"
        for n in ("mmrl" if a == "mmrl" else "TRL" for a in arms)) + " |"
    if "trl" in arms:
        head = head[:-1] + "| TRL / mmrl CPU s |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    by = {a: dict(series(results, axis, a)) for a in arms}
    for x in sorted(set().union(*[set(v) for v in by.values()])):
        cells = []
        for a in arms:
            m = by[a].get(x)
            runs = results[axis][a].get(f"{x:g}", [])
            n_reps, cpus = len(runs), [r["cpu_s"] for r in runs]
            cells += (["-"] * 6 if m is None else
                      [f"{m['cpu_s']:.3f} ({min(cpus):.3f}-{max(cpus):.3f})", f"{m['wall_s']:.3f}", f"{m['peak_mb']:.0f}", f"{m['delta_mb']:.0f}",
                       f"{m['tokens_per_response']:.1f}", str(n_reps)])
        if "trl" in arms:
            m, t = by["mmrl"].get(x), by["trl"].get(x)
            cells.append(f"{t['cpu_s'] / m['cpu_s']:.2f}" if m and t else "-")
        lines.append(f"| {x:g} | " + " | ".join(cells) + " |")
    if no_trl:
        lines += ["", f"TRL: {no_trl}"]
    return "\n".join(lines)


def plot(results: Dict, path: str, title: str) -> None:
    """2 rows (CPU s/step, peak RSS) x 4 axes, log-log, mmrl and TRL lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(2, 4, figsize=(16, 7.5))
    for j, axis in enumerate(AXIS_LABELS):
        for i, (key, label) in enumerate(METRICS[:2]):
            a = ax[i, j]
            for arm, style in (("mmrl", "o-"), ("trl", "s--")):
                s = series(results, axis, arm)
                if s:
                    a.plot([x for x, _ in s], [m[key] for _, m in s], style, label="TRL GRPOTrainer" if arm == "trl" else "mmrl")
            a.set_xscale("log", base=2)
            a.set_yscale("log")
            a.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            a.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            a.set_xlabel(AXIS_LABELS[axis])
            a.set_ylabel(label)
            a.grid(True, which="both", alpha=0.3)
            if a.lines:
                a.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
