"""The results file of ``bench/dspo_protocol.py``, rendered from its seed records alone (``--render``): the command,
the pre-flight (``dspo_preflight.render``'s sections), the grid and the chosen setting, every arm per metric (mean
[95% CI], per seed), differences paired within seeds, the paper's direction per claim (reproduced / reversed / not
resolved: the paired 95% t-interval above 0, below 0, or across it), DSPO's own metrics in training and the step
costs. Every test metric is ``mmrl eval emotion``'s scoring of greedy responses to the seed's held-out images.
"""
from __future__ import annotations

import math
import shlex
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional, Sequence

from _protocol import Protocol, Results
from bpo_protocol_table import command_text, grid_note, intro_opening, load_records, reading_lines, verdict
from bpo_table import fmt_ci
from pacg_protocol_table import cost_lines, grid_lines, metric_sections, missing_lines, protocol_of, stop_lines

ARM_ORDER = ("sft", "coin_flip", "grpo", "dspo", "no_cvig", "no_dedr")
ARM_TEXT = {"sft": "SFT start (no RL)", "coin_flip": "GRPO, coin-flip reward", "grpo": "GRPO", "dspo": "DSPO",
            "no_cvig": "DSPO without CVIG", "no_dedr": "DSPO without DEDR"}
MARK = "<!-- end of the section written by bench/dspo_protocol.py; everything below is earlier -->"
# (key in the evaluation, title, scale): KL in nats and IoU shown x100
METRICS = [("top1", "Top-1 accuracy %", 100.0), ("box_iou", "Box IoU with the cue x100", 100.0),
           ("kl_to_annotators", "KL to the annotators' distribution x100 (nats, lower is better)", 100.0),
           ("topk_overlap", "Top-k overlap with the annotators % (k = 5)", 100.0),
           ("candidate_diversity", "Candidate diversity in VAD x100", 100.0),
           ("well_formed", "Well-formed responses %", 100.0), ("truncated", "Responses cut at max new tokens %", 100.0)]
# (a, b, key, the paper's direction of a - b (+1 / -1), claim), in the order printed
CLAIMS = [("dspo", "grpo", "top1", +1, "DSPO raises top-1 accuracy over GRPO"),
          ("dspo", "grpo", "box_iou", +1, "DSPO's evidence box lands on the cue more than GRPO's (CVIG's aim)"),
          ("dspo", "grpo", "kl_to_annotators", -1,
           "DSPO's candidates sit closer to the annotators' distribution than GRPO's (DEDR's aim)"),
          ("dspo", "no_cvig", "top1", +1, "CVIG adds accuracy (ablation)"),
          ("dspo", "no_cvig", "box_iou", +1, "CVIG adds grounding (ablation)"),
          ("dspo", "no_dedr", "kl_to_annotators", -1, "DEDR brings the candidates closer to the annotators (ablation)"),
          ("dspo", "no_dedr", "top1", +1, "DEDR adds accuracy (ablation)"),
          ("grpo", "coin_flip", "top1", +1, "control: the true reward beats a coin flip of the same mean"),
          ("grpo", "sft", "top1", +1, "control: RL improves on its SFT start")]
PAIRS = [("dspo", "grpo"), ("dspo", "no_cvig"), ("dspo", "no_dedr"), ("grpo", "coin_flip"), ("grpo", "sft"),
         ("dspo", "sft")]
ALGO_SHOWN = ("algo/cvig/r_cf", "algo/cvig/div_shift", "algo/cvig/scored_frac", "reward/dspo_div",
              "reward/dspo_accuracy", "algo/frac_groups_zero_std")
COMPONENTS = ("dspo_accuracy", "dspo_format", "dspo_div", "dspo_evidence")


def values(recs: Dict[int, Dict], key: str) -> Dict[str, Dict[int, float]]:
    """``{arm: {seed: value}}`` of one test metric, arms in ``ARM_ORDER``."""
    out: Dict[str, Dict[int, float]] = {}
    for arm in ARM_ORDER:
        per = {s: r["evals"][arm].get(key, float("nan")) for s, r in recs.items() if arm in r.get("evals", {})}
        if per:
            out[arm] = per
    return out


def claim_lines(recs: Dict[int, Dict], seeds: Sequence[int]) -> List[str]:
    lines = ["## The paper's direction, per claim", "",
             "Paired within seeds (both arms share the seed's world and SFT start); reproduced / reversed: the 95% "
             "t-interval of the difference lies on / against the paper's side of 0; not resolved: it crosses 0.", "",
             "| claim | a − b | metric | paper's sign | mean [95% CI] (x100) | per seed | reading |",
             "|---|---|---|:---:|---:|---|---|"]
    for a, b, key, direction, text in CLAIMS:
        vals = values(recs, key)
        sign = "−" if direction < 0 else "+"
        if a not in vals or b not in vals:
            lines.append(f"| {text} | {a} − {b} | {key} | {sign} | — | — | not run "
                         f"({a if a not in vals else b} has no seed) |")
            continue
        d = [vals[a].get(s, float("nan")) - vals[b].get(s, float("nan")) for s in seeds]
        reading = verdict(d, direction)[0]
        per = ", ".join("—" if math.isnan(x) else f"{100 * x:+.1f}" for x in d)
        lines.append(f"| {text} | {a} − {b} | {key} | {sign} | {fmt_ci(d, signed=True)} | {per} | **{reading}** |")
    return lines + [""]


def spread_lines(recs: Dict[int, Dict]) -> List[str]:
    """Per reward component, on the pre-flight's sampled groups of the SFT start: the share of groups where it is
    constant and its mean within-group standard deviation, alone and times its weight in ``configs/dspo_mood.yaml``
    (what it can add to a group's advantage before GRPO's normalisation; DEDR is ``dspo_div``)."""
    from dspo_preflight import CONFIG

    from mmrl.config import load_config

    weight = {r.name: r.weight for r in load_config([str(CONFIG)], []).rewards}
    lines = ["## Can each reward act? Within-group spread on the SFT start (pre-flight groups, before RL)", "",
             "| seed | " + " | ".join(f"`{c}`: constant / sd / weight x sd" for c in COMPONENTS) + " |",
             "|---|" + "---:|" * len(COMPONENTS)]
    for s, r in recs.items():
        comps = r["preflight"]["groups"].get("components", {})
        cells = []
        for c in COMPONENTS:
            groups = comps.get(c, [])
            if not groups:
                cells.append("—")
                continue
            const = sum(1 for g in groups if max(g) - min(g) < 1e-12) / len(groups)
            sd = sum(statistics.pstdev(g) for g in groups) / len(groups)
            cells.append(f"{100 * const:.0f}% / {sd:.4f} / {weight.get(c, 0.0) * sd:.4f}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return lines + [""]


def algo_lines(recs: Dict[int, Dict]) -> List[str]:
    """Mean over steps (then over seeds) of DSPO's logged metrics, per arm that logs them."""
    arms = [a for a in ARM_ORDER if any(a in r.get("algo_means", {}) for r in recs.values())]
    keys = [k for k in ALGO_SHOWN if any(k in r.get("algo_means", {}).get(a, {}) for r in recs.values() for a in arms)]
    if not arms or not keys:
        return []
    lines = ["## In training (mean over steps; mean [95% CI] over seeds)", "",
             "| arm | " + " | ".join(f"`{k}`" for k in keys) + " |", "|---|" + "---:|" * len(keys)]
    for a in arms:
        cells = [fmt_ci([r["algo_means"][a][k] for r in recs.values() if k in r.get("algo_means", {}).get(a, {})],
                        scale=1.0, digits=3) for k in keys]
        lines.append(f"| {ARM_TEXT[a]} | " + " | ".join(cells) + " |")
    return lines + [""]


def intro_lines(st: Dict) -> List[str]:
    return [intro_opening("Issue 29 item 2", "bench/dspo_protocol.py") +
            "Per seed (its own mood world at 112 px, SFT checkpoint and RL seed): the pre-flight below (SFT "
            f"{st['sft_steps']} steps on {st['n_train']} short four-step responses), the grid on the validation "
            f"split (the GRPO arm), then every RL arm from the same SFT start for {st['rl_steps']} steps x "
            f"{st['prompts_per_step']} prompts x {st['n']} responses at the chosen lr and KL; max new tokens "
            f"{st['max_new_tokens']}.", "",
            "Arms (`configs/dspo_mood.yaml`): `sft`, the start (no RL); `coin_flip`, GRPO whose `dspo_accuracy` is a "
            "coin flip of the batch's mean (`dspo_coin_flip`); `grpo` (1.0 accuracy + 0.1 format; the grid's run at "
            "the chosen setting); `dspo` (+ 0.3 DEDR and CVIG: 0.1 R_cf and the w-gate, the response's own box's "
            "merged visual tokens zeroed); `no_cvig` (`algorithm.params.cvig=false`); `no_dedr` (the `dspo_div` "
            "weight 0). Every arm is scored by `mmrl eval emotion` on the seed's held-out test images (greedy).", ""
            ] + grid_note(st, "Grid", " (KL 0.01 is the paper's beta, fixed by issue 29)")


def render_records(recs: Dict[int, Dict], proto: Protocol, preflight_sections: Sequence[List[str]],
                   notes: Optional[str] = None) -> Results:
    """The whole results section from the seed records (``preflight_sections``: ``dspo_preflight.render``'s)."""
    res = Results(proto, "DSPO against GRPO and its ablations on the tiny base, under the miniature protocol")
    tables = [(title, values(recs, key), scale) for key, title, scale in METRICS]
    for sec in [intro_lines(next(iter(recs.values()))["settings"]), *preflight_sections, stop_lines(recs),
                spread_lines(recs), grid_lines(recs, res, "validation top-1 %, greedy, the GRPO arm"),
                *metric_sections(res, recs, tables, ARM_ORDER, PAIRS), claim_lines(recs, proto.seeds),
                reading_lines(notes), algo_lines(recs), cost_lines(recs, ARM_ORDER, ARM_TEXT),
                missing_lines(recs, proto.seeds)]:
        res.add(sec)
    return res


def render_main(args, argv: List[str]) -> Path:
    from dspo_preflight import render as preflight_render
    from pacg_preflight import write_top

    recs = load_records(Path(args.seed_dir), args.seeds)
    if not recs:
        raise SystemExit(f"--render: no seed record in {args.seed_dir} for seeds {args.seeds}")
    proto = protocol_of(recs, args.seeds, command_text(recs, shlex.join(["python", "bench/dspo_protocol.py", *argv])))
    st = next(iter(recs.values()))["settings"]
    pf = preflight_render([r["preflight"] for r in recs.values()], proto,
                          SimpleNamespace(render_only=False, model=st["model"], group_size=st["group_size"]))
    res = render_records(recs, proto, pf.sections, args.notes)
    text = res.render()
    path = write_top(Path(args.report), text, MARK)
    print(text, end="", flush=True)
    return path
