"""End-of-run report: markdown summary plus PNG plots of reward and accuracy curves from ``metrics.jsonl``."""
from __future__ import annotations

from pathlib import Path
from typing import List

from mmrl.train.metrics import MetricsLogger

_CURVES = [("reward/total", "total reward"), ("reward/accuracy", "accuracy reward"), ("reward/format", "format reward"),
           ("eval/accuracy", "held-out accuracy")]


def _plot(rows: List[dict], keys, out_png: Path, title: str) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    drawn = False
    for key, label in keys:
        pts = [(r["step"], r[key]) for r in rows if key in r]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label)
            drawn = True
    ax.set_xlabel("step")
    ax.set_title(title)
    if drawn:
        ax.legend()
        fig.tight_layout()
        fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return drawn


def write_report(run_dir: str, title: str = "mmrl run", extra: str = "") -> Path:
    run = Path(run_dir)
    rows = MetricsLogger.read(run / "metrics.jsonl") if (run / "metrics.jsonl").exists() else []
    lines = [f"# {title}", ""]
    if extra:
        lines += [extra, ""]
    if rows:
        last = rows[-1]
        lines += [f"Steps: {last['step']}", "", "| metric | first step | last step |", "|---|---|---|"]
        for key in sorted(k for k in last if k != "step" and isinstance(last[k], (int, float))):
            first = rows[0].get(key)
            lines.append(f"| {key} | {first if first is None else round(first, 4)} | {round(last[key], 4)} |")
        if _plot(rows, _CURVES, run / "rewards.png", "rewards per step"):
            lines += ["", "![rewards](rewards.png)"]
        view_keys = [(k, k) for k in sorted(last) if k.startswith("view_acc/") or k in ("stability_rate", "sensitivity_rate", "abstain_f1")]
        if view_keys and _plot(rows, view_keys, run / "views.png", "per-view accuracy and view rates"):
            lines += ["", "![views](views.png)"]
    path = run / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
