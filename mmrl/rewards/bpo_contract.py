"""BPO's per-view contract reward as a reward function (formulas in ``mmrl/algos/bpo.py``, spec §1).

Components: ``accuracy`` (against the view's expected answer; on a view whose expected answer is "abstain",
answering the abstention option counts as correct), ``format`` (both logged only) and ``bpo_contract`` (the reward
BPO trains on: anchor = acc + λ_f·fmt, stable, sensitive, abstain).

The abstention option is recognised per trajectory: its letter depends on how many candidates the question has
(``D`` after three options, ``E`` after four), so a batch that mixes question types must not treat every
abstention letter of the batch as abstaining (that would reward ``D`` = "yellow" on a blank view and zero a
correct ``D`` on the original clip).
"""
from __future__ import annotations

from typing import Dict, List, Optional

from mmrl.algos.bpo import contract_rewards
from mmrl.data.schema import ANSWER_ABSTAIN, LETTERS
from mmrl.rewards.base import REWARDS, RewardContext
from mmrl.rewards.builtin import format_reward
from mmrl.rewards.parsing import parse_choice


def abstain_letter(candidates: List[str], abstain_text: str) -> Optional[str]:
    """The letter of the abstention option among ``candidates`` (case and spacing ignored), or None."""
    norm = " ".join(abstain_text.lower().split())
    for i, c in enumerate(candidates):
        if " ".join(str(c).lower().split()) == norm:
            return LETTERS[i]
    return None


@REWARDS.register("bpo_contract")
def bpo_contract(ctx: List[RewardContext], abstain_text: str = "cannot be determined", fmt_weight: float = 0.1) -> Dict[str, List[float]]:
    """BPO's contract reward per view role (``mmrl.algos.bpo.contract_rewards``, specs/algorithms.md §1) plus
    ``fmt_weight`` x format; choosing the abstention option (``abstain_text``) counts as abstaining. Also logs
    ``accuracy`` and ``format``."""
    preds, golds, cfs, acc = [], [], [], []
    for c in ctx:
        pred = parse_choice(c.trajectory.text, c.letters)
        abst = abstain_letter(c.candidates, abstain_text)
        if pred is not None and pred == abst:
            pred = ANSWER_ABSTAIN  # this trajectory's own abstention letter -> the sentinel, never a letter
        preds.append(pred)
        golds.append(c.sample.answer_letter)
        cfs.append(c.expected if c.role == "sensitive" and c.expected not in (None, ANSWER_ABSTAIN) else None)
        acc.append(1.0 if c.expected is not None and pred == c.expected else 0.0)
    fmts = format_reward(ctx)
    contract = contract_rewards([c.role for c in ctx], preds, golds, [c.trajectory.group_id for c in ctx],
                                [c.trajectory.pack_id for c in ctx], cfs, fmts, ANSWER_ABSTAIN, fmt_weight)
    return {"bpo_contract": contract.tolist(), "accuracy": acc, "format": fmts}
