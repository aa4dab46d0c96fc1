"""Options found by comparing with verl's core_algos: dual-clip PPO and the GSPO log-ratio clamp, on hand values."""
import math

import pytest
import torch

from mmrl.algos.base import LossParams
from mmrl.algos.losses import gspo_loss, ppo_clip
from mmrl.algos.base import POLICY_LOSSES


def _two_tokens():
    # token 0: ratio 5, A = -1; token 1: ratio 5, A = +1  (one sequence each, one token each)
    logp = torch.log(torch.tensor([[5.0], [5.0]]))
    old = torch.zeros(2, 1)
    adv = torch.tensor([-1.0, 1.0])
    mask = torch.ones(2, 1)
    return logp, old, adv, mask


def test_dual_clip_caps_negative_advantage_tokens_only():
    logp, old, adv, mask = _two_tokens()
    # plain PPO: A<0 -> max(5, 1.2) = 5; A>0 -> max(-5, -1.2) = -1.2; token-mean = 1.9
    plain, _ = ppo_clip(logp, old, adv, mask, 0.2, 0.2, "token-mean")
    assert plain.item() == pytest.approx(1.9)
    # dual-clip c=3: A<0 -> min(5, 3) = 3; A>0 unchanged -> (3 - 1.2) / 2 = 0.9
    dual, m = ppo_clip(logp, old, adv, mask, 0.2, 0.2, "token-mean", dual_clip_c=3.0)
    assert dual.item() == pytest.approx(0.9)
    assert m["dual_clip_frac"] == pytest.approx(0.5)
    # through the registry and the config field
    via_cfg, _ = POLICY_LOSSES.get("ppo")(logp, old, adv, mask, LossParams(dual_clip_c=3.0))
    assert via_cfg.item() == pytest.approx(0.9)
    with pytest.raises(ValueError, match="dual_clip_c"):
        ppo_clip(logp, old, adv, mask, dual_clip_c=1.0)


def test_dual_clip_gradient_is_zero_on_capped_tokens():
    logp = torch.log(torch.tensor([[5.0]])).requires_grad_(True)
    loss, _ = ppo_clip(logp, torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1, 1), dual_clip_c=3.0)
    loss.backward()
    assert logp.grad.abs().item() == 0.0  # the constant -A*c term carries no gradient


def test_gspo_log_ratio_clamp():
    logp = torch.full((1, 3), 2.0)  # log ratio 2 on every token -> mean 2
    old = torch.zeros(1, 3)
    adv = torch.tensor([-1.0])  # A < 0: loss = max(s, clip(s)) = s
    mask = torch.ones(1, 3)
    wide, _ = gspo_loss(logp, old, adv, mask)
    assert wide.item() == pytest.approx(math.exp(2.0), rel=1e-6)
    clamped, _ = gspo_loss(logp, old, adv, mask, log_ratio_clamp=1.0)
    assert clamped.item() == pytest.approx(math.exp(1.0), rel=1e-6)
    via_cfg, _ = POLICY_LOSSES.get("gspo")(logp, old, adv, mask, LossParams(gspo_log_ratio_clamp=1.0))
    assert via_cfg.item() == pytest.approx(math.exp(1.0), rel=1e-6)


def test_loss_options_are_validated_in_the_config():
    from mmrl.config import load_config
    from mmrl.errors import ConfigError

    with pytest.raises(ConfigError, match="algorithm.dual_clip_c"):
        load_config(None, ["algorithm.dual_clip_c=0.5"])
    with pytest.raises(ConfigError, match="algorithm.gspo_log_ratio_clamp"):
        load_config(None, ["algorithm.gspo_log_ratio_clamp=0"])
    assert load_config(None, ["algorithm.dual_clip_c=3"]).algorithm.dual_clip_c == 3.0
