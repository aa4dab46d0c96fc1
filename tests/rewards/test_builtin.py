"""Built-in rewards (accuracy, format, length) and ``compute_rewards`` on hand-computed tables."""
import math

import pytest

from mmrl.errors import RewardError
from mmrl.rewards import REWARDS, compute_rewards
from mmrl.rewards.base import RewardSpec
from mmrl.rewards.builtin import accuracy, format_reward, length
from tests.rewards.rewards_support import ctx

ACCURACY_CASES = [
    # text, expected under the view, reward
    ("A", "A", 1.0),
    ("B", "A", 0.0),
    ("The answer is B.", "B", 1.0),
    ("<answer>C</answer>", "C", 1.0),
    ("Because", "B", 0.0),  # the B of "Because" is no answer
    ("nothing", None, 0.0),  # nothing parses and the expected answer is unknown: no pay
    ("A", None, 0.0),  # expected unknown -> 0 even for a letter
    ("", "A", 0.0),
    ("D", "abstain", 0.0),  # the plain reward compares letters only
]


@pytest.mark.parametrize("text,expected,reward", ACCURACY_CASES)
def test_accuracy(text, expected, reward):
    assert accuracy([ctx(text, expected)]) == [reward]


FORMAT_CASES = [
    # text, truncated, reward
    ("A", False, 1.0),
    ("(B).", False, 1.0),
    ("A", True, 0.0),  # cut off by the length limit: the format is not met
    ("The answer is A", False, 0.0),
    ("E", False, 0.0),  # E is no option of a 4-candidate question
    ("D", False, 1.0),  # the abstention option is an option
]


@pytest.mark.parametrize("text,truncated,reward", FORMAT_CASES)
def test_format(text, truncated, reward):
    assert format_reward([ctx(text, "A", truncated=truncated)]) == [reward]


@pytest.mark.parametrize("n_tokens,reward", [(1, 0.0), (6, 0.0), (7, -0.25), (8, -0.5), (10, -1.0), (11, -1.0),
                                             (40, -1.0)])
def test_length_dapo_overlong_shaping(n_tokens, reward):
    """L_max = 10, L_cache = 4: 0 up to 6 tokens, then (6 - n) / 4, and -1 past 10."""
    assert length([ctx("A", n_tokens=n_tokens)], max_len=10, cache_len=4) == [pytest.approx(reward)]


def test_length_rejects_a_cache_longer_than_the_limit():
    with pytest.raises(ValueError, match="cache_len"):
        length([ctx("A")], max_len=4, cache_len=10)


# ---- compute_rewards ----------------------------------------------------------------------------------------


def _register(name, fn):
    if name not in REWARDS:
        REWARDS.register(name)(fn)
    return name


def test_compute_rewards_weights_the_total_and_logs_raw_components():
    c = [ctx("A", "A"), ctx("B", "A"), ctx("The answer is A", "A"), ctx("A", "A", truncated=True)]
    comps, total = compute_rewards([RewardSpec("accuracy", weight=2.0), RewardSpec("format", weight=0.5)], c)
    assert comps == {"accuracy": [1.0, 0.0, 1.0, 1.0], "format": [1.0, 1.0, 0.0, 0.0]}
    assert total == pytest.approx([2.5, 0.5, 2.0, 2.0])


def test_compute_rewards_negative_and_zero_weights():
    c = [ctx("A", "A"), ctx("B", "A")]
    comps, total = compute_rewards([RewardSpec("accuracy", weight=0.0), RewardSpec("format", weight=-1.0)], c)
    assert comps["accuracy"] == [1.0, 0.0]
    assert total == pytest.approx([-1.0, -1.0])


def test_compute_rewards_no_spec_gives_zero_total():
    comps, total = compute_rewards([], [ctx("A")])
    assert comps == {} and total == [0.0]


def test_dict_reward_named_component_alone_enters_the_total():
    name = _register("t_named_dict", lambda c: {"t_named_dict": [1.0, 2.0], "aux": [10.0, 20.0]})
    comps, total = compute_rewards([RewardSpec(name, weight=3.0)], [ctx("A"), ctx("B")])
    assert comps == {"t_named_dict": [1.0, 2.0], "aux": [10.0, 20.0]}
    assert total == pytest.approx([3.0, 6.0])


def test_dict_reward_without_its_own_name_sums_every_component():
    name = _register("t_sum_dict", lambda c: {"x": [1.0, 2.0], "y": [0.5, -4.0]})
    comps, total = compute_rewards([RewardSpec(name, weight=2.0)], [ctx("A"), ctx("B")])
    assert comps == {"x": [1.0, 2.0], "y": [0.5, -4.0]}
    assert total == pytest.approx([3.0, -4.0])


def test_reward_params_reach_the_function():
    c = [ctx("A", n_tokens=8)]
    comps, total = compute_rewards([RewardSpec("length", weight=1.0, params={"max_len": 10, "cache_len": 4})], c)
    assert comps["length"] == [pytest.approx(-0.5)] and total == [pytest.approx(-0.5)]


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, None])
def test_non_finite_reward_fails_naming_reward_sample_and_view(bad):
    name = _register(f"t_bad_{bad}", lambda c, bad=bad: [0.0, bad])
    c = [ctx("A", sid="ok-0"), ctx("A", sid="clip-7", view="reverse", role="sensitive")]
    said = "None \\(NoneType\\)" if bad is None else str(bad)
    with pytest.raises(RewardError, match=rf"'{name}' returned {said} for sample 'clip-7' \(view reverse\)"):
        compute_rewards([RewardSpec(name)], c)


def test_non_finite_component_of_a_dict_reward_fails_too():
    name = _register("t_bad_aux", lambda c: {"t_bad_aux": [1.0], "aux": [math.inf]})
    with pytest.raises(RewardError, match="'t_bad_aux' returned inf"):
        compute_rewards([RewardSpec(name)], [ctx("A")])


def test_wrong_number_of_values_fails():
    name = _register("t_short", lambda c: [1.0])
    with pytest.raises(RewardError, match=r"'t_short' returned 1 values for 2 completions"):
        compute_rewards([RewardSpec(name)], [ctx("A"), ctx("B")])


def test_raising_reward_names_function_and_samples():
    name = _register("t_raise", lambda c: {}["missing"])
    with pytest.raises(RewardError, match=r"'t_raise' raised KeyError.*clip-3"):
        compute_rewards([RewardSpec(name)], [ctx("A", sid="clip-3")])


def test_raising_reward_lists_the_batch_samples_sorted_and_cut_at_300_chars():
    name = _register("t_raise2", lambda c: 1 / 0)
    with pytest.raises(RewardError) as e:
        compute_rewards([RewardSpec(name)], [ctx("A", sid="b-1"), ctx("A", sid="a-2"), ctx("A", sid="b-1")])
    assert str(e.value).endswith("(batch samples: a-2, b-1)")
    many = [ctx("A", sid=f"sample-{i:04d}") for i in range(100)]  # 100 ids of 11 chars: 1,298 chars listed
    with pytest.raises(RewardError) as e:
        compute_rewards([RewardSpec(name)], many)
    listed = str(e.value).split("(batch samples: ", 1)[1][:-1]
    assert listed == ", ".join(f"sample-{i:04d}" for i in range(100))[:300]
