"""Recover per-seed results of ``bench/bpo_vs_grpo.py`` from a committed results markdown (issue 16), for runs
whose run directories are gone, so that their seeds can be pooled with later ones (``bench/bpo_pool.py``).

    .venv/bin/python bench/bpo_recover.py bench/results/bpo_vs_grpo.md --commit <hash> --out bench/results/bpo_vs_grpo

What the markdown (``bench/bpo_table.render``) holds per seed, and so what a recovered seed record holds:

- every paired difference of every metric column ("Per-seed differences" table) -> ``diffs``;
- per arm, held-out accuracy per question type, macro accuracy, abstention precision and recall (the per-question-
  type table) -> ``eval[arm]``; from them, derived: temporal accuracy (the count-weighted mean of the direction and
  order rows, counts from the world's rule ``qtype = qtypes[i % 5]``) and abstention F1 = 2PR / (P + R);
- the per-step cost rows -> ``costs`` (ratios to GRPO as printed, not the absolute rollout / update seconds);
- the command that trained the seed (its flags give the settings) and the rollouts per prompt.

Per-arm values of the other metrics (stability, sensitivity, answer without looking, biased-split accuracy, prior
answer on nulls, recall per null canvas), the items behind each metric and per-seed minutes were printed only as
means over seeds or as differences: a recovered record lists them under ``missing``. Every value is the printed one
(percent / 100, rounded as printed). The reader cross-checks itself: the means over seeds of the recovered macro,
temporal and F1 values, and of every recovered difference, must equal the markdown's own mean columns within
rounding, or it raises.
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
from bpo_cli import command_seeds  # noqa: E402
from bpo_table import ARM_LABEL, BASE_COLUMNS, PAIRS, PRIOR_COLUMNS, short  # noqa: E402

MISSING = ["eval.<arm>.stability", "eval.<arm>.sensitivity", "eval.<arm>.no_look", "eval.<arm>.macro_biased",
           "eval.<arm>.null_prior", "eval.<arm>.null_recall", "eval.<arm>.n", "costs.<arm>.rollout_s",
           "costs.<arm>.update_s", "minutes"]
DERIVED = {"temporal": "count-weighted mean of the direction and order accuracies",
           "abstain_f1": "2PR / (P + R) of the printed abstention precision and recall"}
TOL = {"macro": 0.11, "temporal": 0.11, "abstain_f1": 0.3, "diff": 0.11}  # pp: rounding of printed values


Table = Tuple[str, List[str], List[List[str]]]  # (caption: the last text line above it, header cells, rows)


def tables(md: str) -> List[Table]:
    out, caption, lines = [], "", md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].strip().startswith("|---"):
            cells = lambda s: [c.strip() for c in s.strip().strip("|").split("|")]  # noqa: E731
            header, rows, i = cells(line), [], i + 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(cells(lines[i]))
                i += 1
            out.append((caption, header, rows))
            continue
        if line:
            caption = line
        i += 1
    return out


def _num(s: str) -> Optional[float]:
    """A printed percent as a fraction; ``nan`` / ``n/a`` / ``—`` as None."""
    s = s.strip()
    if s in ("", "n/a", "—"):
        return None
    x = float(s.rstrip("%"))
    return None if math.isnan(x) else round(x / 100.0, 6)


def _find(ts: List[Table], what: str, pred) -> Table:
    for t in ts:
        if pred(t):
            return t
    raise ValueError(f"no {what} table in the markdown")


def commands(md: str) -> List[str]:
    """The commands that trained the seeds ("Command: `...`" or the "Commands" list)."""
    one = re.findall(r"^Command: `([^`]+)`", md, re.M)
    return one or re.findall(r"^- `([^`]+bpo_vs_grpo\.py[^`]*)`", md, re.M)


def budgets(md: str) -> Dict[str, List[int]]:
    m = re.search(r"Rollouts per prompt: (.+?)\.\s*$", md, re.M)
    if not m:
        raise ValueError("no 'Rollouts per prompt' line in the markdown")
    by_label = {v: k for k, v in ARM_LABEL.items()}
    out = {}
    for part in m.group(1).split("; "):
        name, vals = part.rsplit(": ", 1)
        out[by_label.get(name, name)] = [int(v) for v in vals.split("/")]
    return out


def cost_long(md: str) -> Optional[Dict]:
    m = re.search(r"At up to (\d+) response tokens \(untrained tiny model, (\d+) prompt\(s\) x 8 responses per step, "
                  r"median of (\d+) step\(s\) after a warm-up\): BPO \(2x4\) step ([\d.]+) s / GRPO \(G=8\) step ([\d.]+) s "
                  r"= plain step ratio ([\d.]+); work ratio ([\d.]+) \(mean response (\d+) / (\d+) tokens\)", md)
    if not m:
        return None
    g = m.groups()
    return {"max_new_tokens": int(g[0]), "prompts": int(g[1]), "steps": int(g[2]), "bpo_s": float(g[3]),
            "grpo_s": float(g[4]), "step_ratio": float(g[5]), "work_ratio": float(g[6]), "bpo_resp": float(g[7]),
            "grpo_resp": float(g[8])}


def qtype_counts(n_test: int) -> Dict[str, int]:
    """Held-out items per question type: ``make_video_world`` cycles ``qtypes[i % len(qtypes)]``."""
    from mmrl.data.synth_video import VIDEO_QTYPES

    return {q: len(range(j, n_test, len(VIDEO_QTYPES))) for j, q in enumerate(VIDEO_QTYPES)}


def pair_of(row_label: str) -> Tuple[str, str]:
    """The arms of a difference row's label ("BPO − GRPO" -> ("bpo", "grpo"); an extra arm keeps its own name)."""
    names = {short(a): a for a in ARM_LABEL} | {label: a for a, label in ARM_LABEL.items()}
    known = {f"{short(a)} − {short(b)}": (a, b) for a, b in PAIRS}
    if row_label in known:
        return known[row_label]
    a, sep, b = row_label.partition(" − ")
    if not sep:
        raise ValueError(f"difference row {row_label!r}: not 'A − B'")
    return names.get(a, a), names.get(b, b)


def recover(md: str) -> List[Dict]:
    """Per-seed records (seed order) from one results markdown; see the module docstring."""
    ts = tables(md)
    col_key = {h: k for k, h in BASE_COLUMNS + PRIOR_COLUMNS}
    cap, head, rows = _find(ts, "per-seed differences", lambda t: t[0].startswith("Per-seed differences"))
    seeds = ast.literal_eval(cap[cap.index("["):cap.index("]") + 1])
    keys = [col_key[h] for h in head[1:]]
    recs = {s: {"seed": s, "eval": {}, "diffs": {}, "costs": {}} for s in seeds}
    for row in rows:
        a, b = pair_of(row[0])
        for k, cell in zip(keys, row[1:]):
            vals = [_num(x) for x in cell.split(",")]
            if len(vals) != len(seeds):
                raise ValueError(f"per-seed differences, {row[0]} / {k}: {len(vals)} values for seeds {seeds}")
            for s, v in zip(seeds, vals):
                recs[s]["diffs"].setdefault(f"{a} - {b}", {})[k] = v
    _, head, rows = _find(ts, "per-question-type", lambda t: t[0].startswith("Per-seed held-out accuracy"))
    qtypes = head[2:-3]
    for row in rows:
        s, arm, vals = int(row[0]), row[1], [_num(x) for x in row[2:]]
        e = {"per_qtype": dict(zip(qtypes, vals[:len(qtypes)]))}
        e["macro"], e["abstain_precision"], e["abstain_recall"] = vals[len(qtypes):]
        p, r = e["abstain_precision"], e["abstain_recall"]
        e["abstain_f1"] = 2 * p * r / (p + r) if p + r else 0.0
        recs[s]["eval"][arm] = e
    _, head, rows = _find(ts, "per-step cost", lambda t: t[1][:3] == ["seed", "arm", "s/step"])
    for row in rows:
        c = [float(x.rstrip("%")) for x in row[2:]]
        recs[int(row[0])]["costs"][row[1]] = {
            "median_step_s": c[0], "step_ratio": c[1], "rollout_ratio": c[2], "update_ratio": c[3],
            "view_share": c[4] / 100, "prompts": c[5], "prompt_tokens": c[6], "response_tokens": c[7]}
    cmds = commands(md)
    bud, cl = budgets(md), cost_long(md)
    for cmd in cmds:
        cmd_seeds, settings = command_seeds(cmd)
        counts = qtype_counts(settings["n_test"])
        n_t = counts["direction"] + counts["order"]
        for s in cmd_seeds:
            if s not in recs:
                continue
            recs[s].update(command=cmd, settings=settings, budgets={a: {"recovered": v} for a, v in bud.items()})
            if cl and "--cost-tokens 0" not in cmd:
                recs[s]["cost_long"] = cl
            for e in recs[s]["eval"].values():
                pq = e["per_qtype"]
                e["temporal"] = (pq["direction"] * counts["direction"] + pq["order"] * counts["order"]) / n_t
    for s, r in recs.items():
        if "command" not in r:
            raise ValueError(f"seed {s}: no command in the markdown names it")
        arms = [a for a in r["eval"] if a != "sft"]
        r["algos"] = {a: "bpo" if a.startswith("bpo") else ("tgrpo" if a == "tgrpo" else "grpo") for a in arms}
    out = [recs[s] for s in seeds]
    cross_check(ts, out)
    return out


def cross_check(ts: List[Table], recs: List[Dict]) -> None:
    """The markdown's own means over seeds must equal the means of the recovered per-seed values (within rounding)."""
    by_label = {v: k for k, v in ARM_LABEL.items()}
    col_key = {h: k for k, h in BASE_COLUMNS + PRIOR_COLUMNS}
    mean = lambda cell: float(cell.split(" [")[0])  # noqa: E731
    _, head, rows = _find(ts, "arm", lambda t: t[1][0] == "arm" and t[0].startswith("Eval:"))
    for row in rows:
        arm = by_label[row[0]]
        for h, cell in zip(head[1:], row[1:]):
            k = col_key[h]
            if k in TOL and cell != "n/a":
                got = 100 * statistics.mean(r["eval"][arm][k] for r in recs)
                if abs(got - mean(cell)) > TOL[k]:
                    raise ValueError(f"cross-check: {row[0]} / {h}: recovered mean {got:.2f} vs printed {cell}")
    _, head, rows = _find(ts, "differences", lambda t: t[0].startswith("Differences (pp)"))
    for row in rows:
        if row[0].startswith("paper:"):
            continue
        a, b = pair_of(row[0])
        for h, cell in zip(head[1:], row[1:]):
            vals = [r["diffs"][f"{a} - {b}"][col_key[h]] for r in recs]
            if cell == "n/a" or any(v is None for v in vals):
                continue
            if abs(100 * statistics.mean(vals) - mean(cell)) > TOL["diff"]:
                raise ValueError(f"cross-check: {row[0]} / {h}: recovered mean {100 * statistics.mean(vals):.2f} "
                                 f"vs printed {cell}")


def disagreements(recovered: Dict, full: Dict) -> List[str]:
    """Where a full seed record (a rerun) and a recovered one differ beyond the printing's rounding (0.1 pp): every
    recovered accuracy, abstention P/R and paired difference; timings are not compared. Empty: it reproduced."""
    out = []
    for arm, e in recovered["eval"].items():
        f = full["eval"].get(arm)
        if f is None:
            out.append(f"{arm}: not in the rerun")
            continue
        for k in ("macro", "abstain_precision", "abstain_recall"):
            if abs(e[k] - f[k]) > 6e-4:
                out.append(f"{arm} {k}: {100 * e[k]:.1f} printed, {100 * f[k]:.2f} rerun")
        for q, v in e["per_qtype"].items():
            if v is not None and abs(v - f["per_qtype"].get(q, float("nan"))) <= 6e-4:
                continue
            out.append(f"{arm} {q}: {v} printed, {f['per_qtype'].get(q)} rerun")
    for pair, d in recovered["diffs"].items():
        a, b = pair.split(" - ")
        for k, v in d.items():
            x, y = full["eval"][a].get(k), full["eval"][b].get(k)
            if v is None or x is None or y is None or any(map(math.isnan, (x, y))):
                continue
            if abs(v - (x - y)) > 6e-4:
                out.append(f"{pair} {k}: {100 * v:+.1f} printed, {100 * (x - y):+.2f} rerun")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("markdown", help="a results file written by bench/bpo_vs_grpo.py --report, as a path in the repo")
    ap.add_argument("--commit", required=True, help="the commit it is read at (git show COMMIT:PATH; recorded as the origin)")
    ap.add_argument("--out", required=True, help="folder for seed<S>.json")
    ap.add_argument("--against", default=None, metavar="DIR",
                    help="also compare with the full seed<S>.json records of a rerun of the same seeds in DIR")
    args = ap.parse_args(argv)
    repo = Path(__file__).resolve().parent.parent
    md = subprocess.run(["git", "-C", str(repo), "show", f"{args.commit}:{args.markdown}"], check=True,
                        capture_output=True, text=True).stdout
    recs = recover(md)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for r in recs:
        r["origin"] = {"recovered_from": args.markdown, "commit": args.commit, "reader": "bench/bpo_recover.py",
                       "derived": DERIVED, "missing": MISSING}
        (out / f"seed{r['seed']}.json").write_text(json.dumps(r, indent=1) + "\n")
        print(f"{out / ('seed%d.json' % r['seed'])}: {len(r['eval'])} arms, {len(r['diffs'])} differences")
        rerun = Path(args.against or "") / f"seed{r['seed']}.json"
        if args.against and rerun.exists():
            bad = disagreements(r, json.loads(rerun.read_text()))
            print(f"  against {rerun}: " + ("every printed value reproduced" if not bad else
                                            f"{len(bad)} differ: " + "; ".join(bad[:8])))


if __name__ == "__main__":
    main()
