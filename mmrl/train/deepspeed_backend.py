"""``train.backend: deepspeed``: the shared RL step and loop on DeepSpeed ZeRO-2 / ZeRO-3 (optionally offloaded), N ranks.

Launch (one process per GPU; ``--no_local_rank`` because ``mmrl train`` takes no ``--local_rank`` argument)::

    deepspeed --num_gpus 8 --no_local_rank --module mmrl train --config configs/grpo_qwen2_5_vl_3b.yaml
    torchrun --nproc_per_node 8 -m mmrl train --config configs/grpo_qwen2_5_vl_3b.yaml
    DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 -m mmrl train ... train.backend=deepspeed   # CPU, gloo

How prompt groups are spread over ranks, and why the result equals the 1-process run: ``mmrl.dist``.

- ZeRO-3: the policy is built under ``zero.Init`` (sharded while loading; ``zero3_init_context``); the reference
  model (``kl_coef > 0``, no LoRA) is a ZeRO-3 inference engine (sharded, offloaded if the config offloads params);
  with LoRA the reference is the policy with its adapter disabled. Rollouts with the HF engine gather the full
  weights once per step (like TRL's ``ds3_gather_for_generation``); scoring and training forwards run in lockstep.
  A vLLM weight sync gathers one transfer bucket at a time (``mmrl.rollout.weight_sync.SyncWeights``).
- Precision: ``train.precision: bf16`` turns on DeepSpeed bf16 on GPUs; on the CPU accelerator training is fp32.
- Checkpoints: ``engine.save_checkpoint`` (sharded model + optimizer, ``latest`` tag) plus the client state the
  trainer passes (data position, algorithm state), the LR schedule and each rank's RNG; ``--resume`` continues
  exactly. ``export`` writes a plain HF checkpoint (LoRA merged) gathered on rank 0.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from mmrl import dist
from mmrl.errors import ConfigError, MMRLError
from mmrl.models.prefill import CHUNK_TOKENS
from mmrl.models.scoring import response_logprobs
from mmrl.train.backend import Backend
from mmrl.train.ds_config import load_ds_config, require_deepspeed


def init_deepspeed(cfg) -> Dict[str, Any]:
    """Start the process group and resolve the DeepSpeed config (before the model is built)."""
    require_deepspeed()
    from deepspeed.accelerator import get_accelerator

    device_type = get_accelerator().device_name()
    dist.init_distributed(device_type)
    if cfg.train.prompts_per_step < dist.world_size():
        raise ConfigError(f"config key 'train.prompts_per_step' = {cfg.train.prompts_per_step} is below the number "
                          f"of ranks ({dist.world_size()}): every rank must own at least one prompt group")
    return load_ds_config(cfg, device_type, dist.world_size())


def zero3_init_context(ds_config):
    """ZeRO-3: ``from_pretrained`` builds the model under ``zero.Init`` while this object lives."""
    if int(ds_config["zero_optimization"].get("stage", 0)) != 3:
        return None
    from transformers.integrations import HfDeepSpeedConfig

    return HfDeepSpeedConfig(ds_config)


def zero3_gather(params):
    """Whole ZeRO-3 parameters for reading while the context lives (DeepSpeed's ``GatheredParameters``; no
    ``modifier_rank``: nothing is written back)."""
    import deepspeed

    return deepspeed.zero.GatheredParameters(params)


def engine_logprobs(engine, items, temperature: float, micro_batch: int, pad_id: int,
                    chunk_tokens: int = CHUNK_TOKENS) -> List[torch.Tensor]:
    """``response_logprobs`` run as the forward of a DeepSpeed engine (``chunk_tokens``: its LM-head chunk, the
    scorer's default; ``DeepSpeedBackend`` passes its ``chunk_tokens()``, 0 under ZeRO-3).

    Going through ``engine(...)`` runs what DeepSpeed does around a forward (ZeRO-3 step reset, the micro-step
    bookkeeping that makes gradients accumulate instead of overwrite, the backward-prologue hooks); calling the
    model's submodules directly skips it (on ZeRO-3 only the last micro-batch's gradient would survive).
    """
    module = engine.module
    module.forward = lambda batch: response_logprobs(module, batch, temperature, micro_batch, pad_id,
                                                     chunk_tokens=chunk_tokens)
    try:
        return engine(items)
    finally:
        del module.forward


class DeepSpeedBackend(Backend):
    """N ranks: forwards through the engine in lockstep, ZeRO's backward and step, sharded checkpoints."""

    name = "deepspeed"

    def __init__(self, model, optimizer, scheduler, autocast, cfg, pad_id: int, ds_config: Dict[str, Any]):
        import deepspeed

        self.ds_config, self.cfg = ds_config, cfg
        self.stage = int(ds_config["zero_optimization"].get("stage", 0))
        self._ref_engine = None
        # the reference first (under ZeRO-3 an inference engine), then the policy's engine, as in earlier releases
        ref_model = self._build_ref() if cfg.algorithm.kl_coef > 0 else None
        ds_opt = "optimizer" in ds_config
        self.engine, opt, _, _ = deepspeed.initialize(
            model=model, optimizer=None if ds_opt else optimizer,
            model_parameters=[p for p in model.parameters() if p.requires_grad] if ds_opt else None, config=ds_config)
        if ds_opt:  # the LR schedule (same as the torch backend's) acts on the optimizer DeepSpeed built
            base = getattr(opt, "optimizer", opt)
            warm = max(0, int(cfg.train.warmup_steps))
            scheduler = torch.optim.lr_scheduler.LambdaLR(base, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        super().__init__(model, opt, scheduler, ref_model, autocast, cfg, pad_id)

    def chunk_tokens(self) -> int:
        """0 under ZeRO-3: a rank's chunk count follows its own token count, and ZeRO-3 ranks must make the same
        module calls (each head call gathers the head's weights collectively)."""
        return 0 if self.stage == 3 else super().chunk_tokens()

    world_size = property(lambda self: dist.world_size())
    rank = property(lambda self: dist.rank())

    def gather(self, obj):
        return dist.all_gather_objects(obj)

    def all_reduce(self, values, op: str = "sum"):
        return dist.all_reduce(values, op)

    def barrier(self) -> None:
        dist.barrier()

    # ---- models -------------------------------------------------------------------------------------------------
    def _build_ref(self):
        if self.cfg.model.lora.enabled:
            return None  # the policy with its adapter disabled
        from mmrl.models.loading import load_model

        ref = load_model(self.cfg.model.path, self.cfg.model.dtype, attn_implementation=self.cfg.model.attn_implementation)
        ref.eval().requires_grad_(False)
        if self.stage != 3:  # a whole frozen copy on this rank's device
            from deepspeed.accelerator import get_accelerator

            return ref.to(get_accelerator().current_device_name())
        import deepspeed

        ref_cfg = {k: v for k, v in self.ds_config.items() if k not in ("optimizer", "scheduler")}
        zero = {"stage": 3, "stage3_param_persistence_threshold": self.ds_config["zero_optimization"].get(
            "stage3_param_persistence_threshold", 100000)}
        if "offload_param" in self.ds_config["zero_optimization"]:
            zero["offload_param"] = dict(self.ds_config["zero_optimization"]["offload_param"])
        ref_cfg["zero_optimization"] = zero
        self._ref_engine = deepspeed.initialize(model=ref, config=ref_cfg)[0]
        self._ref_engine.eval()
        return self._ref_engine.module

    # ---- passes -------------------------------------------------------------------------------------------------
    def _lockstep(self, engine, items, micro_batch: int, fallback) -> List[torch.Tensor]:
        """Engine forwards with the item count padded to the largest rank's (ZeRO-3 forwards are collective)."""
        n = len(items)
        n_max = int(dist.all_reduce([n], "max")[0])
        pad = items[0] if items else fallback
        lps = engine_logprobs(engine, list(items) + [pad] * (n_max - n), self.cfg.rollout.temperature, micro_batch,
                              self.pad_id, self.chunk_tokens())
        return lps[:n]

    @torch.no_grad()
    def score(self, items, reference: bool = False, fallback=None) -> List[torch.Tensor]:
        mb = self.cfg.train.micro_batch
        if not reference:
            return self._lockstep(self.engine, items, mb, fallback)
        if self.ref_model is None:  # LoRA: the policy with its adapter disabled
            with self.model.disable_adapter():
                return self._lockstep(self.engine, items, mb, fallback)
        if self._ref_engine is not None:
            return self._lockstep(self._ref_engine, items, mb, fallback)
        return response_logprobs(self.ref_model, items, self.cfg.rollout.temperature, mb, self.pad_id,
                                 chunk_tokens=self.chunk_tokens())

    def train_logprobs(self, items) -> List[torch.Tensor]:
        return engine_logprobs(self.engine, items, self.cfg.rollout.temperature, len(items), self.pad_id,
                               self.chunk_tokens())

    def zero_grad(self) -> None:
        self.model.train()

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss)

    def step(self) -> float:
        self.engine.step()  # clips by `gradient_clipping` in the DeepSpeed config (= train.grad_clip)
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    # ---- rollout ------------------------------------------------------------------------------------------------
    def rollout_context(self):
        """ZeRO-3 + HF engine: gather the full policy weights for generation (one collective per step)."""
        if self.stage != 3 or self.cfg.rollout.engine != "hf":
            return nullcontext()
        return self._gathered_for_generation()

    @contextmanager
    def _gathered_for_generation(self):
        """Whole weights and no ZeRO-3 module hooks while generating (as TRL's ``unwrap_model_for_generation``)."""
        import deepspeed

        offload = self.engine.optimizer.parameter_offload
        with deepspeed.zero.GatheredParameters(list(self.model.parameters())):
            for p in self.model.parameters():
                p.ds_active_sub_modules.clear()
            for hook in offload.forward_hooks + offload.backward_hooks:
                hook.remove()
            offload.forward_hooks, offload.backward_hooks = [], []
            try:
                yield
            finally:
                register = getattr(offload, "_register_deepspeed_module", None) or offload._register_hooks_recursively
                register(offload.module)

    def sync_rollout_weights(self, engine, everything: bool = False) -> None:
        """Push the updated weights to the rollout engine (a no-op for the HF engine, which shares the module);
        ``everything``: frozen weights too. ZeRO-3: every rank gathers one transfer bucket of parameters at a time
        (``weight_sync.SyncWeights``), never the whole model."""
        if self.cfg.rollout.engine == "hf":
            return
        engine.sync_weights(self.model, everything=everything, gather=zero3_gather if self.stage == 3 else None)

    # ---- state --------------------------------------------------------------------------------------------------
    def save(self, out_dir: str, step: int, extra: Dict[str, Any], keep: int) -> Path:
        from mmrl.train.checkpoint import rng_state
        from mmrl.train.run_dir import mark_owner, prune

        root = Path(out_dir) / "checkpoints"
        tag = f"step_{step:06d}"
        client = {"step": step, "scheduler": self.scheduler.state_dict(), **extra}
        self.engine.save_checkpoint(str(root), tag=tag, client_state=client)
        torch.save(rng_state(), root / tag / f"rng_rank{dist.rank()}.pt")
        dist.barrier()
        if dist.is_main():  # this run's older checkpoints only, never for a foreign one (mmrl.train.run_dir)
            mark_owner(root / tag, out_dir)
            prune(out_dir, keep, root / tag)
        dist.barrier()
        return root / tag

    def latest(self, out_dir: str) -> Optional[Path]:
        latest = Path(out_dir) / "checkpoints" / "latest"
        return latest.parent / latest.read_text().strip() if latest.exists() else None

    def load(self, path: Path) -> Dict[str, Any]:
        from mmrl.train.checkpoint import load_state, set_rng_state

        root, tag = Path(path).parent, Path(path).name
        load_path, client = self.engine.load_checkpoint(str(root), tag=tag, load_optimizer_states=True,
                                                        load_lr_scheduler_states=False)
        if load_path is None:
            raise MMRLError(f"could not load the DeepSpeed checkpoint {root / tag}")
        self.scheduler.load_state_dict(client["scheduler"])
        rng = root / tag / f"rng_rank{dist.rank()}.pt"
        if rng.exists():
            set_rng_state(load_state(rng))
        return client

    def export(self, path: str, processor) -> str:
        """Plain HF checkpoint (LoRA merged) written by rank 0; ZeRO-3 shards are gathered to rank 0 first."""
        if self.stage == 3:
            state = self.engine._zero3_consolidated_16bit_state_dict()
            if dist.is_main():
                from mmrl.models.loading import export_merged, load_model

                m = self.cfg.model
                fresh = load_model(m.path, m.dtype, lora=m.lora)
                fresh.load_state_dict(state)
                export_merged(fresh, processor, path)
        elif dist.is_main():
            Backend.export(self, path, processor)
        dist.barrier()
        return path
