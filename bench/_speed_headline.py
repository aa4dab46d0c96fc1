"""The headline of ``bench/vs_trl.py``: mmrl at its best setting for the machine against TRL at its best, per length.

Each framework runs several arms on the same work: mmrl synchronous at each of ``--thread-counts`` threads and
asynchronous (``rollout.asynchronous.max_staleness = 1``: trainer + rollout worker, 1 thread each), TRL at each of
``--thread-counts`` threads. A framework's best arm is the one with the highest median steps/s (wall clock) over
the repetitions; the headline ratios are taken per repetition pair of the two best arms (min / median / max).
Peak RSS is summed over an arm's processes (``vs_trl.summarize``).

    overlap efficiency = async step time / max(generation, update) of the synchronous run

(``bench/async_overlap.py``), from mmrl's ``time/*`` metrics: generation = ``time/rollout``, update =
``time/step - time/rollout``, the synchronous run at 1 thread (the async arm's threads per process). 1.0 is a
perfect overlap; the synchronous run's own (generation + update) / max(...) is the ceiling (<= 2).
"""
from __future__ import annotations

import statistics
from typing import Dict, List, Optional, Sequence

from async_overlap import overlap_efficiency

ASYNC_KIND = "mmrl_async"


def thread_kind(framework: str, threads: int, base_threads: int) -> str:
    """The run kind of ``framework`` ("mmrl" or "trl") at ``threads``: the plain name at ``--threads`` (the arm the
    other tables compare), ``<framework>_t<threads>`` otherwise."""
    return framework if threads == base_threads else f"{framework}_t{threads}"


def setting(processes: int, threads: int) -> str:
    """``2 processes x 1 thread``: what an arm ran on (threads per process)."""
    return f"{processes} process{'es' if processes != 1 else ''} x {threads} thread{'s' if threads != 1 else ''}"


def arm_name(kind: str, summary: Dict) -> str:
    """``mmrl async k=1 (2 processes x 1 thread)``, ``TRL (1 process x 2 threads)``."""
    what = "mmrl async k=1" if kind == ASYNC_KIND else ("TRL" if kind.startswith("trl") else "mmrl sync")
    return f"{what} ({setting(int(summary['processes']), int(summary['threads']))})"


def median_of(runs: List[Dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def best_arm(S: Dict[str, List[Dict]], kinds: Sequence[str]) -> Optional[str]:
    """The kind among ``kinds`` (those present in ``S``) with the highest median steps/s; the first listed on a tie;
    None where none ran."""
    ran = [k for k in kinds if S.get(k)]
    return max(ran, key=lambda k: median_of(S[k], "steps_per_s")) if ran else None


def pair_ratios(a: List[Dict], b: List[Dict], key: str) -> List[float]:
    """``a[r][key] / b[r][key]`` for each repetition ``r`` both ran."""
    return [x[key] / y[key] for x, y in zip(a, b)]


def spread(xs: List[float]) -> str:
    return f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f}"


def overlap(S: Dict[str, List[Dict]], sync: str, asy: str = ASYNC_KIND) -> Optional[Dict[str, float]]:
    """Medians over repetitions of the synchronous run's generation and update and the async run's step (s), the
    overlap efficiency of those medians and the synchronous run's own ceiling; None without both runs."""
    if not (S.get(sync) and S.get(asy)):
        return None
    gen, upd, step = (median_of(S[sync], k) for k in ("t_gen", "t_update", "t_step"))
    async_step = median_of(S[asy], "t_step")
    return {"gen": gen, "update": upd, "async_step": async_step,
            "efficiency": overlap_efficiency(async_step, gen, upd), "ceiling": overlap_efficiency(step, gen, upd)}


def headline(S: Dict[str, List[Dict]], mmrl_kinds: Sequence[str], trl_kinds: Sequence[str]) -> Optional[Dict]:
    """The best mmrl and TRL arms and their per-repetition steps/s and peak RSS ratios (mmrl / TRL)."""
    m, t = best_arm(S, mmrl_kinds), best_arm(S, trl_kinds)
    if m is None or t is None:
        return None
    steps = pair_ratios(S[m], S[t], "steps_per_s")
    rss = pair_ratios(S[m], S[t], "peak_rss_mb")
    return {"mmrl": m, "trl": t, "steps_ratio": steps, "rss_ratio": rss,
            "meets": statistics.median(steps) >= 2.0 and statistics.median(rss) <= 1.0}


def headline_table(lengths: List[int], S_by_length: Dict[int, Dict[str, List[Dict]]], mmrl_kinds: Sequence[str],
                   trl_kinds: Sequence[str], sync_ref: str) -> str:
    """One row per length: best mmrl arm vs best TRL arm, and the overlap efficiency that explains a shortfall."""
    lines = ["Headline: mmrl at its best setting vs TRL at its best (best = highest median steps/s, wall; ratios per "
             "repetition pair, min / median / max; peak RSS summed over an arm's processes; overlap efficiency = async "
             f"step / max(generation, update) of the synchronous run at 1 thread, mmrl's time/* metrics):", "",
             "| new tokens | best mmrl arm | mmrl steps/s | best TRL arm | TRL steps/s | steps/s ratio | "
             "peak RSS MB mmrl / TRL | peak RSS ratio | >= 2x TRL, RSS <= TRL | sync gen / update s | async step s "
             "| overlap efficiency (ceiling) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for L in lengths:
        S = S_by_length[L]
        h = headline(S, mmrl_kinds, trl_kinds)
        o = overlap(S, sync_ref)
        cells = [str(L)]
        if h is None:
            cells += ["-"] * 8
        else:
            m, t = h["mmrl"], h["trl"]
            cells += [arm_name(m, S[m][0]), f"{median_of(S[m], 'steps_per_s'):.3f}", arm_name(t, S[t][0]),
                      f"{median_of(S[t], 'steps_per_s'):.3f}", spread(h["steps_ratio"]),
                      f"{median_of(S[m], 'peak_rss_mb'):.0f} / {median_of(S[t], 'peak_rss_mb'):.0f}",
                      spread(h["rss_ratio"]), "yes" if h["meets"] else "no"]
        cells += (["-"] * 3 if o is None else
                  [f"{o['gen']:.3f} / {o['update']:.3f}", f"{o['async_step']:.3f}",
                   f"{o['efficiency']:.2f} ({o['ceiling']:.2f})"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
