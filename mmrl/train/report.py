"""Run reports from ``metrics.jsonl``: a markdown summary and plots with one quantity per axis.

``write_report(run)`` (end of every run) and ``mmrl report RUN`` draw, each axis with its own scale: rewards (total
and each component), held-out accuracy per question type, optimisation (policy loss, KL, grad norm, SFT loss,
learning rate, clip fraction), the policy (token entropy; zero-advantage, truncated and trained shares on a 0-1
axis; response length), throughput, the step-time breakdown (rollout + scoring + update = step, stacked) and peak
memory, per-view accuracy, and the sampler/trainer mismatch (k3 KL, max |Δ log p|, effective sample size). Step 0 is the held-out evaluation of the starting model (e.g. the SFT checkpoint)
before the first update (``RLTrainer.run``). An axis whose values are all zero says why when the config explains it
(``flat_zero_notes``: no KL term at ``kl_coef`` 0, nothing clipped at ``ppo_epochs`` 1, a policy loss of float
rounding around 0 at ``ppo_epochs`` 1). Steps where the run was
resumed (``resumes.jsonl``, written by ``MetricsLogger``) are dashed vertical lines. ``mmrl report RUN_A RUN_B ...
--out DIR`` overlays runs: one axis per quantity, one colour per run. Noisy per-step values are drawn faint under
their bias-corrected exponential moving average.
"""
from __future__ import annotations

import fnmatch
import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from mmrl.advice import advice
from mmrl.errors import ConfigError
from mmrl.train.metrics import MetricsLogger, read_resumes

Axis = Tuple[str, Tuple[str, ...], str]  # (title, key patterns, kind: line | frac | stack | raw: never smoothed)

FIGURES: List[Tuple[str, str, List[Axis]]] = [
    ("rewards.png", "rewards", [("total reward", ("reward/total",), "line"),
                                ("each reward", ("reward/*",), "each")]),
    ("heldout.png", "held-out accuracy", [("held-out accuracy by question type", ("eval/accuracy", "eval/acc_*"), "frac")]),
    ("optim.png", "optimisation", [("policy loss", ("loss",), "line"), ("KL to the reference", ("kl",), "line"),
                                   ("grad norm (before clipping)", ("grad_norm",), "line"),
                                   ("SFT loss", ("sft/loss",), "line"), ("learning rate", ("lr",), "line"),
                                   ("clipped token share", ("clip_frac",), "frac")]),
    ("policy.png", "policy", [("token entropy (nats)", ("entropy",), "line"),
                              ("shares", ("adv/zero_frac", "truncated_frac", "train_frac"), "frac"),
                              ("response tokens", ("response_len",), "line")]),
    ("speed.png", "throughput and step time", [("generated tokens / s", ("tokens_per_s",), "line"),
                                               ("seconds per step", ("time/rollout", "time/scoring", "time/update"),
                                                "stack"),
                                               ("SFT seconds per step", ("time/step",), "sft"),
                                               ("peak memory (GB)", ("mem/*",), "raw")]),
    ("views.png", "views", [("per-view accuracy", ("view_acc/*",), "frac"),
                            ("view rates", ("stability_rate", "sensitivity_rate", "abstain_f1"), "frac")]),
    # the sampler vs the trainer (docs/rollout_correction.md)
    ("mismatch.png", "sampler vs trainer", [("k3 KL, sampler to trainer", ("mismatch/k3_kl",), "line"),
                                            ("max |log-prob difference|", ("mismatch/max_abs_diff",), "line"),
                                            ("effective sample size", ("mismatch/ess", "rollout_corr/ess"), "frac")]),
]
LABELS = {"eval/accuracy": "overall", "mem/rss_peak_gb": "process RSS", "mem/cuda_max_allocated_gb": "CUDA allocated", "adv/zero_frac": "zero advantage", "truncated_frac": "truncated",
          "train_frac": "trained", "time/rollout": "rollout", "time/scoring": "scoring", "time/update": "update",
          # two ESS lines on one axis: the raw sampler/trainer token ratios and the correction weights applied
          "mismatch/ess": "raw ratios", "rollout_corr/ess": "applied weights"}


def _label(key: str) -> str:
    """A metric's legend name: ``eval/acc_color`` -> ``color``, ``time/rollout`` -> ``rollout``."""
    return LABELS.get(key, key.split("/")[-1].removeprefix("acc_"))


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


# a key whose zero comes out of a float sum: |value| below this counts as 0 (its note says "up to float rounding")
FLAT_TOLERANCE = {"loss": 1e-6}


def flat_zero_notes(rows: List[dict], algorithm: dict) -> Dict[str, str]:
    """Why a curve is flat at zero, for the keys whose every value is 0 (``FLAT_TOLERANCE``) and whose config says
    why: ``kl`` at ``algorithm.kl_coef`` 0 (no KL term, no reference pass); ``clip_frac`` at ``algorithm.ppo_epochs``
    1 (one update per batch from the policy that scored it: the ratio pi/pi_old is exactly 1, so no token is
    clipped); ``loss`` at ``ppo_epochs`` 1, ``kl_coef`` 0 and a ``seq-mean-*`` ``loss_agg``: with the ratio 1 it is
    ``-mean_i A_i``, and group-normalised advantages sum to 0 in each group (GRPO, Shao et al. 2024)."""
    reasons = {"kl": (lambda a: a.get("kl_coef") == 0, "algorithm.kl_coef = 0: the loss has no KL term (no reference "
                                                       "model is scored)"),
               "clip_frac": (lambda a: a.get("ppo_epochs") == 1, "algorithm.ppo_epochs = 1: one update per batch, so "
                                                                 "the ratio to the old policy is 1 and nothing is clipped"),
               "loss": (lambda a: a.get("ppo_epochs") == 1 and a.get("kl_coef") == 0
                        and str(a.get("loss_agg", "")).startswith("seq-mean"),
                        "algorithm.ppo_epochs = 1, kl_coef = 0, a seq-mean loss_agg: the ratio is 1, so the loss is "
                        "minus the mean advantage, which is 0 in every group; its gradient is not 0 (grad norm)")}
    notes = {}
    for key, (holds, why) in reasons.items():
        vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        tol = FLAT_TOLERANCE.get(key, 0.0)
        if vals and all(abs(v) <= tol for v in vals) and holds(algorithm):
            notes[key] = why
    return notes


def flat_value(key: str) -> str:
    """How a flat key's zero reads: ``0``, or ``0 up to float rounding`` for a key with a ``FLAT_TOLERANCE``."""
    return f"0 up to float rounding (|value| <= {FLAT_TOLERANCE[key]:g})" if key in FLAT_TOLERANCE else "0"


class Run:
    """One run's rows and resume steps, with a label for legends, and its ``config.yaml``'s algorithm section
    (for ``flat_zero_notes``; {} without the file)."""

    def __init__(self, path: str, label: Optional[str] = None):
        import yaml

        self.dir = Path(path)
        metrics = self.dir / "metrics.jsonl"
        if not metrics.exists():
            raise ConfigError(f"mmrl report: {path} has no metrics.jsonl (not a run directory)")
        self.rows = MetricsLogger.read(metrics)
        self.resumes = read_resumes(self.dir)
        self.label = label or self.dir.name
        config = self.dir / "config.yaml"
        algorithm = (yaml.safe_load(config.read_text()) or {}).get("algorithm", {}) if config.exists() else {}
        self.notes = flat_zero_notes(self.rows, algorithm or {})

    def keys(self) -> List[str]:
        return sorted({k for r in self.rows for k, v in r.items() if k != "step" and isinstance(v, (int, float))})

    def series(self, key: str) -> Tuple[List[int], List[float]]:
        pts = [(r["step"], r[key]) for r in self.rows if isinstance(r.get(key), (int, float))]
        return [p[0] for p in pts], [float(p[1]) for p in pts]


def _expand(patterns: Sequence[str], keys: Sequence[str], exclude: Sequence[str] = ()) -> List[str]:
    out = []
    for pat in patterns:
        out += [k for k in keys if fnmatch.fnmatchcase(k, pat) and k not in out and k not in exclude]
    return out


def _axes_for(spec: List[Axis], keys: Sequence[str], overlay: bool, sft: bool) -> List[Tuple[str, List[str], str]]:
    """The axes a figure gets for the keys present: ``each`` splits a pattern into one axis per key; an overlay
    gives every key its own axis (the lines are the runs); an SFT run shows its own step time only."""
    used = {k for _, pats, kind in spec if kind != "each" for k in _expand(pats, keys)}
    axes = []
    for title, pats, kind in spec:
        if kind == "sft" and not sft:
            continue
        found = _expand(pats, keys, exclude=used if kind == "each" else ())
        if not found:
            continue
        if kind == "each":
            axes += [(k, [k], "line") for k in found]
        elif overlay and len(found) > 1:
            axes += [(f"{title}: {_label(k)}", [k], "frac" if kind == "frac" else "line") for k in found]
        else:
            axes.append((title, found, "line" if kind == "sft" else kind))
    return axes


def _draw(ax, xs, ys, label, color=None, marker=None, smooth=True):
    if smooth and len(ys) >= 20:  # noisy per-step values: faint raw curve under its moving average
        line, = ax.plot(xs, ys, alpha=0.25, color=color, linewidth=0.8)
        ax.plot(xs, ema(ys), color=line.get_color(), label=f"{label} (EMA 0.9)")
    else:
        ax.plot(xs, ys, label=label, color=color, marker=marker or ("o" if len(ys) <= 12 else None), markersize=3)


def legend_place(n_lines: int, kind: str) -> Optional[str]:
    """Where an axis's legend goes: beside it (off the curves) for many lines, or for several on a 0-1 axis, whose
    curves fill the box (question types, views, shares); inside otherwise; every line is named, a lone one too (a
    single view's accuracy, or the EMA that the line shows); ``None`` for an empty axis."""
    if n_lines == 0:
        return None
    return "beside" if n_lines > 3 or (n_lines > 1 and kind == "frac") else "inside"


def plot_figure(runs: List[Run], spec: List[Axis], out_png: Path, title: str) -> bool:
    """One figure of small multiples (each axis its own scale); False when no run has any of its keys."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({k for run in runs for k in run.keys()})
    sft = any("sft/loss" in run.keys() for run in runs)
    axes = _axes_for(spec, keys, overlay=len(runs) > 1, sft=sft)
    if not axes:
        return False
    cols = 1 if len(axes) == 1 else 2
    rows_n = -(-len(axes) // cols)
    fig, grid = plt.subplots(rows_n, cols, figsize=(6.2 * cols, 2.9 * rows_n), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (ax_title, found, kind) in enumerate(axes):
        ax = grid[i // cols][i % cols]
        for r, run in enumerate(runs):
            color = colors[r % len(colors)] if len(runs) > 1 else None
            if kind == "stack" and len(runs) == 1:
                series = [run.series(k) for k in found]
                steps = sorted(set.intersection(*(set(s[0]) for s in series)))
                if steps:
                    vals = [[dict(zip(*s))[st] for st in steps] for s in series]
                    ax.stackplot(steps, *vals, labels=[_label(k) for k in found], alpha=0.8)
            else:
                for k in found:
                    xs, ys = run.series(k)
                    if xs:
                        label = run.label if len(runs) > 1 else _label(k)
                        _draw(ax, xs, ys, label, color, smooth=kind != "raw")
            for step in run.resumes:
                ax.axvline(step, color=color or "gray", linestyle="--", linewidth=1, alpha=0.8)
        notes = {run.notes.get(k) for run in runs for k in found}
        if len(notes) == 1 and None not in notes:  # every line of the axis is flat zero for the same reason
            text = textwrap.fill(f"flat at {flat_value(found[0])}: " + notes.pop(), 64)
            ax.text(0.5, 0.72, text, transform=ax.transAxes, ha="center",
                    va="center", fontsize=7, color="dimgray", bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0})
        if kind == "frac":
            ax.set_ylim(-0.02, 1.02)
        ax.set_title(ax_title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        place = legend_place(len(ax.get_legend_handles_labels()[0]), kind)
        if place == "beside":
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
        elif place == "inside":
            ax.legend(fontsize=7, loc="best")
    for j in range(len(axes), rows_n * cols):
        grid[j // cols][j % cols].axis("off")
    note = "; dashed: resumed here" if any(run.resumes for run in runs) else ""
    fig.suptitle(title + note, fontsize=11)
    fig.tight_layout()
    fig.savefig(out_png, dpi=90)
    plt.close(fig)
    return True


def _num(v: float) -> float:
    """4 decimals; 3 significant digits below 1e-3 (a 1e-6 sampler/trainer mismatch is not 0)."""
    return round(v, 4) if v == 0 or abs(v) >= 1e-3 else float(f"{v:.3g}")


def _summary(run: Run) -> List[str]:
    """Each metric's first and last value with the step each comes from (a held-out metric's first is its step-0
    evaluation, or the first ``eval_every`` step, not the run's first step)."""
    rows, last = run.rows, run.rows[-1]
    lines = [f"Steps: {last['step']}", ""]
    if rows[0]["step"] == 0:
        lines += ["Step 0 is the starting model (before the first update), evaluated on the held-out split.", ""]
    lines += ["| metric | first | at step | last | at step |", "|---|---|---|---|---|"]
    for key in run.keys():
        steps, vals = run.series(key)
        lines.append(f"| {key} | {_num(vals[0])} | {steps[0]} | {_num(vals[-1])} | {steps[-1]} |")
    for key, why in run.notes.items():
        lines += ["", f"`{key}` is {flat_value(key)} at every step: {why}."]
    return lines


def write_report(run_dir: str, title: str = "mmrl run", extra: str = "", out_dir: Optional[str] = None) -> Path:
    """``report.md`` and its PNGs for one run (into ``out_dir``, default the run itself)."""
    run_path = Path(run_dir)
    out = Path(out_dir) if out_dir else run_path
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", ""]
    if extra:
        lines += [extra, ""]
    if (run_path / "metrics.jsonl").exists():
        run = Run(run_dir)
        if run.rows:
            warning = no_signal_warning(run.rows)
            if warning:
                lines += [f"> **Warning:** {warning}", ""]
            if run.resumes:
                lines += ["Resumed at step " + ", ".join(str(s) for s in run.resumes) + " (dashed lines).", ""]
            lines += _summary(run)
            for png, fig_title, spec in FIGURES:
                if plot_figure([run], spec, out / png, fig_title):
                    lines += ["", f"![{fig_title}]({png})"]
            preds = sorted((run_path / "predictions").glob("step_*.jsonl"))
            if preds:
                lines += ["", f"Held-out predictions of the last evaluation: [{preds[-1].name}]"
                              f"({'' if out == run_path else str(run_path.resolve()) + '/'}predictions/{preds[-1].name})"]
            if (run_path / "skipped.jsonl").exists() and (run_path / "skipped.jsonl").stat().st_size:
                n = len((run_path / "skipped.jsonl").read_text().splitlines())
                lines += ["", f"{n} samples were skipped: [skipped.jsonl](skipped.jsonl)"]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def compare_runs(run_dirs: Sequence[str], out_dir: str, title: str = "mmrl runs compared") -> Path:
    """``report.md`` in ``out_dir`` overlaying the runs: one axis per quantity, one colour per run."""
    runs = [Run(d) for d in run_dirs]
    labels = [r.label for r in runs]
    if len(set(labels)) < len(labels):  # same folder names in different places: number them
        for i, r in enumerate(runs):
            r.label = f"{i + 1}: {r.label}"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", "", "| run | folder | steps | resumed at |", "|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r.label} | {r.dir} | {r.rows[-1]['step'] if r.rows else 0} | "
                     f"{', '.join(map(str, r.resumes)) or '—'} |")
    for png, fig_title, spec in FIGURES:
        if plot_figure(runs, spec, out / png, fig_title):
            lines += ["", f"![{fig_title}]({png})"]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def report_main(run_dirs: Sequence[str], out: Optional[str] = None, title: Optional[str] = None) -> Path:
    """``mmrl report RUN [RUN ...]``: one run's report (into the run, or ``--out``), or several overlaid."""
    if len(run_dirs) == 1:
        path = write_report(run_dirs[0], title=title or f"mmrl run {Path(run_dirs[0]).name}", out_dir=out)
    else:
        if not out:
            raise ConfigError("mmrl report: with several runs, give --out (the folder of the comparison)")
        path = compare_runs(run_dirs, out, title=title or "mmrl runs compared")
    print(f"mmrl: report {path}")
    return path
