"""R_mem's proposed scores (specs/algorithms.md §5): S_time, S_keep and ½[ΔS_time + ΔS_keep], on hand values."""
import pytest

from mmrl.rewards.stream_memory import compaction_reward, s_keep, s_time, token_f1


def test_token_f1():
    assert token_f1("red ball left", "the red ball") == pytest.approx(2 / 3)
    assert token_f1("", "x") == 0.0 and token_f1("a b", "c d") == 0.0
    assert token_f1("Red, BALL!", "red ball") == 1.0


def test_s_time_valid_fraction_times_coverage():
    teacher = [(2.0, 4.0)]
    # one valid line exactly on the evidence, one reversed range, one beyond the observed prefix (t = 10)
    lines = [("red ball", 2.0, 4.0), ("bad", 5.0, 3.0), ("future", 8.0, 12.0)]
    assert s_time(lines, 10.0, teacher) == pytest.approx(1 / 3 * 1.0)
    assert s_time([("a", 2.0, 6.0)], 10.0, teacher) == pytest.approx(0.5)  # IoU 2/4
    assert s_time([], 10.0, teacher) == 0.0
    # teacher evidence not yet observed does not count against the memory
    assert s_time([("a", 2.0, 4.0)], 10.0, teacher + [(11.0, 12.0)]) == pytest.approx(1.0)


def test_s_keep_recall_of_facts():
    lines = [("red ball at left", 0.0, 1.0), ("blue cube", 1.0, 2.0)]
    assert s_keep(lines, ["red ball at left", "blue cube"]) == 1.0
    assert s_keep(lines, ["green star"]) == 0.0
    assert s_keep(lines, []) == 1.0
    assert s_keep([], ["x"]) == 0.0


def test_compaction_reward_is_half_the_sum_of_deltas():
    teacher, facts = [(2.0, 4.0)], ["red ball"]
    pre = [("nothing", 0.0, 1.0)]
    post = [("red ball", 2.0, 4.0)]
    # S_time 0 -> 1, S_keep 0 -> 1
    assert compaction_reward(pre, post, 10.0, teacher, facts) == pytest.approx(1.0)
    assert compaction_reward(post, pre, 10.0, teacher, facts) == pytest.approx(-1.0)
    assert compaction_reward(post, post, 10.0, teacher, facts) == 0.0
