"""fp32 master weights with bf16 compute on the torch backend (issue 26 item 6); pure-bf16 training refused."""
from __future__ import annotations

import pytest
import torch

from mmrl.config import load_config
from mmrl.errors import ConfigError
from mmrl.models.loading import load_model
from mmrl.train.gpu_checks import precision_check
from mmrl.train.precision import check_training_precision, keep_fp32_master
from support import small_overrides


def test_small_lr_steps_change_essentially_every_entry_only_with_master_weights(tiny_model_path):
    res = precision_check(lambda: load_model(tiny_model_path, "bfloat16", freeze_vision=True), steps=10, lr=1e-6)
    print(res)
    assert res["fp32_master_changed"] > 0.99  # fp32 master weights: every step lands
    assert res["pure_bf16_changed"] < 0.2  # what pure bf16 AdamW loses (the check can fail)


def test_master_weights_are_the_trainable_parameters_only(tiny_model_path):
    model = load_model(tiny_model_path, "bfloat16", freeze_vision=True)
    n = keep_fp32_master(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert n == len(trainable) and all(p.dtype is torch.float32 for p in trainable)
    assert all(p.dtype is torch.bfloat16 for p in model.parameters() if not p.requires_grad)


@pytest.mark.parametrize("overrides, key", [
    (["model.dtype=bfloat16"], "'train.precision' = 'fp32'"),
    (["model.dtype=float16", "train.precision=fp16"], "'model.dtype' = 'float16'"),
])
def test_pure_low_precision_training_is_refused_naming_the_key(overrides, key):
    cfg = load_config(None, overrides)
    with pytest.raises(ConfigError, match=key):
        check_training_precision(cfg)
    check_training_precision(load_config(None, ["model.dtype=bfloat16", "train.precision=bf16"]))
    check_training_precision(load_config(None, overrides + ["train.backend=deepspeed"]))  # DeepSpeed keeps masters


@pytest.mark.slow
def test_rl_step_with_bf16_weights_fp32_masters_and_a_reference(video_world, tiny_model_path, tmp_path):
    from mmrl.train.rl_trainer import RLTrainer

    cfg = load_config(None, small_overrides(video_world, tmp_path / "bf16w", tiny_model_path)
                      + ["model.dtype=bfloat16", "train.precision=bf16", "train.steps=1", "algorithm.kl_coef=0.04",
                         "model.freeze_vision=true"])
    tr = RLTrainer(cfg, quiet=True)
    trainable = [p for p in tr.model.parameters() if p.requires_grad]
    assert all(p.dtype is torch.float32 for p in trainable)
    before = [p.detach().clone() for p in trainable]
    m = tr.train_step()
    assert torch.isfinite(torch.tensor(m["grad_norm"])) and any(not torch.equal(a, p) for a, p in zip(before, trainable))
