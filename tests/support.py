"""Helpers shared by test modules (imported as ``support``; a conftest module name is not unique across folders)."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def small_overrides(world: Path, out_dir: Path, model: str) -> list:
    return [f"model.path={model}", f"data.train={world / 'train.json'}", f"data.test={world / 'test.json'}",
            f"train.out_dir={out_dir}", "data.max_pixels=3136", "rollout.n=4", "rollout.max_new_tokens=3",
            "train.prompts_per_step=3", "train.micro_batch=8", "train.lr=1e-3", "sft.batch_size=6", "train.seed=0"]
