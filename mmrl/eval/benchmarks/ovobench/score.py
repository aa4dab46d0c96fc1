"""OVO-Bench offline scorer over results in the official layout ``{"backward", "realtime", "forward"}``.

Source: JoeLeelyf/OVO-Bench ``score.py`` (merge every result file's three lists) and ``utils/OVOBenchScore.py``
(``OVOBenchOfflineScore``): multiple choice ``int(gt in response)``; REC digits joined == ``str(count)``; SSR/CRR
exact "N"/"Y" or case-sensitive "No"/"Yes" substring; ``None`` scores 0. Per-task accuracy is micro over items
(backward/realtime) or ``test_info`` probes (forward). Reported aggregates, each labelled:

- ``modes[m].acc``: unweighted mean of the mode's task accuracies (BT, RT, FT as in the README);
- ``total``: **official** total = unweighted mean of the three mode means (README: Gemini 1.5 Pro 63.00), only
  when all three modes are present (``None`` otherwise; ``partial_mean`` is then the mean of the present ones);
- ``weighted_overall``: question-count-weighted mean, the WTI paper's reading (specs/benchmarks.md section 2):
  ``sum(acc_t * n_t) / N`` with n_t = items for BT/RT tasks, REC and CRR items, SSR probes (N = 2227);
- ``task_mean``: unweighted mean of the 12 task accuracies (what ``OVOBenchScore.py`` @19677d28 prints as
  "Total Avg."; the README's numbers use ``total``).
"""
from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Optional, Union

from mmrl.errors import DataError
from mmrl.eval.benchmark_def import BenchmarkDef, load_benchmark
from mmrl.eval.parsers import score_answer

MODE_KEYS = ("backward", "realtime", "forward")
MODE_ABBR = {"backward": "BT", "realtime": "RT", "forward": "FT"}
LABELS = {
    "total": "official total: unweighted mean of the three mode means (OVO-Bench README)",
    "weighted_overall": "question-count-weighted overall (WTI reading: BT/RT items, REC/CRR items, SSR probes)",
    "task_mean": "unweighted mean of the task accuracies (OVOBenchScore.py 'Total Avg.' at 19677d28)",
    "mode": "unweighted mean of the mode's task accuracies",
}


def load_result_files(paths: Iterable[str]) -> Dict[str, List[Dict[str, Any]]]:
    """Merge result files like ``score.py``: each file contributes its three lists."""
    merged: Dict[str, List[Dict[str, Any]]] = {k: [] for k in MODE_KEYS}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise DataError(f"cannot read results: {e}", path=str(path)) from None
        if not isinstance(data, dict) or any(not isinstance(data.get(k), list) for k in MODE_KEYS):
            raise DataError("results must be an object with lists 'backward', 'realtime', 'forward'", path=str(path))
        for k in MODE_KEYS:
            merged[k] += data[k]
    return merged


def per_task_scores(results: Dict[str, List[Dict[str, Any]]], bdef: BenchmarkDef) -> Dict[str, Dict[str, Any]]:
    """``task -> {mode, scores (0/1 list), items, none}`` in first-seen order; each task's parser and gold field
    (``ground_truth``, or the probe's ``count``/``type``) come from the benchmark definition."""
    known = bdef.task_names()
    out: Dict[str, Dict[str, Any]] = {}
    for mode in MODE_KEYS:
        for i, rec in enumerate(results.get(mode, [])):
            task = rec.get("task")
            if task not in known:
                raise DataError(f"results['{mode}'][{i}]: unknown task {task!r} (known: {', '.join(known)})")
            tdef, parser = bdef.task(task), bdef.parser_for(task)
            entry = out.setdefault(task, {"mode": mode, "scores": [], "items": 0, "none": 0})
            entry["items"] += 1
            if mode == "forward":
                key = tdef.gold.split(".", 1)[1]
                for probe in rec["test_info"]:
                    entry["scores"].append(score_answer(parser, probe.get("response"), probe[key]))
                    entry["none"] += probe.get("response") is None
            else:
                entry["scores"].append(score_answer(parser, rec.get("response"), rec["ground_truth"]))
                entry["none"] += rec.get("response") is None
    return out


def score_results(results: Dict[str, List[Dict[str, Any]]], bdef: Optional[BenchmarkDef] = None) -> Dict[str, Any]:
    """Scores (percent, unrounded) of merged official-layout results; see the module docstring for labels."""
    bdef = bdef or load_benchmark("ovobench")
    raw = per_task_scores(results, bdef)
    order = [t for t in bdef.task_names() if t in raw]
    tasks: Dict[str, Dict[str, Any]] = {}
    for t in order:
        e, tdef = raw[t], bdef.task(t)
        n = len(e["scores"])
        unit = "probes" if e["mode"] == "forward" else "items"
        wunit = tdef.weight_unit or unit
        tasks[t] = {"mode": e["mode"], "acc": 100.0 * sum(e["scores"]) / n if n else 0.0, "correct": sum(e["scores"]),
                    "n": n, "unit": unit, "items": e["items"], "none": e["none"],
                    "weight": e["items"] if wunit == "items" else n, "weight_unit": wunit,
                    "parser": bdef.parser_for(t)}
    modes: Dict[str, Dict[str, Any]] = {}
    for m in MODE_KEYS:
        ts = [t for t in order if tasks[t]["mode"] == m]
        if not ts:
            continue
        w = sum(tasks[t]["weight"] for t in ts)
        modes[m] = {"abbr": MODE_ABBR[m], "tasks": ts, "acc": sum(tasks[t]["acc"] for t in ts) / len(ts),
                    "weighted_acc": sum(tasks[t]["acc"] * tasks[t]["weight"] for t in ts) / w if w else 0.0,
                    "weight": w}
    wsum = sum(t["weight"] for t in tasks.values())
    mode_mean = sum(m["acc"] for m in modes.values()) / len(modes) if modes else 0.0
    complete = len(modes) == len(MODE_KEYS)
    return {
        "benchmark": bdef.name,
        "protocol": bdef.protocol,
        "parsers": {t: v["parser"] for t, v in tasks.items()},
        "tasks": tasks,
        "modes": modes,
        "total": mode_mean if complete else None,  # the official script needs all three modes
        "partial_mean": None if complete else mode_mean,
        "weighted_overall": sum(t["acc"] * t["weight"] for t in tasks.values()) / wsum if wsum else 0.0,
        "weighted_n": wsum,
        "task_mean": sum(t["acc"] for t in tasks.values()) / len(tasks) if tasks else 0.0,
        "none_responses": sum(t["none"] for t in tasks.values()),
        "labels": dict(LABELS),
    }


def score_result_files(paths: Union[str, Iterable[str]], bdef: Optional[BenchmarkDef] = None) -> Dict[str, Any]:
    """``score.py`` for a list of result files (all in the official layout)."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    scores = score_results(load_result_files(paths), bdef)
    scores["files"] = [str(p) for p in paths]
    return scores


def format_table(scores: Dict[str, Any]) -> str:
    """Markdown: one row per task (accuracy, count, unit), the mode means, then the labelled totals."""
    lines = [f"OVO-Bench scores ({scores['protocol']})", "",
             "| mode | task | acc (%) | n | unit |", "|---|---|---|---|---|"]
    for m, mv in scores["modes"].items():
        for t in mv["tasks"]:
            tv = scores["tasks"][t]
            lines.append(f"| {mv['abbr']} | {t} | {tv['acc']:.2f} | {tv['n']} | {tv['unit']} |")
        lines.append(f"| {mv['abbr']} | **{mv['abbr']} mean** | {mv['acc']:.2f} | | tasks |")
    if scores["total"] is not None:
        total = f"- **Total (official)**: {scores['total']:.2f}: {scores['labels']['total']}"
    else:
        present = ", ".join(m["abbr"] for m in scores["modes"].values())
        total = (f"- Total (official): not computed, the official total needs all three modes (present: {present}); "
                 f"mean of the present modes {scores['partial_mean']:.2f} (not the official total)")
    lines += ["", total,
              f"- **Weighted overall** (N={scores['weighted_n']}): {scores['weighted_overall']:.2f}: "
              f"{scores['labels']['weighted_overall']}",
              f"- Task mean: {scores['task_mean']:.2f}: {scores['labels']['task_mean']}",
              f"- None responses (scored 0): {scores['none_responses']}"]
    return "\n".join(lines) + "\n"


def summary_line(scores: Dict[str, Any]) -> str:
    """One line: every task, the mode means and the official total (or the labelled partial mean), two decimals."""
    parts = [f"{t} {v['acc']:.2f}" for t, v in scores["tasks"].items()]
    parts += [f"{m['abbr']} {m['acc']:.2f}" for m in scores["modes"].values()]
    if scores["total"] is None:
        return ", ".join(parts) + f"; partial mean {scores['partial_mean']:.2f} (not the official total)"
    return ", ".join(parts) + f"; total {scores['total']:.2f}"
