"""The pre-flight of the miniature protocol (``docs/miniatures.md``): cheap statistics of the SFT start, printed
before any RL is spent, and the stop when the method's own mechanism cannot act.

Per seed:

- the SFT start's greedy accuracy per question type against chance (mean 1 / candidates), flagged ``<= chance``
  when it is not above chance by two binomial standard errors;
- pass@k of the sampled groups (the unbiased estimator of Chen et al. 2021, "Evaluating Large Language Models
  Trained on Code", eq. 1: ``1 - C(n - c, k) / C(n, k)`` for c correct of n samples, averaged over prompts);
- the share of groups whose rewards have zero spread (max = min): such a group has zero advantage under any
  group-normalised method and teaches nothing;
- the method's own statistics (``Mechanism.stats``) and its verdict ``Mechanism.can_act`` -> (bool, why).

``check_truncation``: a bench whose sampled responses are cut by ``max_new_tokens`` in more than ``MAX_TRUNCATION``
(5%) of cases fails with one line (the share and the limit): a cut response has no answer and its reward and
claims measure the budget, not the method. ``sample_groups`` records each response's ``truncated`` flag.

Every group with zero spread (share 1.0) also means nothing can act. When the method cannot act on a seed,
``stop_if_cannot_act`` writes the pre-flight and the reason into the results file and the bench ends there.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from _protocol import ProtocolError, Results

Stats = Dict[str, float]
MAX_TRUNCATION = 0.05  # the largest share of sampled responses a bench may lose to max_new_tokens


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from c correct among n samples: 1 - C(n - c, k) / C(n, k) (1 when n - c < k)."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 < k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def zero_spread_share(groups: Sequence[Sequence[float]]) -> float:
    """Share of groups whose rewards are all equal (within 1e-9); nan for no groups."""
    if not groups:
        return float("nan")
    return sum(1 for g in groups if len(g) and max(g) - min(g) <= 1e-9) / len(groups)


def chance_per_type(samples) -> Dict[str, float]:
    """Mean 1 / candidates per question type (choice samples)."""
    out: Dict[str, List[float]] = defaultdict(list)
    for s in samples:
        if s.is_choice:
            out[s.qtype].append(1.0 / len(s.candidates))
    return {k: sum(v) / len(v) for k, v in sorted(out.items())}


@dataclass
class Groups:
    """Sampled responses of the SFT start, one list per prompt group: total reward and correctness (0/1)."""
    rewards: List[List[float]] = field(default_factory=list)
    correct: List[List[float]] = field(default_factory=list)
    qtypes: List[str] = field(default_factory=list)
    components: Dict[str, List[List[float]]] = field(default_factory=dict)  # reward component -> per group
    truncated: List[List[bool]] = field(default_factory=list)  # cut by max_new_tokens (per response)


def truncation_share(truncated: Sequence[bool]) -> float:
    """Share of responses cut by ``max_new_tokens`` (nan for none)."""
    flags = [bool(x) for x in truncated]
    return sum(flags) / len(flags) if flags else float("nan")


def check_truncation(truncated: Sequence[bool], max_new_tokens: int, limit: float = MAX_TRUNCATION,
                     what: str = "sampled responses") -> float:
    """The truncation share of ``truncated``; a ``ProtocolError`` (one line: the share and the limit) when it
    exceeds ``limit``."""
    share = truncation_share(truncated)
    if share > limit:
        raise ProtocolError(f"protocol: {100 * share:.1f}% of {len(truncated)} {what} were cut at max_new_tokens = "
                            f"{max_new_tokens}, above the {100 * limit:.0f}% limit; raise max_new_tokens")
    return share


def truncation_reasons(checks: Sequence[Tuple[Sequence[bool], str]], max_new_tokens: int) -> List[str]:
    """``check_truncation``'s message for each ``(flags, what)`` whose share is above the limit."""
    why = []
    for flags, what in checks:
        try:
            check_truncation(flags, max_new_tokens, what=what)
        except ProtocolError as e:
            why.append(str(e))
    return why


def sample_groups(trainer, samples, correct_key: str = "accuracy", keep: Optional[Dict] = None) -> Groups:
    """Roll out ``samples`` with ``trainer`` (an ``RLTrainer`` at its start: the real engine, views, plan and
    rewards) and group the rewards per prompt. The global RNG state is restored afterwards, so the pre-flight does
    not shift the arm's own run. ``keep`` (a dict) receives the rollout's ``si`` and ``trajs`` for a bench's own
    statistics on the same responses."""
    from mmrl.train.checkpoint import rng_state, set_rng_state

    saved = rng_state()
    try:
        si, trajs = trainer.rollout(samples)
        comps, total = trainer.rewards(si, trajs)
    finally:
        set_rng_state(saved)
    if keep is not None:
        keep.update(si=si, trajs=trajs)
    by_group: Dict[int, List[int]] = defaultdict(list)
    for i, t in enumerate(trajs):
        by_group[t.group_id].append(i)
    correct = comps.get(correct_key, comps.get(f"coin_flip/true_{correct_key}"))
    out = Groups()
    for gid in sorted(by_group):
        idx = by_group[gid]
        out.rewards.append([float(total[i]) for i in idx])
        out.correct.append([float(correct[i]) if correct is not None else float("nan") for i in idx])
        out.qtypes.append(si.samples[trajs[idx[0]].sample_id].qtype)
        for name, vals in comps.items():
            out.components.setdefault(name, []).append([float(vals[i]) for i in idx])
        out.truncated.append([bool(getattr(trajs[i], "truncated", False)) for i in idx])
    return out


@dataclass
class Mechanism:
    """A method's own pre-flight: ``stats(context) -> {name: value}`` and ``can_act(stats) -> (ok, why)``."""
    name: str
    stats: Callable[[Dict], Stats]
    can_act: Callable[[Stats], Tuple[bool, str]]


@dataclass
class Preflight:
    seed: int
    per_type: Dict[str, Dict[str, float]]  # qtype -> acc, chance, n, above_chance
    pass_at: Dict[int, float]
    zero_spread: float
    n_groups: int
    group_size: int
    mechanism: Stats
    can_act: bool
    reason: str


def build_preflight(seed: int, start_per_type: Dict[str, float], samples, groups: Groups, ks: Sequence[int] = (1, 4),
                    mechanism: Optional[Mechanism] = None, context: Optional[Dict] = None) -> Preflight:
    """The pre-flight of one seed from the start's greedy per-type accuracy (``evaluate_samples``'s
    ``per_qtype`` on the test or validation split ``samples``) and its sampled ``groups``."""
    chance = chance_per_type(samples)
    counts: Dict[str, int] = defaultdict(int)
    for s in samples:
        counts[s.qtype] += 1
    per_type = {}
    for q, acc in sorted(start_per_type.items()):
        c, n = chance.get(q, 0.0), counts.get(q, 0)
        se = math.sqrt(max(c * (1 - c), 1e-12) / n) if n else float("inf")
        per_type[q] = {"acc": acc, "chance": c, "n": n, "above_chance": float(acc > c + 2 * se)}
    sizes = [len(g) for g in groups.correct]
    n_min = min(sizes) if sizes else 0
    pass_at = {}
    for k in ks:
        if 0 < k <= n_min and all(not math.isnan(x) for g in groups.correct for x in g):
            vals = [pass_at_k(len(g), int(round(sum(g))), k) for g in groups.correct]
            pass_at[k] = sum(vals) / len(vals)
    zero = zero_spread_share(groups.rewards)
    stats: Stats = {}
    ok, why = True, "ok"
    if mechanism is not None:
        stats = dict(mechanism.stats(dict(context or {}, groups=groups, samples=samples, seed=seed)))
        ok, why = mechanism.can_act(stats)
    if ok and groups.rewards and zero >= 1.0:
        ok, why = False, "every sampled group has zero reward spread: no group-normalised advantage is non-zero"
    return Preflight(seed, per_type, pass_at, zero, len(groups.rewards), n_min, stats, bool(ok), why)


def preflight_lines(pfs: Sequence[Preflight], mechanism_name: str = "") -> List[str]:
    """The pre-flight section: one table of start vs chance per type and seed, one of the group statistics."""
    types = sorted({q for pf in pfs for q in pf.per_type})
    lines = ["## Pre-flight (SFT start, before any RL)", "",
             "Greedy accuracy % of the SFT start vs chance % per question type (`<= chance`: not above chance by "
             "two standard errors):", "", "| seed | " + " | ".join(types) + " |", "|---|" + "---:|" * len(types)]
    for pf in pfs:
        cells = []
        for q in types:
            r = pf.per_type.get(q)
            cells.append("—" if r is None else f"{100 * r['acc']:.1f} vs {100 * r['chance']:.1f}"
                         + ("" if r["above_chance"] else " (<= chance)"))
        lines.append(f"| {pf.seed} | " + " | ".join(cells) + " |")
    ks = sorted({k for pf in pfs for k in pf.pass_at})
    mech = sorted({k for pf in pfs for k in pf.mechanism})
    head = ["seed", "groups x size"] + [f"pass@{k}" for k in ks] + ["zero-spread groups"] + mech + ["can act"]
    lines += ["", f"Sampled groups{f' and the mechanism of {mechanism_name}' if mechanism_name else ''}:", "",
              "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for pf in pfs:
        row = [str(pf.seed), f"{pf.n_groups} x {pf.group_size}"]
        row += [f"{100 * pf.pass_at[k]:.1f}" if k in pf.pass_at else "—" for k in ks]
        row += [f"{100 * pf.zero_spread:.1f}%"] + [f"{pf.mechanism.get(m, float('nan')):.3g}" for m in mech]
        row += ["yes" if pf.can_act else f"**no**: {pf.reason}"]
        lines.append("| " + " | ".join(row) + " |")
    return lines + [""]


def stop_if_cannot_act(pfs: Sequence[Preflight], results: Results, path: str | Path,
                       mechanism_name: str = "") -> bool:
    """Print the pre-flight; when the method cannot act on some seed, write the results file (command, pre-flight,
    the reason) and return True: the bench must stop before spending RL. Otherwise add the pre-flight to
    ``results`` and return False."""
    lines = preflight_lines(pfs, mechanism_name)
    print("\n".join(lines), flush=True)
    results.add(lines)
    blocked = [pf for pf in pfs if not pf.can_act]
    if not blocked:
        return False
    results.add(["## Stopped before RL", "",
                 f"The pre-flight shows that {mechanism_name or 'the method'} cannot act on seed(s) "
                 f"{[pf.seed for pf in blocked]}, so no RL was spent and no claim is tested at this scale:", ""]
                + [f"- seed {pf.seed}: {pf.reason}" for pf in blocked] + [""])
    results.write(path)
    return True
