"""Helpers shared by test modules (imported as ``support``; a conftest module name is not unique across folders)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"


def load_bench(name: str):
    """``bench/<name>.py`` as a module ``bench_<name>``, with ``bench/`` on ``sys.path`` for its sibling imports."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def small_overrides(world: Path, out_dir: Path, model: str) -> list:
    return [f"model.path={model}", f"data.train={world / 'train.json'}", f"data.test={world / 'test.json'}",
            f"train.out_dir={out_dir}", "data.max_pixels=3136", "rollout.n=4", "rollout.max_new_tokens=3",
            "train.prompts_per_step=3", "train.micro_batch=8", "train.lr=1e-3", "sft.batch_size=6", "train.seed=0"]


MEASURED = ("time/", "mem/", "tokens_per_s", "view_time_share")  # metrics that measure the machine, not the run


def without_measurements(rows: list) -> list:
    """Metric rows without wall-clock, memory and speed: what a resumed run must reproduce exactly."""
    return [{k: v for k, v in r.items() if not k.startswith(MEASURED)} for r in rows]


def mixed_requests(proc, n_of: Callable[[int], int], question_of: Callable[[int], str], meta_of=None) -> list:
    """Three rollout requests over seeded random media: two 4-frame 2f x 2f videos, then one 2f x 3f image, with f the
    processor's resize factor (56x56 and 56x84 for Qwen2/2.5-VL, 64x64 and 64x96 for Qwen3-VL)."""
    import torch

    from mmrl.data.schema import Media
    from mmrl.media.inputs import build_prompt_inputs, resize_factor
    from mmrl.media.prompts import build_messages
    from mmrl.rollout.base import RolloutRequest

    g = torch.Generator().manual_seed(0)
    f = resize_factor(proc)
    reqs = []
    for i in range(3):
        if i < 2:
            m = Media(str(i), frames=torch.randint(0, 255, (4, 3, 2 * f, 2 * f), dtype=torch.uint8, generator=g),
                      timestamps=[0, .5, 1, 1.5], fps=2.0)
        else:
            m = Media(str(i), image=torch.randint(0, 255, (3, 2 * f, 3 * f), dtype=torch.uint8, generator=g))
        pi = build_prompt_inputs(proc, build_messages(question_of(i), ["red", "green"], m), m)
        reqs.append(RolloutRequest(inputs=pi, n=n_of(i), sample_id=str(i), group_id=i,
                                   meta=meta_of(i) if meta_of else {}))
    return reqs


def trained_position_ids(model, inputs, resp=None):
    """M-RoPE position ids ``[3, 1, P + R]`` of ``inputs`` (a ``PromptInputs``) followed by response tokens ``resp``,
    by the numbering the models were trained with (``mmrl.models.mrope``, computed afresh): what a plain forward
    (``model(..., position_ids=...)``) needs to be the scorer's reference, whatever the installed transformers numbers."""
    import torch

    from mmrl.models.mrope import RopeRule, vision_positions

    ids = inputs.input_ids if resp is None else torch.cat([inputs.input_ids, resp.to(inputs.input_ids.dtype)])
    pos, _ = vision_positions(RopeRule.from_config(model.config), ids, inputs.vision)
    return pos[:, None]


def varying_reward_cfg(overrides):
    """A random-init model never answers a letter: reward the share of even token ids (varies within groups)."""
    from mmrl.config import RewardConfig, load_config
    from mmrl.rewards import REWARDS

    if "test_even_tokens" not in REWARDS:
        REWARDS.register("test_even_tokens")(
            lambda ctx: [float((c.trajectory.response_ids % 2 == 0).float().mean()) for c in ctx])
    cfg = load_config(None, overrides)
    cfg.rewards = [RewardConfig("test_even_tokens", 1.0)]
    return cfg


def policy_log_softmax(logits, model):
    """``log_softmax`` over the policy's support (``mmrl.models.policy_head``): the model's vision placeholder
    tokens at ``-inf`` first, as every sampler and the scorer do; the reference for plain-forward comparisons."""
    import torch

    from mmrl.models.policy_head import excluded_tokens

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    z = logits.float().clone()
    ids = excluded_tokens(base.config)
    if ids:
        z[..., ids] = float("-inf")
    return torch.log_softmax(z, -1)


RAN_ON_LOAD: list = []


def _record_load(tag):
    RAN_ON_LOAD.append(tag)


class RunsOnLoad:
    """Unpickled by a full ``torch.load``, it calls ``_record_load`` (appends to ``RAN_ON_LOAD``): the stand-in for
    code a handed-over checkpoint file would run."""

    def __reduce__(self):
        return _record_load, ("ran on load",)
