"""``mmrl diagnose`` outputs: ``responses.jsonl`` (one record per response and checkpoint), ``summary.json`` and
``report.md`` with plots (persistence histograms split by supported / unsupported claims; EFS and persistence by
training step when several checkpoints are given)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

_COLUMNS = ("accuracy", "efs_token_mean", "efs_claim_mean", "persistence_mean", "persistence_supported",
            "persistence_unsupported", "correct_with_unsupported", "n_claims", "n_unsupported")


def _fmt(key: str, v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return str(int(v)) if key.startswith("n_") else f"{v:.4f}"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def persistence_histogram(records: Sequence[dict], out_png: Path, title: str) -> bool:
    claims = [c for r in records for c in r["claims"]]
    groups = [("supported", [c["persistence"] for c in claims if c["supported"] is True]),
              ("unsupported", [c["persistence"] for c in claims if c["supported"] is False]),
              ("unlabelled", [c["persistence"] for c in claims if c["supported"] is None])]
    groups = [(k, v) for k, v in groups if v]
    if not groups:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bins = [i / 20 for i in range(21)]
    for name, vals in groups:
        ax.hist(vals, bins=bins, alpha=0.55, density=True, label=f"{name} (n={len(vals)})")
    ax.set_xlabel("claim persistence P_c")
    ax.set_ylabel("density")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return True


def by_step_plot(rows: Sequence[Tuple[float, Dict[str, float]]], out_png: Path) -> bool:
    if len(rows) < 2:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = [x for x, _ in rows]
    for key in ("efs_token_mean", "persistence_supported", "persistence_unsupported", "persistence_mean"):
        ys = [s.get(key, float("nan")) for _, s in rows]
        if any(not math.isnan(y) for y in ys):
            ax.plot(xs, ys, marker="o", label=key)
    ax.set_xlabel("training step")
    ax.set_title("EFS and claim persistence by checkpoint")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return True


def write_outputs(out_dir: str, runs: List[dict], intervention: str, also: Sequence[str] = ()) -> Path:
    """``runs``: dicts with ``checkpoint``, ``step``, ``records`` and ``summary``; ``also``: names of extra
    interventions whose persistence columns are added. Returns the report path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "responses.jsonl", "w") as f:
        for run in runs:
            for r in run["records"]:
                f.write(json.dumps({"checkpoint": run["checkpoint"], "step": run["step"], **r}) + "\n")
    (out / "summary.json").write_text(json.dumps(
        [{"checkpoint": r["checkpoint"], "step": r["step"], **r["summary"]} for r in runs], indent=1) + "\n")
    cols = list(_COLUMNS) + [f"{k}_{a}" for a in also for k in ("efs_token_mean", "persistence_supported",
                                                                  "persistence_unsupported")]
    lines = ["# Fixed-rollout counterfactual diagnostic", "",
             f"Intervention: `{intervention}`. Same response tokens re-scored under the intervened media.", "",
             *([f"Also re-scored under: {', '.join(f'`{a}`' for a in also)} (columns `<key>_<name>`).", ""] if also else []),
             "| checkpoint | step | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for run in runs:
        s = run["summary"]
        lines.append(f"| {run['checkpoint']} | {run['step']} | " + " | ".join(_fmt(k, s.get(k)) for k in cols) + " |")
    lines.append("")
    for i, run in enumerate(runs):
        png = f"persistence_{i}.png"
        if persistence_histogram(run["records"], out / png, f"claim persistence: {Path(run['checkpoint']).name}"):
            lines += [f"![persistence {run['checkpoint']}]({png})", ""]
    if by_step_plot([(float(r["step"]), r["summary"]) for r in runs], out / "by_step.png"):
        lines += ["![by step](by_step.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
