"""The results section of ``bench/vhop_preflight.py``: the pre-flight table (one row per image size, embedder and
seed), the verdict, and its place at the top of the results file with the earlier content kept below ``MARK``."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

ATTRS = ("emblem", "emblem_colour", "emblem_shape", "main", "scene")
MARK = "<!-- vhop_preflight: everything below this line is kept when the pre-flight is rewritten -->"
# the end of bench/vhop_protocol_table.py's section, which sits above the pre-flight's (kept when this is rewritten)
ROUTER_MARK = "<!-- vhop_protocol: everything below this line is kept when the router section is rewritten -->"


def binomial_se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / n) if n else float("inf")


def above(acc: float, level: float, n: int) -> bool:
    """``acc`` above ``level`` by two binomial standard errors at ``level``."""
    return acc > level + 2 * binomial_se(level, n)



def carries_link(row: dict) -> bool:
    """The frozen features carry a link: hop-2 top-1 by the probes alone above the hop-2 scene-only level by 2 s.e."""
    h = row["retrieval"]
    return above(h["probe_hop2"], h["hop2_scene_only"], h["n_hop2"])


def _pct(r: dict) -> str:
    return f"{100 * r['acc']:.1f} ({100 * r['chance']:.1f})"


def render(rows: Sequence[dict], command: str, smoke: bool = False) -> List[str]:
    """The pre-flight section: one row per (size, embedder, seed), the probes on both features, retrieval, the
    verdict, and the overall verdict (the router can act only if it can on every seed of some size/embedder)."""
    rows = sorted(rows, key=lambda r: (r["size"], r["embedder"] != "base", r["seed"]))
    head = ["px", "embedder", "seed", "images train / held-out"] + [f"{a} (output)" for a in ATTRS] + [
        "emblem (tower tokens)", "main (tower tokens)", "hop-1 top-1 (chance; scene-only)",
        "hop-2 top-1 (scene-only)", "probes' hop-1 / hop-2", "can act"]
    lines = ["## Pre-flight on the base (issue 29): can the router act?", ""]
    if smoke:
        lines += ["**SMOKE RUN** (fewer seeds or smaller worlds than the pre-flight asks): not a result.", ""]
    lines += ["```bash", command, "```", "",
              "Held-out accuracy % of linear probes on the frozen embedder (chance in brackets: the best constant "
              "answer, the held-out share of the most frequent class), trained on the train worlds' images and scored on a held-out "
              "world's; `output` = the embedder's unit vector (what retrieval compares), `tower tokens` = the vision "
              "tower's merged tokens concatenated. Retrieval top-1 % on the held-out world's queries over its corpus. "
              "`probes' hop-1 / hop-2`: top-1 % of retrieval by the output probes alone (`probe_hops`: the described "
              "start's main object and scene for hop 1; the first gold image's read emblem and scene for hop 2), what "
              "the frozen features could carry to a router. "
              "Can act: emblem (output) above chance by 2 s.e. and hop-1 above the scene-only level by 2 s.e.", "",
              "| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 4) + "---|"]
    for r in rows:
        p, t, h = r["probes"]["output"], r["probes"]["tokens"], r["retrieval"]
        cells = [str(r["size"]), r["embedder"] + (f" ({r['pretrain']['steps']} steps)" if r.get("pretrain") else ""),
                 str(r["seed"]), f"{r['images']['train']} / {r['images']['test']}"] + [_pct(p[a]) for a in ATTRS]
        cells += [_pct(t["emblem"]), _pct(t["main"]),
                  f"{100 * h['hop1']:.1f} ({100 * h['hop1_chance']:.1f}; {100 * h['hop1_scene_only']:.1f})",
                  f"{100 * h['hop2']:.1f} ({100 * h['hop2_scene_only']:.1f})",
                  f"{100 * h['probe_hop1']:.1f} / {100 * h['probe_hop2']:.1f}",
                  "yes" if r["can_act"] else f"**no**: {r['reason']}"]
        lines.append("| " + " | ".join(cells) + " |")
    groups: Dict[Tuple[int, str], List[dict]] = {}
    for r in rows:
        groups.setdefault((r["size"], r["embedder"]), []).append(r)
    ok = [k for k, v in groups.items() if all(r["can_act"] for r in v)]
    link = [k for k, v in groups.items() if all(carries_link(r) for r in v)]
    name = lambda ks: ", ".join(f"the {e} embedder at {s} px" for s, e in ks)  # noqa: E731
    lines += ["", "**Verdict:** " + (
        f"the router can act with {name(ok)} on every seed." if ok else
        "the router **cannot act** on this embedder as it stands: on no (size, embedder) does every seed read the "
        "emblem above chance by 2 s.e. and find the described image above the scene-only level by 2 s.e."),
        "", "**Do the frozen features carry a link?** (hop-2 by the probes alone above its scene-only level by 2 "
        "s.e. on every seed): " + (f"yes with {name(link)}" if link else "no") + (
            "; not with " + name([k for k in groups if k not in link]) if link and len(link) < len(groups) else "")
        + ".", ""]
    return lines


def write_results(path: Path, section: Sequence[str]) -> None:
    """Put ``section`` at the top of ``path`` (after its title and the router protocol's section above
    ``ROUTER_MARK``, when there is one), keeping what follows ``MARK`` (or, the first time, everything after the
    title) below it."""
    text = path.read_text() if path.exists() else "# VHOP router: multi-hop visual retrieval\n"
    title, _, rest = text.partition("\n")
    head = []
    if ROUTER_MARK in rest:
        above_mark, rest = rest.split(ROUTER_MARK, 1)
        head = [above_mark.strip("\n"), "", ROUTER_MARK, ""]
    kept = rest.split(MARK, 1)[1] if MARK in rest else "\n## Earlier runs (random-init tiny embedder)\n" + rest
    path.write_text("\n".join([title, ""] + head + list(section) + [MARK]) + kept)
