"""Every recipe (configs/recipes/*.yaml and the three top-level GPU configs) runs one RL step on CPU with the tiny
model: the recipe's own algorithm, loss, rewards, view set and agent loop, with the GPU-only settings swapped for
their CPU counterparts (model.path=tiny, rollout.engine=hf, train.backend=torch, fp32) and tiny sizes."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted(p for p in (REPO / "configs" / "recipes").glob("[a-z]*.yaml") if not p.stem.startswith("vhop")) + [
    REPO / "configs" / f for f in ("grpo_qwen2_5_vl_3b.yaml", "bpo_qwen2_5_vl_7b.yaml", "lora_qwen2_5_vl_7b.yaml")]
CPU = ["model.path=tiny", "rollout.engine=hf", "train.backend=torch", "train.deepspeed_config=null",
       "model.dtype=float32", "train.precision=fp32", "model.gradient_checkpointing=false", "train.steps=1",
       "train.prompts_per_step=2", "train.micro_batch=16", "rollout.max_new_tokens=4", "data.max_pixels=3136",
       "data.max_prompt_tokens=4096", "train.save_every=0", "train.num_threads=1", "data.preflight=none"]


def _world(name, video_world, image_world, tmp_path_factory):
    if name.startswith("dspo"):
        from mmrl.data.synth_mood import make_mood_world

        out = tmp_path_factory.mktemp("mood")
        make_mood_world(str(out), 8, 2, seed=0, size=56)
        return out / "train.json", ["data.nframes=null"]
    if name.startswith("stream"):
        from mmrl.stream.dataset import make_stream_dataset

        out = tmp_path_factory.mktemp("stream")
        make_stream_dataset(str(out), 2, 1, seed=0, size=56, duration=16, fps=2.0)
        return out / "train.json", ["data.nframes=2", "rollout.max_new_tokens=16"]
    if name.startswith("seek"):
        from mmrl.data.synth_seek import make_seek_world

        out = tmp_path_factory.mktemp("seek")
        make_seek_world(str(out), 4, 1, seed=0, size=56, duration=8.0)
        return out / "train.json", ["data.nframes=4", "rollout.max_new_tokens=16"]
    return video_world / "train.json", ["data.nframes=4"]


@pytest.mark.slow
def test_every_recipe_runs_one_step_on_cpu(video_world, image_world, tiny_model_path, tmp_path, tmp_path_factory):
    from mmrl.config import load_config
    from mmrl.train.rl_trainer import RLTrainer
    from mmrl.validate import validate

    failed = []
    for path in RECIPES:
        name = path.stem
        data, extra = _world(name, video_world, image_world, tmp_path_factory)
        n = 4 if ("bpo" in name or "tgrpo" in name) else 2
        over = CPU + extra + [f"data.train={data}", f"train.out_dir={tmp_path / name}", f"rollout.n={n}",
                              f"model.path={tiny_model_path}"]
        try:
            cfg = load_config([str(path)], over)
            validate(cfg, "train")
            hist = RLTrainer(cfg, quiet=True).run()
            assert len(hist) == 1, hist
        except Exception as e:  # noqa: BLE001 - collect every recipe's failure, then fail once
            failed.append(f"{name}: {type(e).__name__}: {str(e)[:300]}")
    assert not failed, "\n".join(failed)


@pytest.mark.slow
def test_the_vhop_recipe_runs_one_step_per_stage_on_cpu(tiny_model_path, tmp_path):
    """The VHOP recipe over each stage's config, model.path=tiny, one step each, each stage from the previous one."""
    from mmrl.cli import main
    from mmrl.data.synth_vhop import make_vhop_world

    make_vhop_world(str(tmp_path / "w"), 4, 2, seed=0, size=56)
    prev = None
    for stage in ("sft", "imitate", "rl"):
        argv = ["vhop", stage, "--quiet", "--config", f"configs/vhop_{stage}.yaml", "--config",
                "configs/recipes/vhop_qwen2_5_vl_7b.yaml", f"model.path={tiny_model_path}", "model.max_pixels=3136",
                f"data.train={tmp_path / 'w' / 'queries_train.json'}", "data.eval=null", "train.steps=1",
                "train.batch_size=2", f"train.out_dir={tmp_path / stage}"]
        if prev:
            argv.append(f"train.init_from={tmp_path / prev}")
        if stage == "rl":
            argv += [f"rl.ref_from={tmp_path / 'sft'}", "rl.group_size=2"]
        assert main(argv) == 0, stage
        assert (tmp_path / stage / "final").is_dir(), stage
        prev = stage
