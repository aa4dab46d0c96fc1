"""BPO: Behavior Pack Optimization (arXiv 2610.03141), specs/algorithms.md §1. **Proposed spec** throughout:
only the abstract and a summary are public, so every formula below is our reading of them.

A *pack* is the responses of one prompt across views (``pack_ids``); a prompt group holds P packs.

Contract reward (roles ``anchor`` = original view, ``stable``, ``sensitive``, ``abstain`` = null view)::

    anchor     r = acc(â_0, y) + λ_f·fmt
    stable     r = 1[â_v = â_0] · acc(â_v, y)
    sensitive  r = 1[â_v = y_cf]   if a counterfactual label is known, else 1[â_v ≠ y] (abstaining counts as ≠ y)
    abstain    r = 1[â_v = ABST]

Answering ABST on the anchor or a stable view gets 0 (format credit included), which penalises
over-abstention; the sensitive view without a counterfactual label is the exception the spec states (test 1).
An unparseable answer (``None``) earns nothing on non-anchor views (our reading). λ_f = 0.1 is proposed.

Anchor-relative advantage (``anchor_mode="batch_std"``)::

    b_q = mean of anchor-role rewards in group q          (counterfactual views never enter b_q)
    A   = (r - b_q) / (σ_B + eps),   σ_B = std over the batch of (r - b), ddof=1 by default (``unbiased``)

``anchor_mode="paired"``: A_{p,v} = r_{p,v} - r_{p,0} (no std), the anchor itself gets 0.
Joint pack score R_p = Σ_v w_v r_{p,v} / Σ_v w_v, for logging and filtering.

View weights w_v (the view set's ``weight``, default 1; ``AdvantageInputs.view_weights``): the estimator
returns w_v · A_{p,v} (b_q and σ_B are computed unweighted) and weighs R_p with them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Dict, List, Optional, Sequence, Tuple, Union

import torch

from mmrl.advice import advice
from mmrl.algos.base import AdvantageInputs, AdvantageOutput
from mmrl.algos.grpo import SequenceSpec, _check_1d, group_stats, out_dtype
from mmrl.algos.spec import register_algorithm
from mmrl.errors import ConfigError
from mmrl.data.schema import ANSWER_ABSTAIN, ANSWER_UNKNOWN

ROLES = ("anchor", "stable", "sensitive", "abstain")
ROLE_ALIASES = {"original": "anchor", "null": "abstain"}
ANCHOR_MODES = ("batch_std", "paired")
Token = Union[str, Collection[str]]


def _norm(x) -> str:
    return str(x).strip().casefold()


def _is_abstain(pred, abstain_token: Token) -> bool:
    tokens = [abstain_token] if isinstance(abstain_token, str) else list(abstain_token)
    return pred is not None and _norm(pred) in {_norm(t) for t in tokens}


def _same(a, b) -> bool:
    return a is not None and b is not None and _norm(a) == _norm(b)


def canonical_role(role: str) -> str:
    r = ROLE_ALIASES.get(role, role)
    if r not in ROLES:
        raise ValueError(f"bpo: unknown view role {role!r}; known: {list(ROLES)} (aliases {ROLE_ALIASES})")
    return r


def contract_reward(
    role: str,
    pred: Optional[str],
    anchor_pred: Optional[str],
    gold: str,
    cf_label: Optional[str] = None,
    abstain_token: Token = ANSWER_ABSTAIN,
    fmt: float = 0.0,
    fmt_weight: float = 0.1,
) -> float:
    """BPO contract reward of one response (see the module table).

    ``pred``/``anchor_pred`` are parsed answers (``None`` = unparseable), ``gold`` the answer y on the original
    view, ``cf_label`` the expected answer under a sensitive view when known (``None``/``"unknown"`` = not
    known), ``abstain_token`` the abstention answer (a string or a set of strings), ``fmt`` the format score.
    """
    role = canonical_role(role)
    abst = _is_abstain(pred, abstain_token)
    if role == "abstain":
        return float(abst)
    if role == "anchor":
        return 0.0 if abst else float(_same(pred, gold)) + fmt_weight * float(fmt)
    if pred is None:
        return 0.0
    if role == "stable":
        return 0.0 if abst else float(_same(pred, anchor_pred) and _same(pred, gold))
    # sensitive
    if cf_label is not None and _norm(cf_label) != ANSWER_UNKNOWN:
        return float(_same(pred, cf_label))
    return float(abst or not _same(pred, gold))


def contract_rewards(
    roles: Sequence[str],
    preds: Sequence[Optional[str]],
    golds: Sequence[str],
    group_ids: Sequence[int],
    pack_ids: Sequence[int],
    cf_labels: Optional[Sequence[Optional[str]]] = None,
    fmts: Optional[Sequence[float]] = None,
    abstain_token: Token = ANSWER_ABSTAIN,
    fmt_weight: float = 0.1,
) -> torch.Tensor:
    """Contract rewards ``[N]`` (float32) of a batch; each response's anchor answer â_0 is looked up as the
    ``anchor`` response with the same (group id, pack id). A pack without exactly one anchor is an error."""
    n = len(roles)
    for name, seq in (("preds", preds), ("golds", golds), ("group_ids", group_ids), ("pack_ids", pack_ids)):
        if len(seq) != n:
            raise ValueError(f"contract_rewards: {name} has {len(seq)} entries for {n} roles")
    gids = [int(g) for g in group_ids]
    pids = [int(p) for p in pack_ids]
    canon = [canonical_role(r) for r in roles]
    anchors: Dict[Tuple[int, int], Optional[str]] = {}
    for i, r in enumerate(canon):
        if r == "anchor":
            key = (gids[i], pids[i])
            if key in anchors:
                raise ValueError(f"bpo: pack {key} (group, pack) has more than one anchor response")
            anchors[key] = preds[i]
    out: List[float] = []
    for i in range(n):
        key = (gids[i], pids[i])
        if key not in anchors:
            raise ValueError(f"bpo: pack {key} (group, pack) has no anchor (original-view) response")
        out.append(contract_reward(
            canon[i], preds[i], anchors[key], golds[i], None if cf_labels is None else cf_labels[i],
            abstain_token, 0.0 if fmts is None else float(fmts[i]), fmt_weight,
        ))
    return torch.tensor(out, dtype=torch.float32)


def _anchor_mask(roles: Sequence[str], n: int, device) -> torch.Tensor:
    if len(roles) != n:
        raise ValueError(f"bpo: {len(roles)} roles for {n} trajectories")
    return torch.tensor([ROLE_ALIASES.get(r, r) == "anchor" for r in roles], dtype=torch.bool, device=device)


def anchor_baseline(rewards: torch.Tensor, group_ids: torch.Tensor, roles: Sequence[str]) -> torch.Tensor:
    """b_q per trajectory ``[N]`` (float64): the mean reward of the anchor-role responses of its group only.
    A group without an anchor response is an error."""
    _check_1d("rewards", rewards)
    _check_1d("group_ids", group_ids, rewards.shape[0])
    anchor = _anchor_mask(roles, rewards.shape[0], rewards.device)
    uniq, inv = torch.unique(group_ids, return_inverse=True)
    g = int(uniq.numel())
    a = anchor.to(torch.float64)
    s = torch.zeros(g, dtype=torch.float64, device=rewards.device).index_add_(0, inv, rewards.to(torch.float64) * a)
    cnt = torch.zeros(g, dtype=torch.float64, device=rewards.device).index_add_(0, inv, a)
    if bool((cnt == 0).any()):
        missing = uniq[cnt == 0].tolist()
        raise ValueError(f"bpo: groups {missing} have no anchor (original-view) response to serve as b_q")
    return (s / cnt)[inv]


def paired_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, roles: Sequence[str], pack_ids: torch.Tensor) -> torch.Tensor:
    """``anchor_mode="paired"``: A_{p,v} = r_{p,v} - r_{p,0} within each (group, pack); anchors get 0."""
    _check_1d("rewards", rewards)
    _check_1d("pack_ids", pack_ids, rewards.shape[0])
    _check_1d("group_ids", group_ids, rewards.shape[0])
    anchor = _anchor_mask(roles, rewards.shape[0], rewards.device)
    keys = torch.stack([group_ids.long(), pack_ids.long()], dim=1)
    uniq, inv = torch.unique(keys, dim=0, return_inverse=True)
    k = int(uniq.shape[0])
    a = anchor.to(torch.float64)
    s = torch.zeros(k, dtype=torch.float64, device=rewards.device).index_add_(0, inv, rewards.to(torch.float64) * a)
    cnt = torch.zeros(k, dtype=torch.float64, device=rewards.device).index_add_(0, inv, a)
    if bool((cnt != 1).any()):
        bad = [tuple(x) for x in uniq[cnt != 1].tolist()]
        raise ValueError(f"bpo paired: packs {bad} (group, pack) need exactly one anchor response")
    adv = rewards.to(torch.float64) - s[inv]
    return torch.where(anchor, torch.zeros_like(adv), adv).to(out_dtype(rewards))


def bpo_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    roles: Sequence[str],
    pack_ids: Optional[torch.Tensor] = None,
    anchor_mode: str = "batch_std",
    eps: float = 1e-6,
    unbiased: bool = True,
    batch_std: Optional[float] = None,
) -> torch.Tensor:
    """BPO anchor-relative advantage ``[N]``: ``(r - b_q) / (σ_B + eps)``, or the paired difference.

    ``batch_std`` overrides σ_B (the spec's test vector fixes σ_B = 1); otherwise σ_B is the std of (r - b)
    over the batch with ddof=1 (``unbiased=False``: ddof=0). If every (r - b) is equal, A is exactly 0.
    """
    if anchor_mode not in ANCHOR_MODES:
        raise ValueError(f"bpo: anchor_mode must be one of {ANCHOR_MODES}, got {anchor_mode!r}")
    if anchor_mode == "paired":
        if pack_ids is None:
            raise ValueError("bpo: anchor_mode='paired' needs pack_ids")
        return paired_advantages(rewards, group_ids, roles, pack_ids)
    d = rewards.to(torch.float64) - anchor_baseline(rewards, group_ids, roles)
    if d.numel() == 0:
        return d.to(out_dtype(rewards))
    _, std, const = group_stats(d, torch.zeros(d.shape[0], dtype=torch.long, device=d.device), 1, unbiased)
    if batch_std is None and bool(const[0]):
        return torch.zeros_like(d).to(out_dtype(rewards))
    sigma = float(std[0]) if batch_std is None else float(batch_std)
    return (d / (sigma + eps)).to(out_dtype(rewards))


def pack_scores(
    rewards: torch.Tensor, group_ids: torch.Tensor, pack_ids: torch.Tensor, weights: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Joint pack score R_p = Σ_v w_v r_{p,v} / Σ_v w_v, returned per trajectory ``[N]`` (its pack's score)."""
    _check_1d("rewards", rewards)
    w = torch.ones_like(rewards, dtype=torch.float64) if weights is None else weights.to(torch.float64)
    keys = torch.stack([group_ids.long(), pack_ids.long()], dim=1)
    _, inv = torch.unique(keys, dim=0, return_inverse=True)
    k = int(inv.max()) + 1 if inv.numel() else 0
    num = torch.zeros(k, dtype=torch.float64, device=rewards.device).index_add_(0, inv, rewards.to(torch.float64) * w)
    den = torch.zeros(k, dtype=torch.float64, device=rewards.device).index_add_(0, inv, w)
    return (num / den.clamp(min=1e-12))[inv].to(out_dtype(rewards))


@dataclass
class BPOParams:
    anchor_mode: str = "batch_std"  # batch_std | paired
    eps: float = 1e-6
    unbiased_std: bool = True

    def __post_init__(self):
        if self.anchor_mode not in ("batch_std", "paired"):
            raise ValueError(f"anchor_mode must be batch_std or paired, got {self.anchor_mode!r}")


def bpo(inp: AdvantageInputs, params: BPOParams) -> AdvantageOutput:
    """BPO: ``params.anchor_mode``, ``eps``, ``unbiased_std``; needs ``inp.roles`` (and ``inp.pack_ids`` for
    ``paired`` and for the pack-score metric)."""
    adv = bpo_advantages(inp.rewards, inp.group_ids, inp.roles, inp.pack_ids, params.anchor_mode, params.eps, params.unbiased_std)
    w = inp.view_weights
    if w is not None:
        _check_1d("view_weights", w, adv.shape[0])
        adv = (adv.to(torch.float64) * w.to(torch.float64)).to(adv.dtype)
    metrics: Dict[str, float] = {}
    if inp.rewards.numel():
        metrics["reward_mean"] = float(inp.rewards.double().mean())
        for role in sorted(set(inp.roles)):
            sel = torch.tensor([r == role for r in inp.roles], device=inp.rewards.device)
            metrics[f"bpo/reward_{role}"] = float(inp.rewards[sel].double().mean())
        if params.anchor_mode == "batch_std":
            d = inp.rewards.double() - anchor_baseline(inp.rewards, inp.group_ids, inp.roles)
            metrics["bpo/sigma_B"] = float(d.std(unbiased=params.unbiased_std)) if d.numel() > 1 else 0.0
        if inp.pack_ids is not None:
            scores = pack_scores(inp.rewards, inp.group_ids, inp.pack_ids, w).tolist()
            per_pack = dict(zip(zip(inp.group_ids.tolist(), inp.pack_ids.tolist()), scores))
            metrics["bpo/pack_score_mean"] = sum(per_pack.values()) / len(per_pack)
    return AdvantageOutput(advantages=adv, rewards=inp.rewards, metrics=metrics)


@register_algorithm("bpo")
class BPO(SequenceSpec):
    """BPO (spec §1): ``rollout.n`` responses per prompt, budget-matched to GRPO's G, spread as packs: every view of
    a sample gets one response per pack, ``packs = rollout.n / views`` of that sample (2 packs x 4 views = 8)."""

    Params = BPOParams
    uses_view_weights = True
    needs_view_set = True

    def plan(self, role: str, n: int, n_views: int = 1) -> int:
        if n % n_views:
            raise ConfigError(f"config key 'rollout.n' = {n} is not a multiple of the {n_views} views of a sample "
                              f"(BPO: rollout.n = packs x views); e.g. {advice('bpo_rollout_n', n=n_views * max(1, n // n_views))}")
        return n // n_views

    def estimate(self, inp):
        return bpo(inp, self.params)
