"""Video-R1's length bonus as the ``tgrpo_length`` reward (hand-computed cases)."""
import torch

from mmrl.data.schema import Sample, Trajectory
from mmrl.rewards import RewardContext, compute_rewards
from mmrl.rewards.base import RewardSpec


def ctx(text, n_tokens, group=0, role="anchor", expected="A"):
    t = Trajectory(sample_id="s", group_id=group, view="v", role=role, prompt_ids=torch.zeros(1, dtype=torch.long),
                   response_ids=torch.zeros(n_tokens, dtype=torch.long), logprobs=torch.zeros(n_tokens),
                   loss_mask=torch.ones(n_tokens, dtype=torch.bool), text=text)
    s = Sample(id="s", question="?", candidates=["x", "y"], answer="x")
    return RewardContext(sample=s, trajectory=t, candidates=["x", "y"], role=role, expected=expected)


def test_bonus_needs_two_correct_ordered_responses_and_the_length_window():
    batch = [ctx("A", 400), ctx("A", 100), ctx("B", 400),  # group 0: 2 correct; only the 400-token one in range
             ctx("A", 400, group=1), ctx("B", 400, group=1),  # group 1: 1 correct: no bonus
             ctx("A", 400, group=2), ctx("A", 512, group=2, role="shuffled"), ctx("A", 600, group=2)]
    comps, total = compute_rewards([RewardSpec("tgrpo_length", 1.0, {})], batch)
    # group 2: 2 ordered correct (400, 600); the shuffled one neither counts nor earns
    assert comps["tgrpo_length"] == [0.2, 0.0, 0.0, 0.0, 0.0, 0.2, 0.0, 0.0]
    comps, _ = compute_rewards([RewardSpec("tgrpo_length", 1.0, {"min_len": 50, "bonus": 0.5})], batch)
    assert comps["tgrpo_length"][:2] == [0.5, 0.5]
