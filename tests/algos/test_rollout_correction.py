"""Rollout correction weights and mismatch metrics (specs/algorithms.md §8; verl 0.9.1 semantics)."""
import json
import math
from pathlib import Path

import pytest
import torch

from mmrl.algos.rollout_correction import MODES, correction_weights, mismatch_metrics, mode_threshold

FIXTURE = Path(__file__).parent / "fixtures" / "verl_rollout_corr.json"
LR = torch.tensor([[0.1, -0.2, 0.9, 0.0], [1.5, 0.3, -3.0, 0.7]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
# verl metric name -> ours
VERL_NAMES = {"rollout_is_mean": "weight_mean", "rollout_is_max": "weight_max", "rollout_is_min": "weight_min",
              "rollout_is_eff_sample_size": "ess", "rollout_is_ratio_fraction_high": "ratio_frac_high",
              "rollout_is_ratio_fraction_low": "ratio_frac_low", "rollout_is_oob_ratio": "masked_frac",
              "rollout_is_batch_norm_factor": "batch_norm_factor"}


def _threshold(spec):
    """verl's threshold spec ("low_high" string or a float) as ours (a pair or a float)."""
    if isinstance(spec, str):
        low, high = spec.split("_")
        return float(low), float(high)
    return float(spec)


@pytest.mark.parametrize("case", json.loads(FIXTURE.read_text())["cases"], ids=lambda c: f"{c['level']}-{c['threshold']}-bn{c['batch_normalize']}")
def test_equals_verl_recorded(case):
    w, m = correction_weights(torch.tensor(case["log_ratio"]), torch.tensor(case["mask"]), case["level"],
                              _threshold(case["threshold"]), case["batch_normalize"])
    torch.testing.assert_close(w, torch.tensor(case["weights"]), rtol=1e-5, atol=1e-6)
    for verl_key, ours in VERL_NAMES.items():
        if verl_key in case["metrics"]:
            assert m[ours] == pytest.approx(case["metrics"][verl_key], rel=1e-5, abs=1e-6), verl_key


def test_fixture_covers_both_levels_both_kinds_and_normalisation():
    cases = json.loads(FIXTURE.read_text())["cases"]
    kinds = {(c["level"], isinstance(c["threshold"], str), c["batch_normalize"]) for c in cases}
    assert kinds == {(lv, band, bn) for lv in ("token", "sequence") for band in (False, True) for bn in (False, True)}


# hand vectors of specs/algorithms.md §8
@pytest.mark.parametrize("level,thr,plain,normed", [
    ("token", 2.0, [[1.105171, 0.818731, 2.0, 0], [2.0, 1.349859, 0.049787, 2.0]],
     [[0.829748, 0.614693, 1.501574, 0], [1.501574, 1.013457, 0.037379, 1.501574]]),
    ("token", (0.5, 5.0), [[1.105171, 0.818731, 2.459603, 0], [4.481689, 1.349859, 0, 2.013753]],
     [[0.632621, 0.468657, 1.407923, 0], [2.565404, 0.772685, 0, 1.15271]]),
    ("sequence", 2.0, [[2, 2, 2, 0], [0.606531] * 4], [[1.534607] * 3 + [0], [0.465393] * 4]),
    ("sequence", (0.5, 5.0), [[2.225541] * 3 + [0], [0.606531] * 4], [[1.57167] * 3 + [0], [0.42833] * 4]),
])
def test_spec_hand_vectors(level, thr, plain, normed):
    w, _ = correction_weights(LR, MASK, level, thr)
    torch.testing.assert_close(w, torch.tensor(plain), rtol=0, atol=2e-6)
    wn, m = correction_weights(LR, MASK, level, thr, batch_normalize=True)
    torch.testing.assert_close(wn, torch.tensor(normed), rtol=0, atol=2e-6)
    assert m["batch_norm_factor"] == pytest.approx(float(w.sum() / MASK.sum()) if level == "token" else
                                                   float((w.sum(-1) / MASK.sum(-1)).mean()), rel=1e-6)


def test_token_truncation_metrics_by_hand():
    _, m = correction_weights(LR, MASK, "token", 2.0)
    # weights 1.105171, 0.818731, 2, 2, 1.349859, 0.049787, 2 on 7 trained tokens; ratios above 2: e^.9, e^1.5, e^.7
    assert m["weight_mean"] == pytest.approx((1.105171 + 0.818731 + 2 + 2 + 1.349859 + 0.049787 + 2) / 7, abs=1e-6)
    assert (m["weight_max"], m["weight_min"]) == (pytest.approx(2.0), pytest.approx(math.exp(-3.0)))
    assert m["clipped_frac"] == pytest.approx(3 / 7)
    assert m["ratio_frac_low"] == pytest.approx(1 / 7)  # e^-3 < 1/2
    ws = torch.tensor([1.105171, 0.818731, 2, 2, 1.349859, 0.049787, 2])
    assert m["ess"] == pytest.approx(float(ws.sum() ** 2 / (7 * (ws ** 2).sum())), rel=1e-5)  # Kish / n


def test_weights_detached_and_zero_on_masked_tokens():
    lr = LR.clone().requires_grad_(True)
    for level in ("token", "sequence"):
        for thr in (2.0, (0.5, 5.0), (0.0, 3.0)):
            w, _ = correction_weights(lr, MASK, level, thr)
            assert not w.requires_grad and w[0, 3] == 0.0


def test_trl_mask_modes_zero_above_the_cap_only():
    """TRL's ``*_mask`` zeroes ratios above its cap and keeps small ones: the band (0, cap]."""
    level, thr = mode_threshold("token_mask", 3.0)
    w, m = correction_weights(LR, MASK, level, thr)
    assert thr == (0.0, 3.0)
    torch.testing.assert_close(w[1], torch.tensor([0.0, math.exp(0.3), math.exp(-3.0), math.exp(0.7)]))
    assert m["masked_frac"] == pytest.approx(1 / 7)
    level, thr = mode_threshold("sequence_mask", 3.0)
    w, _ = correction_weights(LR, MASK, level, thr)  # Σ row 0 = 0.8 -> e^0.8 = 2.2255 kept; row 1 = -0.5 kept
    torch.testing.assert_close(w[:, 0], torch.tensor([math.exp(0.8), math.exp(-0.5)]))
    level, thr = mode_threshold("sequence_mask", 2.0)  # e^0.8 > 2: row 0 dropped whole
    assert correction_weights(LR, MASK, level, thr)[0][0].abs().sum() == 0.0
    assert {MODES[k] for k in MODES if k != "none"} == {(lv, kd) for lv in ("token", "sequence") for kd in ("truncate", "mask")}


@pytest.mark.parametrize("bad,match", [((2.0, 1.0), "low <= high"), (0.0, "> 0"), (True, "boolean"), ("2", "pair")])
def test_bad_threshold(bad, match):
    with pytest.raises(ValueError, match=match):
        correction_weights(LR, MASK, "token", bad)


def test_mismatch_metrics_by_hand():
    trainer = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -3.0, 0.0]])
    sampler = torch.tensor([[-1.1, -2.0, -0.5], [-0.1, -2.5, 9.0]])  # row 1 token 2 is masked: its junk must not count
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    m = mismatch_metrics(trainer, sampler, mask)
    d = torch.tensor([0.1, 0.0, 0.0, 0.0, -0.5], dtype=torch.float64)
    assert m["k3_kl"] == pytest.approx(float((d.exp() - d - 1).mean()), rel=1e-6)
    assert (m["max_abs_diff"], m["mean_abs_diff"], m["tokens"]) == (pytest.approx(0.5), pytest.approx(0.12), 5.0)
    assert m["ratio_p50"] == pytest.approx(1.0)
    assert m["seq_ratio_max"] == pytest.approx(math.exp(0.1)) and m["seq_ratio_min"] == pytest.approx(math.exp(-0.5))
    assert mismatch_metrics(trainer, trainer, mask)["k3_kl"] == 0.0
    assert mismatch_metrics(trainer, sampler, torch.zeros(2, 3)) == {"tokens": 0.0}


# ---- algorithm.rollout_correction: validated like every key, named in the dry-run plan ----------------------------

@pytest.mark.parametrize("override,match", [
    ("algorithm.rollout_correction.mode=seq_mask", "algorithm.rollout_correction.mode"),
    ("algorithm.rollout_correction.mode=off", "write mode: none"),  # YAML reads a bare off as false
    ("algorithm.rollout_correction.threshold=0", "algorithm.rollout_correction.threshold' must be > 0"),
    ("algorithm.rollout_correction.threshold_low=0.5", "does not use it"),  # a band on a truncation mode
    ("algorithm.rollout_correction.thresh=2", "Did you mean"),
])
def test_config_errors_name_the_key(override, match):
    from mmrl.config import load_config
    from mmrl.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        load_config(None, [override], registries=False)


def test_config_mask_band_and_default():
    from mmrl.config import load_config
    from mmrl.errors import ConfigError

    rc = load_config(None, [], registries=False).algorithm.rollout_correction
    assert (rc.mode, rc.threshold, rc.threshold_low, rc.batch_normalize) == ("token_truncate", 2.0, 0.0, False)
    rc = load_config(None, ["algorithm.rollout_correction.mode=token_mask", "algorithm.rollout_correction.threshold=5",
                            "algorithm.rollout_correction.threshold_low=0.5"], registries=False).algorithm.rollout_correction
    assert mode_threshold(rc.mode, rc.threshold, rc.threshold_low) == ("token", (0.5, 5.0))
    with pytest.raises(ConfigError, match="threshold_low' must be in"):
        load_config(None, ["algorithm.rollout_correction.mode=token_mask", "algorithm.rollout_correction.threshold_low=3"],
                    registries=False)


def test_a_loss_without_is_weights_needs_the_correction_off():
    from mmrl.algos.base import POLICY_LOSSES
    from mmrl.config import load_config
    from mmrl.errors import ConfigError
    from mmrl.validate import validate_registries

    name = "t_rc_plain"
    if name not in POLICY_LOSSES:
        POLICY_LOSSES.register(name)(lambda logp, old, adv, mask, cfg: (-(adv[:, None] * logp * mask).sum(), {}))
    with pytest.raises(ConfigError, match="algorithm.loss' = 't_rc_plain' takes no is_weights"):
        validate_registries(load_config(None, [f"algorithm.loss={name}"]))
    validate_registries(load_config(None, [f"algorithm.loss={name}", "algorithm.rollout_correction.mode=none"]))


def test_dry_run_plan_says_whether_the_correction_is_on():
    from mmrl.config import load_config
    from mmrl.train.plan import describe_plan

    on = describe_plan(load_config(None, []))
    assert "rollout correction: on, token_truncate (weights truncated at 2.0)" in "\n".join(on)
    off = describe_plan(load_config(None, ["algorithm.rollout_correction.mode=none"]))
    assert "rollout correction: off" in "\n".join(off)
    bn = describe_plan(load_config(None, ["algorithm.rollout_correction.mode=sequence_mask",
                                          "algorithm.rollout_correction.batch_normalize=true"]))
    text = "\n".join(bn)
    assert "old log-probs" in text and "sequence_mask (weights outside [0.0, 2.0] set to 0, batch-normalised)" in text
