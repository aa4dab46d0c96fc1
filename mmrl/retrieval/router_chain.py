"""One router episode as a small state machine, the oracle that labels its states, and the chain reward
(specs/algorithms.md §6).

A chain starts empty. Each step takes one action: a corpus image (appended to the chain), ``BACKTRACK`` (drops
the last image; that image is then not offered again at the same chain prefix) or ``STOP`` (ends the episode and
returns the chain). An episode also ends after ``max_hops`` non-STOP actions. Images already in the chain are
never offered (no cycles).

Oracle (DAgger labels): if the chain is a prefix of the gold chain ``g`` (length L) the label is ``STOP`` when
it is ``g`` itself, else the next gold hop ``g[len]``; any other chain has left the gold path (a distractor, a
dead end) and the label is ``BACKTRACK``.

Reward: ``R = 1[the chain contains g as a contiguous run] − λ · max(0, #hops − L)``, λ = 0.05, where ``#hops``
counts every non-STOP action (a detour costs its step out and its BACKTRACK). The spec writes ``−λ(#hops − gold)``;
the ``max(0, ·)`` is ours: without it, stopping early on a failed chain would earn a bonus over trying.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

from mmrl.retrieval.router_policy import BACKTRACK, STOP


@dataclass
class StepRecord:
    """One decision: the chain before it, the offered candidate ids, the action taken (an id, BACKTRACK or STOP),
    its index in the policy's action list (candidates, then BACKTRACK, STOP), and log π at sampling time."""

    chain: Tuple[str, ...]
    candidates: Tuple[str, ...]
    action: str
    index: int
    logp: float = 0.0
    oracle: Optional[str] = None  # the oracle's label of this state (imitation), when known


@dataclass
class Episode:
    query_id: str
    max_hops: int
    chain: List[str] = field(default_factory=list)
    tried: Dict[Tuple[str, ...], Set[str]] = field(default_factory=dict)  # prefix -> images backtracked from
    steps: List[StepRecord] = field(default_factory=list)
    hops: int = 0
    done: bool = False

    def excluded(self) -> Set[str]:
        """Images not offered in the current state: those in the chain and those backtracked from here."""
        return set(self.chain) | self.tried.get(tuple(self.chain), set())

    def can_backtrack(self) -> bool:
        return bool(self.chain)

    def apply(self, action: str, force: bool = False) -> None:
        """Take ``action`` (an image id, BACKTRACK or STOP) in the current state. ``force`` (the oracle's move)
        may re-enter an image backtracked from at this prefix."""
        if self.done:
            raise ValueError(f"query '{self.query_id}': the episode has ended")
        if action == STOP:
            self.done = True
            return
        if action == BACKTRACK:
            if not self.chain:
                raise ValueError(f"query '{self.query_id}': BACKTRACK on an empty chain")
            last = self.chain.pop()
            self.tried.setdefault(tuple(self.chain), set()).add(last)
        else:
            if force:
                self.tried.get(tuple(self.chain), set()).discard(action)
            if action in self.excluded():
                raise ValueError(f"query '{self.query_id}': image '{action}' is not offered in this state")
            self.chain.append(action)
        self.hops += 1
        if self.hops >= self.max_hops:
            self.done = True


def oracle_label(chain: Sequence[str], gold: Sequence[str]) -> str:
    """The next gold hop while ``chain`` is a proper prefix of ``gold``, STOP at ``gold``, else BACKTRACK."""
    n = len(chain)
    if n <= len(gold) and list(chain) == list(gold[:n]):
        return STOP if n == len(gold) else gold[n]
    return BACKTRACK


def contains_chain(chain: Sequence[str], gold: Sequence[str]) -> bool:
    """True when ``gold`` (non-empty) occurs in ``chain`` as a contiguous run, in order."""
    L = len(gold)
    if L == 0:
        raise ValueError("the gold chain is empty")
    return any(list(chain[i:i + L]) == list(gold) for i in range(len(chain) - L + 1))


def chain_reward(chain: Sequence[str], hops: int, gold: Sequence[str], hop_penalty: float = 0.05) -> float:
    """``1[chain ⊇ gold] − hop_penalty · max(0, hops − len(gold))`` (see the module docstring)."""
    return float(contains_chain(chain, gold)) - hop_penalty * max(0, hops - len(gold))
