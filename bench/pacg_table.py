"""The tables of ``bench/pacg.py``: arms with 95% CIs and per-seed values, differences paired by seed, step cost and
PACG's gate activity.

Confidence intervals: ``bpo_table.ci95`` (mean ± t_{0.975, n-1} · s / sqrt(n) over seeds). A difference A − B is
taken within each seed (both arms start from the same SFT checkpoint and train side by side on the same world),
then its CI over seeds; "arm − SFT" subtracts the (single) start point from each seed's value. Persistence is
shown under both interventions of the diagnostic: VPPO's 14 px patch blackening (p = 0.5; the one the arms train
with) and ``full_mask`` (every pixel black).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence

from bpo_table import fmt_ci

BASE_OF = {"dapo+pacg": "dapo", "vppo+pacg": "vppo", "dapo+pacg_q": "dapo", "dapo+pacg_full": "dapo"}
PAIRS = [("dapo+pacg", "dapo"), ("vppo+pacg", "vppo"), ("dapo+pacg_q", "dapo"), ("dapo+pacg_full", "dapo"),
         ("dapo", "grpo"), ("vppo", "grpo"), ("dapo", "SFT"), ("vppo", "SFT")]
# (key in a diagnosis, header, scale, decimals)
COLUMNS = [("accuracy", "accuracy %", 100, 1), ("correct_with_unsupported", "correct w/ unsupported claim %", 100, 1),
           ("persistence_unsupported", "P unsup (patch)", 1, 3), ("persistence_supported", "P sup (patch)", 1, 3),
           ("persistence_gap", "P unsup − sup (patch)", 1, 3),
           ("persistence_unsupported_full", "P unsup (full mask)", 1, 3),
           ("persistence_supported_full", "P sup (full mask)", 1, 3),
           ("persistence_gap_full", "P unsup − sup (full mask)", 1, 3),
           ("efs_token_mean", "EFS / token", 1, 3), ("claims_per_response", "claims / response", 1, 2)]
DIFF_KEYS = ["accuracy", "correct_with_unsupported", "persistence_unsupported", "persistence_supported",
             "persistence_unsupported_full", "persistence_supported_full", "efs_token_mean"]
GATE_KEYS = ("claims", "flagged_frac", "gain_flagged_mean", "persistence_mean")


def with_gaps(e: Dict[str, float]) -> Dict[str, float]:
    """A diagnosis with the unsupported − supported persistence gaps (NaN where a side has no claims)."""
    nan = float("nan")
    out = dict(e)
    for sfx in ("", "_full"):
        u, s = e.get(f"persistence_unsupported{sfx}", nan), e.get(f"persistence_supported{sfx}", nan)
        out[f"persistence_gap{sfx}"] = u - s
    return out


def ci_cell(xs: Sequence[float], scale: float = 1.0, digits: int = 3, signed: bool = False) -> str:
    """``bpo_table.fmt_ci`` with this table's defaults (raw scale, 3 decimals)."""
    return fmt_ci(xs, scale=scale, signed=signed, digits=digits)


def seeds_cell(xs: Sequence[float], scale: float = 1.0, digits: int = 3, signed: bool = False) -> str:
    f = f"{{:{'+' if signed else ''}.{digits}f}}"
    return " / ".join("n/a" if x != x else f.format(scale * x) for x in xs)


def _table(head: List[str], rows: List[List[str]]) -> List[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def arm_values(results: List[Dict], prep: Dict, arm: str, get: Callable[[Dict], float]) -> List[float]:
    """Per-seed values of ``get(diagnosis)`` for ``arm`` (``SFT``: the start point, repeated per seed)."""
    if arm == "SFT":
        return [get(with_gaps(prep["sft"]))] * len(results)
    return [get(with_gaps(r["arms"][arm]["eval"])) for r in results]


def render(prep: Dict, results: List[Dict], args, arms: Sequence[str]) -> str:
    nan = float("nan")
    seeds = [r["seed"] for r in results]
    lines = [f"PACG miniature: claims world ({args.n_train} train / {args.n_test} test images; unsupported claims from "
             f"the '{args.unsupported_source}' source), perception warm-up {args.warmup_steps} + trace SFT "
             f"{args.sft_steps} steps, then {args.rl_steps} RL steps x {args.prompts_per_step} prompts x n={args.n} "
             f"(lr {args.lr}), seeds {', '.join(map(str, seeds))}. Mean [95% CI] over seeds; P = claim persistence "
             "(1 = the claim's tokens keep their likelihood without the evidence) under VPPO's patch blackening and "
             "under full_mask.", ""]
    sft = with_gaps(prep["sft"])
    rows = [["SFT (start point)"] + [ci_cell([sft.get(k, nan)], s, d) for k, _, s, d in COLUMNS]]
    rows += [[a] + [ci_cell(arm_values(results, prep, a, lambda e, k=k: e.get(k, nan)), s, d) for k, _, s, d in COLUMNS]
             for a in arms]
    lines += _table(["arm"] + [h for _, h, _, _ in COLUMNS], rows)
    lines += ["", f"Differences paired by seed: mean [95% CI]; per seed ({' / '.join(f's{s}' for s in seeds)}) below each:", ""]
    cols = [c for c in COLUMNS if c[0] in DIFF_KEYS]
    rows = []
    for a, b in PAIRS:
        if a not in arms or (b != "SFT" and b not in arms):
            continue
        cells, per = [], []
        for k, _, s, d in cols:
            xs = [x - y for x, y in zip(arm_values(results, prep, a, lambda e, k=k: e.get(k, nan)),
                                        arm_values(results, prep, b, lambda e, k=k: e.get(k, nan)))]
            cells.append(ci_cell(xs, s, d, signed=True))
            per.append(seeds_cell(xs, s, d, signed=True))
        rows += [[f"{a} − {b}"] + cells, ["  per seed"] + per]
    lines += _table(["difference"] + [h for _, h, _, _ in cols], rows)
    lines += ["", "Per seed:", ""]
    rows = [[a, str(r["seed"])] + [ci_cell([with_gaps(r["arms"][a]["eval"]).get(k, nan)], s, d) for k, _, s, d in COLUMNS]
            for a in arms for r in results]
    lines += _table(["arm", "seed"] + [h for _, h, _, _ in COLUMNS], rows)
    lines += ["", "Step cost (median seconds per step, arms stepped side by side; ratio = arm / its base within each "
              "seed, then mean [95% CI] and per seed):", ""]
    rows = []
    for a in arms:
        cs = [r["arms"][a]["cost"] for r in results]
        ratio = "–"
        base = BASE_OF.get(a)
        if base in arms and all(base in r["arms"][a].get("side_by_side", [base]) for r in results):
            xs = [r["arms"][a]["cost"]["step_s"] / r["arms"][base]["cost"]["step_s"] for r in results]
            ratio = f"{ci_cell(xs, 1, 3)} × {base} ({seeds_cell(xs, 1, 3)})"
        rows.append([a] + [ci_cell([c[k] for c in cs], 1, 3) for k in ("step_s", "rollout_s", "update_s", "resample_rounds")]
                    + [ratio])
    lines += _table(["arm", "step s", "rollout s (incl. re-scoring)", "update s", "resample rounds / step", "vs base"], rows)
    gated = [a for a in arms if "+pacg" in a and all("algo_means" in r["arms"][a] for r in results)]
    if gated:
        lines += ["", "PACG gate activity (mean over training steps): claims per step, share of claims flagged, mean gain "
                  "of a flagged claim (1 when none), mean claim persistence in the batch (its training intervention):", ""]
        rows = [[a] + [ci_cell([r["arms"][a]["algo_means"].get(f"algo/pacg/{k}", nan) for r in results], 1, 3)
                       for k in GATE_KEYS] for a in gated]
        lines += _table(["arm", "claims / step", "flagged share", "gain of flagged", "P (batch)"], rows)
    return "\n".join(lines) + "\n"
