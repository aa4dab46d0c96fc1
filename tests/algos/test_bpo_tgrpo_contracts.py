"""BPO's and T-GRPO's input contracts and edge values, as tables (specs/algorithms.md §1 and the T-GRPO section).

Each malformed input is refused with the message that names it (the argument, the length it should have, the
pack or group at fault); each default and each threshold is checked where its exact value shows (one ordered or
one shuffled response in a group, an accuracy exactly at the threshold, a length exactly at the bound, weights
summing below 1, a non-default eps); outputs keep the rewards' float dtype.
"""
import re

import pytest
import torch

from mmrl.algos.base import AdvantageInputs
from mmrl.algos.bpo import (BPOParams, anchor_baseline, bpo, bpo_advantages, contract_reward, contract_rewards,
                            pack_scores, paired_advantages)
from mmrl.algos.tgrpo import (TGRPOParams, shuffled_mask, tgrpo, tgrpo_advantages, tgrpo_length_bonus,
                              tgrpo_temporal_bonus)
from mmrl.data.schema import ANSWER_ABSTAIN

R2 = torch.tensor([1.0, 0.0])
G2 = torch.tensor([0, 0])
ROLES2 = ["anchor", "stable"]
M = torch.zeros(2, 2)  # a 2-D tensor where [N] is expected
L3 = torch.tensor([0, 0, 0])  # one entry too many


def _one_d(name):
    return rf"^{name} must be a 1-D tensor \[N\], got Tensor"


def _length(name):
    return rf"^{name} has 3 entries, expected 2$"


INPUTS = [
    (lambda: anchor_baseline(M, G2, ROLES2), _one_d("rewards")),
    (lambda: anchor_baseline(R2, M, ROLES2), _one_d("group_ids")),
    (lambda: anchor_baseline(R2, L3, ROLES2), _length("group_ids")),
    (lambda: anchor_baseline(R2, G2, ["anchor"]), r"^bpo: 1 roles for 2 trajectories$"),
    (lambda: paired_advantages(M, G2, ROLES2, G2), _one_d("rewards")),
    (lambda: paired_advantages(R2, G2, ROLES2, M), _one_d("pack_ids")),
    (lambda: paired_advantages(R2, G2, ROLES2, L3), _length("pack_ids")),
    (lambda: paired_advantages(R2, M, ROLES2, G2), _one_d("group_ids")),
    (lambda: paired_advantages(R2, L3, ROLES2, G2), _length("group_ids")),
    (lambda: pack_scores(M, G2, G2), _one_d("rewards")),
    (lambda: bpo_advantages(R2, G2, ROLES2, None, "paired"), r"^bpo: anchor_mode='paired' needs pack_ids$"),
    (lambda: bpo(AdvantageInputs(R2, G2, roles=ROLES2, view_weights=M), BPOParams()), _one_d("view_weights")),
    (lambda: bpo(AdvantageInputs(R2, G2, roles=ROLES2, view_weights=L3.float()), BPOParams()), _length("view_weights")),
    (lambda: BPOParams(anchor_mode="pairs"), r"^anchor_mode must be batch_std or paired, got 'pairs'$"),
    (lambda: tgrpo_temporal_bonus(M, G2, G2.bool()), _one_d("acc")),
    (lambda: tgrpo_temporal_bonus(R2, M, G2.bool()), _one_d("group_ids")),
    (lambda: tgrpo_temporal_bonus(R2, L3, G2.bool()), _length("group_ids")),
    (lambda: tgrpo_temporal_bonus(R2, G2, M), _one_d("is_shuffled")),
    (lambda: tgrpo_temporal_bonus(R2, G2, L3.bool()), _length("is_shuffled")),
    (lambda: tgrpo_advantages(M, R2, G2, G2.bool()), _one_d("rewards")),
    (lambda: tgrpo_length_bonus(M, G2, G2), _one_d("acc")),
    (lambda: tgrpo_length_bonus(R2, M, G2), _one_d("lengths")),
    (lambda: tgrpo_length_bonus(R2, L3, G2), _length("lengths")),
    (lambda: tgrpo_length_bonus(R2, G2, M), _one_d("group_ids")),
    (lambda: tgrpo_length_bonus(R2, G2, L3), _length("group_ids")),
    (lambda: shuffled_mask(["anchor"], 2), r"^tgrpo: 1 roles for 2 trajectories$"),
]


@pytest.mark.parametrize("call,message", INPUTS, ids=[str(i) for i in range(len(INPUTS))])
def test_malformed_inputs_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("name", ["preds", "golds", "group_ids", "pack_ids"])
def test_contract_rewards_name_the_sequence_of_the_wrong_length(name):
    args = dict(roles=["anchor", "stable"], preds=["A", "A"], golds=["A", "A"], group_ids=[0, 0], pack_ids=[0, 0])
    args[name] = args[name][:1]
    with pytest.raises(ValueError, match=rf"^contract_rewards: {name} has 1 entries for 2 roles$"):
        contract_rewards(**args)
    with pytest.raises(ValueError, match=r"^bpo: pack \(0, 0\) \(group, pack\) has more than one anchor response$"):
        contract_rewards(["anchor", "original"], ["A", "A"], ["A", "A"], [0, 0], [0, 0])


# (role, pred, anchor pred, gold, cf label, abstain token, reward); fmt is 0 unless given
CONTRACT = [
    ("anchor", "A", "A", "A", None, ANSWER_ABSTAIN, 1.0),  # the format default adds nothing
    ("abstain", "A", "A", "B", None, ANSWER_ABSTAIN, 0.0),  # the abstain role pays only the abstention
    ("null", "A", "A", "B", None, ANSWER_ABSTAIN, 0.0),
    ("abstain", "None", "A", "B", None, {"none", "cannot tell"}, 1.0),  # a set of abstention answers
    ("abstain", "cannot tell", "A", "B", None, ["none", "cannot tell"], 1.0),
    ("stable", ANSWER_ABSTAIN, ANSWER_ABSTAIN, ANSWER_ABSTAIN, None, ANSWER_ABSTAIN, 0.0),  # abstaining is no match
]


@pytest.mark.parametrize("role,pred,anchor,gold,cf,token,reward", CONTRACT, ids=[str(i) for i in range(len(CONTRACT))])
def test_contract_reward_table(role, pred, anchor, gold, cf, token, reward):
    assert contract_reward(role, pred, anchor, gold, cf, abstain_token=token) == reward


def test_contract_rewards_pass_the_counterfactual_labels_and_format_scores():
    roles, preds, golds = ["anchor", "sensitive", "anchor"], ["A", "B", "A"], ["A", "A", "A"]
    # the sensitive view's expected answer is B: it pays 1 for B (without the label, B != gold pays 1 too; with
    # the label C it pays 0)
    assert contract_rewards(roles, preds, golds, [0, 0, 1], [0, 0, 0], cf_labels=[None, "C", None]).tolist() == \
        [1.0, 0.0, 1.0]
    assert contract_rewards(roles, preds, golds, [0, 0, 1], [0, 0, 0]).tolist() == [1.0, 1.0, 1.0]
    out = contract_rewards(roles, preds, golds, [0, 0, 1], [0, 0, 0], fmts=[1.0, 1.0, 0.5], fmt_weight=0.2)
    assert out.tolist() == pytest.approx([1.2, 1.0, 1.1]) and out.dtype == torch.float32


def test_anchor_baseline_names_the_groups_without_an_anchor_and_takes_the_alias():
    r = torch.tensor([1.0, 0.0, 1.0, 0.5, 0.0])
    g = torch.tensor([0, 0, 1, 2, 2])
    with pytest.raises(ValueError, match=r"^bpo: groups \[1\] have no anchor \(original-view\) response to serve as "
                                         r"b_q$"):
        anchor_baseline(r, g, ["anchor", "anchor", "stable", "anchor", "stable"])
    assert anchor_baseline(r, g, ["original", "stable", "original", "anchor", "sensitive"]).tolist() == \
        [1.0, 1.0, 1.0, 0.5, 0.5]


def test_paired_advantages_name_every_pack_without_exactly_one_anchor():
    r = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0])
    g = torch.tensor([0, 0, 0, 1, 1])
    p = torch.tensor([0, 0, 1, 0, 0])
    with pytest.raises(ValueError, match=re.escape("bpo paired: packs [(0, 0), (1, 0)] (group, pack) need exactly "
                                                   "one anchor response")):
        paired_advantages(r, g, ["anchor", "anchor", "anchor", "stable", "stable"], p)


def test_bpo_advantages_eps_dtype_and_empty_batch():
    r = torch.tensor([1.0, 0.0, 0.5, 1.0])
    g = torch.tensor([0, 0, 1, 1])
    roles = ["anchor", "stable", "anchor", "stable"]
    # d = r - b = [0, -1, 0, 0.5]; with sigma_B fixed at 1 and eps 0.5, A = d / 1.5
    a = bpo_advantages(r, g, roles, eps=0.5, batch_std=1.0)
    assert a.tolist() == pytest.approx([0.0, -1 / 1.5, 0.0, 0.5 / 1.5]) and a.dtype == torch.float32
    same = bpo_advantages(torch.tensor([1.0, 1.0]), G2, ROLES2)  # every d equal: exactly 0, in float32
    assert same.tolist() == [0.0, 0.0] and same.dtype == torch.float32
    empty = bpo_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long), [])
    assert empty.shape == (0,) and empty.dtype == torch.float32
    assert bpo_advantages(r.double(), g, roles).dtype == torch.float64
    assert paired_advantages(r, g, roles, torch.zeros(4, dtype=torch.long)).dtype == torch.float32


def test_pack_scores_with_weights_below_one_and_an_empty_batch():
    r = torch.tensor([1.0, 0.0, 0.5])
    s = pack_scores(r, torch.tensor([0, 0, 1]), torch.tensor([0, 0, 0]), torch.tensor([0.25, 0.125, 0.1]))
    assert s.tolist() == pytest.approx([0.25 / 0.375, 0.25 / 0.375, 0.5])
    assert pack_scores(torch.zeros(0), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)).shape == (0,)


def test_bpo_metrics_and_params_reach_the_advantages():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])
    g = torch.tensor([0, 0, 1, 1])
    roles = ["anchor", "stable", "anchor", "stable"]
    packs = torch.tensor([0, 0, 0, 0])  # the same pack id in two groups: two packs
    inp = AdvantageInputs(r, g, roles=roles, pack_ids=packs)
    out = bpo(inp, BPOParams())
    d = torch.tensor([0.0, -1.0, 0.0, 1.0], dtype=torch.float64)
    assert out.metrics["reward_mean"] == 0.5
    assert out.metrics["bpo/reward_anchor"] == 0.5 and out.metrics["bpo/reward_stable"] == 0.5
    assert out.metrics["bpo/sigma_B"] == pytest.approx(float(d.std(unbiased=True)))
    # pack scores 0.5 (group 0) and 0.5 (group 1); keyed by pack id alone group 1 would overwrite group 0
    r2 = torch.tensor([1.0, 1.0, 0.0, 1.0])
    assert bpo(AdvantageInputs(r2, g, roles=roles, pack_ids=packs), BPOParams()).metrics["bpo/pack_score_mean"] == 0.75
    assert out.rewards is inp.rewards
    biased = bpo(inp, BPOParams(unbiased_std=False))
    assert biased.metrics["bpo/sigma_B"] == pytest.approx(float(d.std(unbiased=False)))
    assert biased.advantages[1].item() == pytest.approx(-1.0 / (float(d.std(unbiased=False)) + 1e-6), rel=1e-5)
    # d = r - b = [0, -0.5, 0, 0.25] (r + b would be [1, 0.5, 0.5, 0.75]: another spread)
    r3 = torch.tensor([0.5, 0.0, 0.25, 0.5])
    d3 = torch.tensor([0.0, -0.5, 0.0, 0.25], dtype=torch.float64)
    assert bpo(AdvantageInputs(r3, g, roles=roles), BPOParams()).metrics["bpo/sigma_B"] == pytest.approx(float(d3.std()))
    two = bpo(AdvantageInputs(torch.tensor([1.0, 0.0]), G2, roles=ROLES2), BPOParams())
    assert two.metrics["bpo/sigma_B"] == pytest.approx(float(torch.tensor([0.0, -1.0]).std()))
    one = bpo(AdvantageInputs(torch.tensor([0.5]), torch.tensor([0]), roles=["anchor"]), BPOParams())
    assert one.metrics["bpo/sigma_B"] == 0.0 and one.metrics["reward_mean"] == 0.5


# ---- T-GRPO ------------------------------------------------------------------------------------------------------
def test_shuffled_mask_without_roles_is_all_ordered():
    m = shuffled_mask([], 3)
    assert m.dtype == torch.bool and m.tolist() == [False, False, False]


def test_temporal_bonus_with_one_ordered_or_one_shuffled_response():
    # group 0: one ordered (acc 1), one shuffled (acc 1): p = 1 >= 0.8 * 1 -> bonus; group 1: one ordered (acc 0.5)
    # and two shuffled (acc 1, 0): p = 0.5 >= 0.8 * 0.5 -> bonus
    acc = torch.tensor([1.0, 1.0, 0.5, 1.0, 0.0], dtype=torch.float64)
    g = torch.tensor([0, 0, 1, 1, 1])
    shuf = torch.tensor([False, True, False, True, True])
    b, cond = tgrpo_temporal_bonus(acc, g, shuf)
    assert b.tolist() == pytest.approx([0.3, 0.0, 0.3, 0.0, 0.0]) and cond.tolist() == [True] * 5
    assert b.dtype == torch.float64
    # a 0/1 integer mask is read as booleans
    assert tgrpo_temporal_bonus(acc, g, shuf.long())[0].tolist() == b.tolist()
    # group 1 with its ordered accuracy 0.3 < 0.8 * 0.5: no bonus
    acc2 = torch.tensor([1.0, 1.0, 0.3, 1.0, 0.0])
    assert tgrpo_temporal_bonus(acc2, g, shuf)[1].tolist() == [True, True, False, False, False]
    # a group with shuffled responses only has no condition to meet (even at accuracy 0)
    only = tgrpo_temporal_bonus(torch.zeros(2), torch.tensor([0, 0]), torch.tensor([True, True]))
    assert only[1].tolist() == [False, False] and only[0].tolist() == [0.0, 0.0]


def test_tgrpo_advantages_take_the_threshold_and_integer_masks():
    r = torch.tensor([1.0, 0.3, 0.2, 0.0])
    acc = torch.tensor([1.0, 0.3, 0.2, 0.0])
    g = torch.tensor([0, 0, 0, 0])
    shuf = torch.tensor([0, 0, 1, 1])  # integer: rows 0-1 ordered
    # ordered accuracy 0.65 >= 0.8 x 0.1: the group earns the bonus, each ordered row whose acc is above the threshold
    adv, train, shaped = tgrpo_advantages(r, acc, g, shuf, acc_threshold=0.5)
    assert train.tolist() == [True, True, False, False]
    assert shaped.tolist() == pytest.approx([1.3, 0.3, 0.2, 0.0])  # 0.3 is not above 0.5
    assert tgrpo_advantages(r, acc, g, shuf)[2].tolist() == pytest.approx([1.3, 0.6, 0.2, 0.0])  # default 0.1
    assert tgrpo_advantages(r, acc, g, shuf.bool())[0].tolist() == pytest.approx(
        tgrpo_advantages(r, acc, g, shuf)[0].tolist())


LENGTHS = [  # (acc, lengths, groups, kwargs, bonus)
    ([1.0, 1.0], [320, 512], [0, 0], {}, [0.2, 0.2]),  # both bounds inside
    ([1.0, 1.0], [319, 513], [0, 0], {}, [0.0, 0.0]),
    ([1.0, 0.0], [400, 400], [0, 0], {}, [0.0, 0.0]),  # one correct: fewer than min_correct = 2
    ([0.1, 0.5, 0.5], [400, 400, 400], [0, 0, 0], {}, [0.0, 0.2, 0.2]),  # acc exactly at the threshold: not correct
    ([1.0, 1.0], [400, 400], [0, 0], {"mask": torch.tensor([1, 0])}, [0.0, 0.0]),  # an integer mask
]


@pytest.mark.parametrize("acc,lengths,groups,kw,bonus", LENGTHS, ids=[str(i) for i in range(len(LENGTHS))])
def test_length_bonus_table(acc, lengths, groups, kw, bonus):
    out = tgrpo_length_bonus(torch.tensor(acc), torch.tensor(lengths), torch.tensor(groups), **kw)
    assert out.tolist() == pytest.approx(bonus)


def test_tgrpo_metrics_params_and_the_acc_component():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    inp = AdvantageInputs(r, torch.tensor([0, 0, 0, 0]), components={"acc": torch.tensor([1.0, 0.0, 1.0, 0.0])},
                          roles=["anchor", "anchor", "shuffled", "shuffled"])
    out = tgrpo(inp, TGRPOParams())
    assert out.metrics["tgrpo/acc_ordered"] == 0.5 and out.metrics["tgrpo/acc_shuffled"] == 0.5
    assert out.metrics["reward_mean"] == pytest.approx((1.3 + 0.0) / 2)
    assert out.metrics["tgrpo/temporal_bonus_rate"] == 1.0
    assert out.rewards.tolist() == pytest.approx([1.3, 0.0, 1.0, 1.0]) and out.train_mask.tolist() == [True, True, False, False]
    # the threshold reaches the bonus: no accuracy is above 1
    assert tgrpo(inp, TGRPOParams(acc_threshold=1.0)).rewards.tolist() == pytest.approx([1.0, 0.0, 1.0, 1.0])
    # eps and the std's ddof reach the advantages: ordered rewards [1.3, 0]
    for unbiased, eps in ((True, 1e-4), (False, 1e-4), (True, 0.5)):
        a = tgrpo(inp, TGRPOParams(unbiased_std=unbiased, eps=eps)).advantages
        x = torch.tensor([1.3, 0.0], dtype=torch.float64)
        assert a[:2].tolist() == pytest.approx(((x - x.mean()) / (x.std(unbiased=unbiased) + eps)).tolist(), rel=1e-5)
    only_ordered = tgrpo(AdvantageInputs(r[:2], torch.tensor([0, 0]), accuracy=r[:2]), TGRPOParams())
    assert "tgrpo/acc_shuffled" not in only_ordered.metrics and only_ordered.metrics["tgrpo/acc_ordered"] == 0.5
