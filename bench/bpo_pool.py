"""Per-seed result files of ``bench/bpo_vs_grpo.py`` and the table pooled from several of them (issue 16).

A seed record is one seed's result (``run_seed``'s dict: eval per arm, costs, budgets, algorithms, minutes) plus the
command that trained it and its world/schedule settings, written by ``--seed-dir DIR`` as ``DIR/seed<S>.json``
(small, committed next to the results markdown). Records recovered from an older results markdown
(``bench/bpo_recover.py``) have the same shape with fewer fields, an ``origin`` and the per-seed ``diffs`` they kept.

``--pool DIR [DIR ...]`` renders the usual table (``bpo_table.render``) from every ``seed<S>.json`` in the folders:
the seeds must be distinct, share the settings and run the same arms. Metrics a recovered seed lacks are averaged
over the seeds that hold them and marked (†); differences use every seed.
"""
from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Tuple

from bpo_arms import budgets_text
from bpo_cli import command_seeds
from bpo_table import render

PREFIX = ".venv/bin/python bench/bpo_vs_grpo.py "


def write_seed_records(results: List[Dict], out: Path, run: Dict) -> List[Path]:
    """``out/seed<S>.json`` per result: the result, the command that trained that seed (from ``run``: its argv or
    the several commands pooled into one ``--out``) and the run's settings (and its long-response cost check)."""
    commands = run.get("commands") or [PREFIX + shlex.join(run["argv"])]
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in results:
        cmd = next((c for c in commands if r["seed"] in command_seeds(c)[0]), commands[0])
        rec = dict(r, command=cmd, settings=run["settings"])
        if run.get("cost_long") and "--cost-tokens 0" not in cmd:
            rec["cost_long"] = run["cost_long"]
        path = out / f"seed{r['seed']}.json"
        path.write_text(json.dumps(rec, indent=1) + "\n")
        paths.append(path)
    return paths


def load_records(dirs: List[str]) -> List[Dict]:
    """Every ``seed<S>.json`` under ``dirs``, in seed order; a clear error for a repeated seed, a settings mismatch
    (naming the files and the key) or a different set of arms."""
    recs: Dict[int, Tuple[Path, Dict]] = {}
    for d in dirs:
        paths = sorted(Path(d).glob("seed*.json"))
        if not paths:
            raise FileNotFoundError(f"--pool {d}: no seed<S>.json in it")
        for p in paths:
            r = json.loads(p.read_text())
            for key in ("seed", "eval", "costs", "command", "settings"):
                if key not in r:
                    raise ValueError(f"{p}: no '{key}' (not a seed record of bench/bpo_vs_grpo.py)")
            if r["seed"] in recs:
                raise ValueError(f"seed {r['seed']} twice: {recs[r['seed']][0]} and {p}")
            recs[r["seed"]] = (p, r)
    ordered = [recs[s] for s in sorted(recs)]
    p0, r0 = ordered[0]
    for p, r in ordered[1:]:
        for k in sorted(set(r0["settings"]) | set(r["settings"])):
            if r0["settings"].get(k) != r["settings"].get(k):
                raise ValueError(f"settings differ: {k} = {r0['settings'].get(k)!r} in {p0}, {r['settings'].get(k)!r} in {p}")
        if set(r["costs"]) != set(r0["costs"]):
            raise ValueError(f"arms differ: {sorted(r0['costs'])} in {p0}, {sorted(r['costs'])} in {p}")
    return [r for _, r in ordered]


def sources(dirs: List[str]) -> List[str]:
    """Lines naming where each seed's values come from, one per folder and origin."""
    out = []
    for d in dirs:
        groups: Dict[str, List[int]] = {}
        for p in sorted(Path(d).glob("seed*.json")):
            r = json.loads(p.read_text())
            o = r.get("origin")
            how = (f"recovered by `{o['reader']}` from `{o['recovered_from']}` at commit {o['commit'][:10]} (paired "
                   "differences, per-question-type accuracy, abstention P/R, costs; no per-arm stability, sensitivity, "
                   "answer w/o looking, null-canvas recall)" if o else "written by the run")
            groups.setdefault(how, []).append(r["seed"])
        out += [f"- seeds {seeds}: `{d}/seed<S>.json`, {how}" for how, seeds in groups.items()]
        out += reproduction(Path(d))
    return ["Per-seed sources:", ""] + out + [""]


def reproduction(d: Path) -> List[str]:
    """A line comparing ``d/recovered/seed<S>.json`` (values an earlier results markdown printed) with the records
    in ``d`` of the same seeds (reruns): reproduced, or how many values differ (``bpo_recover.disagreements``)."""
    from bpo_recover import disagreements

    rec = {json.loads(p.read_text())["seed"]: json.loads(p.read_text()) for p in sorted((d / "recovered").glob("seed*.json"))}
    full = {s: json.loads((d / f"seed{s}.json").read_text()) for s in rec if (d / f"seed{s}.json").exists()}
    if not full:
        return []
    o = next(iter(rec.values()))["origin"]
    bad = {s: disagreements(rec[s], full[s]) for s in full}
    verdict = ("every value it printed for them (accuracies, abstention P/R, paired differences) is reproduced by "
               "these records" if not any(bad.values()) else
               "these records differ from it in " + "; ".join(f"seed {s}: {len(b)} values" for s, b in bad.items() if b))
    return [f"- seeds {sorted(full)} were run before: `{o['recovered_from']}` at commit {o['commit'][:10]} "
            f"(recovered in `{d}/recovered/` by `{o['reader']}`); {verdict}."]


def pool_main(args) -> None:
    """``bench/bpo_vs_grpo.py --pool DIR ...``: print (and with ``--report`` write) the table of the pooled seeds."""
    recs = load_records(args.pool)
    commands = list(dict.fromkeys(r["command"] for r in recs))
    pool_cmd = PREFIX + shlex.join(["--pool", *args.pool] + (["--report", args.report] if args.report else []))
    ns = SimpleNamespace(**recs[0]["settings"], argv=[], commands=commands,
                         sources=[f"Pooled by: `{pool_cmd}`", ""] + sources(args.pool))
    cost_long = next((r["cost_long"] for r in recs if r.get("cost_long")), None)
    table = render(recs, ns, math.nan, budgets_text(recs), cost_long)
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(table)
    print(table, end="", flush=True)
