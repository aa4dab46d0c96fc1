"""bench/bpo_preflight.py: T-GRPO's temporal-bonus spread on hand-built groups, and the two mechanisms' verdicts."""
import sys

import pytest

from tests.support import BENCH

if str(BENCH) not in sys.path:  # the bench modules import their siblings by name (as the bench scripts do)
    sys.path.insert(0, str(BENCH))
import bpo_preflight as B  # noqa: E402


def test_temporal_bonus_spread_on_hand_built_groups():
    # group 0: ordered 2/4 correct, shuffled 0/2 -> p = .5 >= .8 * 0: bonus .3 on the two correct only -> differs
    # group 1: all correct, shuffled all correct -> p = 1 >= .8: bonus .3 on every ordered response -> on, same
    #          (the shuffled responses get 0: counting them would call this group "differs")
    # group 2: ordered 1/4, shuffled 2/2 -> p = .25 < .8: no bonus
    # group 3: no shuffled response (a static clip): no bonus
    acc = [1, 1, 0, 0, 0, 0] + [1, 1, 1, 1, 1, 1] + [1, 0, 0, 0, 1, 1] + [1, 0, 1, 0]
    gid = [0] * 6 + [1] * 6 + [2] * 6 + [3] * 4
    shuf = ([False] * 4 + [True] * 2) * 3 + [False] * 4
    s = B.temporal_bonus_spread(acc, gid, shuf, mu=0.8, bonus=0.3, acc_threshold=0.1)
    assert s == pytest.approx({"bonus_differs": 0.25, "bonus_on": 0.5, "has_shuffled": 0.75})


def test_temporal_bonus_spread_follows_mu():
    # ordered 1/4 vs shuffled 1/2: p = .25 >= mu * .5 only for mu <= .5
    acc, gid, shuf = [1, 0, 0, 0, 1, 0], [7] * 6, [False] * 4 + [True] * 2
    assert B.temporal_bonus_spread(acc, gid, shuf, mu=0.8)["bonus_differs"] == 0.0
    assert B.temporal_bonus_spread(acc, gid, shuf, mu=0.5)["bonus_differs"] == 1.0


def test_mechanism_verdicts():
    ok, why = B.tgrpo_can_act({"bonus_differs": B.MIN_SHARE - 0.01})
    assert not ok and "4.0% of the groups" in why
    assert B.tgrpo_can_act({"bonus_differs": B.MIN_SHARE}) == (True, "ok")
    ok, why = B.bpo_can_act({"null_abstain_sampled": 0.0, "null_abstain_greedy": 0.3})
    assert not ok and "never varies" in why
    ok, why = B.bpo_can_act({"null_abstain_sampled": 0.9, "null_abstain_greedy": 1.0})
    assert not ok and "nothing left" in why
    assert B.bpo_can_act({"null_abstain_sampled": 0.2, "null_abstain_greedy": 0.5}) == (True, "ok")


def test_bonus_spread_by_qtype_splits_groups_by_type():
    # a "direction" group whose bonus differs and an "order" group where it is on for all: 100% vs 0% differs
    acc = [1, 0, 0, 0] + [1, 1, 1, 0]
    gid = [0, 0, 0, 0, 1, 1, 1, 1]
    shuf = [False, False, True, True] * 2
    qt = ["direction"] * 4 + ["order"] * 4
    by = B.bonus_spread_by_qtype(acc, gid, shuf, qt, mu=0.8, bonus=0.3, acc_threshold=0.1)
    assert by["direction"]["bonus_differs"] == 1.0 and by["order"]["bonus_differs"] == 0.0
    assert by["order"]["bonus_on"] == 1.0
