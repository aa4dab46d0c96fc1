"""Typed run configuration: YAML files plus dotted command-line overrides, validated by OmegaConf.

``load_config(["configs/demo.yaml"], ["rollout.n=8", "algorithm.name=bpo"])``; an unknown key or a value of
the wrong type raises ``ConfigError`` naming the key, before anything heavy starts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mmrl.algos.base import AlgoParams
from mmrl.errors import ConfigError


@dataclass
class LoraConfig:
    enabled: bool = False
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: List[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class ModelConfig:
    path: str = "tiny"  # "tiny" = the embedded tiny Qwen2.5-VL (built into the cache on first use), or a local checkpoint
    dtype: str = "float32"  # float32 | bfloat16 | float16
    device: str = "auto"  # auto (cuda if available, else cpu) | cpu | cuda | cuda:N
    freeze_vision: bool = False
    gradient_checkpointing: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class PromptConfig:
    system: Optional[str] = None
    instruction: str = "Answer with the option's letter from the given choices directly."
    abstain_text: str = "cannot be determined"


@dataclass
class DataConfig:
    train: str = ""
    test: str = ""
    media_root: Optional[str] = None
    nframes: Optional[int] = 4
    fps: Optional[float] = None
    min_pixels: int = 28 * 28
    max_pixels: int = 112 * 112
    max_prompt_tokens: int = 4096
    on_error: str = "raise"  # raise | skip (skipped samples are listed in <out_dir>/skipped.jsonl)
    max_skip_frac: float = 0.1  # with on_error=skip: stop when more than this share of data.train was skipped
    shuffle: bool = True
    prompt: PromptConfig = field(default_factory=PromptConfig)


@dataclass
class RolloutConfig:
    engine: str = "hf"  # hf | vllm
    n: int = 8  # responses per prompt (G); with a view set: packs x views = n
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 8
    max_batch_sequences: int = 256
    vllm_mode: str = "colocate"  # colocate | server
    vllm_gpu_memory_utilization: float = 0.4


@dataclass
class RewardConfig:
    name: str = "accuracy"
    weight: float = 1.0
    params: Dict[str, Any] = field(default_factory=dict)


@dataclass
class AlgorithmConfig(AlgoParams):
    name: str = "grpo"  # advantage estimator
    loss: str = "ppo"  # policy loss
    viewset: Optional[str] = None  # a view-set YAML (BPO, T-GRPO)
    packs: int = 2  # BPO packs per prompt
    dynamic_sampling: bool = False  # DAPO: keep only groups with mixed outcomes, refill by resampling
    max_resample_rounds: int = 3
    ppo_epochs: int = 1


@dataclass
class TrainConfig:
    steps: int = 100
    prompts_per_step: int = 8
    micro_batch: int = 32  # sequences per forward/backward; gradients accumulate over micro-batches
    lr: float = 1e-5
    weight_decay: float = 0.0
    warmup_steps: int = 0
    grad_clip: float = 1.0
    seed: int = 0
    num_threads: int = 0  # torch intra-op CPU threads; 0 = torch's default
    precision: str = "fp32"  # fp32 | bf16 | fp16 (autocast where the device supports it)
    backend: str = "torch"  # torch | deepspeed
    deepspeed_config: Optional[str] = None
    out_dir: str = "runs/default"
    save_every: int = 0  # 0 = only at the end
    keep_checkpoints: int = 2
    eval_every: int = 0
    eval_limit: int = 0  # 0 = whole test split


@dataclass
class SFTConfig:
    steps: int = 500
    batch_size: int = 32
    lr: float = 3e-4


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    rewards: List[RewardConfig] = field(default_factory=lambda: [RewardConfig("accuracy", 1.0), RewardConfig("format", 0.1)])
    train: TrainConfig = field(default_factory=TrainConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)


def _check(cfg: Config) -> None:
    choices = {
        "data.on_error": (cfg.data.on_error, ("raise", "skip")),
        "model.dtype": (cfg.model.dtype, ("float32", "bfloat16", "float16")),
        "train.precision": (cfg.train.precision, ("fp32", "bf16", "fp16")),
        "train.backend": (cfg.train.backend, ("torch", "deepspeed")),
        "rollout.engine": (cfg.rollout.engine, ("hf", "vllm")),
        "algorithm.std_scale": (cfg.algorithm.std_scale, ("group", "batch", "none")),
        "algorithm.loss_agg": (cfg.algorithm.loss_agg, ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")),
    }
    for key, (value, allowed) in choices.items():
        if value not in allowed:
            raise ConfigError(f"config key '{key}' = {value!r}; expected one of {', '.join(allowed)}")
    positive = {"rollout.n": cfg.rollout.n, "train.prompts_per_step": cfg.train.prompts_per_step,
                "train.micro_batch": cfg.train.micro_batch,
                "rollout.max_new_tokens": cfg.rollout.max_new_tokens}
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"config key '{key}' must be >= 1, got {value}")


def load_config(files: List[str] | None = None, overrides: List[str] | None = None) -> Config:
    schema = OmegaConf.structured(Config)
    try:
        merged = schema
        for f in files or []:
            try:
                loaded = OmegaConf.load(f)
            except FileNotFoundError:
                raise ConfigError(f"config file not found: {f}") from None
            try:
                merged = OmegaConf.merge(merged, loaded)
            except OmegaConfBaseException as e:
                raise ConfigError(f"{f}: {_explain(e)}") from None
        if overrides:
            bad = [o for o in overrides if "=" not in o]
            if bad:
                raise ConfigError(f"override {bad[0]!r} is not of the form key=value")
            for o in overrides:
                merged = _apply_override(merged, o)
        cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as e:
        raise ConfigError(_explain(e)) from None
    _check(cfg)
    return cfg


def _apply_override(cfg, override: str):
    """``key=value`` with a YAML value; ``key`` may index lists (``rewards.0.params.fmt_weight=0.0``)."""
    key, value = (x.strip() for x in override.split("=", 1))
    parsed = OmegaConf.from_dotlist([f"v={value}"])["v"]
    if OmegaConf.is_config(parsed):
        parsed = OmegaConf.to_container(parsed)
    try:
        OmegaConf.update(cfg, key, parsed, merge=True)
    except OmegaConfBaseException as e:
        raise ConfigError(f"override {override!r}: {_explain(e)}") from None
    except (TypeError, ValueError, KeyError, IndexError) as e:
        raise ConfigError(f"override {override!r}: config key '{key}': {e}") from None
    return cfg


def _explain(e: OmegaConfBaseException) -> str:
    key = getattr(e, "full_key", None)
    msg = str(e).splitlines()[0]
    return f"config key '{key}': {msg}" if key else msg


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
