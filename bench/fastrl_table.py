"""The table and the time-to-accuracy plot of ``bench/fastrl.py`` (FastRL on GRPO / DAPO / GSPO, issue 15).

Time to accuracy: the first held-out eval point at or above the UNWRAPPED base's final accuracy (``reach``); the
speed-up is base / FastRL in wall-clock and in generated + trained tokens (``pair_stats``), defined only when both
arms needed training to get there."""
from __future__ import annotations

import math
import shlex
import statistics
from pathlib import Path
from typing import Dict, List, Optional

from bpo_table import ci95


def reach(points: List[Dict], target: float) -> Optional[Dict]:
    """The first eval point whose accuracy is >= ``target`` (None if the arm never gets there)."""
    for p in points:
        if p["acc"] >= target - 1e-9:
            return p
    return None


def _ms(xs: List[Optional[float]], fmt: str = "{:.1f}") -> str:
    """Mean [95% t-interval] over the defined values (``bpo_table.ci95``); "(n = k)" when fewer than all are defined
    or fewer than 2."""
    n_all, xs = len(xs), [x for x in xs if x is not None]
    if not xs:
        return "n/a"
    m, lo, hi = ci95(xs)
    out = fmt.format(m) if math.isnan(lo) else f"{fmt.format(m)} [{fmt.format(lo)}, {fmt.format(hi)}]"
    return out + (f" (n = {len(xs)})" if len(xs) < n_all or len(xs) < 2 else "")


def pair_stats(r: Dict, base: str) -> Dict:
    b, f = r["arms"][base], r["arms"][f"{base}_fastrl"]
    target = b["final_acc"]
    pb, pf = reach(b["points"], target), reach(f["points"], target)
    ok = pf is not None and pf["wall"] > 0 and pb["wall"] > 0  # both needed training to get there
    why = None if ok else ("n/a: base ended at or below the start" if pb["wall"] == 0 else
                           "—: FastRL never reached it" if pf is None else "n/a: FastRL's start had it")
    return {"target": target, "base": pb, "fast": pf, "why": why,
            "speedup": pb["wall"] / pf["wall"] if ok else None,
            "token_ratio": pb["tokens"] / pf["tokens"] if ok else None}


def render(results: List[Dict], args) -> str:
    seeds = [r["seed"] for r in results]
    lines = [f"# FastRL on GRPO / DAPO / GSPO, miniature (seeds {seeds})", "",
             "Command: `.venv/bin/python bench/fastrl.py " + shlex.join(a for a in args.argv if a != "--render-only") + "`"
             + (" (this table re-rendered from its results.json with `--render-only` added)"
                if getattr(args, "render_only", False) else ""), "",
             f"World: synthetic video clips (the demo's), {args.n_sft} train clips, {args.n_rl} of them as the RL split, "
             f"{args.n_test} held-out. SFT: {args.warmup_steps} steps on letter answers (the demo's SFT), then "
             f"{args.sft_steps} steps (lr {args.sft_lr or 'of configs/demo.yaml'}) on targets with a ~40-token "
             f"reasoning span before `<answer>L</answer>`{' that opens with the chosen letter' if args.answer_first else ''}. "
             f"RL (lr {args.rl_lr or 'of configs/demo.yaml, 1e-4'}) {args.rl_steps} steps x {args.prompts_per_step} prompts x G = {args.n}, "
             f"max {args.max_new_tokens} new tokens, reward accuracy + 0.5 x format. FastRL: τ = {args.tau}, "
             f"{args.ngram}-grams, ARS over {args.rl_steps * args.prompts_per_step // max(args.n_rl, 1)} RL epochs. "
             f"Held-out accuracy (greedy) every {args.eval_every} steps. Percent / seconds, mean [95% CI] over seeds.", "",
             "| arm | final acc | time to base's final acc (s)¹ | tokens to it (k)¹ | speed-up (time) | speed-up (tokens) "
             "| kept fraction | rollouts / prompt | s/step |", "|---|---|---|---|---|---|---|---|---|"]
    for base in args.bases:
        ps = [pair_stats(r, base) for r in results]
        for fast in (False, True):
            name = f"{base}_fastrl" if fast else base
            key = "fast" if fast else "base"
            a = [r["arms"][name] for r in results]
            hit = [p[key] if p["why"] is None else None for p in ps]  # seeds where the ratio is defined
            n_miss = sum(p[key] is None for p in ps)
            miss = f" ({n_miss}/{len(ps)} seeds never reached it)" if n_miss else ""
            lines.append(
                f"| {base.upper()}{' + FastRL' if fast else ''} | {_ms([100 * x['final_acc'] for x in a])} "
                f"| {_ms([h and h['wall'] for h in hit], '{:.0f}')}{miss} | {_ms([h and h['tokens'] / 1e3 for h in hit], '{:.0f}')} "
                f"| {_ms([p['speedup'] for p in ps], '{:.2f}x') if fast else ''} "
                f"| {_ms([p['token_ratio'] for p in ps], '{:.2f}x') if fast else ''} "
                f"| {_ms([x['kept_frac'] for x in a], '{:.2f}')} | {_ms([x['rollouts_per_prompt'] for x in a], '{:.2f}')} "
                f"| {_ms([x['median_step_s'] for x in a], '{:.2f}')} |")
    lines += ["", "¹ over the seeds where the speed-up is defined (see below).", "", "Per seed (speed-up = base's time or tokens to its final accuracy / FastRL's; n/a when the base's "
              "final accuracy is at or below the SFT start, so both arms 'reach' it at step 0; '—' when FastRL never "
              "reached it within the run):", "",
              "| seed | base | base final acc | FastRL final acc | speed-up (time) | speed-up (tokens) | FastRL kept fraction "
              "| FastRL rollouts / prompt | step time FastRL / base (rollout, update) | whole run: time, tokens base / FastRL |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for base in args.bases:
            p = pair_stats(r, base)
            b, f = r["arms"][base], r["arms"][f"{base}_fastrl"]
            fmt = lambda x: f"{x:.2f}x" if x is not None else p["why"]  # noqa: E731
            lines.append(f"| {r['seed']} | {base} | {100 * b['final_acc']:.1f} | {100 * f['final_acc']:.1f} | {fmt(p['speedup'])} "
                         f"| {fmt(p['token_ratio'])} | {f['kept_frac']:.2f} | {f['rollouts_per_prompt']:.2f} "
                         f"| {f['median_step_s'] / b['median_step_s']:.2f} ({f['rollout_s'] / b['rollout_s']:.2f}, "
                         f"{f['update_s'] / max(b['update_s'], 1e-9):.2f}) | {b['wall'] / f['wall']:.2f}x, "
                         f"{b['tokens'] / f['tokens']:.2f}x |")
    lines.append("")
    for base in args.bases:
        run_t = [r["arms"][base]["wall"] / r["arms"][f"{base}_fastrl"]["wall"] for r in results]
        run_k = [r["arms"][base]["tokens"] / r["arms"][f"{base}_fastrl"]["tokens"] for r in results]
        lines.append(f"{base.upper()}, the whole {args.rl_steps}-step run, base / FastRL: wall-clock {_ms(run_t, '{:.2f}x')}, "
                     f"generated + trained tokens {_ms(run_k, '{:.2f}x')}.  ")
    mins = [r["minutes"]["total"] for r in results]
    letters = "; ".join(f"seed {r['seed']} {r['sft_letters']}" for r in results if "sft_letters" in r)
    lines += ["", f"SFT held-out accuracy (every arm's start): {_ms([100 * r['acc0'] for r in results])} "
              f"(per seed {', '.join('%.1f' % (100 * r['acc0']) for r in results)}). "
              + (f"Predicted letters of the SFT start on the held-out clips: {letters}. " if letters else "") +
              f"Minutes per seed: {statistics.mean(mins):.1f} (SFT {statistics.mean(r['minutes']['sft'] for r in results):.1f}, "
              f"RL + evals {statistics.mean(r['minutes']['rl'] for r in results):.1f})."]
    steps = [p["step"] for p in results[0]["arms"][f"{args.bases[0]}"]["points"]]
    lines += ["", f"Held-out accuracy (%) at steps {', '.join(map(str, steps))}:", "", "| seed | arm | curve |", "|---|---|---|"]
    for r in results:
        for name, arm in r["arms"].items():
            label = name.split("_")[0].upper() + (" + FastRL" if name.endswith("_fastrl") else "")
            lines.append(f"| {r['seed']} | {label} | "
                         + ", ".join(f"{100 * p['acc']:.1f}" for p in arm["points"]) + " |")
    return "\n".join(lines) + "\n"


def plot(results: List[Dict], args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.bases), figsize=(4.2 * len(args.bases), 3.4), squeeze=False)
    for ax, base in zip(axes[0], args.bases):
        for name, style in ((base, "-"), (f"{base}_fastrl", "--")):
            pts = [r["arms"][name]["points"] for r in results]
            k = min(len(p) for p in pts)
            wall = [statistics.mean(p[i]["wall"] for p in pts) for i in range(k)]
            acc = [100 * statistics.mean(p[i]["acc"] for p in pts) for i in range(k)]
            ax.plot(wall, acc, style, marker="o", ms=3, label=base.upper() + (" + FastRL" if name.endswith("_fastrl") else ""))
        ax.set_title(base.upper())
        ax.set_xlabel("training wall-clock (s)")
        ax.set_ylabel("held-out accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"time to accuracy, mean of seeds {[r['seed'] for r in results]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
