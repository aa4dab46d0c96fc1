"""Rollout correction in the update and the step (``mmrl/train/correction.py``): the weights multiply the per-token
loss with the sampler's log-probs as the behaviour policy, micro-batching does not change the gradient, decoupled
PPO keeps π_old and μ apart, masked (tool) tokens never count, and the mismatch is measured whatever the mode."""
import math

import pytest
import torch

from mmrl.algos.base import POLICY_LOSSES
from mmrl.algos.losses import AGG_MODES, gspo_loss, ppo_clip
from mmrl.loss_params import RolloutCorrection
from mmrl.media.inputs import pad_right
from mmrl.train.correction import Correction, batch_norm_factor, step_metrics
from tests.train.update_support import Bigram, algo, bigram_logprobs, make_backend, make_batch, perturbed

# six responses; row 2 has no trained token, row 4 a masked tool span whose sampler log-probs are junk (0)
MASKS = [[1, 1, 1], [1], [0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 1], [1, 1]]


def test_loss_takes_weights_per_token_before_aggregation():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    w = torch.tensor([[2.0, 0.5], [0.0, 9.0]])
    # ratio 1: per-token loss -A; token-mean of w * (-A) over 3 tokens = (-2 - 0.5 + 0) / 3
    loss, _ = ppo_clip(logp, logp.detach(), adv, mask, agg="token-mean", is_weights=w)
    assert float(loss.detach()) == pytest.approx(-2.5 / 3)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-2.0 / 3, -0.5 / 3], [0.0, 0.0]]))
    # GSPO: the sequence loss (-A at s = 1) broadcast, weighted, seq-mean-token-mean: (-(2+.5)/2 + 0) / 2
    g, _ = gspo_loss(logp.detach(), logp.detach(), adv, mask, is_weights=w)
    assert float(g) == pytest.approx(-1.25 / 2)
    assert float(POLICY_LOSSES.get("gspo_token")(logp.detach(), logp.detach(), adv, mask, algo(agg="seq-mean-token-mean",
                                                                                             loss="gspo_token"), w)[0]) \
        == pytest.approx(-1.25 / 2)


def _setup(seed=2, scale=0.4):
    model = Bigram()
    trajs, inputs, adv = make_batch(MASKS)
    behav = perturbed(model, trajs, inputs, scale, seed=seed)  # the sampler: off by ~scale nats per token
    for t, b in zip(trajs, behav):
        t.logprobs = torch.where(t.loss_mask, b, torch.zeros_like(b)).float()  # 0 under the mask, as multi-turn
    return model, trajs, inputs, adv


def _hand_weights(model, trajs, inputs, C, prox=None):
    """min(exp(log π_old − log μ), C) on trained tokens, 0 elsewhere, by hand."""
    with torch.no_grad():
        lp = prox or bigram_logprobs(model, [(inputs[t.inputs_key], t.response_ids) for t in trajs])
    rows = [torch.where(t.loss_mask, torch.exp(p.double() - t.logprobs.double()).clamp(max=C), torch.zeros(len(p), dtype=torch.float64))
            for t, p in zip(trajs, lp)]
    return pad_right(rows, 0.0)


def _reference(model, trajs, inputs, adv, cfg, w, old=None):
    model.zero_grad(set_to_none=True)
    logp = pad_right(bigram_logprobs(model, [(inputs[t.inputs_key], t.response_ids) for t in trajs]), 0.0)
    mask = pad_right([t.loss_mask.double() for t in trajs], 0.0)
    old_t = logp.detach() if old is None else pad_right(old, 0.0)
    loss, _ = POLICY_LOSSES.get(cfg.loss)(logp, old_t, adv, mask, cfg, w)
    loss.backward()
    g = model.w.grad.detach().clone()
    model.zero_grad(set_to_none=True)
    return g


def _update(monkeypatch, model, trajs, inputs, adv, cfg, micro_batch, corr, old=None):
    from mmrl.train import update

    be = make_backend(monkeypatch, model, micro_batch)
    update.policy_update(be, trajs, inputs, adv, cfg, micro_batch, old, None, correction=corr)
    return model.w.grad.detach().clone(), be


@pytest.mark.parametrize("micro_batch", [1, 4, 6])
@pytest.mark.parametrize("agg", [a for a in AGG_MODES if a != "seq-mean-token-sum-norm"])
def test_weights_reach_the_gradient_and_micro_batching_keeps_it(monkeypatch, agg, micro_batch):
    model, trajs, inputs, adv = _setup()
    cfg = algo(agg=agg)
    w = _hand_weights(model, trajs, inputs, 1.5)
    assert 0 < float((w == 1.5).sum()) and float(((w > 0) & (w < 0.9)).sum()) > 0  # truncated and down-weighted tokens
    want = _reference(model, trajs, inputs, adv, cfg, w)
    corr = Correction(RolloutCorrection(threshold=1.5), [t.logprobs for t in trajs])
    got, _ = _update(monkeypatch, model, trajs, inputs, adv, cfg, micro_batch, corr)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-7)
    assert not torch.allclose(got, _reference(model, trajs, inputs, adv, cfg, None), rtol=1e-3, atol=1e-5)
    # π_old recorded from the update itself, before the optimizer step (one pass, no scoring)
    for t, lp in zip(trajs, corr.trainer_logps()):
        assert torch.allclose(lp.double(), bigram_logprobs(model, [(inputs[t.inputs_key], t.response_ids)])[0], atol=1e-6)


def test_mode_none_changes_nothing_but_still_records_the_trainer_logprobs(monkeypatch):
    model, trajs, inputs, adv = _setup()
    cfg = algo(agg="token-mean")
    corr = Correction(RolloutCorrection(mode="none"), [t.logprobs for t in trajs])
    got, _ = _update(monkeypatch, model, trajs, inputs, adv, cfg, 2, corr)
    assert torch.allclose(got, _reference(model, trajs, inputs, adv, cfg, None), rtol=1e-6, atol=1e-9)
    assert len(corr.trainer_logps()) == len(trajs)


def test_decoupled_ppo_old_policy_and_behaviour_policy_kept_apart(monkeypatch):
    """ppo_epochs > 1: the ratio is π_θ / π_old (the trainer's pass before the update), the weight f(π_old / μ)."""
    model, trajs, inputs, adv = _setup()
    cfg = algo(agg="token-mean")
    prox = perturbed(model, trajs, inputs, 0.2, seed=7)  # π_old ≠ π_θ (an earlier epoch moved θ) and ≠ μ
    w = _hand_weights(model, trajs, inputs, 2.0, prox=prox)
    want = _reference(model, trajs, inputs, adv, cfg, w, old=prox)
    corr = Correction(RolloutCorrection(), [t.logprobs for t in trajs], prox)
    got, _ = _update(monkeypatch, model, trajs, inputs, adv, cfg, 3, corr, old=prox)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-7)
    # weights from the current θ instead of π_old would differ
    assert not torch.allclose(got, _reference(model, trajs, inputs, adv, cfg, _hand_weights(model, trajs, inputs, 2.0),
                                              old=prox), rtol=1e-3, atol=1e-5)


def test_batch_normalisation_divides_by_the_global_mean(monkeypatch):
    model, trajs, inputs, adv = _setup()
    rc = RolloutCorrection(mode="sequence_mask", threshold=3.0, batch_normalize=True)
    with torch.no_grad():
        prox = bigram_logprobs(model, [(inputs[t.inputs_key], t.response_ids) for t in trajs])
    be = make_backend(monkeypatch, model, 2)
    masks = [t.loss_mask for t in trajs]
    factor = batch_norm_factor(be, rc, prox, [t.logprobs for t in trajs], masks)
    # by hand: per sequence exp(Σ Δ) if <= 3 else 0, averaged over the 5 rows with a trained token
    seq = [math.exp(float((p.double() - t.logprobs.double())[t.loss_mask].sum())) for t, p in zip(trajs, prox) if t.loss_mask.any()]
    assert factor == pytest.approx(sum(s if s <= 3.0 else 0.0 for s in seq) / len(seq), rel=1e-6)


class _TwoRanks:
    """A backend whose gather returns this rank's part and a second rank's (the step's metrics are global)."""

    def __init__(self, other):
        self.other = other

    def gather(self, local):
        return [local, self.other]


def test_step_metrics_are_global_over_ranks_and_skip_masked_tokens():
    t = [torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-0.1])]
    b = [torch.tensor([-1.1, 0.0, -0.5]), torch.tensor([-0.6])]  # token 1 of row 0 is a tool token (μ = 0, junk)
    m = [torch.tensor([True, False, True]), torch.tensor([True])]
    other = {"t": [torch.tensor([-3.0])], "b": [torch.tensor([-3.0])], "m": [torch.tensor([1.0])]}
    corr = Correction(RolloutCorrection(), b, prox=t)
    out = step_metrics(_TwoRanks(other), corr, m)
    d = torch.tensor([0.1, 0.0, 0.5, 0.0], dtype=torch.float64)  # the trained tokens of both ranks
    assert out["mismatch/tokens"] == 4.0 and out["mismatch/max_abs_diff"] == pytest.approx(0.5)
    assert out["mismatch/k3_kl"] == pytest.approx(float((d.exp() - d - 1).mean()), rel=1e-6)
    assert out["rollout_corr/weight_max"] == pytest.approx(math.exp(0.5))
    assert "rollout_corr/batch_norm_factor" not in out
    off = step_metrics(_TwoRanks(other), Correction(RolloutCorrection(mode="none"), b, prox=t), m)
    assert "mismatch/k3_kl" in off and not any(k.startswith("rollout_corr/") for k in off)


def test_mismatch_reaches_metrics_jsonl_and_the_report(tmp_path):
    from mmrl.train.metrics import MetricsLogger
    from mmrl.train.report import write_report

    log = MetricsLogger(str(tmp_path), tensorboard=False)
    for step, d in ((1, 9.5367e-07), (2, 2.5e-3)):
        log.log(step, {"loss": 0.1, "mismatch/k3_kl": d * d / 2, "mismatch/max_abs_diff": d, "mismatch/ess": 0.99,
                       "rollout_corr/ess": 0.98})
    log.close()
    text = write_report(str(tmp_path)).read_text()
    assert "| mismatch/max_abs_diff | 9.54e-07 | 1 | 0.0025 | 2 |" in text  # a 1e-6 mismatch is not rounded to 0
    assert "![sampler vs trainer](mismatch.png)" in text and (tmp_path / "mismatch.png").stat().st_size > 1000
