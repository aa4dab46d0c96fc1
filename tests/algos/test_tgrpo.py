"""T-GRPO (Video-R1 code), specs/algorithms.md §7."""
import math

import pytest
import torch

from mmrl.algos.spec import estimate
from mmrl.algos import AdvantageInputs, tgrpo_advantages, tgrpo_length_bonus, tgrpo_temporal_bonus

# one prompt: 4 ordered responses, then 2 shuffled ones
ROLES = ["anchor"] * 4 + ["shuffled"] * 2
SHUF = torch.tensor([False] * 4 + [True] * 2)
FMT = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
ACC_A = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])  # p = .5, p~ = .5 -> bonus
ACC_B = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0])  # p = .5, p~ = 1  -> no bonus
G0 = torch.zeros(6, dtype=torch.long)


def test_bonus_applied_when_p_ge_mu_ptilde():
    b, cond = tgrpo_temporal_bonus(ACC_A, G0, SHUF)
    assert torch.allclose(b, torch.tensor([0.3, 0.0, 0.3, 0.0, 0.0, 0.0]))
    assert cond.all()


def test_no_bonus_when_p_below_mu_ptilde():
    b, cond = tgrpo_temporal_bonus(ACC_B, G0, SHUF)
    assert torch.all(b == 0) and not cond.any()


def test_bonus_condition_is_inclusive():
    # p = 0.8 = mu * p~ exactly (Video-R1 uses >=)
    acc = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    shuf = torch.tensor([False] * 5 + [True] * 2)
    b, cond = tgrpo_temporal_bonus(acc, torch.zeros(7, dtype=torch.long), shuf)
    assert cond.all() and torch.allclose(b, torch.tensor([0.3] * 4 + [0.0] * 3))


def test_bonus_needs_acc_above_threshold():
    acc = torch.tensor([0.1, 0.11, 1.0, 0.0, 0.0, 0.0])
    b, _ = tgrpo_temporal_bonus(acc, G0, SHUF)
    assert torch.allclose(b, torch.tensor([0.0, 0.3, 0.3, 0.0, 0.0, 0.0]))


def test_advantage_over_ordered_only_with_eps_1e4():
    adv, train, shaped = tgrpo_advantages(ACC_A + FMT, ACC_A, G0, SHUF)
    assert torch.allclose(shaped, torch.tensor([2.3, 1.0, 1.3, 1.0, 2.0, 1.0]))
    exp = torch.tensor([0.9, -0.4, -0.1, -0.4]) / (math.sqrt(0.38) + 1e-4)
    assert torch.allclose(adv[:4], exp, atol=1e-6)
    assert adv[0].item() == pytest.approx(1.45976, abs=1e-4)
    assert torch.all(adv[4:] == 0) and train.tolist() == [True] * 4 + [False] * 2

    adv_b, _, shaped_b = tgrpo_advantages(ACC_B + FMT, ACC_B, G0, SHUF)
    assert torch.allclose(shaped_b, ACC_B + FMT)
    assert torch.allclose(adv_b[:4], torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-4), atol=1e-6)


def test_condition_is_per_prompt_group():
    # interleave the two prompts in one batch: group 3 = case A, group 8 = case B
    idx = torch.arange(6)
    gid = torch.cat([torch.full((6,), 3), torch.full((6,), 8)])[torch.stack([idx, idx + 6], 1).flatten()]
    acc = torch.stack([ACC_A, ACC_B], 1).flatten()
    shuf = torch.stack([SHUF, SHUF], 1).flatten()
    r = acc + torch.stack([FMT, FMT], 1).flatten()
    adv, _, shaped = tgrpo_advantages(r, acc, gid, shuf)
    adv_a, _, shaped_a = tgrpo_advantages(ACC_A + FMT, ACC_A, G0, SHUF)
    adv_b, _, shaped_b = tgrpo_advantages(ACC_B + FMT, ACC_B, G0, SHUF)
    assert torch.allclose(adv[0::2], adv_a) and torch.allclose(adv[1::2], adv_b)
    assert torch.allclose(shaped[0::2], shaped_a) and torch.allclose(shaped[1::2], shaped_b)


def test_group_without_shuffled_gets_no_bonus():
    acc = torch.tensor([1.0, 0.0, 1.0, 0.0])
    b, cond = tgrpo_temporal_bonus(acc, torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.bool))
    assert torch.all(b == 0) and not cond.any()


def test_length_bonus():
    acc = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0])
    lengths = torch.tensor([320, 600, 512, 400, 400])
    gid = torch.tensor([0, 0, 0, 0, 1])  # group 1 has a single correct response
    b = tgrpo_length_bonus(acc, lengths, gid)
    assert torch.allclose(b, torch.tensor([0.2, 0.0, 0.2, 0.0, 0.0]))
    # with the mask restricting to two rows, group 0 has fewer than 2 correct responses
    m = torch.tensor([True, False, False, True, True])
    assert torch.all(tgrpo_length_bonus(acc, lengths, gid, mask=m) == 0)


def test_registered_tgrpo_and_errors():
    inp = AdvantageInputs(rewards=ACC_A + FMT, group_ids=G0, roles=ROLES, accuracy=ACC_A)
    out = estimate("tgrpo", inp)
    exp = torch.tensor([0.9, -0.4, -0.1, -0.4]) / (math.sqrt(0.38) + 1e-4)
    assert torch.allclose(out.advantages[:4], exp, atol=1e-6)
    assert out.train_mask.tolist() == [True] * 4 + [False] * 2
    assert out.metrics["tgrpo/temporal_bonus_rate"] == 1.0
    # accuracy can come from the components
    inp2 = AdvantageInputs(rewards=ACC_B + FMT, group_ids=G0, roles=ROLES, components={"accuracy": ACC_B})
    assert estimate("tgrpo", inp2).metrics["tgrpo/temporal_bonus_rate"] == 0.0
    with pytest.raises(ValueError, match="accuracy"):
        estimate("tgrpo", AdvantageInputs(rewards=ACC_A, group_ids=G0, roles=ROLES))
    with pytest.raises(ValueError, match="unknown roles"):
        bad = AdvantageInputs(rewards=ACC_A, group_ids=G0, roles=["anchor"] * 4 + ["shuffle"] * 2, accuracy=ACC_A)
        estimate("tgrpo", bad)
