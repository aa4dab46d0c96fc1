"""Up-front validation of a run ``Config``: everything that can be checked without loading a model.

``validate(cfg, kind)`` (kind ``train`` or ``sft``) raises ``ConfigError`` with one line naming the key for:
paths (``data.train``, ``data.test`` when set, ``data.media_root``, ``model.path``, ``algorithm.viewset``,
``train.deepspeed_config``), registry names (``algorithm.name``, ``algorithm.loss``, ``rewards[i].name``, checked
against the registries with a "did you mean"; ``module:function`` names are imported), numeric ranges, and the
view set an algorithm needs (``AlgorithmSpec.needs_view_set``), and ``model.lora.target_modules`` against the
checkpoint's module names. ``mmrl train/sft`` run it in ``--dry-run`` and before every real run, so a bad key costs a
second, not a model load; a real run runs the torch-free part (``registries=False``) and the data pre-flight before
``validate_registries``. ``check_yaml(files)`` gives malformed YAML the same one-line treatment.
"""
from __future__ import annotations

import math
import os
from typing import List, Sequence

from mmrl.advice import advice
from mmrl.errors import ConfigError

def check_name(registry, name: str, key: str) -> None:
    """``name`` is registered in ``registry`` or is an importable ``module:function``."""
    try:
        registry.get(name)  # unknown names: the known ones with a "did you mean" (mmrl.registry)
    except KeyError as e:
        raise ConfigError(f"config key '{key}': {e.args[0]}") from None


def check_yaml(files: Sequence[str]) -> None:
    import yaml

    for f in files or []:
        if not os.path.isfile(f):
            raise ConfigError(f"config file not found: {f}")
        try:
            with open(f, encoding="utf-8") as fh:
                data = yaml.safe_load(fh)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"config file {f}:{where}: malformed YAML: {problem}") from None
        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"config file {f}: expected a mapping of config sections, got {type(data).__name__}")


def check_model_path(path: str, key: str = "model.path") -> None:
    """'tiny', 'base' / 'base:<hash>' (built by `mmrl base build`) or a local Qwen2-VL / Qwen2.5-VL checkpoint
    folder (holding config.json)."""
    if path == "tiny":
        return
    from mmrl.models.base_recipe import is_base_ref, resolve_base

    where = key if key.startswith("--") else f"config key '{key}'"
    if is_base_ref(path):
        resolve_base(path, where)  # an unbuilt base: a one-line error naming the command that builds it
        return
    if not os.path.exists(path):
        raise ConfigError(f"{where}: checkpoint folder not found: {path} (no hub downloads at run time)")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ConfigError(f"{where}: {path} is not a model checkpoint (no config.json); give a folder "
                          "written by mmrl (e.g. <out_dir>/final) or a Hugging Face checkpoint, or 'tiny'")


def _file(path, key: str, what: str = "file") -> None:
    if not path:
        raise ConfigError(f"config key '{key}' is empty; give the {what}")
    if not os.path.isfile(path):
        raise ConfigError(f"config key '{key}': {what} not found: {path}")


def _ranges(cfg, kind: str) -> List[tuple]:
    """(key, value, ok, expectation) for every bounded numeric field."""
    t, r, d, a, s = cfg.train, cfg.rollout, cfg.data, cfg.algorithm, cfg.sft
    return [
        ("train.steps", t.steps, t.steps >= 1, ">= 1"),
        ("train.lr", t.lr, t.lr > 0, "> 0"),
        ("train.weight_decay", t.weight_decay, t.weight_decay >= 0, ">= 0"),
        ("train.warmup_steps", t.warmup_steps, t.warmup_steps >= 0, ">= 0"),
        ("train.grad_clip", t.grad_clip, t.grad_clip > 0, "> 0"),
        ("train.save_every", t.save_every, t.save_every >= 0, ">= 0 (0 = only at the end)"),
        ("train.keep_checkpoints", t.keep_checkpoints, t.keep_checkpoints >= 0, ">= 0 (0 = keep all)"),
        ("train.eval_every", t.eval_every, t.eval_every >= 0, ">= 0 (0 = never)"),
        ("train.eval_limit", t.eval_limit, t.eval_limit >= 0, ">= 0 (0 = whole test split)"),
        ("train.num_threads", t.num_threads, t.num_threads >= 0, ">= 0 (0 = torch's default)"),
        ("train.logprob_chunk_tokens", t.logprob_chunk_tokens, t.logprob_chunk_tokens >= 0, ">= 0 (0 = off)"),
        ("rollout.temperature", r.temperature, r.temperature > 0, "> 0 (rollouts sample; greedy decoding would "
                                                                  "give every group identical responses)"),
        ("rollout.top_p", r.top_p, 0 < r.top_p <= 1, "in (0, 1]"),
        ("rollout.max_batch_sequences", r.max_batch_sequences, r.max_batch_sequences >= 1, ">= 1"),
        ("rollout.vllm_gpu_memory_utilization", r.vllm_gpu_memory_utilization,
         0 < r.vllm_gpu_memory_utilization <= 1, "in (0, 1]"),
        ("rollout.server_timeout_s", r.server_timeout_s, r.server_timeout_s > 0, "> 0 (seconds)"),
        ("data.nframes", d.nframes, d.nframes is None or d.nframes >= 2, ">= 2 (qwen-vl-utils samples frame pairs)"),
        ("data.fps", d.fps, d.fps is None or d.fps > 0, "> 0"),
        ("data.min_pixels", d.min_pixels, d.min_pixels >= 1, ">= 1"),
        ("data.max_pixels", d.max_pixels, d.max_pixels >= d.min_pixels, f">= data.min_pixels ({d.min_pixels})"),
        ("data.max_prompt_tokens", d.max_prompt_tokens, d.max_prompt_tokens >= 1, ">= 1"),
        ("data.max_skip_frac", d.max_skip_frac, 0 <= d.max_skip_frac <= 1, "in [0, 1]"),
        ("algorithm.ppo_epochs", a.ppo_epochs, a.ppo_epochs >= 1, ">= 1"),
        ("algorithm.kl_coef", a.kl_coef, a.kl_coef >= 0, ">= 0"),
        ("sft.steps", s.steps, s.steps >= 1, ">= 1"),
        ("sft.batch_size", s.batch_size, s.batch_size >= 1, ">= 1"),
        ("sft.lr", s.lr, s.lr > 0, "> 0"),
    ]


def validate(cfg, kind: str = "train", data_paths: bool = True, registries: bool = True) -> None:
    """Raise ``ConfigError`` (one line, naming the key) for the first problem found in ``cfg``; see module doc.
    ``data_paths=False`` (planning a run for another machine) leaves out the existence of the model and data;
    ``registries=False`` the checks that import torch (``validate_registries``; ``mmrl train`` runs them after the
    data pre-flight)."""
    for key, value, ok, expect in _ranges(cfg, kind):
        if isinstance(value, float) and not math.isfinite(value):
            ok = False
        if not ok:
            raise ConfigError(f"config key '{key}' must be {expect}, got {value}")
    _check_servers(cfg.rollout)
    if data_paths:
        check_model_path(cfg.model.path)
        _file(cfg.data.train, "data.train", "annotation file")
        if cfg.data.test or (kind == "train" and cfg.train.eval_every):
            _file(cfg.data.test, "data.test", "annotation file (train.eval_every > 0 evaluates on it)")
        if cfg.data.media_root is not None and not os.path.isdir(cfg.data.media_root):
            raise ConfigError(f"config key 'data.media_root': folder not found: {cfg.data.media_root}")
    if cfg.train.wandb_project:
        import importlib.util

        if importlib.util.find_spec("wandb") is None:
            raise ConfigError("config key 'train.wandb_project' needs the wandb package: pip install wandb")
    if cfg.train.deepspeed_config:
        _file(cfg.train.deepspeed_config, "train.deepspeed_config", "DeepSpeed config")
    if cfg.algorithm.viewset and kind != "sft":  # before the data pre-flight reads it (what its views need)
        _file(cfg.algorithm.viewset, "algorithm.viewset", "view set file")
    if registries:
        validate_registries(cfg, kind)


def _check_servers(r) -> None:
    """``rollout.vllm_mode``, ``rollout.weight_transfer`` and ``rollout.servers``: each an ``http(s)://host:port``
    URL, none twice (empty: one server at http://127.0.0.1:8000)."""
    from urllib.parse import urlsplit

    if r.vllm_mode not in ("colocate", "server"):
        raise ConfigError(f"config key 'rollout.vllm_mode' = {r.vllm_mode!r}; expected colocate or server")
    if r.weight_transfer not in ("collective", "http"):
        raise ConfigError(f"config key 'rollout.weight_transfer' = {r.weight_transfer!r}; expected collective or http")
    for i, url in enumerate(r.servers):
        parts = urlsplit(str(url))
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme not in ("http", "https") or not parts.hostname or port is None or parts.path not in ("", "/"):
            raise ConfigError(f"config key 'rollout.servers[{i}]' = {url!r}; expected http://host:port")
    if len({str(u).rstrip("/") for u in r.servers}) != len(r.servers):
        raise ConfigError(f"config key 'rollout.servers' lists a server twice: {list(r.servers)}")


def _check_lora(model_cfg) -> None:
    """``model.lora.target_modules`` against the checkpoint's module names (a meta-device model from its config; a
    folder not here yet, as when planning for another machine, is checked when it loads)."""
    from mmrl.models.loading import resolve_model_path
    from mmrl.models.lora_targets import check_lora_targets
    from mmrl.models.tiny import TINY_NAMES

    path = model_cfg.path
    if path in TINY_NAMES or os.path.isfile(os.path.join(path, "config.json")):
        check_lora_targets(resolve_model_path(path), list(model_cfg.lora.target_modules))


def validate_registries(cfg, kind: str = "train") -> None:
    """The checks that need torch's side of the package: precision, LoRA target modules (``_check_lora``), the
    algorithm, loss and reward registries, the view set an algorithm needs and the algorithm's plan."""
    if kind in ("train", "sft"):  # bf16 weights train with fp32 master weights (mmrl.train.precision)
        from mmrl.train.precision import check_training_precision

        check_training_precision(cfg, backend="torch" if kind == "sft" else None)
    if cfg.model.lora.enabled:
        _check_lora(cfg.model)
    if kind == "sft":
        return
    from mmrl.algos.base import POLICY_LOSSES
    from mmrl.algos.spec import ALGORITHMS
    from mmrl.rewards import REWARDS

    check_name(ALGORITHMS, cfg.algorithm.name, "algorithm.name")
    check_name(POLICY_LOSSES, cfg.algorithm.loss, "algorithm.loss")
    _check_loss_takes_weights(POLICY_LOSSES.get(cfg.algorithm.loss), cfg.algorithm)
    if not cfg.rewards:
        raise ConfigError("config key 'rewards' is empty; give at least one reward (e.g. {name: accuracy})")
    for i, rw in enumerate(cfg.rewards):
        check_name(REWARDS, rw.name, f"rewards[{i}].name")
        if not math.isfinite(rw.weight):
            raise ConfigError(f"config key 'rewards[{i}].weight' must be a finite number, got {rw.weight}")
    from mmrl.algos.spec import build_algorithm

    if not cfg.algorithm.viewset and build_algorithm(cfg.algorithm).needs_view_set:  # a wrapper: its base's spec
        raise ConfigError(f"config key 'algorithm.viewset': algorithm '{cfg.algorithm.name}' trains on counterfactual "
                          f"views and needs a view set (e.g. {advice('needs_viewset')})")
    from mmrl.train.plan import describe_plan

    describe_plan(cfg)  # the spec's own params, the view set file and the responses per view (ConfigError)


def _check_loss_takes_weights(loss_fn, cfg_algo) -> None:
    """With ``algorithm.rollout_correction.mode`` on, the policy loss must take ``is_weights`` (mmrl.algos.base)."""
    import inspect

    if cfg_algo.rollout_correction.mode == "none":
        return
    try:
        params = inspect.signature(loss_fn).parameters
    except (TypeError, ValueError):
        return
    if "is_weights" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        raise ConfigError(f"config key 'algorithm.loss' = {cfg_algo.loss!r} takes no is_weights argument, which "
                          f"algorithm.rollout_correction.mode = {cfg_algo.rollout_correction.mode!r} needs; add "
                          f"is_weights=None to it (mmrl.algos.base) or set algorithm.rollout_correction.mode: none")
