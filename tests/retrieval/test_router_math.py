"""The router policy's logits and InfoNCE against hand-computed cosines on unnormalised, non-square inputs, and the
chain episode's rules (specs/algorithms.md §6)."""
import math

import pytest
import torch
import torch.nn.functional as F

from mmrl.retrieval.router_chain import BACKTRACK, STOP, Episode, chain_reward, contains_chain
from mmrl.retrieval.router_policy import action_log_probs, action_logits, info_nce

# B = 2 states, K = 3 candidates, D = 3, none of unit length (so that a normalisation over the wrong axis shows)
STATE = torch.tensor([[3.0, 4.0, 0.0], [1.0, -2.0, 2.0]])
CANDS = torch.tensor([[[2.0, 0.0, 1.0], [0.0, 7.0, -1.0], [1.0, 1.0, 1.0]], [[4.0, 4.0, 0.5], [0.0, -2.0, 3.0], [1.0, 0.0, 0.0]]])
SPECIAL = torch.tensor([[-5.0, 1.0, 2.0], [0.5, 3.0, -1.0]])  # BACKTRACK, STOP


def _cos(a, b):
    a, b = a.tolist(), b.tolist()
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


COS = [[_cos(STATE[i], c) for c in list(CANDS[i]) + list(SPECIAL)] for i in range(2)]


@pytest.mark.parametrize("t", [1.0, 0.05, 0.5])
def test_logits_are_cosines_over_t(t):
    got = action_logits(STATE, CANDS, SPECIAL, t)
    assert got.shape == (2, 5) and torch.allclose(got, torch.tensor(COS) / t, atol=1e-5)
    lp = action_log_probs(got)
    assert torch.allclose(lp.exp().sum(dim=1), torch.ones(2), atol=1e-5)
    assert torch.allclose(lp, torch.log_softmax(torch.tensor(COS) / t, dim=1), atol=1e-5)


def test_masks_set_minus_infinity_and_need_one_allowed_action():
    cm = torch.tensor([[True, False, True], [False, False, False]])
    sm = torch.tensor([[False, True], [False, True]])
    got = action_logits(STATE, CANDS, SPECIAL, 0.5, cand_mask=cm, special_mask=sm)
    allowed = torch.cat([cm, sm], dim=1)
    assert torch.isneginf(got[~allowed]).all() and torch.allclose(got[allowed], (torch.tensor(COS) / 0.5)[allowed])
    assert action_log_probs(got)[1].exp().tolist() == pytest.approx([0, 0, 0, 0, 1.0])
    p0 = torch.softmax(torch.tensor([COS[0][0], COS[0][2], COS[0][4]]) / 0.5, 0)
    assert action_log_probs(got)[0].exp().tolist() == pytest.approx([float(p0[0]), 0, float(p0[1]), 0, float(p0[2])], abs=1e-5)
    with pytest.raises(ValueError, match=r"^every state needs at least one allowed action \(STOP is always allowed"):
        action_logits(STATE, CANDS, SPECIAL, 0.5, cand_mask=cm, special_mask=torch.tensor([[False, True], [False, False]]))


@pytest.mark.parametrize("args,message", [
    ((STATE, CANDS[:1], SPECIAL, 1.0), r"^state must be \[B, D\] and cands \[B, K, D\], got \(2, 3\) and \(1, 3, 3\)$"),
    ((STATE, CANDS[..., :1], SPECIAL, 1.0), r"^state must be \[B, D\] and cands \[B, K, D\], got \(2, 3\) and \(2, 3, 1\)$"),
    ((STATE[0], CANDS, SPECIAL, 1.0), r"^state must be \[B, D\]"),
    ((STATE, CANDS[0], SPECIAL, 1.0), r"^state must be \[B, D\]"),
    ((STATE, CANDS, SPECIAL[:1], 1.0), r"^special must be \[2, D=3\], got \(1, 3\)$"),
    ((STATE, CANDS, SPECIAL, 0.0), r"^temperature must be > 0, got 0.0$"),
])
def test_bad_shapes_and_temperature(args, message):
    with pytest.raises(ValueError, match=message):
        action_logits(*args)


def test_info_nce_by_hand():
    keys = torch.tensor([[2.0, 0.0, 1.0], [0.0, 9.0, -3.0], [-1.0, 0.5, 0.0]])
    labels = torch.tensor([0, 1])
    t = 0.5
    logits = [[_cos(STATE[i], k) / t for k in keys] for i in range(2)]
    nll = lambda row, lab, keep: -(row[lab] - math.log(sum(math.exp(row[j]) for j in keep)))  # noqa: E731
    want = (nll(logits[0], 0, [0, 1, 2]) + nll(logits[1], 1, [0, 1, 2])) / 2
    assert info_nce(STATE, keys, labels, t).item() == pytest.approx(want, abs=1e-5)
    # key_mask drops key 2 from state 0 and keys 0 and 1 from state 1; the label is always kept
    km = torch.tensor([[True, True, False], [False, False, True]])
    want = (nll(logits[0], 0, [0, 1]) + nll(logits[1], 1, [1, 2])) / 2
    assert info_nce(STATE, keys, labels, t, key_mask=km).item() == pytest.approx(want, abs=1e-5)
    with pytest.raises(ValueError, match=r"^labels must be \[B=2\], got \(3,\)$"):
        info_nce(STATE, keys, torch.tensor([0, 1, 2]), t)


def test_episode_rules():
    e = Episode("q", max_hops=5)
    assert not e.can_backtrack()
    with pytest.raises(ValueError, match=r"^query 'q': BACKTRACK on an empty chain$"):
        e.apply(BACKTRACK)
    e.apply("a")
    assert e.can_backtrack() and e.chain == ["a"]
    e.apply(BACKTRACK)
    assert e.excluded() == {"a"} and e.tried == {(): {"a"}}
    with pytest.raises(ValueError, match="is not offered"):
        e.apply("a")
    e.apply("a", force=True)  # the oracle may re-enter it: no longer excluded at the empty prefix
    assert e.chain == ["a"] and e.tried == {(): set()}
    e.apply("b", force=True)  # nothing backtracked at ("a",): force changes nothing there
    assert e.tried == {(): set()} and e.chain == ["a", "b"]
    e.apply(STOP)
    with pytest.raises(ValueError, match=r"^query 'q': the episode has ended$"):
        e.apply("c")


@pytest.mark.parametrize("chain,gold,inside", [
    (["a"], ["a"], True), (["x", "a"], ["a"], True), ([], ["a"], False), (["a", "b"], ["a", "b"], True),
    (["x", "a", "b"], ["a", "b"], True), (["a", "x", "b"], ["a", "b"], False), (["b", "a"], ["a", "b"], False),
    (["a"], ["a", "b"], False),
])
def test_contains_chain(chain, gold, inside):
    assert contains_chain(chain, gold) is inside
    assert chain_reward(chain, len(chain), gold, 0.1) == pytest.approx(float(inside) - 0.1 * max(0, len(chain) - len(gold)))


def test_an_empty_gold_chain_is_refused():
    with pytest.raises(ValueError, match="^the gold chain is empty$"):
        contains_chain(["a"], [])
