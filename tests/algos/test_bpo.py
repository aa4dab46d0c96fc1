"""BPO (proposed spec), specs/algorithms.md §1, unit tests 1-3 (test 4 is about view transforms)."""
import math

import pytest
import torch

from mmrl.algos.spec import estimate
from mmrl.algos import (
    AdvantageInputs,
    anchor_baseline,
    bpo_advantages,
    contract_reward,
    contract_rewards,
    pack_scores,
)

ABST = "ABST"


def cr(role, pred, cf=None, anchor="A", fmt=0.0):
    return contract_reward(role, pred, anchor, "A", cf_label=cf, abstain_token=ABST, fmt=fmt)


def test_spec_1_reward_table():
    assert cr("stable", "A") == 1.0 and cr("stable", "B") == 0.0
    assert cr("sensitive", "A") == 0.0 and cr("sensitive", "B") == 1.0 and cr("sensitive", ABST) == 1.0
    assert cr("abstain", ABST) == 1.0 and cr("abstain", "A") == 0.0


def test_reward_table_other_rows():
    assert cr("anchor", "A") == 1.0 and cr("anchor", "B") == 0.0
    assert cr("anchor", "A", fmt=1.0) == pytest.approx(1.1)  # λ_f = 0.1
    assert cr("anchor", ABST, fmt=1.0) == 0.0  # abstaining on a non-abstain view gets 0
    assert cr("stable", ABST) == 0.0
    assert cr("stable", "A", anchor="B") == 0.0  # correct but unstable
    assert cr("stable", "B", anchor="B") == 0.0  # stable but wrong
    # sensitive view with a known counterfactual label (e.g. reverse maps left -> right)
    assert cr("sensitive", "B", cf="B") == 1.0 and cr("sensitive", "A", cf="B") == 0.0
    assert cr("sensitive", ABST, cf="B") == 0.0
    assert cr("sensitive", "B", cf="unknown") == 1.0  # "unknown" = no label
    assert cr("sensitive", None) == 0.0 and cr("stable", None) == 0.0  # unparseable
    assert cr("null", " abst ") == 1.0 and cr("original", "a") == 1.0  # aliases, case/space-insensitive
    with pytest.raises(ValueError, match="unknown view role"):
        cr("shuffled", "A")


def test_contract_rewards_batch_finds_each_packs_anchor():
    roles = ["anchor", "stable", "abstain", "anchor", "stable", "sensitive"]
    preds = ["A", "A", ABST, "B", "B", "A"]
    r = contract_rewards(roles, preds, ["A"] * 6, [0] * 6, [0, 0, 0, 1, 1, 1], abstain_token=ABST, fmts=[1.0] * 6)
    assert torch.allclose(r, torch.tensor([1.1, 1.0, 1.0, 0.1, 0.0, 0.0]))
    with pytest.raises(ValueError, match="no anchor"):
        contract_rewards(["anchor", "stable"], ["A", "A"], ["A", "A"], [0, 0], [0, 1])


# spec test 2: packs p=1,2; r_{p,0} = [1, 0], stable = [1, 1], null = [1, 0]
ROLES = ["anchor", "anchor", "stable", "stable", "abstain", "abstain"]
R = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 0.0])
GID = torch.zeros(6, dtype=torch.long)
PACK = torch.tensor([0, 1, 0, 1, 0, 1])


def test_spec_2_anchor_advantage_with_sigma_1():
    assert torch.allclose(anchor_baseline(R, GID, ROLES), torch.full((6,), 0.5, dtype=torch.float64))
    a = bpo_advantages(R, GID, ROLES, batch_std=1.0, eps=1e-6)
    assert torch.allclose(a, torch.tensor([0.5, -0.5, 0.5, 0.5, 0.5, -0.5]), atol=1e-5)


def test_batch_std_of_r_minus_b():
    d = torch.tensor([0.5, -0.5, 0.5, 0.5, 0.5, -0.5])
    a = bpo_advantages(R, GID, ROLES, eps=0.0)  # ddof=1: sigma_B = sqrt(12/45)
    assert torch.allclose(a, d / math.sqrt(12 / 45), atol=1e-6)
    assert a[0].item() == pytest.approx(0.968246, abs=1e-5)
    p = bpo_advantages(R, GID, ROLES, eps=0.0, unbiased=False)  # ddof=0: sqrt(12/54)
    assert p[0].item() == pytest.approx(1.06066, abs=1e-5)


def test_spec_3_null_rewards_do_not_move_the_baseline():
    r2 = R.clone()
    r2[4:] = torch.tensor([0.0, 1.0])
    assert torch.equal(anchor_baseline(R, GID, ROLES), anchor_baseline(r2, GID, ROLES))
    a1 = bpo_advantages(R, GID, ROLES, batch_std=1.0)
    a2 = bpo_advantages(r2, GID, ROLES, batch_std=1.0)
    assert torch.equal(a1[:4], a2[:4])
    assert not torch.equal(a1[4:], a2[4:])


def test_baseline_is_per_group():
    r = torch.cat([R, torch.tensor([0.0, 1.0, 0.0])])
    gid = torch.cat([GID, torch.full((3,), 4)])
    roles = ROLES + ["anchor", "stable", "abstain"]
    b = anchor_baseline(r, gid, roles)
    assert b[:6].tolist() == [0.5] * 6 and b[6:].tolist() == [0.0] * 3
    with pytest.raises(ValueError, match="no anchor"):
        anchor_baseline(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]), ["anchor", "stable"])


def test_single_pack_anchor_gets_zero():
    a = bpo_advantages(torch.tensor([1.0, 0.0, 1.0]), torch.zeros(3, dtype=torch.long), ["anchor", "stable", "abstain"])
    assert a[0].item() == 0.0
    # all (r - b) equal -> exactly zero, no division by a zero std
    z = bpo_advantages(torch.tensor([1.0, 1.0]), torch.zeros(2, dtype=torch.long), ["anchor", "stable"], eps=0.0)
    assert z.tolist() == [0.0, 0.0]


def test_paired_mode():
    a = bpo_advantages(R, GID, ROLES, pack_ids=PACK, anchor_mode="paired")
    assert a.tolist() == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="pack_ids"):
        bpo_advantages(R, GID, ROLES, anchor_mode="paired")
    with pytest.raises(ValueError, match="anchor_mode"):
        bpo_advantages(R, GID, ROLES, anchor_mode="pairs")


def test_pack_scores_and_registered_bpo():
    s = pack_scores(R, GID, PACK)
    assert torch.allclose(s, torch.tensor([1.0, 1 / 3, 1.0, 1 / 3, 1.0, 1 / 3]))
    inp = AdvantageInputs(rewards=R, group_ids=GID, roles=ROLES, pack_ids=PACK)
    out = estimate("bpo", inp, eps=0.0)
    assert torch.allclose(out.advantages, torch.tensor([0.5, -0.5, 0.5, 0.5, 0.5, -0.5]) / math.sqrt(12 / 45), atol=1e-6)
    assert out.metrics["bpo/pack_score_mean"] == pytest.approx(2 / 3)
    assert out.metrics["bpo/reward_abstain"] == pytest.approx(0.5)
    assert out.metrics["bpo/sigma_B"] == pytest.approx(math.sqrt(12 / 45))
    out = estimate("bpo", inp, anchor_mode="paired")
    assert out.advantages.tolist() == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
