"""End to end on the tiny model: SFT and GRPO steps change parameters, the loss falls on a fixed batch, and
resume (3 + 3 steps) reproduces 6 straight steps exactly."""
import json

import pytest
import torch

from support import small_overrides, varying_reward_cfg as _varying_reward_cfg, without_measurements
from mmrl.config import load_config
from mmrl.train.rl_trainer import RLTrainer
from mmrl.train.sft import run_sft

pytestmark = pytest.mark.slow


def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_sft_loss_falls_and_exports(video_world, tiny_model_path, tmp_path):
    cfg = load_config(None, small_overrides(video_world, tmp_path / "sft", tiny_model_path)
                      + ["sft.steps=12", "sft.lr=1e-3", "data.shuffle=false", "sft.batch_size=4", "train.micro_batch=4"])
    cfg.data.train = str(video_world / "train.json")
    hist = run_sft(cfg, quiet=True)
    losses = [h["sft/loss"] for h in hist]
    # 24 samples / batch 4 = 6 distinct batches, seen twice: the second pass is lower on every batch
    assert all(b < a for a, b in zip(losses[:6], losses[6:12])), losses
    assert (tmp_path / "sft" / "final" / "config.json").exists()


def test_grpo_steps_change_parameters_and_loss_falls_on_fixed_batch(video_world, tiny_model_path, tmp_path):
    cfg = load_config(None, small_overrides(video_world, tmp_path / "rl", tiny_model_path) + ["train.steps=2", "rollout.temperature=1.5"])
    tr = RLTrainer(cfg, quiet=True)
    before = _params(tr.model)
    tr.step = 0
    m = tr.train_step()
    assert "time/rollout" in m and "reward/accuracy" in m
    # a fixed batch with non-zero advantages: repeated updates on it lower the policy loss
    from mmrl.train.update import policy_update

    si, trajs = tr.rollout(tr.stream.next(3))
    adv = torch.linspace(-1, 1, len(trajs))
    inputs = [r.inputs for r in si.requests]
    old = [t.logprobs for t in trajs]  # fixed behaviour policy: the PPO surrogate can only fall by learning
    losses = [policy_update(tr.backend, trajs, inputs, adv, cfg.algorithm, cfg.train.micro_batch, old)["loss"]
              for _ in range(4)]
    assert losses[-1] < losses[0], losses
    after = _params(tr.model)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert any("visual" in k for k in changed) and any("language_model" in k for k in changed)


def _strip(rows):
    return without_measurements(rows)


def test_resume_matches_straight_run(video_world, tiny_model_path, tmp_path):
    base = small_overrides(video_world, tmp_path / "a", tiny_model_path)
    straight = RLTrainer(_varying_reward_cfg(base + ["train.steps=6"]), quiet=True).run()
    half = small_overrides(video_world, tmp_path / "b", tiny_model_path)
    RLTrainer(_varying_reward_cfg(half + ["train.steps=3"]), quiet=True).run()
    RLTrainer(_varying_reward_cfg(half + ["train.steps=6"]), quiet=True).run(resume=True)
    rows = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert _strip(rows) == _strip(straight)
    assert any(r.get("adv/std", 0) > 0 for r in straight)  # the comparison covered real updates
    a = torch.load(tmp_path / "a" / "checkpoints" / "step_000006" / "model.pt")
    b = torch.load(tmp_path / "b" / "checkpoints" / "step_000006" / "model.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("arm", ["bpo", "tgrpo"])
def test_view_algorithms_train_end_to_end(video_world, tiny_model_path, tmp_path, arm):
    from support import REPO

    cfg = load_config([str(REPO / "configs" / f"{arm}_demo.yaml")],
                      small_overrides(video_world, tmp_path / arm, tiny_model_path) + ["train.steps=2"]
                      + (["rollout.n=8"] if arm == "bpo" else []))  # BPO: 2 packs x 4 views
    cfg.algorithm.viewset = str(REPO / cfg.algorithm.viewset)
    hist = RLTrainer(cfg, quiet=True).run()
    assert len(hist) == 2
    assert "view_acc/original" in hist[-1]
    # the HF engine samples with the trainer's weights: every view's sampler log-probs agree with the trainer's
    assert hist[-1]["mismatch/max_abs_diff"] < 1e-4 and hist[-1]["rollout_corr/weight_mean"] == pytest.approx(1.0, abs=1e-4)
    if arm == "bpo":
        assert {"stability_rate", "sensitivity_rate", "abstain_f1", "answer_without_looking"} <= set(hist[-1])
    else:
        assert "view_acc/shuffled" in hist[-1]


def test_bf16_autocast_step_and_periodic_eval_and_report(video_world, tiny_model_path, tmp_path):
    cfg = load_config(None, small_overrides(video_world, tmp_path / "bf16", tiny_model_path)
                      + ["train.steps=2", "train.precision=bf16", "train.eval_every=2", "train.eval_limit=4"])
    hist = RLTrainer(cfg, quiet=True).run()
    assert "eval/accuracy" in hist[-1] and "eval/accuracy" not in hist[0]
    report = (tmp_path / "bf16" / "report.md").read_text()
    assert "reward/total" in report and (tmp_path / "bf16" / "final" / "model.safetensors").exists()


def test_fp16_on_cpu_is_a_config_error(video_world, tiny_model_path, tmp_path):
    from mmrl.errors import ConfigError

    cfg = load_config(None, small_overrides(video_world, tmp_path / "fp16", tiny_model_path) + ["train.precision=fp16"])
    with pytest.raises(ConfigError, match="train.precision"):
        RLTrainer(cfg, quiet=True)


@pytest.mark.parametrize("overrides", [
    ["algorithm.kl_coef=0.04", "algorithm.ppo_epochs=2"],
    ["algorithm.name=dapo", "algorithm.params.dynamic_sampling=true", "algorithm.params.max_resample_rounds=1", "algorithm.clip_high=0.28"],
    ["algorithm.name=gdpo"],
    ["algorithm.name=drgrpo", "algorithm.loss_agg=seq-mean-token-sum-norm", "algorithm.max_response_len=3"],
    ["algorithm.loss=gspo"],
])
def test_algorithm_variants_run_through_the_trainer(video_world, tiny_model_path, tmp_path, overrides):
    from mmrl.config import RewardConfig

    cfg = _varying_reward_cfg(small_overrides(video_world, tmp_path / "v", tiny_model_path) + ["train.steps=1"] + overrides)
    cfg.rewards = [RewardConfig("accuracy", 1.0), RewardConfig("test_even_tokens", 1.0)]
    m = RLTrainer(cfg, quiet=True).run()[-1]
    assert m["step"] == 1
    # π_old (the update's own log-probs, or the old pass with ppo_epochs 2) against the HF sampler: agree to round-off
    assert (m["mismatch/tokens"] > 0) == (m["train_frac"] > 0)  # measured on the rows the update trains
    if m["train_frac"] > 0:
        assert m["mismatch/max_abs_diff"] < 1e-4 and m["rollout_corr/clipped_frac"] == 0.0
    if cfg.algorithm.kl_coef > 0:
        assert 0.0 < m["kl"] < 1.0  # second PPO epoch: the policy has moved away from the reference
    if cfg.algorithm.params.get("dynamic_sampling"):
        assert m["resample_rounds"] == 1.0  # a random model gets no accuracy: no mixed group, one refill round
    else:
        assert abs(m["loss"]) > 0
