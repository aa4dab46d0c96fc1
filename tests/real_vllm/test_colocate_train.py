"""RL steps end to end with ``rollout.engine=vllm`` on vLLM's CPU build: GRPO (and its resume: one step, a new
process-worth of trainer and engine resumed from the checkpoint, reproduces the straight two-step run's metrics),
BPO's view groups and PACG's re-scoring under an intervened view. Every step syncs the weights into the engine."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")

from mmrl.config import load_config  # noqa: E402
from mmrl.train.rl_trainer import RLTrainer  # noqa: E402

from support import REPO, without_measurements  # noqa: E402

pytestmark = pytest.mark.slow


def _cfg(world, out, extra=()):
    return load_config([str(REPO / "configs" / "demo.yaml")], [
        "model.path=tiny", f"data.train={world / 'train.json'}", f"data.test={world / 'test.json'}",
        "train.eval_every=0", f"train.out_dir={out}", "train.prompts_per_step=2", "rollout.n=4", "train.lr=1e-3",
        "rollout.engine=vllm", "data.max_prompt_tokens=1024", *extra])


def _rows(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_grpo_with_vllm_resumes_to_the_straight_run(video_world, tmp_path, mmrl_cache):
    straight = RLTrainer(_cfg(video_world, tmp_path / "a", ["train.steps=2"]), quiet=True).run()
    assert all(r["mismatch/max_abs_diff"] <= 1e-4 for r in straight)  # the sampler scores what the trainer scores
    RLTrainer(_cfg(video_world, tmp_path / "b", ["train.steps=1"]), quiet=True).run()
    RLTrainer(_cfg(video_world, tmp_path / "b", ["train.steps=2"]), quiet=True).run(resume=True)
    rows = _rows(tmp_path / "b")
    assert [r["step"] for r in rows] == [1, 2]
    assert without_measurements(rows) == without_measurements(_rows(tmp_path / "a"))


@pytest.mark.parametrize("extra", [
    ["--config", "configs/bpo_demo.yaml", "rollout.n=8"],
    ["algorithm.name=pacg", "algorithm.params={base: grpo}"],
], ids=["bpo", "pacg"])
def test_view_groups_and_rescoring_with_vllm(video_world, tmp_path, mmrl_cache, extra):
    files = [str(REPO / "configs" / "demo.yaml")] + ([str(REPO / extra[1])] if extra[0] == "--config" else [])
    overrides = [x for x in (extra[2:] if extra[0] == "--config" else extra)]
    cfg = load_config(files, [
        "model.path=tiny", f"data.train={video_world / 'train.json'}", f"data.test={video_world / 'test.json'}",
        "train.eval_every=0", f"train.out_dir={tmp_path / 'run'}", "train.prompts_per_step=2", "rollout.n=4",
        "rollout.engine=vllm", "data.max_prompt_tokens=1024", "train.steps=2", *overrides])
    rows = RLTrainer(cfg, quiet=True).run()
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["mismatch/max_abs_diff"] <= 1e-4 for r in rows)
