"""Typed run configuration: YAML files plus dotted command-line overrides, validated by OmegaConf.

``load_config(["configs/demo.yaml"], ["rollout.n=8", "algorithm.name=bpo"])``; an unknown key or a value of
the wrong type raises ``ConfigError`` naming the key, before anything heavy starts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mmrl.errors import ConfigError
from mmrl.loss_params import ROLLOUT_CORRECTION_MODES, LossParams  # noqa: F401  (the config's algorithm: keys)


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
    attn_implementation: str = "sdpa"  # sdpa | eager | flash_attention_2 (needs flash_attn; scores in the `full` layout)
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
    preflight: str = "all"  # media probe before the model loads: all | sample N | none (fields and files: always)
    prompt: PromptConfig = field(default_factory=PromptConfig)


@dataclass
class AsyncRolloutConfig:
    """``rollout.asynchronous`` (``async`` is a Python keyword): batches generated ahead by a rollout worker process
    while the trainer updates (``mmrl.train.async_rollout``, docs/async_rollouts.md)."""

    max_staleness: int = 0  # 0 = synchronous, in the trainer (today's run); k >= 1: step s's batch from the weights after max(0, s - k) updates
    timeout_s: float = 600.0  # a worker that sends no batch for this long (its model load included) ends the run with a checkpoint
    bucket_mb: int = 64  # weight transfer bucket size (MiB)


@dataclass
class RolloutConfig:
    engine: str = "hf"  # hf | vllm
    n: int = 8  # responses per prompt (G); how views share them is the algorithm's plan (mmrl train --dry-run)
    seed_per_group: Optional[bool] = None  # sample each prompt group under its own seed (rank-count invariant); None = on with deepspeed
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 8
    max_batch_sequences: int = 256
    vllm_mode: str = "colocate"  # colocate | server
    vllm_gpu_memory_utilization: float = 0.4
    servers: List[str] = field(default_factory=list)  # vllm_mode=server: rollout server URLs; empty: http://127.0.0.1:8000
    server_timeout_s: float = 600.0  # vllm_mode=server: longest wait on one server request or weight sync
    weight_transfer: str = "collective"  # vllm_mode=server: collective (a gloo/NCCL group) | http (a safetensors blob)
    agent_loop: str = "single_turn"  # a registered rollout loop (mmrl.rollout.agent_loop): single_turn | multi_turn | stream
    tools: Optional[str] = None  # multi_turn: a tool suite YAML (tools/video_seek.yaml); stream: tools/streaming.yaml
    asynchronous: AsyncRolloutConfig = field(default_factory=AsyncRolloutConfig)


@dataclass
class RewardConfig:
    name: str = "accuracy"
    weight: float = 1.0
    params: Dict[str, Any] = field(default_factory=dict)


@dataclass
class AlgorithmConfig(LossParams):
    """``algorithm:``: a registered spec (``name``) with its own typed ``params`` (``mmrl.algos.spec``), the policy
    loss and its constants (``LossParams``), PPO epochs and an optional view set."""

    name: str = "grpo"  # a registered algorithm spec (mmrl.algos.spec.ALGORITHMS) or module:Class
    loss: str = "ppo"  # policy loss: ppo | gspo | gspo_token | module:function
    params: Dict[str, Any] = field(default_factory=dict)  # the spec's own parameters, validated by its Params
    viewset: Optional[str] = None  # a view-set YAML (BPO, T-GRPO)
    ppo_epochs: int = 1


@dataclass
class TrainConfig:
    steps: int = 100
    prompts_per_step: int = 8
    micro_batch: int = 32  # sequences per forward/backward; gradients accumulate over micro-batches
    # tokens of a micro-batch that go through the LM head at a time (mmrl.models.prefill.token_logprobs): one chunk's
    # [tokens, vocabulary] logits are alive at a time (2.5 GB per fp32 copy at Qwen's 151,936 words), for one extra head
    # forward per chunk in backward; 0 = all at once. Off under DeepSpeed ZeRO-3 (ranks must make equal head calls)
    logprob_chunk_tokens: int = 4096
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
    wandb_project: Optional[str] = None  # also log the metrics to this Weights & Biases project (pip install wandb)
    # output that is not a terminal (SLURM, nohup): one progress line per step, at most one every this many seconds
    # (the first and last step always); a terminal gets the progress bar (mmrl.train.progress). 0 = every step
    log_every_s: float = 30.0
    # TensorBoard/W&B: a table of sample completions and a contact sheet of one sample's views at step 1 and every
    # this many steps (histograms and scalars: every step); 0 = never (mmrl.train.step_details)
    log_samples_every: int = 10


@dataclass
class SFTConfig:
    steps: int = 500
    batch_size: int = 32
    lr: float = 3e-4
    turns: Optional[str] = None  # multi-turn tool scripts (JSONL {id, turns}: teacher.jsonl, mmrl rectify's set); needs rollout.tools


@dataclass
class RectifyConfig:
    """``mmrl rectify``'s pipeline: the rectify-SFT setting chosen by accuracy on a validation split
    (``mmrl.tools.rectify_select``); every list empty = ``sft.lr`` and ``sft.steps`` on the rectified set alone."""
    val: Optional[str] = None  # validation annotations: clips no stage trains on, never data.test
    lr: List[float] = field(default_factory=list)  # candidate sft.lr values
    steps: List[int] = field(default_factory=list)  # candidate sft.steps values
    teacher: Optional[str] = None  # teacher scripts (JSONL {id, turns}) mixed into the rectified set
    teacher_mix: List[float] = field(default_factory=list)  # candidate teacher scripts per rectified sample
    control: bool = False  # also run the control (b'): the same SFT stage on rectify.teacher's scripts, no rectification


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    rewards: List[RewardConfig] = field(default_factory=lambda: [RewardConfig("accuracy", 1.0), RewardConfig("format", 0.1)])
    train: TrainConfig = field(default_factory=TrainConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    rectify: RectifyConfig = field(default_factory=RectifyConfig)


def _check(cfg: Config) -> None:
    choices = {
        "data.on_error": (cfg.data.on_error, ("raise", "skip")),
        "model.dtype": (cfg.model.dtype, ("float32", "bfloat16", "float16")),
        "train.precision": (cfg.train.precision, ("fp32", "bf16", "fp16")),
        "train.backend": (cfg.train.backend, ("torch", "deepspeed")),
        "rollout.engine": (cfg.rollout.engine, ("hf", "vllm")),
        "algorithm.loss_agg": (cfg.algorithm.loss_agg, ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")),
    }
    for key, (value, allowed) in choices.items():
        if value not in allowed:
            raise ConfigError(f"config key '{key}' = {value!r}; expected one of {', '.join(allowed)}")
    parse_preflight(cfg.data.preflight)
    _check_rectify(cfg.rectify, cfg.data.test)
    _check_attention(cfg)
    if cfg.rollout.top_p < 1.0:
        raise ConfigError(f"config key 'rollout.top_p' = {cfg.rollout.top_p}: the rollout engine "
                          f"(rollout.engine = {cfg.rollout.engine!r}) would sample from the top-p truncated distribution "
                          "while the importance ratio and the KL use the scorer's full-softmax log-probs; use 1.0")
    positive = {"rollout.n": cfg.rollout.n, "train.prompts_per_step": cfg.train.prompts_per_step,
                "train.micro_batch": cfg.train.micro_batch,
                "rollout.max_new_tokens": cfg.rollout.max_new_tokens}
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"config key '{key}' must be >= 1, got {value}")
    if cfg.train.log_samples_every < 0:
        raise ConfigError(f"config key 'train.log_samples_every' must be >= 0 (0 = never), got "
                          f"{cfg.train.log_samples_every}")
    if not cfg.train.log_every_s >= 0:
        raise ConfigError(f"config key 'train.log_every_s' must be >= 0 (seconds; 0 = a line every step), got "
                          f"{cfg.train.log_every_s}")
    _check_async(cfg)
    if cfg.algorithm.dual_clip_c is not None and cfg.algorithm.dual_clip_c <= 1.0:
        raise ConfigError(f"config key 'algorithm.dual_clip_c' must be > 1 (or null), got {cfg.algorithm.dual_clip_c}")
    if cfg.algorithm.gspo_log_ratio_clamp <= 0:
        raise ConfigError(f"config key 'algorithm.gspo_log_ratio_clamp' must be > 0, got {cfg.algorithm.gspo_log_ratio_clamp}")
    _check_rollout_correction(cfg.algorithm.rollout_correction)


def _check_rollout_correction(rc) -> None:
    """``algorithm.rollout_correction``: a known mode, C > 0, and a band 0 <= low <= C only where it is used."""
    key = "algorithm.rollout_correction"
    if rc.mode in ("False", "True"):  # YAML reads a bare off / no / false (on / yes / true) as a boolean
        raise ConfigError(f"config key '{key}.mode' = {rc.mode}: YAML read a boolean; write mode: none to turn the "
                          f"correction off, or one of {', '.join(m for m in ROLLOUT_CORRECTION_MODES if m != 'none')}")
    if rc.mode not in ROLLOUT_CORRECTION_MODES:
        raise ConfigError(f"config key '{key}.mode' = {rc.mode!r}; expected one of {', '.join(ROLLOUT_CORRECTION_MODES)}")
    if not rc.threshold > 0:
        raise ConfigError(f"config key '{key}.threshold' must be > 0, got {rc.threshold}")
    if not 0.0 <= rc.threshold_low <= rc.threshold:
        raise ConfigError(f"config key '{key}.threshold_low' must be in [0, threshold = {rc.threshold}], "
                          f"got {rc.threshold_low}")
    if rc.threshold_low > 0 and not rc.mode.endswith("_mask"):
        raise ConfigError(f"config key '{key}.threshold_low' = {rc.threshold_low} is the lower end of a mask mode's "
                          f"band; mode {rc.mode!r} does not use it (use token_mask or sequence_mask, or drop the key)")


def complete_config(cfg: Config) -> Config:
    """The part of ``load_config`` that needs the registries (which import torch): what the agent loop's declared
    capabilities need of the config, the values that follow from another key (Dr.GRPO's L_max, FastRL's horizon from
    ``train.steps``), then the spec's own params. ``mmrl train`` runs it after the data pre-flight, so a bad input
    costs no torch import (``load_config(..., registries=False)``)."""
    from mmrl.algos.spec import build_algorithm, derive_params

    caps = _loop_capabilities(cfg)
    _check_agent_loop(cfg, caps)
    _derive(cfg, caps)
    derive_params(cfg.algorithm, cfg)
    spec = build_algorithm(cfg.algorithm, cfg)  # unknown algorithm names and params are ConfigErrors naming the key
    if caps is not None and caps.multi_turn and spec.needs().rescore:
        raise ConfigError(f"config key 'algorithm.name' = {cfg.algorithm.name!r} re-scores responses under an "
                          f"intervened view, which multi-turn trajectories (rollout.agent_loop=multi_turn) do not "
                          f"support yet")
    return cfg


def parse_preflight(value: str) -> tuple:
    """``data.preflight``: ``all`` -> ("all", 0); ``sample N`` -> ("sample", N); ``none`` -> ("none", 0)."""
    v = str(value).strip()
    if v in ("all", "none"):
        return v, 0
    parts = v.split()
    if len(parts) == 2 and parts[0] == "sample" and parts[1].isdigit() and int(parts[1]) >= 1:
        return "sample", int(parts[1])
    raise ConfigError(f"config key 'data.preflight' = {value!r}; expected all, none or 'sample N' (N >= 1)")


def _loop_capabilities(cfg: Config):
    """The ``LoopCapabilities`` of ``rollout.agent_loop`` (None for a name no registry knows: the run plan's
    ``check_rollout_config`` names the known ones)."""
    from mmrl.rollout.agent_loop import loop_class

    try:
        return loop_class(cfg.rollout.agent_loop).capabilities
    except KeyError:
        return None


def _check_agent_loop(cfg: Config, caps) -> None:
    """What ``rollout.agent_loop`` (its declared ``capabilities``) and ``rollout.tools`` need of the rest of the
    config. The suite file is loaded by ``mmrl.rollout.agent_loop_tools.check_rollout_config``, which the trainer
    calls before it loads the model."""
    r = cfg.rollout
    if caps is None:
        return
    if caps.tools == "suite" and not r.tools:
        raise ConfigError("config key 'rollout.tools' must name a tool suite (e.g. tools/video_seek.yaml) when "
                          f"rollout.agent_loop is {r.agent_loop!r}")
    if cfg.sft.turns and (not r.tools or not caps.sft_turns):
        raise ConfigError("config key 'sft.turns' needs rollout.tools (the suite the scripts' calls run in) and "
                          "rollout.agent_loop=multi_turn")
    if r.tools and caps.tools == "none":
        raise ConfigError(f"config key 'rollout.tools' = {r.tools!r} needs rollout.agent_loop=multi_turn or stream")
    if cfg.train.backend not in caps.backends or (r.seed_per_group and not caps.seed_per_group):
        raise ConfigError(f"config key 'rollout.agent_loop' = {r.agent_loop!r} runs with train.backend="
                          f"{' or '.join(caps.backends)} and rollout.seed_per_group off only (so far)")
    if r.engine not in caps.engines:
        raise ConfigError(f"config key 'rollout.engine' must be {' or '.join(map(repr, caps.engines))} with "
                          f"rollout.agent_loop={r.agent_loop} (so far)")


def _check_async(cfg: Config) -> None:
    """``rollout.asynchronous``: a staleness >= 0, a positive timeout and bucket; a worker of one trainer process."""
    a = cfg.rollout.asynchronous
    if a.max_staleness < 0 or a.timeout_s <= 0 or a.bucket_mb < 1:
        bad = ("max_staleness", a.max_staleness, ">= 0") if a.max_staleness < 0 else \
            ("timeout_s", a.timeout_s, "> 0") if a.timeout_s <= 0 else ("bucket_mb", a.bucket_mb, ">= 1")
        raise ConfigError(f"config key 'rollout.asynchronous.{bad[0]}' must be {bad[2]}, got {bad[1]}")
    if a.max_staleness > 0 and cfg.train.backend != "torch":
        raise ConfigError(f"config key 'rollout.asynchronous.max_staleness' = {a.max_staleness} needs "
                          f"train.backend=torch (one trainer process; got {cfg.train.backend!r}); use 0")


def _check_attention(cfg: Config) -> None:
    """``model.attn_implementation``: a known kernel; FlashAttention-2 only where ``flash_attn`` is installed and with
    the vLLM sampler (the HF engine decodes shared prompts with custom 4-D masks, which FlashAttention-2 ignores)."""
    import importlib.util

    impl = cfg.model.attn_implementation
    if impl not in ("sdpa", "eager", "flash_attention_2"):
        raise ConfigError(f"config key 'model.attn_implementation' = {impl!r}; expected one of sdpa, eager, "
                          "flash_attention_2")
    if impl == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        raise ConfigError("config key 'model.attn_implementation' = 'flash_attention_2' needs the flash_attn package "
                          "(pip install flash-attn, CUDA only); use sdpa")
    if impl == "flash_attention_2" and cfg.rollout.engine != "vllm":
        raise ConfigError("config key 'model.attn_implementation' = 'flash_attention_2' needs rollout.engine=vllm: the "
                          "HF engine's shared-prompt decoding uses custom 4-D attention masks; use sdpa")


def _check_rectify(r: RectifyConfig, test: Optional[str]) -> None:
    """A candidate list needs a validation split to choose by; the validation split is not the test split."""
    grid = {"rectify.lr": r.lr, "rectify.steps": r.steps, "rectify.teacher_mix": r.teacher_mix}
    for key, values in grid.items():
        if values and not r.val:
            raise ConfigError(f"config key '{key}' lists candidates; set rectify.val (a validation split) to choose")
        if any(v < 0 or (v == 0 and key != "rectify.teacher_mix") for v in values):
            raise ConfigError(f"config key '{key}' = {list(values)}: values must be > 0 (teacher_mix: >= 0)")
    if r.val and test and r.val == test:
        raise ConfigError(f"config key 'rectify.val' = {r.val!r} is data.test: select on a validation split")
    if r.control and not r.teacher:
        raise ConfigError("config key 'rectify.control' = true needs rectify.teacher: the control fine-tunes on the "
                          "teacher scripts of the samples rectify rewrote")
    if any(m > 0 for m in r.teacher_mix) != bool(r.teacher) and not (r.control and r.teacher):
        raise ConfigError("config key 'rectify.teacher' and a rectify.teacher_mix value > 0 (or rectify.control) go "
                          f"together (teacher={r.teacher!r}, teacher_mix={list(r.teacher_mix)})")


def load_config(files: List[str] | None = None, overrides: List[str] | None = None, registries: bool = True) -> Config:
    """The run config of YAML ``files`` (later ones override) and dotted ``overrides``, checked. ``registries=False``
    leaves out what needs the algorithm registry (``complete_config``): the rest imports no torch."""
    schema = OmegaConf.structured(Config)
    try:
        merged = schema
        for f, loaded in (layer for g in files or [] for layer in _with_includes(g)):
            try:
                merged = _reset_params_on_new_algorithm(merged, loaded)
                merged = OmegaConf.merge(merged, loaded)
            except OmegaConfBaseException as e:
                raise ConfigError(f"{f}: {_explain(e)}") from None
        if overrides:
            bad = [o for o in overrides if "=" not in o]
            if bad:
                raise ConfigError(f"override {bad[0]!r} is not of the form key=value")
            # a new algorithm.name first (it drops the previous algorithm's params), then the rest in order
            for o in sorted(overrides, key=lambda o: o.split("=", 1)[0].strip() != "algorithm.name"):
                merged = _apply_override(merged, o)
        cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as e:
        raise ConfigError(_explain(e)) from None
    _check(cfg)
    return complete_config(cfg) if registries else cfg


def _derive(cfg: Config, caps) -> None:
    """Keys that follow from another one unless set: Dr.GRPO's normaliser L_max (``algorithm.max_response_len``,
    of ``seq-mean-token-sum-norm``) is the response budget ``rollout.max_new_tokens`` of a single-turn run."""
    a = cfg.algorithm
    if (a.max_response_len is None and caps is not None and not caps.multi_turn
            and "seq-mean-token-sum-norm" in (a.loss_agg, a.gspo_loss_agg)):
        a.max_response_len = cfg.rollout.max_new_tokens


def _with_includes(f: str, seen: tuple = ()) -> list:
    """``[(file, layer), ...]`` of config file ``f``: the files its top-level ``include:`` names (a path or a list,
    relative to ``f``; each with its own includes, depth first) before ``f`` itself, which overrides them."""
    import os

    if f in seen:
        raise ConfigError(f"config file {f}: include cycle ({' -> '.join(seen + (f,))})")
    try:
        loaded = OmegaConf.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {f}" + (f" (included by {seen[-1]})" if seen else "")) from None
    inc = loaded.pop("include", None) if OmegaConf.is_dict(loaded) else None
    names = [inc] if isinstance(inc, str) else list(inc or [])
    layers = [x for g in names for x in _with_includes(os.path.join(os.path.dirname(f), str(g)), seen + (f,))]
    return layers + [(f, loaded)]


def _reset_params_on_new_algorithm(merged, layer):
    """A layer (file or override) that names a different algorithm starts from that algorithm's own defaults:
    ``algorithm.params`` of the previous one (e.g. GRPO's ``std_scale``) would be unknown keys to it."""
    algo = layer.get("algorithm") if OmegaConf.is_dict(layer) else None
    new = algo.get("name") if OmegaConf.is_dict(algo) else None
    if new is not None and new != merged.algorithm.name:
        merged.algorithm.params = {}
    return merged


def _apply_override(cfg, override: str):
    """``key=value`` with a YAML value; ``key`` may index lists (``rewards.0.params.fmt_weight=0.0``)."""
    key, value = (x.strip() for x in override.split("=", 1))
    parsed = OmegaConf.from_dotlist([f"v={value}"])["v"]
    if OmegaConf.is_config(parsed):
        parsed = OmegaConf.to_container(parsed)
    if key == "algorithm.name" and parsed != cfg.algorithm.name:
        cfg.algorithm.params = {}
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
    if key and (key == "async" or ".async" in str(key)):
        msg += " (the asynchronous rollout keys are rollout.asynchronous.*: async is a Python keyword)"
    return f"config key '{key}': {msg}" if key else msg


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
