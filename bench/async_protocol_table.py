"""The results file of ``bench/async_protocol.py``, rendered from its seed records alone (``--render``): the
command, the SFT start against chance, the setting, held-out accuracy per arm (mean [95% t-interval], per seed),
differences paired within seeds, the RL stage's wall and CPU minutes with their paired differences, the claim's
reading, the step phases and the mismatch metrics of each arm (means over the steps, then over the seeds).
"""
from __future__ import annotations

import math
import statistics
from typing import Dict, List, Sequence, Tuple

from _protocol import Protocol, Results
from bpo_table import ci95

# arm -> its overrides on the demo config (after the seed's world, SFT start, steps and setting)
ARM_OVERRIDES: Dict[str, List[str]] = {
    "sync": [], "coin_flip": [],
    "async1_corr": ["rollout.asynchronous.max_staleness=1"],
    "async1_nocorr": ["rollout.asynchronous.max_staleness=1", "algorithm.rollout_correction.mode=none"]}
LATER = ("async1_corr", "async1_nocorr", "coin_flip")  # after the grid's chosen run (sync), in this order
ARM_ORDER = ("sft", "coin_flip", "sync", "async1_corr", "async1_nocorr")
ARM_TEXT = {"sft": "SFT start (no RL)", "coin_flip": "sync, coin-flip reward", "sync": "sync (max_staleness 0)",
            "async1_corr": "async-1, correction token_truncate 2", "async1_nocorr": "async-1, correction none"}
RL_ARMS = ARM_ORDER[1:]
PAIRS = [("async1_corr", "sync"), ("async1_nocorr", "sync"), ("async1_corr", "async1_nocorr"),
         ("sync", "coin_flip"), ("sync", "sft")]
COST_PAIRS = [("async1_corr", "sync"), ("async1_nocorr", "sync")]
# (metric key in the step means, column title)
MISMATCH = [("mismatch/k3_kl", "k3 KL"), ("mismatch/mean_abs_diff", "mean abs Δ"), ("mismatch/max_abs_diff", "max abs Δ"),
            ("mismatch/ess", "ESS (raw ratios)"), ("mismatch/ratio_p01", "ratio p01"),
            ("mismatch/ratio_p99", "ratio p99"), ("rollout_corr/clipped_frac", "clipped share"),
            ("rollout_corr/ess", "ESS (weights)"), ("async/staleness", "staleness")]
PHASES = [("time/step@2+", "step s"), ("time/rollout@2+", "rollout s"), ("time/rollout_wait@2+", "wait s"),
          ("time/worker_generation@2+", "worker generation s"), ("reward/total", "reward (mean over steps)")]


def per_seed(recs: Dict[int, Dict], field: str, key: str, arms: Sequence[str]) -> Dict[str, Dict[int, float]]:
    """``{arm: {seed: value}}``: ``evals[arm]['accuracy']`` (``field='evals'``, ``key='accuracy'``),
    ``minutes['rl_<arm>']`` / ``cpu_minutes['rl_<arm>']`` (``key=None``) or ``algo_means[arm][key]``; arms a seed lacks
    are left out of that seed."""
    out: Dict[str, Dict[int, float]] = {}
    for arm in arms:
        vals = {}
        for s, r in recs.items():
            if field == "evals" and arm in r.get("evals", {}):
                vals[s] = r["evals"][arm][key]
            elif field in ("minutes", "cpu_minutes") and f"rl_{arm}" in r.get(field, {}):
                vals[s] = r[field][f"rl_{arm}"]
            elif field == "algo_means" and key in r.get("algo_means", {}).get(arm, {}):
                vals[s] = r["algo_means"][arm][key]
        if vals:
            out[arm] = vals
    return out


def paired(values: Dict[str, Dict[int, float]], a: str, b: str, seeds: Sequence[int]) -> List[float]:
    """``a − b`` per seed (nan where either is missing)."""
    return [values.get(a, {}).get(s, math.nan) - values.get(b, {}).get(s, math.nan) for s in seeds]


def claim_reading(acc_diff: Sequence[float], wall_diff: Sequence[float]) -> Tuple[str, str]:
    """The claim "async-1 reaches the synchronous accuracy in less wall time", read from the paired differences
    (accuracy in points, wall in minutes, a − sync per seed) by their 95% t-intervals: accuracy ``reached`` when
    the interval's lower end is >= −2.5 points (one binomial standard error at 400 items) or above 0, ``not
    reached`` when its upper end is below 0, else ``not resolved``; wall ``less`` when the interval lies below 0,
    ``more`` above 0, else ``not resolved``. Returns (accuracy reading, wall reading)."""
    _, alo, ahi = ci95(list(acc_diff))
    _, wlo, whi = ci95(list(wall_diff))
    acc = ("not resolved" if math.isnan(alo) else "reached" if alo >= -2.5 else "not reached" if ahi < 0
           else "not resolved")
    wall = "not resolved" if math.isnan(wlo) else "less" if whi < 0 else "more" if wlo > 0 else "not resolved"
    return acc, wall


def fmt_mean(xs: Sequence[float], digits: int = 3) -> str:
    xs = [x for x in xs if not math.isnan(x)]
    return "—" if not xs else f"{statistics.mean(xs):.{digits}g}"


def mean_table(recs: Dict[int, Dict], title: str, cols: Sequence[Tuple[str, str]], note: str) -> List[str]:
    """One row per RL arm, one column per step-mean metric: the mean over seeds of each seed's mean over steps."""
    lines = [f"## {title}", "", note, "", "| arm | " + " | ".join(t for _, t in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for arm in RL_ARMS:
        if not any(arm in r.get("algo_means", {}) for r in recs.values()):
            continue
        cells = [fmt_mean([r.get("algo_means", {}).get(arm, {}).get(k, math.nan) for r in recs.values()])
                 for k, _ in cols]
        lines.append(f"| {ARM_TEXT[arm]} | " + " | ".join(cells) + " |")
    return lines + [""]


def start_lines(recs: Dict[int, Dict]) -> List[str]:
    """The SFT start's greedy test accuracy per question type against chance (1 / candidates), per seed."""
    qtypes = sorted({q for r in recs.values() for q in r.get("chance", {})})
    lines = ["## Pre-flight: the SFT start against chance (greedy test accuracy %)", "",
             "| seed | " + " | ".join(qtypes) + " | overall |", "|---|" + "---:|" * (len(qtypes) + 1)]
    for s, r in recs.items():
        e = r["evals"].get("sft", {})
        cells = [f"{100 * e.get('per_qtype', {}).get(q, math.nan):.1f}" for q in qtypes]
        lines.append(f"| {s} | " + " | ".join(cells) + f" | {100 * e.get('accuracy', math.nan):.1f} |")
    first = next(iter(recs.values())).get("chance", {})
    lines.append("| chance | " + " | ".join(f"{100 * first.get(q, math.nan):.1f}" for q in qtypes) + " | |")
    return lines + [""]


def render_records(recs: Dict[int, Dict], proto: Protocol, notes: str = "") -> Results:
    """The whole results file from the seed records ``{seed: record}``."""
    seeds = proto.seeds
    st = next(iter(recs.values()))["settings"]
    res = Results(proto, "Asynchronous rollouts against the synchronous run, miniature (issue 45 item 4)")
    res.add([f"Per seed: the demo world (`mmrl.demo.WORLD`: 2 s clips, 4 frames of 56 px, fixed options), "
             f"{st['n_train']} training clips, {st['n_test']} test and {st['n_val']} validation clips; SFT "
             f"{st['sft_steps']} steps (`configs/demo.yaml`) from `model.path={st['model']}`; then GRPO "
             f"(`configs/demo.yaml`: 16 prompts x 8 responses, accuracy + 0.1 format) for {st['rl_steps']} steps "
             f"per arm, one torch thread per process; the async arms add a rollout worker process (one thread). "
             f"Overrides: {' '.join(st['overrides']) or 'none'}.", ""])
    res.add(start_lines(recs))
    res.add(res.chosen_setting(recs, "on greedy validation accuracy of the sync arm"))
    if len(st["lr_grid"]) * len(st["kl_grid"]) == 1:
        res.add([f"The grid is one point (lr {st['lr_grid'][0]:g}, KL {st['kl_grid'][0]:g}): the setting is fixed, "
                 "not chosen on validation; the table above only reports its validation accuracy.", ""])
    acc = per_seed(recs, "evals", "accuracy", ARM_ORDER)
    res.add(res.arms_table("Held-out accuracy % (greedy, test file)", acc))
    res.add(res.paired_table("held-out accuracy (points)", acc, [(a, b) for a, b in PAIRS if a in acc and b in acc]))
    for field, what in (("minutes", "wall"), ("cpu_minutes", "CPU")):
        vals = per_seed(recs, field, None, RL_ARMS)
        why = {"sft": "no RL stage"}
        res.add(res.arms_table(f"RL stage {what} minutes", vals, scale=1.0, missing=why))
        res.add(res.paired_table(f"RL stage {what} minutes", vals,
                                 [(a, b) for a, b in COST_PAIRS if a in vals and b in vals], scale=1.0))
    wall = per_seed(recs, "minutes", None, RL_ARMS)
    lines = ["## The claim: async-1 reaches the sync accuracy in less wall time", "",
             "Read from the paired 95% t-intervals above: accuracy reached when the interval of a − sync lies above "
             "−2.5 points (one standard error at 400 items); less wall time when the interval of the wall minutes "
             "lies below 0.", "", "| arm | accuracy vs sync | wall time vs sync |", "|---|---|---|"]
    for arm in ("async1_corr", "async1_nocorr"):
        if arm in acc and arm in wall:
            a, w = claim_reading([100 * x for x in paired(acc, arm, "sync", seeds)], paired(wall, arm, "sync", seeds))
            lines.append(f"| {ARM_TEXT[arm]} | **{a}** | **{w}** |")
    res.add(lines + [""])
    res.add(mean_table(recs, "Step phases (means over steps 2.., then over seeds)", PHASES,
                       "`time/*` from `metrics.jsonl`; the first step, which holds the worker's start, is left out."))
    res.add(mean_table(recs, "Sampler/trainer mismatch (means over steps, then over seeds)", MISMATCH,
                       "Δ = log π_old − log μ on the trained tokens (docs/rollout_correction.md); `clipped share` and "
                       "`ESS (weights)` exist only where a correction mode is on; staleness in updates."))
    if notes:
        res.add(["## Reading", "", notes.strip(), ""])
    return res
