"""The section of ``bench/vhop_protocol.py`` at the top of ``docs/results/vhop.md``, from the seed records alone:
the pre-flight and the rule's hop-1 half (hop-1 / hop-2 top-1 before and after SFT), success by level of the
single-step retriever and the router after each stage (mean [95% CI], per seed), the paired differences per level,
and the costs. What follows ``MARK`` in the file (the pre-flight's section and the earlier runs) is kept."""
from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from _protocol import Protocol, Results
from bpo_protocol_table import command_text as seed_commands
from bpo_table import fmt_ci
from vhop_preflight_table import ROUTER_MARK as MARK  # the pre-flight's rewrite keeps this section above its own

TITLE = "VHOP-Router from the pre-trained embedder on the base, under the miniature protocol"
ARMS = {"single_step": "single-step top-k (SFT embedder)", "sft": "router: SFT", "imitate": "router: +imitation",
        "rl": "router: +RL"}
LEVELS = ("L1", "L2", "L3", "L4", "L5", "all")
PAIRS = (("rl", "single_step"), ("sft", "single_step"), ("rl", "sft"))
NO_COIN = ("no coin-flip arm: the router's RL reward is chain success, and the session's CPU allowed only the "
           "three stages; the RL setting is the config's, not chosen on a validation split")
HOP_ROWS = (("preflight", "hop1", "hop-1 top-1, pre-trained (before SFT)"),
            ("preflight", "hop2", "hop-2 top-1, pre-trained (before SFT)"),
            ("after_sft", "hop1", "hop-1 top-1, after SFT"), ("after_sft", "hop2", "hop-2 top-1, after SFT"))


def level_key(level: str) -> str:
    return "success" if level == "all" else f"success/{level}"


def success_values(recs: Dict[int, Dict], level: str) -> Dict[str, Dict[int, float]]:
    """``{arm: {seed: success}}`` at ``level`` over the arms some seed has evaluated (in ``ARMS`` order)."""
    out: Dict[str, Dict[int, float]] = {}
    for arm in ARMS:
        per = {s: r["evals"][arm][level_key(level)] for s, r in recs.items()
               if arm in r.get("evals", {}) and level_key(level) in r["evals"][arm]}
        if per:
            out[arm] = per
    return out


def cells(xs: Sequence[float], scale: float = 100.0) -> str:
    """``mean [95% CI] (per seed)``; a missing seed is ``—``."""
    if all(math.isnan(x) for x in xs):
        return "—"
    digits = 1 if scale != 1.0 else 2  # rates in % with one decimal, counts (hops) with two
    per = ", ".join("—" if math.isnan(x) else f"{scale * x:.{digits}f}" for x in xs)
    return f"{fmt_ci(xs, scale, digits=digits)} ({per})"


def hop_lines(recs: Dict[int, Dict], seeds: Sequence[int]) -> List[str]:
    """The pre-flight per seed (probes, hop levels) and hop-1 / hop-2 top-1 before and after SFT with CIs."""
    lines = ["## Pre-flight and the rule's hop-1 half", "",
             "Held-out accuracy % of the output probes of the pre-trained embedder (chance: the best constant answer), "
             "and top-1 % of single-step retrieval on the held-out queries (hop 1: the query -> the first gold image; "
             "hop 2: (query, first gold image) -> the second, levels >= 2), each over its own world's corpus; "
             "scene-only: a retriever that finds the scene but guesses the object.", "",
             "| seed | emblem (chance; n) | main object (chance) | scene (chance) | hop-1 before SFT "
             "| hop-2 before SFT | hop-1 after SFT | hop-2 after SFT | hop-1 / hop-2 scene-only (n) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in seeds:
        r = recs.get(s)
        if r is None or "preflight" not in r:
            continue
        p, h = r["preflight"]["probes"], r["preflight"]["hops"]
        a = r.get("after_sft", {}).get("hops")
        fmt = lambda x: "—" if x is None else f"{100 * x:.1f}"  # noqa: E731
        lines.append(f"| {s} | {fmt(p['emblem']['acc'])} ({fmt(p['emblem']['chance'])}; {p['emblem']['n']}) | "
                     f"{fmt(p['main']['acc'])} ({fmt(p['main']['chance'])}) | {fmt(p['scene']['acc'])} "
                     f"({fmt(p['scene']['chance'])}) | {fmt(h['hop1'])} | {fmt(h['hop2'])} | "
                     f"{fmt(a and a['hop1'])} | {fmt(a and a['hop2'])} | {fmt(h['hop1_scene_only'])} / "
                     f"{fmt(h['hop2_scene_only'])} ({h['n_hop1']} / {h['n_hop2']}) |")
    lines += ["", "| measure | mean [95% CI] (per seed) |", "|---|---|"]
    nan = float("nan")
    for block, key, label in HOP_ROWS:
        xs = [recs[s][block]["hops"][key] if s in recs and block in recs[s] else nan for s in seeds]
        lines.append(f"| {label} | {cells(xs)} |")
    xs = [recs[s]["preflight"]["probes"]["emblem"]["acc"] if s in recs and "preflight" in recs[s] else nan
          for s in seeds]
    return lines + [f"| emblem accuracy of the pre-trained embedder | {cells(xs)} |", ""]


def overview_lines(recs: Dict[int, Dict], seeds: Sequence[int]) -> List[str]:
    """Success % by level, every arm: mean [95% CI] (per seed), with the held-out queries per level."""
    n = next((r["levels"] for r in recs.values() if "levels" in r), {})
    lines = ["## Retrieval success by hop level (held-out queries)", "",
             "Success = the router's greedy chain contains the gold chain in order; the single step: every gold "
             "image among its top k = max_hops. % mean [95% CI] (per seed).", "",
             "| retriever | " + " | ".join(f"{lv} (n={n.get(lv, '?')})" for lv in LEVELS)
             + " | mean hops | training signal, last 50 steps |",
             "|---|" + "---|" * (len(LEVELS) + 2)]
    nan = float("nan")
    for arm, label in ARMS.items():
        if not any(arm in r.get("evals", {}) for r in recs.values()):
            continue
        row = [cells([recs[s]["evals"][arm].get(level_key(lv), nan) if s in recs and arm in recs[s]["evals"] else nan
                      for s in seeds]) for lv in LEVELS]
        acc, hops = ([recs[s]["evals"][arm].get(k, nan) if s in recs and arm in recs[s]["evals"] else nan
                      for s in seeds] for k in ("train_signal", "hops"))
        if arm == "single_step":
            lines.append(f"| {label} | " + " | ".join(row) + f" | k = {first_k(recs)} images | — |")
        else:
            lines.append(f"| {label} | " + " | ".join(row) + f" | {cells(hops, 1.0)} | {cells(acc)} |")
    return lines + ["", "Mean hops: the greedy chain's length on the held-out queries (max_hops caps it). Training "
                    "signal: SFT's in-batch accuracy, imitation's agreement with the oracle, RL's success of its "
                    "sampled chains.", ""]


def first_k(recs: Dict[int, Dict]) -> int:
    return next(iter(recs.values()))["settings"]["max_hops"]


def cost_lines(recs: Dict[int, Dict]) -> List[str]:
    stages = ("preflight", "sft", "after_sft", "imitate", "rl")
    lines = ["## Cost per seed (wall min / CPU min of the seed's process, one torch thread)", "",
             "| seed | " + " | ".join(stages) + " |", "|---:|" + "---:|" * len(stages)]
    for s, r in recs.items():
        got = r.get("minutes", {})
        lines.append(f"| {s} | " + " | ".join(
            f"{got[k]:.1f} / {r['cpu_minutes'][k]:.1f}" if k in got else "—" for k in stages) + " |")
    return lines + [""]


def intro_lines(st: Dict, n_levels: Dict[str, int]) -> List[str]:
    return [f"Per seed: {st['train_worlds']} train worlds x {st['n_train']} queries and {st['heldout_worlds']} "
            f"held-out worlds x {st['n_test']} queries ({n_levels.get('all', '?')} test queries), {st['size']} px "
            f"(`bench/vhop_preflight.WORLD`); the base embedder ({st.get('pooling', 'mean')}-token pooling) "
            "pre-trained with the attribute heads "
            f"(emblem, main object, scene) for {st['pretrain_steps']} steps (lr {st['pretrain_lr']:g}) on the train "
            f"worlds' images and saved; from it SFT {st['sft_steps']} steps (lr {st['sft_lr']:g}), imitation "
            f"{st['il_steps']} (lr {st['il_lr']:g}), RL {st['rl_steps']} (lr {st['rl_lr']:g}) with the rest of "
            f"configs/vhop_{{sft,imitate,rl}}.yaml (model.pooling={st.get('pooling', 'mean')}: the saved embedder's), "
            f"max_hops {st['max_hops']}" + (f", overrides {st['overrides']}" if st["overrides"] else "") + ".", "",
            "Not under the full protocol whatever the sizes: the RL setting is the config's (no validation grid, 0 "
            "validation items) and there is no coin-flip arm, so the protocol refuses the run without `--smoke` (the "
            "label below); the seeds and the test size are stated as they were.", ""]


def render_records(recs: Dict[int, Dict], proto: Protocol, notes: Optional[str] = None) -> Results:
    """The section from the seed records."""
    res = Results(proto, TITLE)
    first = next(iter(recs.values()))
    res.add(intro_lines(first["settings"], first.get("levels", {})))
    res.add(hop_lines(recs, proto.seeds))
    res.add(overview_lines(recs, proto.seeds))
    vals = success_values(recs, "all")
    if vals:
        miss = {"coin_flip": NO_COIN}
        miss.update({a: "not run" for a in ARMS if a not in vals and a == "sft"})
        res.add(["Arm keys below: " + ", ".join(f"`{k}` = {v}" for k, v in ARMS.items()) + ".", ""])
        res.add(res.arms_table("success, all levels (%)", vals, missing=miss))
    for lv in LEVELS:
        vals = success_values(recs, lv)
        pairs = [(a, b) for a, b in PAIRS if a in vals and b in vals]
        if pairs:
            res.add(res.paired_table(f"success {lv} (%)", vals, pairs))
    if notes and Path(notes).exists():
        res.add([f"## Reading (written by hand from the tables above, `{notes}`)", "", Path(notes).read_text().strip(),
                 ""])
    res.add(cost_lines(recs))
    missing = [s for s in proto.seeds if s not in recs]
    if missing:
        res.add([f"**Incomplete: no record for seed(s) {missing}.**", ""])
    return res


def section_text(res: Results) -> str:
    """``Results.render`` one heading level down (a section of the results file, not the file)."""
    return "\n".join(("#" + x) if x.startswith("#") else x for x in res.render().splitlines())


def write_section(path: Path, text: str) -> None:
    """Put ``text`` after the title of ``path``, keeping what follows ``MARK`` (the first time: all after the title)."""
    old = path.read_text() if path.exists() else "# VHOP router: multi-hop visual retrieval\n"
    title, _, rest = old.partition("\n")
    kept = rest.split(MARK, 1)[1] if MARK in rest else "\n" + rest.lstrip("\n")
    path.write_text("\n".join([title, "", text.rstrip(), "", MARK]) + kept)


def load(seed_dir: Path, seeds: Sequence[int]) -> Dict[int, Dict]:
    import json

    return {s: json.loads((seed_dir / f"seed{s}.json").read_text()) for s in seeds
            if (seed_dir / f"seed{s}.json").exists()}


def command_text(recs: Dict[int, Dict], render_cmd: str) -> str:
    """The seeds ran one after the other, niced (``bpo_protocol_table.command_text``)."""
    return seed_commands(recs, render_cmd, prefix="OMP_NUM_THREADS=1 nice -n 10", parallel=False)


def protocol_of(recs: Dict[int, Dict], seeds: Sequence[int], command: str) -> Protocol:
    st = next(iter(recs.values()))["settings"]
    smoke = any("--smoke" in r["command"] for r in recs.values())
    return Protocol(command=command, seeds=list(seeds), n_test=st["heldout_worlds"] * st["n_test"], n_val=0,
                    smoke=smoke, lr_grid=[st["rl_lr"]], kl_grid=[0.01])


def render_main(a, argv: List[str], script: str) -> Path:
    recs = load(Path(a.seed_dir), a.seeds)
    if not recs:
        raise SystemExit(f"--render: no seed record in {a.seed_dir} for seeds {a.seeds}")
    proto = protocol_of(recs, a.seeds, command_text(recs, shlex.join(["python", script, *argv])))
    text = section_text(render_records(recs, proto, a.notes))
    write_section(Path(a.report), text)
    print(text, flush=True)
    return Path(a.report)
