"""End-of-run report from ``metrics.jsonl``: a markdown summary, smoothed plots of rewards, held-out accuracy,
losses, KL, grad norm, entropy and lengths, a warning when most groups carry no signal, and the skipped samples."""
from __future__ import annotations

from pathlib import Path
from typing import List

from mmrl.advice import advice
from mmrl.train.metrics import MetricsLogger

_CURVES = [("reward/total", "total reward"), ("reward/accuracy", "accuracy reward"), ("reward/format", "format reward"),
           ("eval/accuracy", "held-out accuracy")]


_PANELS = [("optim.png", [("loss", "policy loss"), ("sft/loss", "SFT loss"), ("kl", "KL to reference"),
                          ("grad_norm", "grad norm")], "optimisation"),
           ("policy.png", [("entropy", "token entropy"), ("adv/zero_frac", "share of zero advantages"),
                           ("truncated_frac", "truncated share")], "policy"),
           ("length.png", [("response_len", "response tokens")], "response length")]


def no_signal_warning(rows: List[dict], threshold: float = 0.5) -> str:
    """A warning when, over the last quarter of the run, most trajectories got a zero advantage (their group's
    rewards were all equal: no learning signal), or '' otherwise."""
    vals = [r["adv/zero_frac"] for r in rows if "adv/zero_frac" in r]
    tail = vals[-max(1, len(vals) // 4):]
    if not tail or sum(tail) / len(tail) <= threshold:
        return ""
    return (f"most groups carry no signal: adv/zero_frac averaged {sum(tail) / len(tail):.2f} over the last "
            f"{len(tail)} steps (all responses of a group rewarded alike). More responses per prompt (rollout.n), "
            f"harder or easier prompts, or DAPO's dynamic sampling ({advice('no_signal')}) give the update "
            "something to learn from.")


def ema(ys: List[float], beta: float = 0.9) -> List[float]:
    """Exponential moving average s_t = beta * s_{t-1} + (1 - beta) * y_t, bias-corrected by 1 - beta^t
    (as TensorBoard's smoothing slider and Adam's moments)."""
    out, s = [], 0.0
    for t, y in enumerate(ys, 1):
        s = beta * s + (1 - beta) * y
        out.append(s / (1 - beta ** t))
    return out


def _plot(rows: List[dict], keys, out_png: Path, title: str) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    drawn = False
    for key, label in keys:
        pts = [(r["step"], r[key]) for r in rows if key in r]
        if pts:
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            if len(pts) >= 20:  # noisy per-step values: faint raw curve under its exponential moving average
                line, = ax.plot(xs, ys, alpha=0.25)
                ax.plot(xs, ema(ys), color=line.get_color(), label=f"{label} (EMA 0.9)")
            else:
                ax.plot(xs, ys, label=label)
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
        warning = no_signal_warning(rows)
        if warning:
            lines[2:2] = [f"> **Warning:** {warning}", ""]
        if _plot(rows, _CURVES, run / "rewards.png", "rewards per step"):
            lines += ["", "![rewards](rewards.png)"]
        for png, keys, title in _PANELS:
            if _plot(rows, keys, run / png, title):
                lines += ["", f"![{title}]({png})"]
        preds = sorted((run / "predictions").glob("step_*.jsonl"))
        if preds:
            lines += ["", f"Held-out predictions of the last evaluation: [{preds[-1].name}](predictions/{preds[-1].name})"]
        if (run / "skipped.jsonl").exists() and (run / "skipped.jsonl").stat().st_size:
            n = len((run / "skipped.jsonl").read_text().splitlines())
            lines += ["", f"{n} samples were skipped: [skipped.jsonl](skipped.jsonl)"]
        view_keys = [(k, k) for k in sorted(last) if k.startswith("view_acc/") or k in ("stability_rate", "sensitivity_rate", "abstain_f1")]
        if view_keys and _plot(rows, view_keys, run / "views.png", "per-view accuracy and view rates"):
            lines += ["", "![views](views.png)"]
    path = run / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
