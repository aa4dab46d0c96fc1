"""The router's three training stages by name and their typed YAML config (``mmrl vhop sft|imitate|rl``).

Each stage module (``train_sft``, ``train_imitate``, ``train_rl``) holds its config class and its loss; this table
names them, so that the stages import ``train_common`` and nothing imports back up.
"""
from __future__ import annotations

from typing import Sequence

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mmrl.errors import ConfigError
from mmrl.retrieval.train_data import check_spec

STAGES = ("sft", "imitate", "rl")


def _stage_config(stage: str):
    from mmrl.retrieval import train_imitate, train_rl, train_sft

    return {"sft": train_sft.SFTStageConfig, "imitate": train_imitate.ImitateStageConfig,
            "rl": train_rl.RLStageConfig}[stage]


def load_stage_config(stage: str, files: Sequence[str], overrides: Sequence[str] = ()):
    """The stage's typed config from YAML files plus dotted overrides; unknown keys or bad values are a
    ``ConfigError`` naming the key."""
    if stage not in STAGES:
        raise ConfigError(f"router stage {stage!r}: expected one of {', '.join(STAGES)}")
    schema = OmegaConf.structured(_stage_config(stage))
    try:
        layers = [OmegaConf.load(f) for f in files] + [OmegaConf.from_dotlist(list(overrides))]
        cfg = OmegaConf.to_object(OmegaConf.merge(schema, *layers))
    except FileNotFoundError as e:
        raise ConfigError(f"config file not found: {e.filename}") from None
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        raise ConfigError((f"config key '{key}': " if key else "") + str(e).splitlines()[0]) from None
    check_spec(cfg.data.train, "data.train")
    if cfg.data.eval is not None:
        check_spec(cfg.data.eval, "data.eval")
    for key, val in (("model.path", cfg.model.path), ("train.out_dir", cfg.train.out_dir)):
        if not val:
            raise ConfigError(f"config key '{key}' is required")
    if cfg.model.pooling not in ("mean", "last"):
        raise ConfigError(f"config key 'model.pooling' must be 'mean' or 'last', got {cfg.model.pooling!r}")
    for key, val in (("train.steps", cfg.train.steps), ("train.batch_size", cfg.train.batch_size),
                     ("train.save_every", cfg.train.save_every), ("train.index_refresh", cfg.train.index_refresh),
                     ("train.keep", cfg.train.keep), ("router.top_k", cfg.router.top_k),
                     ("router.max_hops", cfg.router.max_hops)):
        if val < 1:
            raise ConfigError(f"config key '{key}' must be >= 1, got {val}")
    if cfg.router.temperature <= 0 or cfg.train.lr <= 0:
        raise ConfigError("config keys 'router.temperature' and 'train.lr' must be > 0")
    cfg.check()
    return cfg
