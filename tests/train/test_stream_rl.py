"""Streaming RL end to end on the tiny model (issue 18): Stream-GDPO steps on stream blocks, and a resumed streaming
run (2 steps, interrupt, resume to 4) equal to 4 straight steps, metrics and weights."""
import json

import pytest
import torch

from mmrl.config import RewardConfig, load_config
from support import without_measurements

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def blocks_file(tmp_path_factory):
    from mmrl.data.annotations import save_samples
    from mmrl.data.synth_stream import make_stream_world
    from mmrl.stream.config import load_stream_config
    from mmrl.stream.ovo import block_samples

    out = tmp_path_factory.mktemp("stream_rl")
    info = make_stream_world(str(out), 1, 0, seed=5)
    samples = block_samples(json.load(open(info["ovo_train"])), info["video_root"], load_stream_config(),
                            json.load(open(info["oracle_train"])))
    save_samples(samples, str(out / "train_blocks.json"))
    return out / "train_blocks.json"


def _cfg(train, model, out, steps):
    """Stream-GDPO with the real stream components plus one that varies on a random-init model (its share of even
    token ids, as the fmt role), so that the compared steps really update the weights."""
    from mmrl.rewards import REWARDS

    if "test_even_stream" not in REWARDS:
        REWARDS.register("test_even_stream")(
            lambda ctx: [float((c.trajectory.response_ids[c.trajectory.loss_mask] % 2 == 0).float().mean()) for c in ctx])
    cfg = load_config(["configs/stream_gdpo.yaml"],
                      [f"model.path={model}", f"data.train={train}", f"train.out_dir={out}", f"train.steps={steps}",
                       "train.prompts_per_step=2", "rollout.n=2", "rollout.max_new_tokens=6", "train.lr=1e-3",
                       "train.save_every=2", "algorithm.params.components.fmt=test_even_stream"])
    cfg.rewards = [RewardConfig("stream", 1.0), RewardConfig("test_even_stream", 0.0)]
    return cfg


def _strip(rows):
    return without_measurements(rows)


def test_resumed_streaming_run_equals_a_straight_run(blocks_file, tiny_model_path, tmp_path):
    from mmrl.train.rl_trainer import RLTrainer

    straight = RLTrainer(_cfg(blocks_file, tiny_model_path, tmp_path / "a", 4), quiet=True).run()
    RLTrainer(_cfg(blocks_file, tiny_model_path, tmp_path / "b", 2), quiet=True).run()
    RLTrainer(_cfg(blocks_file, tiny_model_path, tmp_path / "b", 4), quiet=True).run(resume=True)
    rows = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and _strip(rows) == _strip(straight)
    assert any(r.get("adv/std", 0) > 0 for r in straight)  # real updates were compared
    assert all({"reward/stream_out", "reward/stream_fmt", "reward/stream_tool", "reward/stream_mem"} <= set(r)
               for r in straight)
    a = torch.load(tmp_path / "a" / "checkpoints" / "step_000004" / "model.pt")
    b = torch.load(tmp_path / "b" / "checkpoints" / "step_000004" / "model.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
