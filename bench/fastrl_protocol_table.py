"""The pure pieces of ``bench/fastrl_protocol.py`` (FastRL under the miniature protocol, issue 28): the pre-flight's
mechanism statistics (MDAP's prune split, ARS's predicted rollout counts), time to the base's best held-out
accuracy, and the results file rendered from the committed seed records alone.

Time to accuracy (issue 28): the target is the BEST held-out accuracy the unwrapped base reaches at any of its
evaluation points; an arm's time is its cost (process CPU seconds, wall seconds, generated tokens, update-pass
tokens) at its first point at or above the target. The speed-up is base / FastRL per seed; it is defined only
when the base needed training to get there (its best point is not the SFT start) and FastRL got there.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

from _preflight import Preflight, preflight_lines
from _protocol import COIN_ARM, SFT_ARM, Protocol, Results, setting_lines, Selection
from bpo_table import ci95, fmt_ci

COSTS = (("cpu", "CPU s"), ("wall", "wall s"), ("gen", "generated tokens (k)"), ("upd", "update-pass tokens (k)"))
SCALE = {"cpu": 1.0, "wall": 1.0, "gen": 1e-3, "upd": 1e-3}
LABEL = {SFT_ARM: "SFT start (no RL)", COIN_ARM: "coin-flip control (GRPO, coin-flip accuracy reward)",
         "grpo": "GRPO", "grpo_fastrl": "GRPO + FastRL", "dapo": "DAPO", "dapo_fastrl": "DAPO + FastRL",
         "gspo": "GSPO (ppo_epochs 2)", "gspo_fastrl": "GSPO + FastRL (ppo_epochs 2)"}
BASES = ("grpo", "dapo", "gspo")


# ---- pre-flight: the mechanism ------------------------------------------------------------------------------------
def group_advantages(rewards: Sequence[Sequence[float]], eps: float = 1e-6) -> List[List[float]]:
    """GRPO's group-normalised advantage per response: (r - mean) / (std + eps), std the population std of the
    group (a zero-spread group gets 0 everywhere)."""
    out = []
    for g in rewards:
        m = sum(g) / len(g)
        sd = math.sqrt(sum((x - m) ** 2 for x in g) / len(g))
        out.append([(x - m) / (sd + eps) if sd > 1e-12 else 0.0 for x in g])
    return out


def ars_predict(sizes: Sequence[Tuple[float, float]], g_max: int, steps_per_epoch: int, total_steps: int,
                epochs: int) -> List[int]:
    """ARS's rollout count per epoch (``mmrl.algos.fastrl.ARSState``) if every step's MDAP kept-set sizes were the
    start's: ``sizes`` = (B_mean, B_max) per step-sized chunk of the sampled prompts. Epoch 1 sets G'_ref =
    (mean + max) / 2, epoch 2 runs at G, and epoch k >= 3 at n = ars_rollout_count(G, G'_ref, G'_t) with
    G'_t = α mean + (1 - α) max, α = (k - 1) steps_per_epoch / total_steps (clipped to [0, 1])."""
    from mmrl.algos.fastrl import ars_rollout_count

    if not sizes:
        return []
    b_mean = sum(s[0] for s in sizes) / len(sizes)
    b_max = sum(s[1] for s in sizes) / len(sizes)
    g_ref = (b_mean + b_max) / 2.0
    out = []
    for k in range(1, epochs + 1):
        if k <= 2:
            out.append(int(g_max))
            continue
        alpha = min(max((k - 1) * steps_per_epoch / total_steps, 0.0), 1.0)
        out.append(ars_rollout_count(g_max, g_ref, alpha * b_mean + (1 - alpha) * b_max))
    return out


def mdap_stats(rewards, responses, tau: float, ngram: int, prompts_per_step: int, g_max: int,
               steps_per_epoch: int, total_steps: int, epochs: int) -> Dict:
    """The pre-flight's mechanism statistics on sampled groups (``rewards`` per group, ``responses`` token-id lists
    per group): ``fastrl_preflight.mdap_split`` at τ and n, the mean kept set per prompt, and ARS's predicted
    rollout count per epoch (``ars_n``, a list; ``ars_n_min`` and the epochs where it is below G)."""
    import torch

    from fastrl_preflight import mdap_split
    from mmrl.algos.fastrl import kept_set_sizes, mdap_keep

    adv = torch.tensor([a for g in group_advantages(rewards) for a in g], dtype=torch.float64)
    gids = torch.tensor([i for i, g in enumerate(rewards) for _ in g])
    resp = [torch.as_tensor(r, dtype=torch.long) for g in responses for r in g]
    split = mdap_split(adv, gids, resp, tau, ngram)
    keep = mdap_keep(adv, gids, resp, tau, ngram)
    sizes = []
    for lo in range(0, len(rewards), prompts_per_step):
        m = (gids >= lo) & (gids < lo + prompts_per_step)
        sizes.append(kept_set_sizes(keep[m], gids[m]))
    ars = ars_predict(sizes, g_max, steps_per_epoch, total_steps, epochs)
    return {**split, "kept_per_prompt": sum(s[0] for s in sizes) / max(len(sizes), 1), "ars_n": ars, "kept_sizes": sizes,
            "ars_n_min": float(min(ars)) if ars else float("nan"),
            "ars_epochs_below_G": float(sum(1 for n in ars if n < g_max))}


def mdap_can_act(st: Dict) -> Tuple[bool, str]:
    """MDAP acts when it prunes some rollouts; the reason also says whether the similarity test and ARS act."""
    pruned = st.get("pruned_by_advantage", float("nan")) - st.get("kept_by_similarity", 0.0)
    if not pruned > 0:
        return False, "MDAP prunes no rollout of the start's sampled groups: FastRL would equal its base"
    sim = st.get("kept_by_similarity", 0.0)
    return True, (f"MDAP prunes {100 * pruned:.1f}% of the rollouts; the similarity test keeps back "
                  f"{100 * sim:.1f}% ({'acts' if sim > 0 else 'does not act: advantage-only pruning'}); ARS's "
                  f"predicted n goes down to {st.get('ars_n_min', float('nan')):.0f}")


# ---- time to the base's best accuracy -----------------------------------------------------------------------------
def reach(points: List[Dict], target: float) -> Optional[Dict]:
    """The first evaluation point whose accuracy is >= ``target`` (None if never)."""
    return next((p for p in points if p["acc"] >= target - 1e-9), None)


def time_to_best(arms: Dict[str, Dict], base: str) -> Dict:
    """Per cost key: the base's and FastRL's cost to the base's best held-out accuracy, and base / FastRL."""
    b, f = arms[base]["points"], arms[f"{base}_fastrl"]["points"]
    target = max(p["acc"] for p in b)
    pb, pf = reach(b, target), reach(f, target)
    why = ("the base's best is its SFT start (RL never improved on it)" if pb["step"] == 0 else
           "FastRL never reached it" if pf is None else None)
    out = {"target": target, "base_step": pb["step"], "fast_step": pf["step"] if pf else None, "why": why}
    for k, _ in COSTS:  # each side's cost where it is defined; the ratio only where both are
        out[f"base_{k}"] = pb[k] if pb["step"] > 0 else None
        out[f"fast_{k}"] = pf[k] if pf is not None and pb["step"] > 0 else None
        out[f"speedup_{k}"] = pb[k] / pf[k] if why is None and pf[k] > 0 else None
    return out


# ---- the results file ---------------------------------------------------------------------------------------------
def _v(x, scale: float = 1.0, fmt: str = "{:.1f}") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(scale * x)


def direction(diffs: Sequence[Optional[float]], paper_sign: int) -> str:
    """Reproduced when the paired differences' 95% CI lies on the paper's side of 0, reversed when on the other,
    not resolved otherwise (or when a seed's difference is undefined)."""
    if any(d is None for d in diffs) or len(diffs) < 2:
        return "not resolved (undefined on some seed)"
    _, lo, hi = ci95([paper_sign * d for d in diffs])
    return "reproduced" if lo > 0 else "reversed" if hi < 0 else "not resolved (CI contains 0)"


def arm_values(recs: List[Dict], key: str) -> Dict[str, Dict[int, float]]:
    """{arm: {seed: value}} of ``key`` ("final" or "best" held-out accuracy) over the seed records; the SFT start
    is every arm's step-0 point."""
    out: Dict[str, Dict[int, float]] = {SFT_ARM: {r["seed"]: r["preflight"]["start_acc"] for r in recs}}
    for r in recs:
        for name, a in r.get("arms", {}).items():
            accs = [p["acc"] for p in a["points"]]
            out.setdefault(name, {})[r["seed"]] = accs[-1] if key == "final" else max(accs)
    order = [SFT_ARM, COIN_ARM] + [a for b in BASES for a in (b, f"{b}_fastrl")]
    return {k: out[k] for k in order if k in out}


def time_section(recs: List[Dict], bases: Sequence[str]) -> Tuple[List[str], List[str]]:
    """The per-seed time-to-accuracy table (every base), then per base the speed-up and the paired difference."""
    seeds = [r["seed"] for r in recs]
    lines = ["## Time to the base's best held-out accuracy", "",
             "Target: the best held-out accuracy the unwrapped base reaches at any evaluation point; cost: at the "
             "arm's first evaluation point at or above it (evaluations are not counted). Speed-up = base / FastRL.",
             "", "| base | seed | target % | base: step; CPU s, wall s, gen k, update k | FastRL: step; CPU s, wall s, "
             "gen k, update k | speed-up CPU | speed-up tokens (gen + update) | note |",
             "|---|---|---:|---|---|---:|---:|---|"]
    summaries, claims = [], []
    for base in bases:
        never = 0
        rows = [(r["seed"], time_to_best(r["arms"], base)) for r in recs
                if base in r.get("arms", {}) and f"{base}_fastrl" in r.get("arms", {})]
        if not rows:
            continue
        for s, t in rows:
            cost = lambda w: ", ".join(_v(t[f"{w}_{k}"], SCALE[k], "{:.0f}" if k in ("cpu", "wall") else "{:.1f}")  # noqa: E731
                                       for k, _ in COSTS)
            tok = None if t["why"] else (t["base_gen"] + t["base_upd"]) / max(t["fast_gen"] + t["fast_upd"], 1e-9)
            never += t["why"] == "FastRL never reached it"
            lines.append(f"| {base.upper()} | {s} | {100 * t['target']:.1f} | {t['base_step']}; {cost('base')} "
                         f"| {_v(t['fast_step'], 1, '{:.0f}')}; {cost('fast')} | {_v(t['speedup_cpu'], 1, '{:.2f}x')} "
                         f"| {_v(tok, 1, '{:.2f}x')} | {t['why'] or ''} |")
        sp = [t["speedup_cpu"] for _, t in rows]
        diff = [None if t["why"] else t["base_cpu"] - t["fast_cpu"] for _, t in rows]
        ok = [x for x in sp if x is not None]
        defined = [d for d in diff if d is not None]
        summaries.append(f"- {base.upper()}: speed-up in CPU seconds over the seeds where it is defined "
                         f"({len(ok)}/{len(rows)}): " + (f"{fmt_ci(ok, 1.0, digits=2)}x" if ok else "n/a")
                         + f" (per seed {', '.join(_v(x, 1, '{:.2f}x') for x in sp)}); paired difference base − "
                         f"FastRL, CPU s: " + (fmt_ci(defined, 1.0, signed=True) if defined else "n/a")
                         + f" (per seed {', '.join(_v(d, 1, '{:+.0f}') for d in diff)}).")
        verdict = direction(diff if len(rows) == len(seeds) else [None], +1)
        if never == len(seeds):  # no time to compare: FastRL did not get there in the same number of steps
            verdict = (f"reversed: FastRL never reached the base's best held-out accuracy within the run's steps on "
                       f"{never}/{len(seeds)} seeds")
        claims.append(f"- **{base.upper()} + FastRL reaches the base's best accuracy in less time** (paper: yes): "
                      f"{verdict}.")
    return lines + [""] + summaries + [""], claims


def render(recs: List[Dict], proto: Protocol, notes: str = "") -> str:
    """The whole results file from the seed records (``bench/results/fastrl_protocol/seed<S>.json``)."""
    res = Results(proto, "FastRL on GRPO / DAPO / GSPO, miniature on the tiny base (issue 28)")
    r0 = recs[0]
    st = r0["settings"]
    res.add([f"Setting: per seed the synthetic video world at the base's resolution ({st['world']}), reasoning targets "
             f"in {st['styles']} styles (`mmrl.data.reasoning`, answer-first {st['answer_first']}), "
             f"{st['n_train']} train clips (the first {st['n_rl']} are the RL split), {st['n_val']} validation and "
             f"{st['n_test']} test clips; SFT {st['sft_steps']} steps from `model.path=base` at lr {st.get('sft_lr', 'of configs/demo.yaml')}{', vision tower frozen' if st.get('freeze_vision') else ''}; RL {st['rl_steps']} "
             f"steps x {st['prompts_per_step']} prompts x G = {st['n']}, max {st['max_new_tokens']} new tokens, reward "
             f"accuracy + 0.5 x answer-tag format; FastRL τ = {st['tau']} on {st['ngram']}-grams, ARS over "
             f"{st['rl_steps'] * st['prompts_per_step'] // st['n_rl']} epochs; greedy held-out accuracy every "
             f"{st['eval_every']} steps. Costs per arm: process CPU seconds and wall seconds of its steps, generated "
             f"tokens, update-pass tokens (response tokens of the rows entering the actor pass x ppo_epochs).", ""])
    pfs = []
    for r in recs:
        d = r["preflight"]["pf"]
        mech = dict(d["mechanism"])
        mech["mdap_pruned"] = mech.get("pruned_by_advantage", float("nan")) - mech.get("kept_by_similarity", 0.0)
        pfs.append(Preflight(**{**d, "mechanism": mech, "pass_at": {int(k): v for k, v in d["pass_at"].items()}}))
    pre = preflight_lines(pfs, "FastRL (MDAP + ARS)")
    pre += ["Mechanism columns (shares of the sampled rollouts): `mdap_pruned` what MDAP at τ prunes, "
            "`pruned_by_advantage` what one rollout per advantage partition would prune, `kept_by_similarity` what "
            "the similarity test keeps back of that, `partitions_similarity_acts` the share of partitions with two or "
            "more rollouts where it keeps more than one, `kept_per_prompt` MDAP's mean kept set per prompt; "
            "`ars_n_min` and `ars_epochs_below_G` from ARS's prediction:", "",
            "ARS's predicted rollout count per epoch (start's kept-set sizes held fixed): "
            + "; ".join(f"seed {r['seed']}: {r['preflight']['ars_n']}" for r in recs),
            "", "Truncation share of the sampled responses (max new tokens "
            f"{st['max_new_tokens']}): " + ", ".join(f"seed {r['seed']} {100 * r['preflight']['truncation']:.1f}%"
                                                     for r in recs), ""]
    res.add(pre + other_ngram_lines(recs, st["ngram"]) + style_lines(recs, st["tau"]))
    grid = r0.get("selection")
    if grid:
        sel = Selection(grid["lr"], grid["kl"], {(float(k.split("_")[0][2:]), float(k.split("_")[1][2:])): v
                                                 for k, v in grid["scores"].items()})
        res.add(setting_lines(sel))
    dropped = {}
    for r in recs:
        for a, why in r.get("dropped", {}).items():
            dropped[a] = (dropped[a] + "; " if a in dropped else "") + f"seed {r['seed']}: {why}"
    for key, title in (("final", "final held-out accuracy %"), ("best", "best held-out accuracy % over the eval points")):
        vals = arm_values(recs, key)
        missing = {} if COIN_ARM in vals else {COIN_ARM: dropped.get(COIN_ARM, "not finished when this file was rendered")}
        if key == "best" and COIN_ARM in vals:  # the control is evaluated at its end only: no best over a curve
            vals.pop(COIN_ARM)
            missing = {COIN_ARM: "evaluated at its end only (its final accuracy is in the table above)"}
        res.add(res.arms_table(title, vals, missing=missing))
        pairs = [(f"{b}_fastrl", b) for b in BASES if b in vals and f"{b}_fastrl" in vals]
        pairs += [(a, b) for a, b in (("grpo", COIN_ARM), ("grpo", SFT_ARM), (COIN_ARM, SFT_ARM)) if a in vals and b in vals]
        res.add(res.paired_table(title, vals, pairs))
    bases = [b for b in BASES if any(b in r.get("arms", {}) for r in recs)]
    tsec, claims = time_section(recs, bases)
    res.add(tsec)
    res.add(cost_lines(recs))
    vals = arm_values(recs, "final")
    for b in bases:
        if f"{b}_fastrl" in vals and len(vals[b]) == len(recs) == len(vals[f"{b}_fastrl"]):
            d = [vals[f"{b}_fastrl"][s] - vals[b][s] for s in proto.seeds]
            claims.append(f"- **{b.upper()} + FastRL keeps the final accuracy** (paper: comparable or better): "
                          f"{direction(d, +1)} (FastRL − base {fmt_ci(d, 100.0, signed=True)} points).")
    if COIN_ARM in vals and "grpo" in vals:
        d = [vals["grpo"][s] - vals[COIN_ARM][s] for s in proto.seeds if s in vals[COIN_ARM] and s in vals["grpo"]]
        claims.append(f"- control: GRPO − coin flip {fmt_ci(d, 100.0, signed=True)} points: "
                      f"{'the true reward taught something' if direction(d, +1) == 'reproduced' else 'the true reward is not shown to beat reward noise'}.")
    res.add(["## The paper's direction, per claim", ""] + claims + [""])
    if dropped:
        res.add(["## Arms not run", ""] + [f"- {a}: {w}" for a, w in dropped.items()] + [""])
    minutes = "; ".join(f"seed {r['seed']}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.get("minutes", {}).items())
                        for r in recs)
    res.add(["Minutes per stage: " + minutes, ""] + ([notes] if notes else []))
    return res.render()


def other_ngram_lines(recs: List[Dict], ngram: int) -> List[str]:
    """MDAP on the same sampled groups at the other n-gram size: what the choice of n does to the prune share."""
    rows = []
    for r in recs:
        for n, o in sorted(r["preflight"].get("mdap_other_ngram", {}).items()):
            pruned = o["pruned_by_advantage"] - o["kept_by_similarity"]
            rows.append(f"seed {r['seed']}: {100 * pruned:.1f}% pruned, {100 * o['kept_by_similarity']:.1f}% kept "
                        f"back by the similarity test ({n}-grams)")
    if not rows:
        return []
    return [f"MDAP on the same sampled groups at the other n-gram size (this run prunes on {ngram}-grams): "
            + "; ".join(rows) + ".", ""]


def style_lines(recs: List[Dict], tau: float) -> List[str]:
    """MDAP's similarity test offline: θ between one item's targets in two reasoning styles, per seed."""
    if not all("style_distances" in r["preflight"] for r in recs):
        return []
    lines = [f"MDAP's similarity test offline (the base's tokenizer, no model forward): Jaccard distance θ between the "
             f"same item's SFT targets in two styles (first 200 train items per seed); the test can keep both of two "
             f"same-advantage responses only when θ >= τ = {tau}:", "",
             "| n-gram | styles | θ min (all seeds) | θ median per seed | share θ >= τ per seed |", "|---|---|---:|---|---|"]
    rows = {}
    for r in recs:
        for n, a, b, lo, med, share in r["preflight"]["style_distances"]:
            rows.setdefault((n, a, b), []).append((lo, med, share))
    for (n, a, b), xs in sorted(rows.items()):
        lines.append(f"| {n} | {a} vs {b} | {min(x[0] for x in xs):.3f} | {', '.join(f'{x[1]:.3f}' for x in xs)} "
                     f"| {', '.join(f'{100 * x[2]:.0f}%' for x in xs)} |")
    return lines + [""]


def cost_lines(recs: List[Dict]) -> List[str]:
    names = [a for a in LABEL if any(a in r.get("arms", {}) for r in recs) and a != SFT_ARM]
    lines = ["## Cost per arm over the whole run (mean [95% CI] over seeds)", "",
             "| arm | CPU s / step | kept fraction | rollouts / prompt | generated k | update-pass k |",
             "|---|---:|---:|---:|---:|---:|"]
    for a in names:
        xs = [r["arms"][a] for r in recs if a in r.get("arms", {})]
        cpu = [x["points"][-1]["cpu"] / max(x["points"][-1]["step"], 1) for x in xs]
        lines.append(f"| {LABEL[a]} | {fmt_ci(cpu, 1.0, digits=2)} | {fmt_ci([x['kept_frac'] for x in xs], 1.0, digits=2)} "
                     f"| {fmt_ci([x['rollouts_per_prompt'] for x in xs], 1.0, digits=2)} "
                     f"| {fmt_ci([x['points'][-1]['gen'] for x in xs], 1e-3)} "
                     f"| {fmt_ci([x['points'][-1]['upd'] for x in xs], 1e-3)} |")
    return lines + [""]
