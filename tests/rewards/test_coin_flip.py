"""The coin-flip control reward: Bernoulli noise with the true reward's mean, independent of the responses."""
import pytest
import torch

from mmrl.rewards import REWARDS, compute_rewards
from mmrl.rewards.base import RewardSpec
from tests.rewards.rewards_support import ctx


def _batch(n_right: int, n: int):
    return [ctx("A" if i < n_right else "B", "A", sid=f"s{i}") for i in range(n)]


def test_registered_and_only_the_coins_enter_the_total():
    torch.manual_seed(0)
    comps, total = compute_rewards([RewardSpec("coin_flip")], _batch(3, 4))
    assert REWARDS.get("coin_flip") is not None
    assert comps["coin_flip/true_accuracy"] == [1.0, 1.0, 1.0, 0.0]
    assert total == comps["coin_flip"] and set(total) <= {0.0, 1.0}


def test_mean_matches_the_batch_accuracy_and_ignores_the_responses():
    torch.manual_seed(1)
    batch = _batch(300, 1000)  # true accuracy 0.3
    coins = REWARDS.get("coin_flip")(batch)["coin_flip"]
    assert abs(sum(coins) / len(coins) - 0.3) < 0.05  # 3.5 standard errors
    right = [c for c, b in zip(coins, batch) if b.trajectory.text == "A"]
    wrong = [c for c, b in zip(coins, batch) if b.trajectory.text == "B"]
    assert abs(sum(right) / len(right) - sum(wrong) / len(wrong)) < 0.1  # no signal: same rate on right and wrong


def test_seeded_by_the_global_torch_generator_and_given_p():
    torch.manual_seed(7)
    a = REWARDS.get("coin_flip")(_batch(2, 64))["coin_flip"]
    torch.manual_seed(7)
    b = REWARDS.get("coin_flip")(_batch(2, 64))["coin_flip"]
    assert a == b
    assert REWARDS.get("coin_flip")(_batch(2, 8), p=1.0)["coin_flip"] == [1.0] * 8
    assert REWARDS.get("coin_flip")(_batch(8, 8), p=0.0)["coin_flip"] == [0.0] * 8
    assert REWARDS.get("coin_flip")(_batch(0, 8))["coin_flip"] == [0.0] * 8  # mean 0: never a reward


def test_p_out_of_range_is_refused():
    with pytest.raises(ValueError, match="p must be in"):
        REWARDS.get("coin_flip")(_batch(1, 2), p=1.5)


def test_dspo_coin_flip_replaces_dspo_accuracy():
    """DSPO's control: coins of the batch's mean ``dspo_accuracy`` (the step-4 choice vs the gold emotion)."""
    good = (r"<step1>the sky \bboxed{[0.1, 0.2, 0.5, 0.6]}</step1><step2>low</step2>"
            r"<step3>\list{red, green}</step3><step4>\boxed{red}</step4>")
    batch = [ctx(good if i < 3 else good.replace(r"\boxed{red}", r"\boxed{blue}"), "A", sid=f"s{i}") for i in range(4)]
    torch.manual_seed(0)
    out = REWARDS.get("dspo_coin_flip")(batch)
    assert out["coin_flip/true_dspo_accuracy"] == [1.0, 1.0, 1.0, 0.0]
    assert set(out["dspo_coin_flip"]) <= {0.0, 1.0}
    assert REWARDS.get("dspo_coin_flip")(batch, p=0.0)["dspo_coin_flip"] == [0.0] * 4
    comps, total = compute_rewards([RewardSpec("dspo_coin_flip")], batch)
    assert total == comps["dspo_coin_flip"]  # the true accuracy is logged, not summed

