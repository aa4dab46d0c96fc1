"""BPO's per-view contract reward as a reward function (formulas in ``mmrl/algos/bpo.py``, spec §1).

Components: ``accuracy`` (against the view's expected answer), ``format`` (both logged only) and ``bpo_contract``
(the reward BPO trains on: anchor = acc + λ_f·fmt, stable, sensitive, abstain).
"""
from __future__ import annotations

from typing import Dict, List

from mmrl.algos.bpo import contract_rewards
from mmrl.data.schema import ANSWER_ABSTAIN, LETTERS
from mmrl.rewards.base import REWARDS, RewardContext
from mmrl.rewards.builtin import accuracy, format_reward
from mmrl.rewards.parsing import parse_choice


@REWARDS.register("bpo_contract")
def bpo_contract(ctx: List[RewardContext], abstain_text: str = "cannot be determined", fmt_weight: float = 0.1) -> Dict[str, List[float]]:
    preds, golds, cfs, abst_letters = [], [], [], set()
    for c in ctx:
        preds.append(parse_choice(c.trajectory.text, c.letters))
        golds.append(c.sample.answer_letter)
        cfs.append(c.expected if c.role == "sensitive" and c.expected not in (None, ANSWER_ABSTAIN) else None)
        if abstain_text in c.candidates:
            abst_letters.add(LETTERS[c.candidates.index(abstain_text)])
    fmts = format_reward(ctx)
    contract = contract_rewards([c.role for c in ctx], preds, golds, [c.trajectory.group_id for c in ctx],
                                [c.trajectory.pack_id for c in ctx], cfs, fmts, abst_letters or ANSWER_ABSTAIN, fmt_weight)
    return {"bpo_contract": contract.tolist(), "accuracy": accuracy(ctx), "format": fmts}
