"""Loss aggregation, k3 KL, PPO clip-higher, GSPO / GSPO-token (specs/algorithms.md notation and §7)."""
import math

import pytest
import torch

from mmrl.algos import (
    POLICY_LOSSES,
    LossParams,
    aggregate,
    drgrpo_advantages,
    gspo_loss,
    gspo_token_loss,
    k3_kl,
    kl_term,
    ppo_clip,
)

MASK = torch.tensor([[1, 0, 0], [1, 1, 1]], dtype=torch.bool)  # a 1-token and a 3-token sequence


def test_token_mean_weights_quarter_and_three_quarters():
    v = torch.ones(2, 3, requires_grad=True)
    aggregate(v, MASK, "token-mean").backward()
    assert v.grad.sum(-1).tolist() == [0.25, 0.75]
    v.grad = None
    aggregate(v, MASK, "seq-mean-token-mean").backward()
    assert v.grad.sum(-1).tolist() == [0.5, 0.5]


def test_aggregation_values():
    v = torch.tensor([[2.0, 99.0, float("nan")], [1.0, 1.0, 1.0]])  # padding may hold garbage
    assert aggregate(v, MASK, "token-mean").item() == pytest.approx(5 / 4)
    assert aggregate(v, MASK, "seq-mean-token-mean").item() == pytest.approx(3 / 2)
    assert aggregate(v, MASK, "seq-mean-token-sum").item() == pytest.approx(5 / 2)
    assert aggregate(v, MASK, "seq-mean-token-sum-norm", max_len=4).item() == pytest.approx(5 / 8)
    assert aggregate(v, MASK, "seq-mean-token-sum-norm").item() == pytest.approx(5 / 6)  # falls back to T
    assert aggregate(v, torch.zeros_like(MASK), "token-mean").item() == 0.0
    with pytest.raises(ValueError, match="known"):
        aggregate(v, MASK, "sum")


def test_empty_rows_do_not_count_in_seq_mean():
    v = torch.tensor([[2.0, 0.0], [5.0, 5.0], [1.0, 3.0]])
    m = torch.tensor([[1, 0], [0, 0], [1, 1]], dtype=torch.bool)
    assert aggregate(v, m, "seq-mean-token-mean").item() == pytest.approx(2.0)


def _pad(x, t, fill=0.0):
    return torch.cat([x, torch.full((x.shape[0], t - x.shape[1]), fill)], 1)


def test_drgrpo_advantage_and_padding_invariant_loss():
    adv = drgrpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.zeros(4, dtype=torch.long))
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, -0.5, 0.5]))
    torch.manual_seed(0)
    old = -torch.rand(4, 4)
    new = old + 0.05 * torch.randn(4, 4)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    losses, grads = [], []
    for t in (4, 6, 11):
        lp = _pad(new, t).requires_grad_(True)
        loss, _ = ppo_clip(lp, _pad(old, t), adv, _pad(mask.float(), t).bool(), agg="seq-mean-token-sum-norm", max_len=16)
        loss.backward()
        losses.append(loss.item())
        grads.append(lp.grad[:, :4].clone())
    assert losses[0] == pytest.approx(losses[1], abs=1e-7) == pytest.approx(losses[2], abs=1e-7)
    assert torch.allclose(grads[0], grads[2], atol=1e-8)
    # the normaliser is G*L_max: one token with l = -rho*A = -0.5 contributes -0.5/(4*16)
    one = torch.zeros(4, 4, dtype=torch.bool)
    one[0, 0] = True
    loss, _ = ppo_clip(torch.zeros(4, 4), torch.zeros(4, 4), adv, one, agg="seq-mean-token-sum-norm", max_len=16)
    assert loss.item() == pytest.approx(-0.5 / 64)


def test_k3_kl():
    lp = torch.tensor([-1.0, -2.0, 0.0, 0.0])
    assert torch.equal(k3_kl(lp, lp), torch.zeros(4))
    ref = torch.tensor([-1.0, -2.0, math.log(0.5), 1.0])
    kl = k3_kl(torch.zeros(4) + lp * torch.tensor([1.0, 1.0, 0.0, 0.0]), ref)
    assert kl[:2].tolist() == [0.0, 0.0]
    assert kl[2].item() == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)  # x = -ln2
    assert kl[3].item() == pytest.approx(math.e - 2, abs=1e-6)  # x = 1
    x = torch.linspace(-3, 3, 13)
    assert torch.all(k3_kl(torch.zeros(13), x)[x != 0] > 0)
    p = torch.zeros(2, 2, requires_grad=True)
    loss, m = kl_term(p, torch.zeros(2, 2), torch.ones(2, 2, dtype=torch.bool), coef=0.1)
    loss.backward()
    assert loss.item() == 0.0 and m["kl"] == 0.0 and torch.all(p.grad == 0)
    assert k3_kl(torch.zeros(1), torch.tensor([50.0]), clamp=True).item() == 10.0


def _ppo_one(ratio, adv, lo, hi):
    lp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    loss, m = ppo_clip(lp, torch.zeros(1, 1), torch.tensor([adv]), torch.ones(1, 1, dtype=torch.bool), lo, hi)
    loss.backward()
    return loss.item(), lp.grad.item(), m


def test_clip_higher_is_asymmetric():
    loss, g, m = _ppo_one(1.25, 1.0, 0.2, 0.28)  # inside 1 + 0.28: unclipped
    assert loss == pytest.approx(-1.25) and g == pytest.approx(-1.25) and m["clip_frac"] == 0.0
    loss, g, m = _ppo_one(1.25, 1.0, 0.2, 0.2)  # symmetric clip: clipped at 1.2, no gradient
    assert loss == pytest.approx(-1.2) and g == 0.0 and m["clip_frac"] == 1.0 and m["clip_frac_high"] == 1.0
    loss, g, m = _ppo_one(0.75, -1.0, 0.2, 0.28)  # lower side stays at 1 - 0.2
    assert loss == pytest.approx(0.8) and g == 0.0 and m["clip_frac_low"] == 1.0
    loss, g, m = _ppo_one(0.75, 1.0, 0.2, 0.28)  # A > 0, low ratio: pessimistic term is unclipped
    assert loss == pytest.approx(-0.75) and g != 0.0 and m["clip_frac"] == 0.0
    loss, g, m = _ppo_one(1.35, -1.0, 0.2, 0.28)  # A < 0, high ratio: unclipped
    assert loss == pytest.approx(1.35) and g == pytest.approx(1.35)


def test_ppo_metrics_and_token_advantages():
    lp = torch.log(torch.tensor([[1.0, 1.5], [1.0, 0.5]]))
    mask = torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)
    loss, m = ppo_clip(lp, torch.zeros(2, 2), torch.tensor([1.0, -1.0]), mask, 0.2, 0.28)
    assert m["clip_frac"] == pytest.approx(1 / 3)
    assert m["ratio_mean"] == pytest.approx((1 + 1.5 + 1) / 3)
    assert loss.item() == pytest.approx((-1 - 1.28 + 1) / 3)
    loss2, _ = ppo_clip(lp, torch.zeros(2, 2), torch.tensor([[1.0, 1.0], [-1.0, -1.0]]), mask, 0.2, 0.28)
    assert loss2.item() == loss.item()
    with pytest.raises(ValueError, match="advantages"):
        ppo_clip(lp, torch.zeros(2, 2), torch.ones(3), mask)


def test_gspo_sequence_ratio_and_gradients():
    old = torch.zeros(1, 2)
    mask = torch.ones(1, 2, dtype=torch.bool)
    lp = torch.tensor([[0.1, -0.3]], requires_grad=True)
    loss, m = gspo_loss(lp, old, torch.tensor([1.0]), mask)
    s = math.exp(-0.1)
    assert s == pytest.approx(0.9048, abs=1e-4)
    assert m["ratio_mean"] == pytest.approx(s, abs=1e-6) and m["clip_frac"] == 0.0
    assert loss.item() == pytest.approx(-s, abs=1e-6)  # A > 0: unclipped
    loss.backward()
    assert torch.allclose(lp.grad, torch.full((1, 2), -s / 2), atol=1e-6)  # has a gradient
    lp.grad = None
    loss, m = gspo_loss(lp, old, torch.tensor([-1.0]), mask)  # A < 0: clipped at 1 - 3e-4
    assert loss.item() == pytest.approx(1 - 3e-4, abs=1e-6) and m["clip_frac"] == 1.0
    loss.backward()
    assert torch.all(lp.grad == 0)


def test_gspo_token_matches_gspo_for_sequence_advantages():
    torch.manual_seed(1)
    old = -torch.rand(3, 5)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([0.7, -1.2, 0.3])
    base = old + 1e-4 * torch.randn(3, 5)
    base[0] += 1e-3  # A > 0 and s > 1 + 4e-4: clipped
    base[1] -= 1e-3  # A < 0 and s < 1 - 3e-4: clipped; row 2 stays inside the range
    out = []
    for fn in (gspo_loss, gspo_token_loss):
        lp = base.clone().requires_grad_(True)
        loss, m = fn(lp, old, adv, mask)
        loss.backward()
        out.append((loss.item(), lp.grad * mask, m["clip_frac"]))
    assert out[0][0] == pytest.approx(out[1][0], abs=1e-7)
    assert torch.allclose(out[0][1], out[1][1], atol=1e-7)
    assert out[0][2] == out[1][2] == pytest.approx(7 / 10)  # clipped rows hold 5 + 2 of 10 tokens
    assert torch.all(out[0][1][:2] == 0) and torch.all(out[0][1][2, :3] != 0)


def test_gspo_is_seq_mean():
    old = torch.zeros(2, 3)
    lp = torch.zeros(2, 3)
    loss, _ = gspo_loss(lp, old, torch.tensor([1.0, 3.0]), MASK)
    assert loss.item() == pytest.approx(-2.0)  # (-1 - 3) / 2, not length-weighted (-1 - 9) / 4


def test_registered_losses_read_cfg():
    lp = torch.tensor([[math.log(1.25)]])
    args = (lp, torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1, dtype=torch.bool))
    assert POLICY_LOSSES.get("ppo")(*args, LossParams(clip_high=0.28))[0].item() == pytest.approx(-1.25)
    assert POLICY_LOSSES.get("ppo")(*args, LossParams())[0].item() == pytest.approx(-1.2)
    assert POLICY_LOSSES.get("gspo")(*args, LossParams())[0].item() == pytest.approx(-(1 + 4e-4))
    assert POLICY_LOSSES.get("gspo_token")(*args, LossParams())[0].item() == pytest.approx(-(1 + 4e-4))


def test_unknown_policy_loss_lists_known_names():
    with pytest.raises(KeyError) as e:
        POLICY_LOSSES.get("ppo2")
    for name in ("gspo", "gspo_token", "ppo"):
        assert name in str(e.value)
