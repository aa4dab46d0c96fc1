"""The results file of ``bench/bpo_protocol.py``, rendered from its seed records alone (``--render``): the command,
the pre-flight, the grid and the chosen setting, every arm per metric (mean [95% CI], per seed), paired differences
and the paper's direction per claim (reproduced / reversed / not resolved: the paired 95% t-interval above 0, below
0, or across it)."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from _protocol import DEFAULT_KL_GRID, DEFAULT_LR_GRID, Protocol, Results, grid_key
from bpo_table import ci95, fmt_ci

ARM_ORDER = ("sft", "coin_flip", "grpo", "bpo", "tgrpo", "grpo_g32", "bpo_p8")
ARM_TEXT = {"sft": "SFT start (no RL)", "coin_flip": "GRPO G=8, coin-flip reward", "grpo": "GRPO G=8",
            "bpo": "BPO 2x4", "tgrpo": "T-GRPO 8+4", "grpo_g32": "GRPO G=32", "bpo_p8": "BPO 8x4"}
METRICS = [("macro", "Debiased test split: macro accuracy %"),
           ("temporal", "Debiased test split: temporal accuracy % (direction + order)"),
           ("direction", "Debiased test split: direction accuracy %"),
           ("abstain_recall", "Held-out nulls: abstention % on the unseen null canvases"),
           ("abstain_f1", "Held-out nulls: abstention F1 %"),
           ("macro_biased", "Biased split (the train split's tint kept): macro accuracy %")]
# (a, b, metric, the paper's direction of a - b: +1 a above b, or None for a control), in the order printed
CLAIMS = [("bpo", "grpo", "macro", +1, "BPO beats GRPO on the debiased split (less reliance on the prior)"),
          ("bpo", "grpo", "abstain_recall", +1, "BPO abstains more on held-out null views"),
          ("bpo", "grpo", "abstain_f1", +1, "BPO's abstention F1 on held-out null views beats GRPO's"),
          ("bpo", "grpo", "temporal", +1, "BPO beats GRPO on temporal questions"),
          ("tgrpo", "grpo", "temporal", +1, "T-GRPO beats GRPO on temporal questions"),
          ("tgrpo", "grpo", "macro", +1, "T-GRPO beats GRPO overall"),
          ("bpo_p8", "grpo_g32", "macro", +1, "BPO 8x4 beats GRPO G=32 on the debiased split"),
          ("bpo_p8", "grpo_g32", "abstain_recall", +1, "BPO 8x4 abstains more on held-out null views than GRPO G=32"),
          ("grpo", "coin_flip", "macro", +1, "control: the true reward beats a coin flip of the same mean"),
          ("grpo", "sft", "macro", +1, "control: RL improves on its SFT start")]


EARLIER = ["## Earlier runs", "",
           "Before the protocol and the base, the miniature ran on the random-init tiny model (start points at "
           "chance, 40 RL steps at the demo's lr 1e-4, 64 test clips): "
           "[bpo_random_init.md](bpo_random_init.md), its tables pooled from committed records in "
           "`bench/results/bpo_vs_grpo*.md`. Issue 28's audit explains why they could show little; the tables above "
           "replace them.", ""]


def load_records(seed_dir: Path, seeds: Sequence[int]) -> Dict[int, Dict]:
    return {s: json.loads((seed_dir / f"seed{s}.json").read_text()) for s in seeds
            if (seed_dir / f"seed{s}.json").exists()}


def values(recs: Dict[int, Dict], metric: str) -> Dict[str, Dict[int, float]]:
    """``{arm: {seed: value}}`` of one metric (``direction``: that question type's accuracy), arms in order."""
    out: Dict[str, Dict[int, float]] = {}
    for arm in ARM_ORDER:
        per = {}
        for s, r in recs.items():
            e = r["evals"].get(arm)
            if e is not None:
                per[s] = e["per_qtype"].get(metric, float("nan")) if metric == "direction" else e.get(metric, float("nan"))
        if per:
            out[arm] = per
    return out


def verdict(diffs: Sequence[float], direction: Optional[int]) -> Tuple[str, float, float, float]:
    """``reproduced`` when the paired 95% t-interval of ``diffs`` lies on the paper's side of 0, ``reversed`` when it
    lies on the other side, else ``not resolved`` (also for fewer than 2 seeds)."""
    m, lo, hi = ci95([100 * d for d in diffs])
    if math.isnan(lo):
        return "not resolved (fewer than 2 seeds)", m, lo, hi
    if lo > 0:
        return ("reproduced" if direction > 0 else "reversed"), m, lo, hi
    if hi < 0:
        return ("reversed" if direction > 0 else "reproduced"), m, lo, hi
    return "not resolved", m, lo, hi


def claim_lines(recs: Dict[int, Dict], seeds: Sequence[int]) -> List[str]:
    lines = ["## The paper's direction, per claim", "",
             "Paired within seeds (both arms share the seed's world and SFT start); reproduced / reversed: the 95% "
             "t-interval of the difference lies on / against the paper's side of 0; not resolved: it crosses 0.", "",
             "| claim | a − b | metric | mean [95% CI] (pp) | per seed | reading |", "|---|---|---|---:|---|---|"]
    names = dict(METRICS)
    for a, b, metric, direction, text in CLAIMS:
        vals = values(recs, metric)
        if a not in vals or b not in vals:
            lines.append(f"| {text} | {a} − {b} | {names[metric].split(': ')[-1]} | — | — | "
                         f"not run ({a if a not in vals else b} has no seed) |")
            continue
        d = [vals[a].get(s, float("nan")) - vals[b].get(s, float("nan")) for s in seeds]
        read, m, lo, hi = verdict(d, direction)
        per = ", ".join("—" if math.isnan(x) else f"{100 * x:+.1f}" for x in d)
        lines.append(f"| {text} | {a} − {b} | {names[metric].split(': ')[-1]} | {fmt_ci(d, signed=True)} | {per} | "
                     f"**{read}** |")
    return lines + [""]


def grid_lines(recs: Dict[int, Dict], res: Results) -> List[str]:
    """The grid's validation accuracy per seed, then the protocol's table of the mean with the chosen setting."""
    keys = [(lr, kl) for lr in res.protocol.lr_grid for kl in res.protocol.kl_grid]
    lines = ["## The grid, per seed (validation accuracy %, GRPO G=8 true reward)", "",
             "| lr | KL | " + " | ".join(f"seed {s}" for s in recs) + " |", "|---|---|" + "---:|" * len(recs)]
    for lr, kl in keys:
        lines.append(f"| {lr:g} | {kl:g} | " + " | ".join(
            f"{100 * r['grid'][grid_key(lr, kl)]:.1f}" if grid_key(lr, kl) in r["grid"] else "—"
            for r in recs.values()) + " |")
    return lines + res.chosen_setting(recs, "(validation accuracy %, the true-reward GRPO G=8 arm)")


def minutes_lines(recs: Dict[int, Dict]) -> List[str]:
    lines = ["## Time (minutes of wall time per seed process; the seeds ran in parallel, one torch thread each)", "",
             "| seed | pre-flight (world, SFT, eval, rollouts) | grid | wait for the other seeds | arms (RL + eval) "
             "| total |", "|---|---:|---:|---:|---:|---:|"]
    for s, r in recs.items():
        m = r["minutes"]
        grid = sum(v for k, v in m.items() if k.startswith("grid_"))
        arms = sum(v for k, v in m.items() if k.startswith(("rl_", "eval_")))
        tot = m.get("preflight", 0.0) + grid + m.get("wait", 0.0) + arms
        lines.append(f"| {s} | {m.get('preflight', float('nan')):.1f} | {grid:.1f} | {m.get('wait', 0.0):.1f} | "
                     f"{arms:.1f} | {tot:.1f} |")
    lines += ["", "Median seconds per RL step (mean over seeds): " + ", ".join(
        f"{ARM_TEXT[a]} {sum(r['costs'][a]['median_step_s'] for r in recs.values() if a in r['costs']) / n:.2f}"
        for a in ARM_ORDER if (n := sum(1 for r in recs.values() if a in r["costs"]))), ""]
    return lines


def command_text(recs: Dict[int, Dict], render_cmd: str, prefix: str = "OMP_NUM_THREADS=1",
                 parallel: bool = True) -> str:
    """The shell commands that wrote the seed records ``recs``, then ``render_cmd``: one loop over the seeds per
    distinct seed command (``--only S`` written ``$s``; seeds added later with a longer ``--seeds`` get their own
    loop), each command after ``prefix``, run in the background and waited for when ``parallel``."""
    by_cmd: Dict[str, List[int]] = {}
    for s, r in recs.items():
        by_cmd.setdefault(re.sub(r"--only \d+", "--only $s", r["command"]), []).append(s)
    end = " & done; wait; " if parallel else "; done; "
    return "".join(f"for s in {' '.join(map(str, seeds))}; do {prefix} {cmd}{end}"
                   for cmd, seeds in sorted(by_cmd.items(), key=lambda kv: kv[1])) + render_cmd


def render_main(args, argv: List[str]) -> Path:
    import shlex

    from bpo_preflight import preflight_section

    recs = load_records(Path(args.seed_dir), args.seeds)
    if not recs:
        raise SystemExit(f"--render: no seed record in {args.seed_dir} for seeds {args.seeds}")
    r0 = next(iter(recs.values()))
    st = r0["settings"]
    render_cmd = shlex.join(["python", "bench/bpo_protocol.py", *argv])
    smoke = any("--smoke" in r["command"] for r in recs.values())
    proto = Protocol(command=command_text(recs, render_cmd), seeds=list(args.seeds), n_test=st["n_test"],
                     n_val=st["n_val"], smoke=smoke, lr_grid=st["lr_grid"], kl_grid=st["kl_grid"])
    res = Results(proto, "BPO and T-GRPO vs GRPO on the tiny base, under the miniature protocol")
    res.add(intro_lines(recs, args, st))
    res.add(["## Pre-flight (SFT start, before any RL)", ""] + preflight_section([r["preflight"] for r in recs.values()]))
    res.add(grid_lines(recs, res))
    missing_seeds = [s for s in args.seeds if s not in recs]
    for metric, title in METRICS:
        vals = values(recs, metric)
        miss = {a: dropped_text(recs, a) for a in ARM_ORDER if a not in vals}
        res.add(res.arms_table(title, vals, missing={a: w or "not run" for a, w in miss.items()}))
    for metric, pairs in (("macro", [("bpo", "grpo"), ("tgrpo", "grpo"), ("grpo", "coin_flip"), ("grpo", "sft"),
                                     ("bpo", "sft"), ("tgrpo", "sft"), ("bpo_p8", "grpo_g32")]),
                          ("abstain_recall", [("bpo", "grpo"), ("bpo_p8", "grpo_g32"), ("bpo", "sft")]),
                          ("abstain_f1", [("bpo", "grpo"), ("bpo_p8", "grpo_g32")]),
                          ("macro_biased", [("bpo", "grpo"), ("grpo", "sft")]),
                          ("temporal", [("tgrpo", "grpo"), ("bpo", "grpo")]),
                          ("direction", [("tgrpo", "grpo"), ("bpo", "grpo")])):
        vals = values(recs, metric)
        title = dict(METRICS)[metric]
        res.add(res.paired_table(title, vals, [(a, b) for a, b in pairs if a in vals and b in vals]))
    res.add(claim_lines(recs, args.seeds))
    res.add(reading_lines(getattr(args, "notes", None)))
    res.add(minutes_lines(recs))
    if missing_seeds:
        res.add([f"**Incomplete: no record for seed(s) {missing_seeds}** (the run did not finish them).", ""])
    res.add(EARLIER)
    path = res.write(args.report)
    print(res.render(), end="", flush=True)
    return path


def dropped_text(recs: Dict[int, Dict], arm: str) -> str:
    """Why ``arm`` has no value: each reason once, with the seeds that gave it."""
    by: Dict[str, List[int]] = {}
    for s, r in recs.items():
        if arm in r["dropped"]:
            by.setdefault(r["dropped"][arm], []).append(s)
    return "; ".join(f"seed{'s' if len(ss) > 1 else ''} {', '.join(map(str, ss))}: {why}" for why, ss in by.items())


def intro_opening(item: str, script: str) -> str:
    """The first sentence of a protocol bench's introduction: the issue ``item``, the model, the protocol and the
    ``script``."""
    return (f"{item} on the tiny base that sees (`model.path=base`, [docs/base_model.md](../base_model.md)), "
            f"under the miniature protocol ([docs/miniatures.md](../miniatures.md)), by `{script}`. ")


def grid_note(st: Dict, label: str = "Reduced grid", aside: str = "", why: str = "") -> List[str]:
    """``**label**: lr [...] x KL [...]`` (``aside``) ``instead of the protocol's default`` (``why``), when the
    records' settings ``st`` ran another grid than the protocol's default; nothing when they ran the default."""
    if list(st["lr_grid"]) == list(DEFAULT_LR_GRID) and list(st["kl_grid"]) == list(DEFAULT_KL_GRID):
        return []
    return [f"**{label}**: lr {st['lr_grid']} x KL {st['kl_grid']}{aside} instead of the protocol's default "
            f"lr {list(DEFAULT_LR_GRID)} x KL {list(DEFAULT_KL_GRID)}{why}.", ""]


def reading_lines(notes: Optional[str]) -> List[str]:
    """The hand-written reading ``notes`` (a markdown file), titled as such; nothing when there is none."""
    if not notes or not Path(notes).exists():
        return []
    return [f"## Reading (written by hand from the tables above, `{notes}`)", "", Path(notes).read_text().strip(), ""]


def intro_lines(recs: Dict[int, Dict], args, st: Dict) -> List[str]:
    lines = [intro_opening("Issue 28 item 3", "bench/bpo_protocol.py") +
             "Per seed (its own world, SFT and RL seed): the `tint`-prior video world at the base's resolution "
             f"(56 px, 8 frames; {st['n_train']} train clips leaning on the tint with strength 0.8, "
             f"{st['n_test']} debiased test clips, {st['n_val']} debiased validation clips no stage trains on, "
             f"{st['n_test']} biased clips), SFT {st['sft_steps']} steps from the base, the pre-flight, the grid on "
             f"the validation split, then every RL arm from the same SFT start for {st['rl_steps']} steps x "
             f"{st['prompts_per_step']} prompts at the chosen lr and KL (T-GRPO's own KL 0.04 replaced by it).", "",
             "Arms: `sft`, the start (no RL); `coin_flip`, GRPO G=8 whose accuracy reward is a coin flip of the "
             "batch's mean accuracy (the control); `grpo`, GRPO G=8 (the grid's run at the chosen setting); `bpo`, "
             "BPO 2 packs x 4 views (original, stable, sensitive, `blank` null view; budget-matched to G=8); "
             "`tgrpo`, T-GRPO 8 ordered + 4 shuffled-frame responses; `grpo_g32` and `bpo_p8` (8 x 4) when the "
             "deadline allowed. Every arm is evaluated greedily on the debiased test split with "
             "`views/bpo_eval.yaml`, whose five null canvases (black, light gray, noise, gradient, drifting "
             "texture) no stage trained on (\"held-out nulls\": the share of their answers that abstain), and on "
             "the biased split.", ""]
    lines += grid_note(st, why=", to fit the CPU budget of this session (2 shared cores); every point ran on every "
                                "seed at the arms' full step count")
    dropped = [a for a in ARM_ORDER if any(a in r["dropped"] for r in recs.values())]
    lines += [f"- `{a}` not run: {dropped_text(recs, a)}" for a in dropped] + ([""] if dropped else [])
    return lines
