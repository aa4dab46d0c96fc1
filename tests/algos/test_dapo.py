"""DAPO overlong shaping and dynamic sampling (specs/algorithms.md §7)."""
import pytest
import torch

from mmrl.algos.spec import estimate
from mmrl.algos import dynamic_sampling_keep, dynamic_sampling_plan, overlong_penalty


def test_overlong_spec_vectors():
    p = overlong_penalty(torch.tensor([16384, 18432, 20481]), max_len=20480, cache_len=4096)
    assert p.tolist() == [0.0, -0.5, -1.0]
    p = overlong_penalty(torch.tensor([100, 16385, 17408, 20480, 30000]))
    assert torch.allclose(p, torch.tensor([0.0, -1 / 4096, -0.25, -1.0, -1.0]))


def test_overlong_rejects_bad_cache():
    with pytest.raises(ValueError):
        overlong_penalty(torch.tensor([1]), max_len=100, cache_len=200)


def test_dynamic_sampling_keep_mixed_groups_only():
    # ids unordered, sizes unequal: 4 = all correct, 1 = all wrong, 9 = mixed, 2 = single member, 6 = mixed
    gid = torch.tensor([4, 1, 9, 4, 9, 1, 2, 9, 6, 6])
    acc = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    keep = dynamic_sampling_keep(acc, gid)
    assert keep.tolist() == [False, False, True, False, True, False, False, True, True, True]
    assert keep.dtype == torch.bool


def test_plan_trims_to_target_and_counts_needed():
    gid = torch.tensor([4, 1, 9, 4, 9, 1, 2, 9, 6, 6])
    acc = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    plan = dynamic_sampling_plan(acc, gid, target_groups=3, already_kept=2)
    assert plan.kept_group_ids == [9]  # first mixed group in order of appearance
    assert plan.keep.tolist() == [False, False, True, False, True, False, False, True, False, False]
    assert plan.done and plan.num_needed == 0 and plan.prompts_to_sample == 0
    plan = dynamic_sampling_plan(acc, gid, target_groups=8)
    assert plan.kept_group_ids == [9, 6] and plan.num_mixed == 2 and plan.num_groups == 5
    assert plan.num_needed == 6 and not plan.done
    assert plan.keep_rate == pytest.approx(0.4)
    assert plan.prompts_to_sample == 15  # ceil(6 / 0.4)
    assert dynamic_sampling_plan(acc, gid, target_groups=8, max_prompts=10).prompts_to_sample == 10


def test_plan_with_nothing_kept_resamples_a_full_round():
    gid = torch.tensor([0, 0, 1, 1])
    plan = dynamic_sampling_plan(torch.tensor([1.0, 1.0, 0.0, 0.0]), gid, target_groups=4)
    assert plan.num_kept == 0 and not plan.keep.any()
    assert plan.num_needed == 4 and plan.prompts_to_sample == 4


def test_dapo_advantage_is_grpo():
    from mmrl.algos import AdvantageInputs

    inp = AdvantageInputs(rewards=torch.tensor([1.0, -1.0, -1.0, 1.0]), group_ids=torch.zeros(4, dtype=torch.long))
    a = estimate("dapo", inp, eps=0.0).advantages
    assert torch.allclose(a, torch.tensor([0.8660254, -0.8660254, -0.8660254, 0.8660254]), atol=1e-6)
