"""VHOP-Router policy math, oracle and reward on hand-made tensors and chains (specs/algorithms.md §6)."""
import math

import pytest
import torch

from mmrl.retrieval.router_chain import Episode, chain_reward, contains_chain, oracle_label
from mmrl.retrieval.router_policy import BACKTRACK, STOP, action_log_probs, action_logits, info_nce


def test_softmax_over_candidates_plus_special_actions():
    state = torch.tensor([[1.0, 0.0]])
    cands = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]])  # cos 1, 0, -1
    special = torch.tensor([[0.0, -1.0], [3.0, 3.0]])  # BACKTRACK cos 0, STOP cos 1/sqrt(2) (norm does not matter)
    T = 0.5
    logp = action_log_probs(action_logits(state, cands, special, T))
    cos = torch.tensor([1.0, 0.0, -1.0, 0.0, 1 / math.sqrt(2)])
    want = torch.log_softmax(cos / T, dim=0)
    assert logp.shape == (1, 5)  # K = 3 candidates, then BACKTRACK, STOP
    assert torch.allclose(logp[0], want, atol=1e-6)
    assert math.isclose(float(logp.exp().sum()), 1.0, rel_tol=1e-6)


def test_masked_actions_get_zero_probability_and_the_rest_renormalise():
    state = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    cands = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]])
    special = torch.tensor([[1.0, 1.0], [-1.0, 1.0]])
    cm = torch.tensor([[True, False], [True, True]])
    sm = torch.tensor([[False, True], [True, True]])  # no BACKTRACK on an empty chain
    p = action_log_probs(action_logits(state, cands, special, 0.05, cm, sm)).exp()
    assert p[0, 1] == 0 and p[0, 2] == 0 and p[0].sum().item() == pytest.approx(1.0)
    full = torch.softmax(torch.tensor([1.0, -1 / math.sqrt(2)]) / 0.05, dim=0)  # the two left: cand 0 and STOP
    assert torch.allclose(p[0, [0, 3]], full, atol=1e-6)
    assert (p[1] > 0).all()
    with pytest.raises(ValueError, match="at least one allowed action"):
        action_logits(state, cands, special, 0.05, torch.zeros(2, 2, dtype=torch.bool),
                      torch.zeros(2, 2, dtype=torch.bool))


def test_logits_are_differentiable_in_state_candidates_and_specials():
    torch.manual_seed(0)
    state, cands = torch.randn(2, 4, requires_grad=True), torch.randn(2, 3, 4, requires_grad=True)
    special = torch.randn(2, 4, requires_grad=True)
    action_log_probs(action_logits(state, cands, special, 0.05))[:, -1].sum().backward()
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in (state, cands, special))


def test_info_nce_matches_cross_entropy_and_keeps_the_label():
    state = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    keys = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    labels = torch.tensor([0, 1])
    T = 0.1
    cos = torch.tensor([[1.0, 0.0, 1 / math.sqrt(2)], [0.0, 1.0, 1 / math.sqrt(2)]])
    want = -(torch.log_softmax(cos / T, 1)[0, 0] + torch.log_softmax(cos / T, 1)[1, 1]) / 2
    assert info_nce(state, keys, labels, T).item() == pytest.approx(want.item(), rel=1e-5)
    mask = torch.tensor([[False, True, True], [True, True, False]])  # label 0 masked for row 0: kept anyway
    l0 = -torch.log_softmax(cos[0] / T, 0)[0]
    l1 = -torch.log_softmax(cos[1, :2] / T, 0)[1]
    assert info_nce(state, keys, labels, T, mask).item() == pytest.approx(((l0 + l1) / 2).item(), rel=1e-5)


def test_oracle_labels_next_hop_backtrack_at_dead_ends_and_stop_at_target():
    gold = ["a", "b", "c"]
    assert oracle_label([], gold) == "a"
    assert oracle_label(["a", "b"], gold) == "c"
    assert oracle_label(["a", "b", "c"], gold) == STOP
    assert oracle_label(["a", "x"], gold) == BACKTRACK  # a distractor / dead end off the gold path
    assert oracle_label(["x"], gold) == BACKTRACK
    assert oracle_label(["a", "b", "c", "d"], gold) == BACKTRACK  # past the target


def test_reward_is_one_only_when_the_chain_contains_the_target_chain_with_hop_penalty():
    gold = ["a", "b", "c"]
    assert chain_reward(["a", "b", "c"], 3, gold) == 1.0
    assert chain_reward(["a", "b"], 2, gold) == 0.0
    assert chain_reward(["a", "c", "b"], 3, gold) == 0.0  # order matters
    assert chain_reward(["a", "b", "x", "c"], 4, gold) == pytest.approx(-0.05)  # not contiguous
    assert chain_reward(["x", "a", "b", "c"], 4, gold) == pytest.approx(0.95)  # contains it, one extra hop
    assert chain_reward(["a", "b", "c"], 5, gold) == pytest.approx(0.9)  # a detour: out and BACKTRACK
    assert chain_reward([], 0, gold) == 0.0  # no bonus for giving up early
    assert contains_chain(["a", "b", "c"], ["b", "c"]) and not contains_chain(["b"], ["b", "c"])


def test_episode_backtrack_excludes_the_dead_end_and_counts_hops():
    ep = Episode("q", max_hops=4)
    assert not ep.can_backtrack()
    ep.apply("a")
    ep.apply("x")
    ep.apply(BACKTRACK)
    assert ep.chain == ["a"] and ep.excluded() == {"a", "x"} and ep.hops == 3
    with pytest.raises(ValueError, match="not offered"):
        ep.apply("x")
    ep.apply("b")
    assert ep.done and ep.chain == ["a", "b"]  # the 4th non-STOP action ends it
    ep2 = Episode("q", max_hops=6)
    ep2.apply(STOP)
    assert ep2.done and ep2.hops == 0
