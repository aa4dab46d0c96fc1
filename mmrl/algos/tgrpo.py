"""T-GRPO: temporal GRPO of Video-R1 (official code ``tulerfeng/Video-R1``, ``grpo_trainer.py``), spec §7.

Each prompt is rolled out on the ordered frames (role ``anchor``, G responses) and on shuffled frames (role
``shuffled``, G/2 responses in the paper; any count here) under the same group id. With p and p̃ the mean
accuracies of the ordered and the shuffled responses of the group::

    if p >= mu * p̃:   acc_i += bonus   for ordered responses with acc_i > acc_threshold   (mu=0.8, bonus=0.3)
    A_i = (r_i - mean) / (std + 1e-4)  over the ordered responses of the group (unbiased std)

Only the ordered responses are trained (``train_mask``); shuffled ones get A = 0. Video-R1 compares p and p̃
over one device batch (one prompt); here the comparison is made per prompt group, as the brief asks. A group
without shuffled responses (e.g. an image prompt) gets no bonus, as in Video-R1 where the temporal branch is
off for such inputs.

Length bonus (Video-R1 ``len_control``): +0.2 to a correct response (acc > 0.1) whose length is in
[320, 512] tokens, when at least 2 responses of the group are correct. It is a reward term: the ``tgrpo_length``
reward (``mmrl/rewards/tgrpo_length.py``, in ``configs/tgrpo_demo.yaml``) adds ``tgrpo_length_bonus`` to the
total reward; the registered estimator does not apply it again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch

from mmrl.algos.base import AdvantageInputs, AdvantageOutput
from mmrl.algos.grpo import SequenceSpec, _check_1d, group_index, group_normalize, out_dtype
from mmrl.algos.spec import register_algorithm

ORDERED_ROLE = "anchor"
SHUFFLED_ROLE = "shuffled"


def _masked_group_mean(x: torch.Tensor, inv: torch.Tensor, g: int, mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    m = mask.to(torch.float64)
    s = torch.zeros(g, dtype=torch.float64, device=x.device).index_add_(0, inv, x.to(torch.float64) * m)
    n = torch.zeros(g, dtype=torch.float64, device=x.device).index_add_(0, inv, m)
    return s / n.clamp(min=1.0), n


def tgrpo_temporal_bonus(
    acc: torch.Tensor,
    group_ids: torch.Tensor,
    is_shuffled: torch.Tensor,
    mu: float = 0.8,
    bonus: float = 0.3,
    acc_threshold: float = 0.1,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Temporal bonus ``[N]`` (``bonus`` or 0; always 0 on shuffled responses) and per-trajectory bool ``[N]``
    telling whether the condition ``p >= mu * p̃`` held for the trajectory's group (False without shuffled)."""
    _check_1d("acc", acc)
    _check_1d("group_ids", group_ids, acc.shape[0])
    _check_1d("is_shuffled", is_shuffled, acc.shape[0])
    shuf = is_shuffled.to(torch.bool)
    inv, g = group_index(group_ids)
    p, n_ord = _masked_group_mean(acc, inv, g, ~shuf)
    p_shuf, n_shuf = _masked_group_mean(acc, inv, g, shuf)
    cond = (p >= mu * p_shuf) & (n_shuf > 0) & (n_ord > 0)
    eligible = cond[inv] & ~shuf & (acc > acc_threshold)
    return eligible.to(out_dtype(acc)) * bonus, cond[inv]


def tgrpo_advantages(
    rewards: torch.Tensor,
    acc: torch.Tensor,
    group_ids: torch.Tensor,
    is_shuffled: torch.Tensor,
    mu: float = 0.8,
    bonus: float = 0.3,
    acc_threshold: float = 0.1,
    eps: float = 1e-4,
    unbiased: bool = True,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """T-GRPO. Returns ``(advantages [N], train_mask [N] bool, shaped_rewards [N])``.

    ``rewards`` is the total reward (accuracy included); the temporal bonus is added to it for ordered
    responses, then the GRPO advantage is taken over the ordered responses of each group only.
    """
    _check_1d("rewards", rewards)
    b, _ = tgrpo_temporal_bonus(acc, group_ids, is_shuffled, mu, bonus, acc_threshold)
    shaped = rewards.to(torch.float64) + b.to(torch.float64)
    ordered = ~is_shuffled.to(torch.bool)
    adv = torch.zeros_like(shaped)
    if bool(ordered.any()):
        adv[ordered] = group_normalize(shaped[ordered], group_ids[ordered], "group", unbiased, eps)
    dt = out_dtype(rewards)
    return adv.to(dt), ordered, shaped.to(dt)


def tgrpo_length_bonus(
    acc: torch.Tensor,
    lengths: torch.Tensor,
    group_ids: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    bonus: float = 0.2,
    min_len: int = 320,
    max_len: int = 512,
    acc_threshold: float = 0.1,
    min_correct: int = 2,
) -> torch.Tensor:
    """Video-R1 length bonus ``[N]``: ``bonus`` for a response with acc > ``acc_threshold`` and
    ``min_len <= length <= max_len`` when its group has at least ``min_correct`` correct responses.

    ``mask`` [N] bool restricts both the count and the bonus (pass the ordered responses for T-GRPO).
    """
    _check_1d("acc", acc)
    _check_1d("lengths", lengths, acc.shape[0])
    _check_1d("group_ids", group_ids, acc.shape[0])
    m = torch.ones_like(acc, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    correct = (acc > acc_threshold) & m
    inv, g = group_index(group_ids)
    n_correct = torch.zeros(g, dtype=torch.float64, device=acc.device).index_add_(0, inv, correct.to(torch.float64))
    in_range = (lengths >= min_len) & (lengths <= max_len)
    ok = correct & in_range & (n_correct[inv] >= min_correct)
    return ok.to(out_dtype(acc)) * bonus


def shuffled_mask(roles: Sequence[str], n: int, device=None) -> torch.Tensor:
    """Bool ``[N]``: True for role ``shuffled``; roles must be ``anchor`` or ``shuffled`` (empty = all ordered)."""
    if not roles:
        return torch.zeros(n, dtype=torch.bool, device=device)
    if len(roles) != n:
        raise ValueError(f"tgrpo: {len(roles)} roles for {n} trajectories")
    bad = sorted({r for r in roles if r not in (ORDERED_ROLE, SHUFFLED_ROLE)})
    if bad:
        raise ValueError(f"tgrpo: unknown roles {bad}; expected '{ORDERED_ROLE}' (ordered) or '{SHUFFLED_ROLE}'")
    return torch.tensor([r == SHUFFLED_ROLE for r in roles], dtype=torch.bool, device=device)


def _accuracy(inp: AdvantageInputs) -> torch.Tensor:
    if inp.accuracy is not None:
        return inp.accuracy
    for key in ("accuracy", "acc"):
        if key in inp.components:
            return inp.components[key]
    raise ValueError(f"tgrpo needs the accuracy (AdvantageInputs.accuracy or a component 'accuracy'); components: {sorted(inp.components)}")


@dataclass
class TGRPOParams:
    mu: float = 0.8  # the ordered group must beat mu x the shuffled group's accuracy
    bonus: float = 0.3  # alpha, added to correct ordered responses when it does
    acc_threshold: float = 0.1
    eps: float = 1e-4  # Video-R1 code
    unbiased_std: bool = True
    shuffled_fraction: float = 0.5  # shuffled responses per prompt = max(1, round-down(n x this)); Video-R1: G/2


def tgrpo(inp: AdvantageInputs, params: TGRPOParams) -> AdvantageOutput:
    """T-GRPO: ``params.mu``, ``bonus``, ``acc_threshold``, ``eps``, ``unbiased_std``."""
    acc = _accuracy(inp)
    shuf = shuffled_mask(inp.roles, inp.rewards.shape[0], inp.rewards.device)
    adv, train, shaped = tgrpo_advantages(
        inp.rewards, acc, inp.group_ids, shuf, params.mu, params.bonus, params.acc_threshold,
        params.eps, params.unbiased_std,
    )
    metrics = {}
    if bool(shuf.any()):
        _, cond = tgrpo_temporal_bonus(acc, inp.group_ids, shuf, params.mu, params.bonus, params.acc_threshold)
        metrics["tgrpo/temporal_bonus_rate"] = float(cond[shuf].double().mean())
        metrics["tgrpo/acc_shuffled"] = float(acc[shuf].double().mean())
    if bool((~shuf).any()):
        metrics["tgrpo/acc_ordered"] = float(acc[~shuf].double().mean())
        metrics["reward_mean"] = float(shaped[~shuf].double().mean())
    return AdvantageOutput(advantages=adv, train_mask=train, rewards=shaped, metrics=metrics)


@register_algorithm("tgrpo")
class TGRPO(SequenceSpec):
    """T-GRPO (Video-R1): ``rollout.n`` responses on the ordered clip, ``n x shuffled_fraction`` on the shuffled one."""

    Params = TGRPOParams
    needs_view_set = True  # the shuffled clip is a view of the set

    def plan(self, role: str, n: int, n_views: int = 1) -> int:
        return n if role == ORDERED_ROLE else max(1, int(n * self.params.shuffled_fraction))

    def estimate(self, inp):
        return tgrpo(inp, self.params)
