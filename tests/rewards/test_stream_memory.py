"""R_mem's proposed scores (specs/algorithms.md §5): S_time, S_keep and ½[ΔS_time + ΔS_keep], on hand values."""
import pytest

from mmrl.rewards.stream_memory import compaction_reward, line_valid, s_keep, s_time, token_f1


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


# the line under test, whether it is valid at observed = 10 s, and S_time of [the evidence line [2, 4], that line]
# against the teacher evidence [2, 4]: valid fraction x IoU of the valid lines' union with [2, 4]
LINES = [
    (2.0, 4.0, True, 1.0), (4.0, 4.0, True, 1.0), (0.0, 0.0, True, 1.0), (10.0, 10.0, True, 1.0),
    (8.0, 10.0, True, 0.5),  # valid, off the evidence: IoU 2 / 4
    (5.0, 3.0, False, 0.5),  # start > end: half the lines valid, IoU 1
    (10.0, 9.5, False, 0.5),
    (-1.0, 3.0, False, 0.5),  # before the stream
    (8.0, 12.0, False, 0.5), (10.5, 11.0, False, 0.5), (9.0, 10.001, False, 0.5),  # beyond the observed [0, 10]
]


@pytest.mark.parametrize("start,end,valid,score", LINES, ids=[f"{a}-{b}" for a, b, _, _ in LINES])
def test_a_memory_line_is_valid_only_ordered_and_inside_the_observed_prefix(start, end, valid, score):
    assert line_valid(("note", start, end), 10.0) is valid
    assert s_time([("ev", 2.0, 4.0), ("x", start, end)], 10.0, [(2.0, 4.0)]) == pytest.approx(score)


# the memory [2, 10] at observed time t against teacher intervals: seen are those starting before t, cut at t
@pytest.mark.parametrize("teacher,observed,want", [
    ([(2.0, 14.0)], 10.0, 1.0),  # the teacher's [2, 14] counts as [2, 10]
    ([(2.0, 30.0)], 12.0, 8 / 10),  # as [2, 12]
    ([(2.0, 14.0)], 6.0, 0.0),  # the line [2, 10] is itself beyond a 6 s prefix: invalid
    ([(2.0, 6.0), (10.0, 12.0)], 10.0, 0.5),  # [10, 12] starts at the prefix's end: not seen; IoU 4 / 8
    ([(0.0, 2.0), (9.0, 30.0)], 10.0, 0.1),  # seen [0, 2] and [9, 10]: intersection 1, union 10
])
def test_teacher_intervals_are_clipped_to_the_observed_prefix(teacher, observed, want):
    assert s_time([("a", 2.0, 10.0)], observed, teacher) == pytest.approx(want)
