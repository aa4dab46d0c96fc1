"""The results file of ``bench/pacg_protocol.py``, rendered from its seed records alone (``--render``): the command,
the pre-flight (``pacg_preflight.render``'s sections), the grid and the chosen setting, every arm per metric
(mean [95% CI], per seed), differences paired within seeds, the paper's direction per claim (reproduced /
reversed / not resolved: the paired 95% t-interval above 0, below 0, or across it), PACG's gate in training and
the step costs.

The test metrics (``pacg_protocol.summary``) come from two passes over the seed's test images: greedy, and one
response per image sampled at temperature 1 (what RL trains on). The claims read the sampled pass: the pre-flight
shows the greedy SFT start at 100% accuracy with 0–3% unsupported claims, a floor and a ceiling no method can
move past.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from _protocol import Protocol, Results, grid_key
from bpo_protocol_table import dropped_text, grid_note, intro_opening, load_records, reading_lines, verdict
from bpo_table import fmt_ci

ARM_ORDER = ("sft", "coin_flip", "dapo", "dapo+pacg", "vppo", "vppo+pacg")
ARM_TEXT = {"sft": "SFT start (no RL)", "coin_flip": "DAPO, coin-flip reward", "dapo": "DAPO",
            "dapo+pacg": "DAPO+PACG", "vppo": "VPPO", "vppo+pacg": "VPPO+PACG"}
# (pass, key in its summary, title, scale): persistence is shown x100 (% of the claim's likelihood kept)
METRICS = [("sampled", "correct_with_unsupported", "Sampled: correct responses with an unsupported claim %", 100.0),
           ("sampled", "unsupported_share", "Sampled: unsupported share of the labelled claims %", 100.0),
           ("sampled", "accuracy", "Sampled: accuracy %", 100.0),
           ("sampled", "persistence_unsupported_full", "Sampled: persistence x100 of unsupported claims (full_mask)", 100.0),
           ("sampled", "persistence_supported_full", "Sampled: persistence x100 of supported claims (full_mask)", 100.0),
           ("greedy", "correct_with_unsupported", "Greedy: correct responses with an unsupported claim %", 100.0),
           ("greedy", "unsupported_share", "Greedy: unsupported share of the labelled claims %", 100.0),
           ("greedy", "accuracy", "Greedy: accuracy %", 100.0),
           ("sampled", "truncated", "Sampled: responses cut at max new tokens %", 100.0)]
# (a, b, pass, key, the paper's direction of a - b (+1 / -1), claim), in the order printed
CLAIMS = [("dapo+pacg", "dapo", "sampled", "correct_with_unsupported", -1,
           "PACG lowers the share of correct responses with an unsupported claim, over DAPO"),
          ("vppo+pacg", "vppo", "sampled", "correct_with_unsupported", -1,
           "PACG lowers the share of correct responses with an unsupported claim, over VPPO"),
          ("dapo+pacg", "dapo", "sampled", "accuracy", +1, "PACG raises accuracy over DAPO (paper: 58.1 -> 59.9)"),
          ("vppo+pacg", "vppo", "sampled", "accuracy", +1, "PACG raises accuracy over VPPO (paper: 59.8 -> 60.9)"),
          ("dapo", "sft", "sampled", "persistence_unsupported_full", +1,
           "Under DAPO unsupported claims become more persistent"),
          ("vppo", "sft", "sampled", "persistence_unsupported_full", +1,
           "Under VPPO unsupported claims become more persistent"),
          ("dapo+pacg", "dapo", "sampled", "persistence_unsupported_full", -1,
           "PACG keeps unsupported claims less persistent than DAPO (our reading of the mechanism)"),
          ("dapo", "coin_flip", "sampled", "accuracy", +1, "control: the true reward beats a coin flip of the same mean"),
          ("dapo", "sft", "sampled", "accuracy", +1, "control: RL improves on its SFT start")]
PAIRS = [("dapo+pacg", "dapo"), ("vppo+pacg", "vppo"), ("dapo", "coin_flip"), ("dapo", "sft"), ("vppo", "sft"),
         ("dapo+pacg", "sft"), ("vppo+pacg", "sft")]
GATE_KEYS = (("claims", "claims / step"), ("flagged_frac", "flagged share"), ("gain_flagged_mean", "gain of flagged"),
             ("persistence_mean", "P (batch)"))


def values(recs: Dict[int, Dict], src: str, key: str) -> Dict[str, Dict[int, float]]:
    """``{arm: {seed: value}}`` of one test metric of one pass, arms in ``ARM_ORDER``."""
    out: Dict[str, Dict[int, float]] = {}
    for arm in ARM_ORDER:
        per = {s: r["evals"][arm][src].get(key, float("nan")) for s, r in recs.items() if arm in r.get("evals", {})}
        if per:
            out[arm] = per
    return out


def paired(vals: Dict[str, Dict[int, float]], a: str, b: str, seeds: Sequence[int]) -> List[float]:
    """a − b within each seed (nan where either is missing)."""
    return [vals[a].get(s, float("nan")) - vals[b].get(s, float("nan")) for s in seeds]


def claim_rows(recs: Dict[int, Dict], seeds: Sequence[int]) -> List[Dict]:
    """Per claim: the paired differences (scaled), their mean [95% CI] and the reading (``verdict``)."""
    rows = []
    scale = {(src, k): sc for src, k, _, sc in METRICS}
    for a, b, src, key, direction, text in CLAIMS:
        vals = values(recs, src, key)
        row = {"claim": text, "a": a, "b": b, "src": src, "key": key, "direction": direction}
        if a not in vals or b not in vals:
            row.update(diffs=[], reading=f"not run ({a if a not in vals else b} has no seed)")
        else:
            d = paired(vals, a, b, seeds)
            read, m, lo, hi = verdict(d, direction)
            sc = scale[(src, key)] / 100.0  # verdict reports 100 x d
            row.update(diffs=d, mean=m * sc, lo=lo * sc, hi=hi * sc, reading=read)
        rows.append(row)
    return rows


def claim_lines(recs: Dict[int, Dict], seeds: Sequence[int]) -> List[str]:
    lines = ["## The paper's direction, per claim", "",
             "Paired within seeds (both arms share the seed's world and SFT start); reproduced / reversed: the 95% "
             "t-interval of the difference lies on / against the paper's side of 0; not resolved: it crosses 0. "
             "Sampled pass (temperature 1, one response per test image).", "",
             "| claim | a − b | metric | paper's sign | mean [95% CI] (pp) | per seed | reading |",
             "|---|---|---|:---:|---:|---|---|"]
    for r in claim_rows(recs, seeds):
        sign = "−" if r["direction"] < 0 else "+"
        if not r["diffs"]:
            lines.append(f"| {r['claim']} | {r['a']} − {r['b']} | {r['key']} | {sign} | — | — | {r['reading']} |")
            continue
        per = ", ".join("—" if math.isnan(x) else f"{100 * x:+.1f}" for x in r["diffs"])
        lines.append(f"| {r['claim']} | {r['a']} − {r['b']} | {r['key']} | {sign} | "
                     f"{fmt_ci(r['diffs'], signed=True)} | {per} | **{r['reading']}** |")
    return lines + [""]


def grid_lines(recs: Dict[int, Dict], res: Results, what: Optional[str] = None) -> List[str]:
    """Each seed's grid (validation score per lr and KL), then the chosen setting; ``what`` names the score and the
    arm (default: PACG's, accuracy sampled or greedy as the records' ``select_on``, the DAPO arm)."""
    keys = [(lr, kl) for lr in res.protocol.lr_grid for kl in res.protocol.kl_grid]
    if what is None:
        how = {"sampled": "sampled at temperature 1, rollout.n per prompt", "greedy": "greedy"}[
            next(iter(recs.values()))["settings"].get("select_on", "greedy")]
        what = f"validation accuracy %, {how}, the DAPO arm"
    lines = [f"## The grid, per seed ({what})", "",
             "| lr | KL | " + " | ".join(f"seed {s}" for s in recs) + " |", "|---|---|" + "---:|" * len(recs)]
    for lr, kl in keys:
        lines.append(f"| {lr:g} | {kl:g} | " + " | ".join(
            f"{100 * r['grid'][grid_key(lr, kl)]:.1f}" if grid_key(lr, kl) in r.get("grid", {}) else "—"
            for r in recs.values()) + " |")
    return lines + res.chosen_setting(recs, "(ties go to the smaller lr, then the larger KL)")


def gate_lines(recs: Dict[int, Dict]) -> List[str]:
    arms = [a for a in ARM_ORDER if "+pacg" in a and any(a in r.get("algo_means", {}) for r in recs.values())]
    if not arms:
        return []
    lines = ["## PACG's gate in training (mean over steps; content persistence under full_mask)", "",
             "| arm | " + " | ".join(t for _, t in GATE_KEYS) + " |", "|---|" + "---:|" * len(GATE_KEYS)]
    for a in arms:
        cells = [fmt_ci([r["algo_means"][a].get(f"algo/pacg/{k}", float("nan")) for r in recs.values()
                         if a in r.get("algo_means", {})], scale=1.0, digits=3) for k, _ in GATE_KEYS]
        lines.append(f"| {ARM_TEXT[a]} | " + " | ".join(cells) + " |")
    return lines + [""]


def cost_lines(recs: Dict[int, Dict], arms: Sequence[str] = ARM_ORDER, text: Optional[Dict[str, str]] = None
               ) -> List[str]:
    """Minutes per seed process by stage, then each arm's seconds per RL step (``arms``, named by ``text``)."""
    text = ARM_TEXT if text is None else text
    lines = ["## Time (minutes per seed process, one torch thread each: wall, with the shared machine's load, and "
             "CPU of the process)", "",
             "| seed | pre-flight (world, SFT, diagnosis, groups) | grid | wait | arms (RL + eval) | total | CPU total |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for s, r in recs.items():
        m = r.get("minutes", {})
        grid = sum(v for k, v in m.items() if k.startswith("grid_"))
        rl = sum(v for k, v in m.items() if k.startswith(("rl_", "eval_")))
        tot = m.get("preflight", 0.0) + grid + m.get("wait", 0.0) + rl
        cpu = sum(v for k, v in r.get("cpu_minutes", {}).items() if k != "this_run")
        lines.append(f"| {s} | {m.get('preflight', float('nan')):.1f} | {grid:.1f} | {m.get('wait', 0.0):.1f} | "
                     f"{rl:.1f} | {tot:.1f} | {cpu:.1f} |")
    for what, key in (("Median wall seconds per RL step", "median_step_s"), ("CPU seconds per RL step", "cpu_step_s")):
        parts = []
        for a in arms:
            xs = [r["costs"][a][key] for r in recs.values() if key in r.get("costs", {}).get(a, {})]
            if xs:
                parts.append(f"{text[a]} {sum(xs) / len(xs):.2f}")
        lines += ["", f"{what} (mean over seeds): " + (", ".join(parts) or "none") + "."]
    return lines + [""]


def stop_lines(recs: Dict[int, Dict]) -> List[str]:
    """Seeds whose pre-flight stopped the bench (the gate cannot act, or the 5% truncation rule)."""
    stopped = {s: r["stopped"] for s, r in recs.items() if r.get("stopped")}
    would = {s: r["smoke_would_stop"] for s, r in recs.items() if r.get("smoke_would_stop")}
    lines = []
    if stopped:
        lines += (["## Stopped before RL", "", "The pre-flight stopped these seeds before any RL was spent:", ""]
                  + [f"- seed {s}: {why}" for s, why in stopped.items()] + [""])
    if would:
        lines += (["## What would have stopped a full run (smoke run: it went on)", ""]
                  + [f"- seed {s}: {why}" for s, why in would.items()] + [""])
    return lines


def intro_lines(st: Dict) -> List[str]:
    return [intro_opening("Issue 29 item 1", "bench/pacg_protocol.py") +
            "Per seed (its own `prior` claims world, SFT checkpoint and RL seed): the pre-flight below, the grid on "
            f"the validation split (the DAPO arm), then every RL arm from the same SFT start for {st['rl_steps']} "
            f"steps x {st['prompts_per_step']} prompts x {st['n']} responses at the chosen lr and KL.", "",
            "Arms: `sft`, the start (no RL); `coin_flip`, DAPO whose accuracy reward is a coin flip of the batch's "
            "mean accuracy (without dynamic sampling, which filters on the true accuracy the control must not see); "
            "`dapo` (the grid's run at the chosen setting); `dapo+pacg` and `vppo+pacg`, PACG with `persistence: "
            "content` under `full_mask` (the setting where the pre-flight shows the gate acts); `vppo`. Every arm is "
            "diagnosed on the seed's test images (`mmrl.diagnose`, the world's claim labels): greedy, and one "
            "response per image sampled at temperature 1 with the same seed for every arm.", ""] + grid_note(st)


EARLIER = ["## Earlier runs", "",
           "Before the protocol and the base, the miniature ran on the random-init tiny model (one world and one SFT "
           "checkpoint shared by the seeds, 64 test images, 40 new tokens against 50-token traces): "
           "[pacg_random_init.md](pacg_random_init.md), with the probe that found where the signal is.", ""]


def render_records(recs: Dict[int, Dict], proto: Protocol, preflight_sections: Sequence[List[str]],
                   notes: Optional[str] = None) -> Results:
    """The whole results file from the seed records (``preflight_sections``: ``pacg_preflight.render``'s)."""
    res = Results(proto, "PACG over DAPO and VPPO on the tiny base, under the miniature protocol")
    tables = [(title, values(recs, src, key), scale) for src, key, title, scale in METRICS]
    for sec in [intro_lines(next(iter(recs.values()))["settings"]), *preflight_sections, stop_lines(recs),
                grid_lines(recs, res), *metric_sections(res, recs, tables, ARM_ORDER, PAIRS),
                claim_lines(recs, proto.seeds), reading_lines(notes), gate_lines(recs), cost_lines(recs),
                missing_lines(recs, proto.seeds), EARLIER]:
        res.add(sec)
    return res


def metric_sections(res: Results, recs: Dict[int, Dict], tables: Sequence[Tuple[str, Dict, float]],
                    arms: Sequence[str], pairs: Sequence[Tuple[str, str]], paired: int = 4) -> List[List[str]]:
    """One table per metric ``(title, {arm: {seed: value}}, scale)`` of ``tables`` that has a value (each arm of
    ``arms`` without one said why, ``dropped_text``), then the differences ``pairs`` paired within seeds on the first
    ``paired`` metrics."""
    out = [res.arms_table(title, vals, scale=scale,
                          missing={a: (dropped_text(recs, a) or "not run") for a in arms if a not in vals})
           for title, vals, scale in tables if vals]
    for title, vals, scale in tables[:paired]:
        both = [(a, b) for a, b in pairs if a in vals and b in vals]
        if both:
            out.append(res.paired_table(title, vals, both, scale=scale))
    return out


def missing_lines(recs: Dict[int, Dict], seeds: Sequence[int]) -> List[str]:
    """A line naming the protocol's seeds without a record, if any."""
    missing = [s for s in seeds if s not in recs]
    return [f"**Incomplete: no record for seed(s) {missing}.**", ""] if missing else []


def load(seed_dir: Path, seeds: Sequence[int]) -> Dict[int, Dict]:
    return load_records(Path(seed_dir), seeds)


def smoke_of(recs: Dict[int, Dict]) -> bool:
    return any("--smoke" in r["command"] for r in recs.values())


def protocol_of(recs: Dict[int, Dict], seeds: Sequence[int], command: str) -> Protocol:
    st = next(iter(recs.values()))["settings"]
    return Protocol(command=command, seeds=list(seeds), n_test=st["n_test"], n_val=st["n_val"], smoke=smoke_of(recs),
                    lr_grid=st["lr_grid"], kl_grid=st["kl_grid"])
