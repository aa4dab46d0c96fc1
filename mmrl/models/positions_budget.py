"""How many positions a checkpoint was built for, read before anything loads (``config.json`` as JSON; a tiny
model's from its spec), and the check that a prompt budget plus a response budget fits in them.

vLLM refuses to start when ``max_model_len`` exceeds the model's ``max_position_embeddings`` (the text config's,
for the VL configs that nest one); mmrl sets ``max_model_len = data.max_prompt_tokens + rollout.max_new_tokens``
(``mmrl.rollout.vllm_engine.engine_options``), so the pre-flight checks that sum against the checkpoint.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from mmrl.errors import ConfigError


def checkpoint_positions(path: str) -> Optional[int]:
    """``max_position_embeddings`` of a checkpoint folder or a tiny model's name; None where it cannot be read
    without loading (a base build not made yet, a folder without ``config.json``)."""
    from mmrl.models.tiny import TINY_NAMES, TinySpec

    if path in TINY_NAMES:
        return TinySpec(family=TINY_NAMES[path]).max_positions
    cfg_file = Path(path) / "config.json"
    if not cfg_file.is_file():
        return None
    cfg = json.loads(cfg_file.read_text())
    for section in (cfg.get("text_config") or {}, cfg):
        if section.get("max_position_embeddings"):
            return int(section["max_position_embeddings"])
    return None


def context_tokens(cfg) -> int:
    """A single-turn episode's tokens at most: ``data.max_prompt_tokens + rollout.max_new_tokens``."""
    return cfg.data.max_prompt_tokens + cfg.rollout.max_new_tokens


def check_context_fits(cfg) -> None:
    """``data.max_prompt_tokens + rollout.max_new_tokens`` within the checkpoint's positions (a vLLM engine's
    ``max_model_len``); a ``ConfigError`` naming both keys and the budget that fits, before any weight loads."""
    positions = checkpoint_positions(str(cfg.model.path))
    total = context_tokens(cfg)
    if positions is not None and total > positions:
        raise ConfigError(f"config keys 'data.max_prompt_tokens' ({cfg.data.max_prompt_tokens}) + "
                          f"'rollout.max_new_tokens' ({cfg.rollout.max_new_tokens}) = {total} exceed the "
                          f"{positions} positions of model.path={cfg.model.path} (vLLM's max_model_len); set "
                          f"data.max_prompt_tokens={positions - cfg.rollout.max_new_tokens} or less")
