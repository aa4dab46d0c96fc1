"""vLLM rollout backend (``rollout.engine: vllm``): colocated in the trainer process, or a separate server.

Inputs come from ``build_prompt_inputs`` like every other engine: the prompt's token ids with each run of
``<|video_pad|>`` / ``<|image_pad|>`` collapsed to ONE placeholder (vLLM expands it itself; passing the expanded
ids would expand them twice) and, as ``multi_modal_data``, the very frames the HF processor got (already resized,
so ``do_resize=False``) with their fps. vLLM returns the prompt it expanded; it must equal ours token for token,
else the image/video token counts (and so the M-RoPE positions) disagree and ``generate`` raises naming the
sample. Sampling log-probs come back with ``logprobs=0`` (the sampled token's log-prob after temperature,
``logprobs_mode="processed_logprobs"``); ``mmrl.rollout.parity`` compares them with the trainer's scorer.

Colocate: one ``vllm.LLM`` per trainer process (``external_launcher`` under torchrun/deepspeed), asleep
(``sleep(level=1)``: weights to CPU, KV cache dropped) while the trainer trains, woken for rollouts.
Server: ``python -m mmrl.rollout.vllm_server`` on other GPUs, spoken to over HTTP (``rollout.vllm_mode: server``).

``sync_weights(model)`` after every optimizer step: LoRA is merged for the copy (only the adapted base weights
travel), otherwise every trainable weight, through vLLM's ``load_weights`` (HF names: vLLM maps them); then the
prefix cache and the multimodal caches are reset (a cached vision encoding would come from the old weights).
Nothing is imported from vLLM before an engine is built; without vLLM or a GPU the constructor raises a
``ConfigError`` naming ``rollout.engine``.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any, Dict, List, Optional, Tuple

import torch

from mmrl.data.schema import Trajectory
from mmrl.errors import ConfigError, MMRLError
from mmrl.media.inputs import PromptInputs
from mmrl.rollout.base import ENGINES, RolloutEngine, RolloutRequest, SamplingParams

PLACEHOLDERS = ("<|image_pad|>", "<|video_pad|>")


def engine_options(cfg) -> Dict[str, Any]:
    """The vLLM engine's keyword arguments from an mmrl ``Config`` (for ``build_engine(..., **engine_options(cfg))``)."""
    return {"mode": cfg.rollout.vllm_mode, "gpu_memory_utilization": cfg.rollout.vllm_gpu_memory_utilization,
            "dtype": cfg.model.dtype, "seed": cfg.train.seed,
            "max_model_len": cfg.data.max_prompt_tokens + cfg.rollout.max_new_tokens}


def collapse_placeholders(ids: torch.Tensor, placeholder_ids) -> List[int]:
    """Each run of one placeholder token becomes a single token (what vLLM expects before it expands)."""
    out: List[int] = []
    for t in ids.tolist():
        if t in placeholder_ids and out and out[-1] == t:
            continue
        out.append(t)
    return out


def vllm_prompt(inputs: PromptInputs, placeholder_ids) -> Dict[str, Any]:
    """``TokensPrompt`` for one request: collapsed ids + the processor's own frames / image."""
    prompt: Dict[str, Any] = {"prompt_token_ids": collapse_placeholders(inputs.input_ids, placeholder_ids)}
    m = inputs.media
    if m is not None and m.is_video:
        frames = m.frames.permute(0, 2, 3, 1).contiguous().numpy()  # [T, H, W, C] uint8
        fps = float(m.fps or 2.0)
        n = int(frames.shape[0])
        meta = {"fps": fps, "total_num_frames": n, "frames_indices": list(range(n)), "duration": n / fps,
                "video_backend": "mmrl", "do_sample_frames": False}
        prompt["multi_modal_data"] = {"video": (frames, meta)}
        prompt["mm_processor_kwargs"] = {"do_resize": False, "do_sample_frames": False, "fps": fps}
    elif m is not None and m.image is not None:
        prompt["multi_modal_data"] = {"image": m.image.permute(1, 2, 0).contiguous().numpy()}
        prompt["mm_processor_kwargs"] = {"do_resize": False}
    elif inputs.vision:
        raise MMRLError("vLLM engine: PromptInputs carry vision tensors but no media; build them with build_prompt_inputs")
    return prompt


def hf_weights(model, only_changed: bool = True) -> List[Tuple[str, torch.Tensor]]:
    """(HF name, tensor) pairs to send; with peft call between ``merge_adapter`` and ``unmerge_adapter``."""
    peft = hasattr(model, "get_base_model")
    lora_bases = set()
    if peft:
        for name, module in model.named_modules():
            if hasattr(module, "base_layer") and hasattr(module, "lora_A"):
                lora_bases.add(name + ".base_layer.")
    out = []
    for name, p in model.named_parameters():
        if peft and ".lora_" in name:
            continue
        changed = p.requires_grad or any(name.startswith(b) for b in lora_bases)
        if only_changed and not changed:
            continue
        clean = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
        if "original_module" in clean:
            continue
        out.append((clean.replace(".modules_to_save.default.", "."), p.detach()))
    return out


@ENGINES.register("vllm")
class VLLMEngine(RolloutEngine):
    supports_request_seeds = True  # per-request seeds: rank-count-invariant sampling (mmrl.dist)

    def __init__(self, model, processor, max_batch_sequences: int = 256, mode: str = "colocate",
                 gpu_memory_utilization: float = 0.4, dtype: Optional[str] = None, seed: int = 0,
                 model_path: Optional[str] = None, server_url: Optional[str] = None, max_model_len: Optional[int] = None,
                 sleep_level: int = 1, backend=None):
        if mode not in ("colocate", "server"):
            raise ConfigError(f"config key 'rollout.vllm_mode' = {mode!r}; expected colocate or server")
        if backend is None and mode == "colocate":
            _check_colocate()
        self.model, self.processor, self.mode = model, processor, mode
        tok = processor.tokenizer
        self.eos_id = tok.convert_tokens_to_ids("<|im_end|>")
        self.placeholder_ids = {tok.convert_tokens_to_ids(t) for t in PLACEHOLDERS}
        from mmrl.rollout.hf_engine import vision_token_ids

        self.suppress = vision_token_ids(tok)
        self.sleep_level = sleep_level
        self.asleep = False
        if backend is not None:  # injected (tests, custom transports)
            self.backend = backend
        elif mode == "server":
            from mmrl.rollout.vllm_server import ServerClient

            url = server_url or os.environ.get("MMRL_VLLM_SERVER", "http://127.0.0.1:8000")
            self.backend = ServerClient(url)
        else:
            path = model_path or _model_path(model)
            dtype = dtype or str(next(model.parameters()).dtype).removeprefix("torch.")  # sample what is trained
            self.backend = LocalBackend(path, gpu_memory_utilization=gpu_memory_utilization, dtype=dtype, seed=seed,
                                        max_model_len=max_model_len)
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
        prompts = [vllm_prompt(r.inputs, self.placeholder_ids) for r in requests]
        outs = self.backend.generate(prompts, [self.sampling(r, params) for r in requests])
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
        if self.mode == "colocate":
            self._sleep()
        return trajs

    # ---- weights ------------------------------------------------------------------------------------------------
    def sync_weights(self, model, everything: bool = False) -> None:
        """Copy the trainer's weights into vLLM (call with ZeRO-3 params gathered), then drop stale caches."""
        if self.mode == "colocate" and self.asleep:
            self.backend.wake(["weights"])
        peft = hasattr(model, "merge_adapter")
        if peft:
            model.merge_adapter()
        try:
            self.backend.load_weights(hf_weights(model, only_changed=not everything and self.sleep_level < 2))
        finally:
            if peft:
                model.unmerge_adapter()
        self.backend.reset_caches()

    def _wake(self) -> None:
        if self.asleep:
            self.backend.wake(None)
            self.asleep = False

    def _sleep(self) -> None:
        self.backend.sleep(self.sleep_level)
        self.asleep = True


def _check_colocate() -> None:
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError("config key 'rollout.engine' = 'vllm' needs vLLM (pip install vllm, on a CUDA machine); "
                          "use rollout.engine=hf on CPU")
    if not torch.cuda.is_available():
        raise ConfigError("config key 'rollout.engine' = 'vllm' needs a CUDA GPU (none is visible); "
                          "use rollout.engine=hf on CPU, or rollout.vllm_mode=server with a vLLM server elsewhere")


def _model_path(model) -> str:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    path = getattr(base, "name_or_path", None) or getattr(base.config, "_name_or_path", "")
    if not path or not os.path.isdir(path):
        raise ConfigError(f"config key 'model.path': vLLM needs the checkpoint folder, got {path!r}")
    return path


class LocalBackend:
    """A ``vllm.LLM`` in this process (colocate mode). Prompts and sampling are plain dicts (see ``VLLMEngine``)."""

    def __init__(self, path: str, gpu_memory_utilization: float, dtype: str, seed: int, max_model_len: Optional[int]):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the model in this process: load_weights
        from vllm import LLM

        from mmrl.dist import is_dist, rank

        kwargs: Dict[str, Any] = {}
        if is_dist():  # one engine per trainer rank, inside the torchrun / deepspeed process group
            kwargs["distributed_executor_backend"] = "external_launcher"
        self.llm = LLM(model=path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization, seed=seed + rank(),
                       max_model_len=max_model_len, enable_sleep_mode=True, enable_prefix_caching=True,
                       limit_mm_per_prompt={"image": 1, "video": 1}, logprobs_mode="processed_logprobs", **kwargs)

    def generate(self, prompts: List[Dict[str, Any]], sampling: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        from vllm import SamplingParams as VSP

        outs = self.llm.generate(prompts, sampling_params=[VSP(**s) for s in sampling], use_tqdm=False)
        res = []
        for o in outs:
            comps = []
            for c in o.outputs:
                lps = [step[tok].logprob for step, tok in zip(c.logprobs or [], c.token_ids)]
                comps.append({"token_ids": list(c.token_ids), "logprobs": lps, "finish_reason": c.finish_reason})
            res.append({"prompt_token_ids": list(o.prompt_token_ids), "completions": comps})
        return res

    def _model(self):
        ex = self.llm.llm_engine.model_executor
        worker = ex.driver_worker
        worker = getattr(worker, "worker", worker)
        return worker.model_runner.model

    def load_weights(self, weights: List[Tuple[str, torch.Tensor]]) -> None:
        try:
            model = self._model()
        except AttributeError:  # engine core in another process: ship the weights to it
            self.llm.apply_model(lambda m: m.load_weights(weights))
            return
        device = next(model.parameters()).device
        model.load_weights((n, t.to(device)) for n, t in weights)

    def reset_caches(self) -> None:
        self.llm.reset_prefix_cache()
        for name in ("reset_mm_cache", "reset_encoder_cache"):
            if hasattr(self.llm, name):
                getattr(self.llm, name)()

    def sleep(self, level: int) -> None:
        self.llm.sleep(level=level)

    def wake(self, tags: Optional[List[str]]) -> None:
        torch.cuda.empty_cache()
        if tags is None:
            self.llm.wake_up()
        else:
            self.llm.wake_up(tags=tags)
