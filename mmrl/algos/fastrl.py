"""FastRL (arXiv 2609.36932, NeurIPS'26; specs/algorithms.md §4): MDAP pruning and ARS, as pure functions.

**MDAP** (Maximizing-Differential Advantage Pruning, the paper's Alg. 1). Per prompt q, with GRPO advantages A_i
(not recomputed after pruning):

1. Partition the rollouts by equal advantage: |A_i - A_j| < ``tol`` (1e-4) counts as equal.
2. Within a partition, traverse by |A| descending (ties by index) and keep o_i iff no already-kept o_j of the
   partition has  θ_ij = 1 - |N_n(o_i) ∩ N_n(o_j)| / |N_n(o_i) ∪ N_n(o_j)| < τ,  N_n = unique token n-grams.
   τ = 0.8 (the repo's ``SIM_THRESHOLD=0.2``): a rollout is kept only if its Jaccard similarity to every kept
   one is <= 0.2. The first rollout of a partition is always kept (at least one per partition).
3. Data-parallel alignment: while |S| mod d != 0, add back the unselected rollout with the highest |A|,
   round-robin over prompts.

**ARS** (Adaptive Rollout Sampling). Each step logs B_mean = mean_q |S(q)| and B_max = max_q |S(q)|. At an epoch
boundary, with α = step / M_total::

    G'_t   = α·avg(B_mean) + (1-α)·avg(B_max)          (avg over the steps of the epoch that ended)
    G'_ref = (avg B_mean + avg B_max) / 2              (set once, after the first epoch)
    n      = max(round(min(G - (G'_ref - G'_t), G)), 2)  if G'_t < G'_ref  else  G

``round`` is half-up (floor(x + 0.5)), not Python's banker's rounding (spec test 3).

Our readings where the spec is silent (configurable or stated here):
- n-grams are over token ids, n = 1 by default (the paper leaves n unspecified).
- "Equal advantage" for continuous rewards is single-linkage: sorted by A within the prompt, a new partition
  starts where the gap to the previous value is >= ``tol``.
- Similarity is compared within a partition only (rollouts of different advantage are never redundant).
- τ >= 1 is the "Advantage-only" ablation: exactly one rollout per partition (the strict rule θ < τ would keep
  rollouts with disjoint n-gram sets, θ = 1, and the spec says τ = 1.0 keeps exactly one per distinct A).
- Two empty responses have θ = 0 (identical); an empty and a non-empty one θ = 1.
- Round-robin padding visits prompts in order of their best unselected |A| (descending, ties by group id), each
  visit adding that prompt's highest-|A| unselected rollout; it stops if nothing is left to add.
- ARS statistics are taken on the MDAP set before the DP padding, so ARS does not depend on the rank count;
  prompts whose rows the base method dropped entirely (e.g. DAPO's filter) do not count.
- An epoch ends when the data stream turns over; the step whose draw opens the new epoch closes the old one with
  step = the steps done before it (``FastRL.after_step``). M_total is ``algorithm.params.total_steps``, derived
  from ``train.steps`` by the run config unless set (``mmrl.algos.spec.derive_params``).
- With several views per sample (a view-set base such as BPO), ``plan`` hands the base the ARS count rounded down
  to a multiple of the sample's views (at least one per view), as if it were ``rollout.n``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple

import torch

from mmrl.algos.base import AdvantageOutput
from mmrl.algos.grpo import _check_1d, group_index
from mmrl.algos.spec import Selection, StepBatch, WrapperParams, WrapperSpec, register_algorithm
from mmrl.errors import ConfigError


# ---- MDAP ----------------------------------------------------------------------------------------------------------
def advantage_partitions(adv: torch.Tensor, group_ids: torch.Tensor, tol: float = 1e-4) -> torch.Tensor:
    """Partition id ``[N]`` (long, dense) of each rollout: same prompt and |ΔA| < ``tol`` (single-linkage).

    Vectorised: a lexicographic sort by (group, A); a new partition starts where the group changes or the
    sorted advantage jumps by >= ``tol``.
    """
    _check_1d("advantages", adv)
    _check_1d("group_ids", group_ids, adv.shape[0])
    n = adv.shape[0]
    if n == 0:
        return torch.zeros(0, dtype=torch.long)
    inv, _ = group_index(group_ids)
    a = adv.detach().to(torch.float64).cpu()
    inv = inv.cpu()
    order = torch.argsort(a, stable=True)
    order = order[torch.argsort(inv[order], stable=True)]  # by group, then by A
    sa, sg = a[order], inv[order]
    new = torch.ones(n, dtype=torch.bool)
    new[1:] = (sg[1:] != sg[:-1]) | ((sa[1:] - sa[:-1]).abs() >= tol)
    part_sorted = torch.cumsum(new.long(), 0) - 1
    part = torch.empty(n, dtype=torch.long)
    part[order] = part_sorted
    return part


def ngram_set(ids: torch.Tensor | Sequence[int], n: int = 1) -> frozenset:
    """The unique token n-grams N_n(o) of a response (tuples of ids; fewer than n tokens gives the empty set)."""
    seq = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    return frozenset(tuple(seq[i:i + n]) for i in range(len(seq) - n + 1))


def jaccard_distance(a: frozenset, b: frozenset) -> float:
    """θ = 1 - |a ∩ b| / |a ∪ b|; two empty sets are identical (θ = 0)."""
    union = len(a | b)
    return 0.0 if union == 0 else 1.0 - len(a & b) / union


def _check_tau(tau: float, n: int) -> None:
    if not 0.0 <= tau:
        raise ValueError(f"MDAP tau must be >= 0, got {tau}")
    if n < 1:
        raise ValueError(f"MDAP n-gram size must be >= 1, got {n}")


def mdap_keep(adv: torch.Tensor, group_ids: torch.Tensor, responses: Sequence[torch.Tensor],
              tau: float = 0.8, ngram: int = 1, tol: float = 1e-4,
              eligible: Optional[torch.Tensor] = None) -> torch.Tensor:
    """MDAP kept set ``[N]`` bool (before DP padding) for sequence advantages ``adv [N]`` and response ids.

    ``eligible`` [N] bool restricts pruning to rows a base method already selected (others are never kept).
    Spec test 1: A = [a, a, b, b], unigram sets {1,2,3,4}, {1,2,3,5}, {7,8}, {9,10}, τ = 0.8 -> keep o1, o3, o4.
    """
    _check_tau(tau, ngram)
    n = adv.shape[0]
    if len(responses) != n:
        raise ValueError(f"MDAP got {len(responses)} responses for {n} advantages")
    elig = torch.ones(n, dtype=torch.bool) if eligible is None else eligible.to(torch.bool).cpu()
    _check_1d("eligible", elig, n)
    keep = torch.zeros(n, dtype=torch.bool)
    idx = elig.nonzero().flatten()
    if idx.numel() == 0:
        return keep
    part = advantage_partitions(adv[idx], group_ids[idx], tol)
    absa = adv.detach().to(torch.float64).cpu().abs()[idx]
    # traversal: by partition, then |A| descending, then index
    order = torch.argsort(idx, stable=True)
    order = order[torch.argsort(-absa[order], stable=True)]
    order = order[torch.argsort(part[order], stable=True)]
    kept_sets: Dict[int, List[frozenset]] = {}
    for j in order.tolist():
        p, row = int(part[j]), int(idx[j])
        s = ngram_set(responses[row], ngram)
        prev = kept_sets.setdefault(p, [])
        if not prev or (tau < 1.0 and all(jaccard_distance(s, k) >= tau for k in prev)):
            prev.append(s)
            keep[row] = True
    return keep


def dp_pad(keep: torch.Tensor, adv: torch.Tensor, group_ids: torch.Tensor, world_size: int,
           eligible: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Add back unselected rollouts until ``keep.sum() % world_size == 0`` (spec §4, "DP alignment").

    Round-robin over prompts, highest |A| first (see the module docstring for the order). Only ``eligible``
    rows (default all) can be added back; if none are left the result stays short of divisibility.
    Spec test 4: the padded count divides ``world_size``.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    keep = keep.to(torch.bool).cpu().clone()
    need = (-int(keep.sum())) % world_size
    if need == 0:
        return keep
    n = keep.shape[0]
    elig = torch.ones(n, dtype=torch.bool) if eligible is None else eligible.to(torch.bool).cpu()
    absa = adv.detach().to(torch.float64).cpu().abs()
    gids = group_ids.cpu().tolist()
    queues: Dict[int, List[int]] = {}
    for i in sorted(range(n), key=lambda i: (-float(absa[i]), i)):
        if elig[i] and not keep[i]:
            queues.setdefault(gids[i], []).append(i)
    prompts = sorted(queues, key=lambda g: (-float(absa[queues[g][0]]), g))
    while need > 0 and prompts:
        for g in list(prompts):
            if need == 0:
                break
            keep[queues[g].pop(0)] = True
            need -= 1
            if not queues[g]:
                prompts.remove(g)
    return keep


def kept_set_sizes(keep: torch.Tensor, group_ids: torch.Tensor,
                   eligible: Optional[torch.Tensor] = None) -> Tuple[float, float]:
    """(B_mean, B_max): mean and max over prompts of |S(q)|, over prompts with at least one eligible row."""
    _check_1d("group_ids", group_ids, keep.shape[0])
    elig = torch.ones_like(keep, dtype=torch.bool) if eligible is None else eligible.to(torch.bool)
    if not bool(elig.any()):
        return 0.0, 0.0
    inv, g = group_index(group_ids)
    sizes = torch.zeros(g, dtype=torch.float64).index_add_(0, inv.cpu(), keep.to(torch.float64).cpu())
    present = torch.zeros(g, dtype=torch.bool)
    present[inv.cpu()[elig.cpu()]] = True
    sizes = sizes[present]
    return float(sizes.mean()), float(sizes.max())


# ---- ARS -----------------------------------------------------------------------------------------------------------
def round_half_up(x: float) -> int:
    """floor(x + 0.5): 6.5 -> 7 (Python's round gives 6)."""
    return int(math.floor(x + 0.5))


def ars_rollout_count(g_max: int, g_ref: float, g_t: float) -> int:
    """n = max(round(min(G - (G'_ref - G'_t), G)), 2) if G'_t < G'_ref else G (spec §4; test 3: 6, 5 -> 7)."""
    if g_t >= g_ref:
        return int(g_max)
    return max(round_half_up(min(g_max - (g_ref - g_t), g_max)), 2)


@dataclass
class ARSState:
    """The adaptive rollout count and the per-epoch history it is computed from (saved in checkpoints).

    ``g_max`` = G (rollout.n, never exceeded); ``total_steps`` = M_total; ``n`` is what ``plan`` uses next.
    """

    g_max: int
    total_steps: int
    n: int = 0
    g_ref: Optional[float] = None
    epoch_means: List[float] = field(default_factory=list)
    epoch_maxes: List[float] = field(default_factory=list)
    epochs_done: int = 0

    def __post_init__(self):
        if self.g_max < 2:
            raise ValueError(f"ARS needs G = rollout.n >= 2, got {self.g_max}")
        if self.total_steps < 1:
            raise ValueError(f"ARS needs total steps >= 1, got {self.total_steps}")
        if self.n == 0:
            self.n = self.g_max

    def record(self, b_mean: float, b_max: float) -> None:
        """Log one step's kept-set sizes."""
        self.epoch_means.append(float(b_mean))
        self.epoch_maxes.append(float(b_max))

    def end_epoch(self, step: int) -> Dict[str, float]:
        """Epoch boundary after global ``step`` (1-based count of steps done): update ``n``; returns metrics."""
        out: Dict[str, float] = {}
        if self.epoch_means:
            avg_mean = sum(self.epoch_means) / len(self.epoch_means)
            avg_max = sum(self.epoch_maxes) / len(self.epoch_maxes)
            if self.g_ref is None:
                self.g_ref = (avg_mean + avg_max) / 2.0
            else:
                alpha = min(max(step / self.total_steps, 0.0), 1.0)
                g_t = alpha * avg_mean + (1.0 - alpha) * avg_max
                self.n = ars_rollout_count(self.g_max, self.g_ref, g_t)
                out["fastrl/ars_g_t"] = g_t
            out["fastrl/ars_g_ref"] = self.g_ref
        self.epochs_done += 1
        self.epoch_means, self.epoch_maxes = [], []
        out["fastrl/ars_n"] = float(self.n)
        return out

    def state_dict(self) -> dict:
        return {"g_max": self.g_max, "total_steps": self.total_steps, "n": self.n, "g_ref": self.g_ref,
                "epoch_means": list(self.epoch_means), "epoch_maxes": list(self.epoch_maxes),
                "epochs_done": self.epochs_done}

    def load_state_dict(self, d: dict) -> None:
        if int(d["g_max"]) != self.g_max:
            raise ValueError(f"ARS state was saved with G = {d['g_max']} but rollout.n is now {self.g_max}")
        self.total_steps = int(d["total_steps"])
        self.n, self.g_ref = int(d["n"]), d["g_ref"]
        self.epoch_means, self.epoch_maxes = list(d["epoch_means"]), list(d["epoch_maxes"])
        self.epochs_done = int(d["epochs_done"])


# ---- the wrapper spec --------------------------------------------------------------------------------------------
@dataclass
class FastRLParams(WrapperParams):
    """``algorithm.params`` of ``fastrl``: the base method plus MDAP's and ARS's constants (spec §4)."""

    tau: float = 0.8  # Jaccard distance threshold τ: keep iff θ >= τ to every kept rollout of the partition
    ngram: int = 1  # n of the unique token n-grams N_n
    adv_tol: float = 1e-4  # |ΔA| below which two advantages are equal
    ars: bool = True  # adapt the rollout count at epoch boundaries (False: always rollout.n)
    total_steps: int = 0  # M_total of α = step / M_total; 0 = train.steps (derived by mmrl.config; set to override)
    DERIVED: ClassVar[Dict[str, str]] = {"total_steps": "train.steps"}  # mmrl.algos.spec.derive_params
    pad_to: int = 0  # pad the kept count to a multiple of this; 0 = the number of data-parallel ranks


def sequence_advantages(adv: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[N]`` advantages as given, or the mean over each response's tokens of per-token ``[N, T]`` ones."""
    if adv.dim() == 1:
        return adv
    t = torch.arange(adv.shape[1], device=adv.device)
    valid = (t[None, :] < lengths.to(adv.device)[:, None]).to(adv.dtype)
    return (adv * valid).sum(1) / valid.sum(1).clamp(min=1)


@register_algorithm("fastrl")
class FastRL(WrapperSpec):
    """FastRL around any registered method (spec §4).

    - ``select``: the base's selection, then MDAP on the rows it kept, then the DP padding to a multiple of
      ``pad_to`` (default ``batch.world_size``, the run's ranks). It runs on the gathered global batch, so the kept
      set does not depend on how rows are spread over ranks; a 1-process run with ``pad_to`` = another run's rank
      count reproduces that run's kept set exactly. Pruned rows enter no old, reference or actor pass.
    - ``plan``: the base's plan with ``rollout.n`` replaced by the ARS count (``rollout.n`` is G, the ceiling).
    - ``after_step``: records the step's kept-set sizes, updates the count at epoch boundaries, logs it.
    - Advantages are the base's, untouched (never recomputed after pruning).
    """

    Params = FastRLParams

    def __init__(self, params, loss, key: str = "algorithm.params"):
        super().__init__(params, loss, key)
        p = self.params
        if not 0.0 <= p.tau:
            raise ConfigError(f"config key '{key}.tau' must be >= 0, got {p.tau}")
        if p.ngram < 1:
            raise ConfigError(f"config key '{key}.ngram' must be >= 1, got {p.ngram}")
        if p.pad_to < 0:
            raise ConfigError(f"config key '{key}.pad_to' must be >= 0 (0 = the number of ranks), got {p.pad_to}")
        if p.adv_tol < 0:
            raise ConfigError(f"config key '{key}.adv_tol' must be >= 0, got {p.adv_tol}")
        if p.ars and p.total_steps < 1:
            raise ConfigError(f"config key '{key}.total_steps' must be >= 1 when {key}.ars is true (ARS's "
                              f"α = step / total_steps; a run config derives it from train.steps)")
        self.ars_state: Optional[ARSState] = None
        self._sizes: Optional[Tuple[float, float]] = None

    # plan: the base's, with rollout.n replaced by the ARS count
    def _ars(self, n: int) -> ARSState:
        if self.ars_state is None:
            self.ars_state = ARSState(g_max=n, total_steps=self.params.total_steps)
        elif self.ars_state.g_max != n:
            raise ValueError(f"FastRL ARS was started with rollout.n = {self.ars_state.g_max}, now asked for {n}")
        return self.ars_state

    def plan(self, role: str, n: int, n_views: int = 1) -> int:
        if not self.params.ars or n < 2:
            return self.base.plan(role, n, n_views)
        k = self._ars(n).n
        if n_views > 1:
            k = max(n_views, k - k % n_views)
        return self.base.plan(role, k, n_views)

    def select(self, batch: StepBatch, out: AdvantageOutput) -> Selection:
        sel = self.base.select(batch, out)
        if len(batch) == 0:
            return sel
        if len(batch.response_ids) != len(batch):
            raise ValueError("FastRL needs the response token ids of every row (StepBatch.response_ids)")
        p = self.params
        adv = sequence_advantages(out.advantages, batch.lengths)
        gids = batch.groups["prompt"]
        elig = sel.train_mask.to(torch.bool)
        keep = mdap_keep(adv, gids, batch.response_ids, p.tau, p.ngram, p.adv_tol, eligible=elig)
        self._sizes = kept_set_sizes(keep, gids, elig)
        padded = dp_pad(keep, adv, gids, p.pad_to or max(1, int(batch.world_size)), eligible=elig)
        n_base = int(elig.sum())
        metrics = dict(sel.metrics)
        metrics.update({
            "fastrl/kept_frac": float(padded.sum()) / n_base if n_base else 1.0,  # of the rows the base selected
            "fastrl/kept_rows": float(padded.sum()), "fastrl/pruned_rows": float(n_base - int(padded.sum())),
            "fastrl/padded_rows": float(padded.sum() - keep.sum()),
            "fastrl/b_mean": self._sizes[0], "fastrl/b_max": self._sizes[1],
        })
        return Selection(train_mask=padded, resample=sel.resample, metrics=metrics)

    def after_step(self, batch: StepBatch, selection: Selection, epoch_ended: bool) -> Dict[str, float]:
        m = dict(self.base.after_step(batch, selection, epoch_ended))
        if self.params.ars and self.ars_state is not None:
            # ``epoch_ended``: this step's draw crossed into a new epoch (the data stream turns over when it is
            # asked for more), so the epoch that ended is the one of the steps before: close it at M = batch.step
            # steps done, then count this step's kept sets in the new epoch
            if epoch_ended:
                m.update(self.ars_state.end_epoch(step=batch.step))
            if self._sizes is not None:
                self.ars_state.record(*self._sizes)
            m["fastrl/rollout_n"] = float(self.ars_state.n)
        self._sizes = None
        return m

    def state_dict(self) -> Dict[str, Any]:
        d = super().state_dict()
        d["ars"] = self.ars_state.state_dict() if self.ars_state is not None else None
        return d

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        ars = state.get("ars")
        if ars is not None:
            self.ars_state = ARSState(g_max=int(ars["g_max"]), total_steps=int(ars["total_steps"]))
            self.ars_state.load_state_dict(ars)
