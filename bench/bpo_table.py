"""The tables of ``bench/bpo_vs_grpo.py``: arms, differences with 95% CIs and per-seed values, bimodal metrics,
the items behind each metric, per-question-type accuracy and the per-step cost with its bounds.

Confidence intervals: paired over seeds (a difference is taken within each seed, where both arms share the world
and the SFT checkpoint), mean ± t_{0.975, n-1} · s / sqrt(n) with the sample standard deviation s (Student's t;
quantiles from the standard table, e.g. 2.776 for 5 seeds). Bimodal metrics (abstention F1: a seed learns to
abstain or it does not) are reported as the count of seeds whose F1 reaches ``LEARNED`` and the mean among those.
"""
from __future__ import annotations

import math
import shlex
import statistics
from typing import Dict, List, Optional, Tuple

T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
LEARNED = 0.5  # abstention F1 at or above which a seed counts as having learned to abstain
ARM_LABEL = {"sft": "SFT (start point)", "grpo": "GRPO (G=8)", "grpo_g2": "GRPO (G=2)", "grpo_g32": "GRPO (G=32)",
             "tgrpo": "T-GRPO (8+4)", "bpo": "BPO (2x4)", "bpo_p8": "BPO (8x4)", "bpo_anchor": "BPO anchor-only (2x1)"}
PAIRS = [("bpo", "grpo"), ("bpo", "grpo_g2"), ("bpo", "tgrpo"), ("bpo", "bpo_anchor"), ("bpo_anchor", "grpo_g2"),
         ("bpo_p8", "grpo_g32"), ("bpo_p8", "grpo"), ("grpo_g2", "grpo"), ("grpo_g32", "grpo"), ("tgrpo", "grpo")]
PAPER = {"macro": 4.7, "temporal": 7.8, "abstain_f1": 20.0}
BASE_COLUMNS = [("macro", "macro acc"), ("temporal", "temporal acc (dir+order)"),
                ("abstain_f1", "abstention F1 (held-out nulls)"), ("stability", "stability (changed pixels)"),
                ("sensitivity", "sensitivity (vs expected)"), ("no_look", "answer w/o looking")]
PRIOR_COLUMNS = [("macro_biased", "macro acc, biased split"), ("null_prior", "prior answer on nulls")]


def t975(n: int) -> float:
    """Student's t quantile 0.975 with n - 1 degrees of freedom (1.96 beyond 31 samples)."""
    return T975[n - 2] if 2 <= n <= 31 else 1.96


def ci95(xs: List[float]) -> Tuple[float, float, float]:
    """(mean, low, high) of the 95% t-interval; low = high = nan for fewer than 2 values or nan entries."""
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return float("nan"), float("nan"), float("nan")
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, float("nan"), float("nan")
    h = t975(len(xs)) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - h, m + h


def fmt_ci(xs: List[float], scale: float = 100.0, signed: bool = False, digits: int = 1) -> str:
    """``mean [low, high]`` of ``scale * xs`` (95% t-interval), ``digits`` decimals; the mean alone for one value,
    ``n/a`` for none."""
    m, lo, hi = ci95([scale * x for x in xs])
    if math.isnan(m):
        return "n/a"
    s = f"{m:+.{digits}f}" if signed else f"{m:.{digits}f}"
    return s if math.isnan(lo) else f"{s} [{lo:.{digits}f}, {hi:.{digits}f}]"


def label(arm: str) -> str:
    return ARM_LABEL.get(arm, arm)


def short(arm: str) -> str:
    return label(arm).split(" (")[0] if arm in ARM_LABEL and arm not in ("grpo_g2", "grpo_g32", "bpo_p8") else label(arm)


def pairs_for(arms: List[str]) -> List[Tuple[str, str]]:
    out = [(a, b) for a, b in PAIRS if a in arms and b in arms]
    out += [(a, "grpo") for a in arms if a not in ARM_LABEL and "grpo" in arms]
    return out


def columns(results: List[Dict]) -> List[Tuple[str, str]]:
    prior = any("macro_biased" in e for r in results for e in r["eval"].values())
    return BASE_COLUMNS + (PRIOR_COLUMNS if prior else [])


def _v(e: Dict, k: str) -> float:
    x = e.get(k)
    return float("nan") if x is None else float(x)


def diff_values(results: List[Dict], a: str, b: str, k: str) -> List[float]:
    """Per-seed a − b of metric k: the recorded difference where a seed record keeps only differences (seeds
    recovered from a results markdown, ``bench/bpo_recover.py``), else the difference of the arms' values."""
    out = []
    for r in results:
        d = r.get("diffs", {}).get(f"{a} - {b}")
        out.append(_v(d, k) if d is not None else _v(r["eval"][a], k) - _v(r["eval"][b], k))
    return out


def seeds_with(results: List[Dict], arm: str, k: str) -> List[int]:
    """Seeds whose record holds arm's own value of metric k (recovered seeds lack some, see bench/bpo_recover.py)."""
    return [r["seed"] for r in results if k in r["eval"].get(arm, {})]


def _ratio(c: Dict, g: Dict, k: str) -> float:
    """c's median k-time over GRPO's (a recovered cost row keeps only the printed ratio)."""
    return c[f"{k}_s"] / g[f"{k}_s"] if f"{k}_s" in c else c[f"{k}_ratio"]


def render(results: List[Dict], args, wall_min: float, budgets_text: str, cost_long: Optional[Dict]) -> str:
    seeds = [r["seed"] for r in results]
    arms = list(results[0]["costs"])
    cols = columns(results)
    lines = [f"# BPO vs GRPO vs T-GRPO, miniature (seeds {seeds}{', prior world: ' + args.prior if args.prior else ''})",
             "", *(["Commands (their seeds pooled here):", ""] + [f"- `{c}`" for c in args.commands]
                   + [""] + list(getattr(args, "sources", None) or [])
                   if getattr(args, "commands", None) else
                   ["Command: `.venv/bin/python bench/bpo_vs_grpo.py " + shlex.join(args.argv) + "`"]), "",
             f"World: synthetic video (`make_video_world`), {args.n_train} train / {args.n_test} held-out clips per seed"
             + (f", prior `{args.prior}` at strength {args.prior_strength} in the train split (held-out split "
                f"debiased; `test_biased.json` keeps the prior)" if args.prior else "")
             + f". SFT {args.sft_steps} steps on the train split plus {100 * args.sft_null_share:.0f}% empty-scene clips "
             f"answered with the abstention option; RL {args.rl_steps} steps x {args.prompts_per_step} prompts, same lr "
             f"for every arm. Rollouts per prompt: {budgets_text}.",
             "Eval: greedy, held-out split, `views/bpo_eval.yaml` for every arm: stable and sensitive views as in "
             "training, null views on five canvases no stage trained on (black, light gray, noise, a gradient, a "
             "drifting texture). Percent; mean [95% t-interval] over seeds.", ""]
    lines += ["| arm | " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * (len(cols) + 1)]
    partial: Dict[str, List[int]] = {}  # column -> the seeds that hold its per-arm values, where not all do
    for arm in ["sft"] + arms:
        cells = []
        for k, h in cols:
            have = seeds_with(results, arm, k)
            cells.append(fmt_ci([_v(r["eval"][arm], k) for r in results]) + ("" if len(have) == len(seeds) else " †"))
            if len(have) < len(seeds):
                partial[h] = have
        lines.append(f"| {label(arm)} | " + " | ".join(cells) + " |")
    if partial:
        groups: Dict[str, List[str]] = {}
        for h, v in partial.items():
            groups.setdefault(str(v), []).append(h)
        lines += ["", "† Over seeds " + "; ".join(f"{v} only ({', '.join(hs)})" for v, hs in groups.items())
                  + ": the other seeds' records keep these metrics only as the paired differences below (recovered "
                  "from a results markdown)."]
    lines += ["", "Differences (pp), paired by seed: mean [95% t-interval].", "",
              "| difference | " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * (len(cols) + 1)]
    pairs = pairs_for(arms)
    for a, b in pairs:
        cells = [fmt_ci(diff_values(results, a, b, k), signed=True) for k, _ in cols]
        lines.append(f"| {short(a)} − {short(b)} | " + " | ".join(cells) + " |")
    paper = [f"+{PAPER[k]:.1f}" if k in PAPER else "" for k, _ in cols]
    lines.append("| paper: BPO − budget-matched GRPO | " + " | ".join(paper) + " |")
    lines += ["", f"Per-seed differences (pp), seeds {seeds} in order:", "",
              "| difference | " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for a, b in pairs:
        cells = [", ".join("n/a" if math.isnan(d) else f"{100 * d:+.1f}" for d in diff_values(results, a, b, k))
                 for k, _ in cols]
        lines.append(f"| {short(a)} − {short(b)} | " + " | ".join(cells) + " |")
    lines += ["", f"Abstention is bimodal (a seed learns it or it does not): seeds with held-out abstention F1 ≥ "
              f"{100 * LEARNED:.0f}, and the values among those seeds.", "",
              "| arm | learned | F1 among those | recall among those | answer w/o looking among those |", "|---|---|---|---|---|"]
    def among(got: List[Dict], k: str) -> str:
        have = [r for r in got if k in r["eval"][arm]]
        if not have:
            return "—" if not got else "n/a"
        m = f"{100 * statistics.mean(r['eval'][arm][k] for r in have):.1f}"
        return m if len(have) == len(got) else f"{m} (seeds {[r['seed'] for r in have]}; not kept for the others)"

    for arm in ["sft"] + arms:
        got = [r for r in results if _v(r["eval"][arm], "abstain_f1") >= LEARNED]
        lines.append(f"| {label(arm)} | {len(got)} / {len(results)} | {among(got, 'abstain_f1')} | "
                     f"{among(got, 'abstain_recall')} | {among(got, 'no_look')} |")
    nr_res = [r for r in results if "null_recall" in r["eval"]["sft"]] or results[:1]
    canvases = sorted(nr_res[0]["eval"]["sft"].get("null_recall", {}))
    lines += ["", "Held-out abstention recall per null canvas (mean over seeds"
              + ("" if len(nr_res) == len(results) else f" {[r['seed'] for r in nr_res]}, the only ones that keep it")
              + "):", "", "| arm | " + " | ".join(canvases) + " |", "|" + "---|" * (len(canvases) + 1)]
    for arm in ["sft"] + arms:
        lines.append(f"| {label(arm)} | " + " | ".join(
            f"{100 * statistics.mean(r['eval'][arm]['null_recall'][k] for r in nr_res):.1f}" for k in canvases) + " |")
    ref = "grpo" if "grpo" in arms else arms[0]
    n_res = next((r for r in results if "n" in r["eval"][ref]), results[0])
    lines += ["", "Items behind each metric (seed " + str(n_res["seed"]) + ", per arm): " + ", ".join(
        f"{k} {int(v)}" for k, v in sorted(n_res["eval"][ref].get("n", {}).items())) + ".", ""]
    lines += per_qtype(results, arms) + [""] + cost_lines(results, arms, cost_long)
    timed = [r for r in results if "minutes" in r]
    mean_min = lambda k: statistics.mean(r["minutes"][k] for r in timed)  # noqa: E731
    if timed:
        lines += ["", (f"Wall time: {wall_min:.1f} min in all (" if not math.isnan(wall_min) else "Wall time: ")
                  + f"{mean_min('total'):.1f} min per seed: SFT {mean_min('sft'):.1f}, RL {mean_min('rl'):.1f} for "
                  f"the {len(arms)} arms, eval {mean_min('eval'):.1f}"
                  + ("" if len(timed) == len(results) else f"; seeds {[r['seed'] for r in timed]}, the only ones timed")
                  + (")." if not math.isnan(wall_min) else ".")]
    return "\n".join(lines) + "\n"


def per_qtype(results: List[Dict], arms: List[str]) -> List[str]:
    qtypes = sorted(results[0]["eval"]["sft"]["per_qtype"])
    lines = ["Per-seed held-out accuracy per question type (original clips):", "",
             "| seed | arm | " + " | ".join(qtypes) + " | macro | abst. P | abst. R |", "|" + "---|" * (len(qtypes) + 5)]
    for r in results:
        for arm in ["sft"] + arms:
            e = r["eval"][arm]
            lines.append(f"| {r['seed']} | {arm} | " + " | ".join(f"{100 * e['per_qtype'].get(q, 0):.1f}" for q in qtypes)
                         + f" | {100 * e['macro']:.1f} | {100 * e['abstain_precision']:.1f} | {100 * e['abstain_recall']:.1f} |")
    return lines


def work(cost: Dict[str, float]) -> float:
    """Tokens a step pushes through the model: every distinct (media, prompt) once, every response once."""
    return cost.get("prompt_tokens", 0.0) + cost.get("response_tokens", 0.0)


def cost_lines(results: List[Dict], arms: List[str], cost_long: Optional[Dict]) -> List[str]:
    lines = ["Per-step cost. Arms are stepped round-robin in one process (same load); s/step is the median step. "
             "Work = prompt + response tokens pushed through the model per step (mean): every distinct (media, prompt) "
             "is prefilled and scored once, every response decoded and scored once. The bound (issue 16): per token of "
             "work, a BPO step costs ≤ 1.1x a GRPO step, i.e. (step ratio) / (work ratio) ≤ 1.1 against the "
             "budget-matched GRPO arm.", "",
             "| seed | arm | s/step | / GRPO | rollout / GRPO | update / GRPO | view share | prompts | prompt tok "
             "| response tok | work ratio | step ratio / work ratio |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ratio: Dict[str, List[float]] = {a: [] for a in arms}
    per_tok: Dict[str, List[float]] = {a: [] for a in arms}
    for r in results:
        g = r["costs"]["grpo"]
        for arm in arms:
            c = r["costs"][arm]
            q, w = c["median_step_s"] / g["median_step_s"], work(c) / max(work(g), 1e-9)
            ratio[arm].append(q)
            per_tok[arm].append(q / w)
            lines.append(f"| {r['seed']} | {arm} | {c['median_step_s']:.3f} | {q:.2f} | {_ratio(c, g, 'rollout'):.2f} | "
                         f"{_ratio(c, g, 'update'):.2f} | {100 * c['view_share']:.2f}% | {c.get('prompts', 0):.0f} | "
                         f"{c.get('prompt_tokens', 0):.0f} | {c.get('response_tokens', 0):.0f} | {w:.2f} | {q / w:.2f} |")
    lines.append("")
    from_match = {"bpo": "grpo", "bpo_p8": "grpo_g32", "bpo_anchor": "grpo_g2"}
    for arm, ref in from_match.items():
        if arm in arms and ref in arms:
            q = [r["costs"][arm]["median_step_s"] / r["costs"][ref]["median_step_s"] for r in results]
            w = [work(r["costs"][arm]) / max(work(r["costs"][ref]), 1e-9) for r in results]
            pt = [a / b for a, b in zip(q, w)]
            lines.append(f"{label(arm)} vs {label(ref)} (same budget): step ratio {statistics.mean(q):.2f}, work ratio "
                         f"{statistics.mean(w):.2f}, per token of work {statistics.mean(pt):.2f} (max {max(pt):.2f}): "
                         f"{'within' if max(pt) <= 1.1 else 'ABOVE'} the 1.1 bound")
    for arm in arms:
        if results[0].get("algos", {}).get(arm) == "bpo":
            share = [r["costs"][arm]["view_share"] for r in results]
            lines.append(f"View construction share of {label(arm)}'s step time: {100 * statistics.mean(share):.2f}% "
                         f"(max {100 * max(share):.2f}%)")
    if cost_long:
        c = cost_long
        lines.append(f"At up to {c['max_new_tokens']} response tokens (untrained tiny model, {c['prompts']} prompt(s) x 8 "
                     f"responses per step, median of {c['steps']} step(s) after a warm-up): BPO (2x4) step {c['bpo_s']:.3f} s / GRPO (G=8) step {c['grpo_s']:.3f} s "
                     f"= plain step ratio {c['step_ratio']:.2f}; work ratio {c['work_ratio']:.2f} (mean response "
                     f"{c['bpo_resp']:.0f} / {c['grpo_resp']:.0f} tokens); per token of work {c['step_ratio'] / c['work_ratio']:.2f}")
    return lines
