"""FastRL MDAP and ARS on the spec's vectors (specs/algorithms.md §4, tests 1-4) and the readings we chose."""
import pytest
import torch

from mmrl.algos.fastrl import (
    ARSState,
    advantage_partitions,
    ars_rollout_count,
    dp_pad,
    jaccard_distance,
    kept_set_sizes,
    mdap_keep,
    ngram_set,
    round_half_up,
)

T = torch.tensor
SPEC_RESPONSES = [T([1, 2, 3, 4]), T([1, 2, 3, 5]), T([7, 8]), T([9, 10])]


def test_spec1_kept_set_o1_o3_o4():
    adv = T([0.5, 0.5, -0.5, -0.5])  # A = [a, a, b, b]
    assert jaccard_distance(ngram_set(SPEC_RESPONSES[0]), ngram_set(SPEC_RESPONSES[1])) == pytest.approx(0.4)
    keep = mdap_keep(adv, T([0, 0, 0, 0]), SPEC_RESPONSES, tau=0.8)
    assert keep.tolist() == [True, False, True, True]


def test_spec1_boundary_similarity_exactly_0_2_is_kept():
    # J = 1/5 = 0.2 -> θ = 0.8, not < τ: kept ("similarity <= 0.2")
    r = [T([1, 2, 3]), T([3, 4, 5])]
    assert jaccard_distance(ngram_set(r[0]), ngram_set(r[1])) == pytest.approx(0.8)
    assert mdap_keep(T([1.0, 1.0]), T([0, 0]), r, tau=0.8).tolist() == [True, True]
    assert mdap_keep(T([1.0, 1.0]), T([0, 0]), r, tau=0.81).tolist() == [True, False]


def test_spec2_tau_one_keeps_one_per_distinct_advantage():
    g = torch.Generator().manual_seed(0)
    adv = T([0.5, 0.5, -0.5, -0.5, 1.2, 0.5, 0.3, 0.3])
    gids = T([0, 0, 0, 0, 0, 0, 1, 1])
    resp = [torch.randint(0, 1000, (6,), generator=g) for _ in range(8)]  # almost disjoint sets
    keep = mdap_keep(adv, gids, resp, tau=1.0)
    assert keep.tolist() == [True, False, True, False, True, False, True, False]
    assert keep.sum() == 4  # distinct (prompt, A): (0,.5) (0,-.5) (0,1.2) (1,.3)
    # with τ = 0.8 the disjoint responses are all kept
    assert mdap_keep(adv, gids, resp, tau=0.8).all()


def test_partitions_tolerance_and_groups():
    adv = T([0.1, 0.10005, 0.2, 0.1, 0.10009])
    gids = T([3, 3, 3, 7, 3])
    p = advantage_partitions(adv, gids, tol=1e-4)
    assert p[0] == p[1] == p[4]  # |ΔA| < 1e-4 (chained)
    assert len({int(p[0]), int(p[2]), int(p[3])}) == 3  # other value, other prompt


def test_traversal_by_abs_advantage_descending():
    # one partition within tolerance; |A| largest (index 2) is traversed first and kept; identical responses
    adv = T([0.30000, 0.30004, 0.30008])
    resp = [T([1, 2]), T([1, 2]), T([1, 2])]
    assert mdap_keep(adv, T([0, 0, 0]), resp, tol=1e-4).tolist() == [False, False, True]


def test_ngrams_bigram_and_empty():
    assert ngram_set(T([1, 2, 1, 2]), 2) == frozenset({(1, 2), (2, 1)})
    assert ngram_set(T([1]), 2) == frozenset()
    assert jaccard_distance(frozenset(), frozenset()) == 0.0
    # bigrams separate what unigrams call identical
    r = [T([1, 2, 3]), T([3, 2, 1])]
    assert mdap_keep(T([1.0, 1.0]), T([0, 0]), r, ngram=1).tolist() == [True, False]
    assert mdap_keep(T([1.0, 1.0]), T([0, 0]), r, ngram=2).tolist() == [True, True]


def test_eligible_rows_only():
    adv = T([0.5, 0.5, -0.5, -0.5])
    keep = mdap_keep(adv, T([0, 0, 0, 0]), SPEC_RESPONSES, eligible=T([False, True, True, False]))
    assert keep.tolist() == [False, True, True, False]


def test_bad_inputs():
    with pytest.raises(ValueError, match="responses"):
        mdap_keep(T([1.0, 2.0]), T([0, 0]), [T([1])])
    with pytest.raises(ValueError, match="n-gram"):
        mdap_keep(T([1.0]), T([0]), [T([1])], ngram=0)
    with pytest.raises(ValueError, match="world_size"):
        dp_pad(T([True]), T([1.0]), T([0]), 0)


def test_spec4_padding_divisible_round_robin_highest_abs_first():
    adv = T([1.5, 0.2, -0.9, 0.8, -1.1, 0.1, 2.0, 0.05])
    gids = T([0, 0, 0, 1, 1, 1, 2, 2])
    keep = T([True, False, False, True, False, False, True, False])  # |S| = 3
    for d in (1, 2, 3, 4, 5, 8):
        out = dp_pad(keep, adv, gids, d)
        assert int(out.sum()) % d == 0 and (out | ~keep).all() and (out >= keep).all()
    # d = 4: one more; the best unselected |A| is 1.1 (prompt 1)
    assert dp_pad(keep, adv, gids, 4).nonzero().flatten().tolist() == [0, 3, 4, 6]
    # d = 6: three more, one per prompt in order of their best |A|: 1.1 (p1), 0.9 (p0), 0.05 (p2)
    assert dp_pad(keep, adv, gids, 6).nonzero().flatten().tolist() == [0, 2, 3, 4, 6, 7]
    # d = 8: five more: round 1 = 4, 2, 7; round 2 = 1 (p0, |A| .2), 5 (p1, |A| .1)
    assert dp_pad(keep, adv, gids, 8).all()


def test_padding_stops_when_nothing_left():
    out = dp_pad(T([True, True, True]), T([1.0, 2.0, 3.0]), T([0, 0, 1]), 2)
    assert out.all()


def test_kept_set_sizes():
    keep = T([True, False, True, True, True, False])
    gids = T([0, 0, 0, 1, 1, 5])
    assert kept_set_sizes(keep, gids) == (1.0 + 1.0 / 3.0, 2.0)  # sizes 2, 2, 0 -> mean 4/3
    elig = T([True, True, True, True, True, False])  # prompt 5 dropped by the base: not counted
    assert kept_set_sizes(keep, gids, elig) == (2.0, 2.0)


def test_spec3_ars_rounding_and_bounds():
    assert round_half_up(6.5) == 7 and round(6.5) == 6
    assert ars_rollout_count(8, 6.0, 5.0) == 7
    assert ars_rollout_count(8, 6.0, 6.0) == 8 and ars_rollout_count(8, 6.0, 7.5) == 8
    assert ars_rollout_count(8, 6.0, 5.5) == 8  # 7.5 rounds half up (banker's would give 8 too; see next)
    assert ars_rollout_count(8, 6.0, 4.5) == 7  # 6.5 -> 7, banker's rounding would give 6
    assert ars_rollout_count(8, 6.0, 0.0) == 2  # G - 6 = 2
    assert ars_rollout_count(4, 6.0, 0.5) == 2  # -1.5 clamps to 2


def test_spec3_ars_state_epochs():
    ars = ARSState(g_max=8, total_steps=20)
    for _ in range(10):
        ars.record(4.0, 8.0)
    m = ars.end_epoch(step=10)
    assert ars.g_ref == 6.0 and ars.n == 8 and m["fastrl/ars_n"] == 8.0  # first epoch: reference only
    ars.record(2.0, 6.0)
    ars.record(4.0, 8.0)  # avg B_mean = 3, avg B_max = 7
    m = ars.end_epoch(step=10)  # α = 0.5 -> G'_t = 5 -> n = 7
    assert m["fastrl/ars_g_t"] == 5.0 and ars.n == 7
    ars.record(6.0, 6.0)
    ars.end_epoch(step=20)  # G'_t = 6 >= G'_ref -> n = G
    assert ars.n == 8
    saved = ars.state_dict()
    other = ARSState(g_max=8, total_steps=20)
    other.load_state_dict(saved)
    assert other.state_dict() == saved
    with pytest.raises(ValueError, match="rollout.n"):
        ARSState(g_max=4, total_steps=20).load_state_dict(saved)
    with pytest.raises(ValueError):
        ARSState(g_max=1, total_steps=20)


# advantages and prompt ids -> partitions (as "same partition" classes): equal A in two prompts never share one,
# however the prompts' rows interleave and whatever their ids
PARTITIONS = [
    ([1.0, 0.5, 1.0, 2.0], [0, 0, 1, 1], [[0], [1], [2], [3]]),  # prompt 0's top A = prompt 1's bottom A
    ([0.5, 0.5, 0.5, 0.5], [4, 9, 4, 9], [[0, 2], [1, 3]]),
    ([0.3, 0.3, 0.3, 0.3, 0.3, 0.3], [2, 1, 0, 2, 1, 0], [[0, 3], [1, 4], [2, 5]]),
    ([-1.0, 1.0, 1.00005, -1.0, 1.0], [7, 7, 7, 3, 3], [[0], [1, 2], [3], [4]]),
]


@pytest.mark.parametrize("adv,gids,classes", PARTITIONS, ids=[str(i) for i in range(len(PARTITIONS))])
def test_mdap_partitions_never_span_two_prompts(adv, gids, classes):
    p = advantage_partitions(T(adv), T(gids), tol=1e-4).tolist()
    got = sorted(sorted(i for i in range(len(p)) if p[i] == v) for v in set(p))
    assert got == sorted(classes)
    # the kept set with identical responses and tau = 1: one row per (prompt, advantage) partition
    keep = mdap_keep(T(adv), T(gids), [T([1, 2, 3])] * len(adv), tau=1.0)
    assert int(keep.sum()) == len(classes) and all(sum(bool(keep[i]) for i in c) == 1 for c in classes)


@pytest.mark.parametrize("adv,gids,tol,parts", [
    ([], [], 1e-4, []),
    ([0.7], [3], 1e-4, [0]),
    ([0.0, 0.5], [0, 0], 0.5, [0, 1]),  # a jump of exactly tol starts a new partition
    ([0.0, 0.25, 0.5], [0, 0, 0], 0.5, [0, 0, 0]),  # single linkage: 0.25 steps chain 0 to 0.5
    ([2.0, 1.0, 3.0], [1, 1, 0], 1e-4, [2, 1, 0]),  # dense ids from 0, in (group id, A) order
])
def test_partition_ids_by_hand(adv, gids, tol, parts):
    got = advantage_partitions(T(adv, dtype=torch.float32), T(gids, dtype=torch.long), tol=tol)
    assert got.dtype == torch.long and got.tolist() == parts


def test_partition_and_size_inputs_are_checked_by_name():
    with pytest.raises(ValueError, match=r"^advantages must be a 1-D tensor"):
        advantage_partitions(T([[1.0]]), T([0]))
    with pytest.raises(ValueError, match=r"^group_ids has 1 entries, expected 2$"):
        advantage_partitions(T([1.0, 2.0]), T([0]))
    with pytest.raises(ValueError, match=r"^group_ids has 3 entries, expected 2$"):
        kept_set_sizes(T([True, False]), T([0, 0, 1]))
    assert kept_set_sizes(T([True, False]), T([0, 1]), eligible=T([False, False])) == (0.0, 0.0)
    assert kept_set_sizes(T([True, True, False]), T([0, 0, 1])) == (1.0, 2.0)  # sizes 2 and 0 over both prompts
    assert kept_set_sizes(T([True, True, False]), T([0, 0, 1]), eligible=T([1, 1, 0])) == (2.0, 2.0)
