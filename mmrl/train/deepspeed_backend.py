"""``train.backend: deepspeed``: the RL loop on DeepSpeed ZeRO-2 / ZeRO-3 (optionally offloaded), N ranks.

Launch (one process per GPU; ``--no_local_rank`` because ``mmrl train`` takes no ``--local_rank`` argument)::

    deepspeed --num_gpus 8 --no_local_rank --module mmrl train --config configs/grpo_qwen2_5_vl_3b.yaml
    torchrun --nproc_per_node 8 -m mmrl train --config configs/grpo_qwen2_5_vl_3b.yaml
    DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 -m mmrl train ... train.backend=deepspeed   # CPU, gloo

How prompt groups are spread over ranks, and why the result equals the 1-process run: ``mmrl.dist``.

- ZeRO-3: the policy is built under ``zero.Init`` (sharded while loading); the reference model (``kl_coef > 0``,
  no LoRA) is a ZeRO-3 inference engine (sharded, offloaded if the config offloads params); with LoRA the
  reference is the policy with its adapter disabled. Rollouts with the HF engine gather the full weights once per
  step (like TRL's ``ds3_gather_for_generation``); scoring and training forwards run in lockstep across ranks.
- Precision: ``train.precision: bf16`` turns on DeepSpeed bf16 on GPUs; on the CPU accelerator training is fp32.
- Checkpoints: ``engine.save_checkpoint`` (sharded model + optimizer, ``latest`` tag) plus the data position,
  LR schedule and each rank's RNG; ``--resume`` continues exactly. The end of ``run()`` exports a plain HF
  checkpoint (``out_dir/final``, LoRA merged) gathered on rank 0; ``zero_to_fp32.py`` in each checkpoint folder
  consolidates a checkpoint offline too.
"""
from __future__ import annotations

import shutil
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Dict, List, Optional

import torch

from mmrl.algos.base import AdvantageInputs, AdvantageOutput
from mmrl.config import Config, to_yaml
from mmrl.errors import ConfigError, MMRLError
from mmrl import dist
from mmrl.train.sharded_rollout import RankInvariantRollout
from mmrl.train.ds_config import load_ds_config, require_deepspeed
from mmrl.train.ds_update import ds_policy_update, lockstep_logprobs
from mmrl.train.rl_trainer import RLTrainer
from mmrl.models.scoring import response_logprobs


class DeepSpeedTrainer(RankInvariantRollout, RLTrainer):
    """``RLTrainer`` whose update, checkpoints and export go through a DeepSpeed engine, one process per rank."""

    def __init__(self, cfg: Config, quiet: bool = False):
        require_deepspeed()
        import deepspeed
        from deepspeed.accelerator import get_accelerator

        if cfg.algorithm.dynamic_sampling:
            raise ConfigError("config key 'algorithm.dynamic_sampling' is not supported with train.backend=deepspeed yet")
        self.device_type = get_accelerator().device_name()
        dist.init_distributed(self.device_type)
        if cfg.train.prompts_per_step < dist.world_size():
            raise ConfigError(f"config key 'train.prompts_per_step' = {cfg.train.prompts_per_step} is below the number "
                              f"of ranks ({dist.world_size()}): every rank must own at least one prompt group")
        self.ds_config = load_ds_config(cfg, self.device_type, dist.world_size())
        self.stage = int(self.ds_config["zero_optimization"].get("stage", 0))
        hf_ds = None
        if self.stage == 3:  # from_pretrained builds the model under zero.Init: sharded while it loads
            from transformers.integrations import HfDeepSpeedConfig

            hf_ds = HfDeepSpeedConfig(self.ds_config)
        super().__init__(cfg, quiet=quiet or not dist.is_main())
        ds_opt = "optimizer" in self.ds_config
        self.ds_engine, opt, _, _ = deepspeed.initialize(
            model=self.model, optimizer=None if ds_opt else self.optimizer,
            model_parameters=[p for p in self.model.parameters() if p.requires_grad] if ds_opt else None,
            config=self.ds_config)
        if ds_opt:  # the LR schedule (same as the torch backend's) acts on the optimizer DeepSpeed built
            base = getattr(opt, "optimizer", opt)
            warm = max(0, int(cfg.train.warmup_steps))
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(base, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        self.optimizer = opt
        del hf_ds  # generation must not run in lockstep (HF's synced_gpus): rollouts gather full weights instead

    # ---- models -------------------------------------------------------------------------------------------------
    _ref_engine = None

    def _build_ref(self):
        if self.cfg.model.lora.enabled:
            return None  # the policy with its adapter disabled
        from mmrl.models.loading import load_model

        ref = load_model(self.cfg.model.path, self.cfg.model.dtype)
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

    def rollout_context(self):
        """ZeRO-3 + HF engine: gather the full policy weights for generation (one collective per step)."""
        if self.stage != 3 or self.cfg.rollout.engine != "hf":
            return nullcontext()
        return self._gathered_for_generation()

    @contextmanager
    def _gathered_for_generation(self):
        """Whole weights and no ZeRO-3 module hooks while generating (as TRL's ``unwrap_model_for_generation``)."""
        import deepspeed

        offload = self.ds_engine.optimizer.parameter_offload
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

    def sync_rollout_weights(self) -> None:
        """Push the updated weights to the rollout engine (a no-op for the HF engine, which shares the module)."""
        if self.cfg.rollout.engine == "hf":
            return
        if self.stage == 3:
            import deepspeed

            with deepspeed.zero.GatheredParameters(list(self.model.parameters())):
                self.engine.sync_weights(self.model)
        else:
            self.engine.sync_weights(self.model)

    # ---- stages -------------------------------------------------------------------------------------------------
    def advantages(self, trajs, comps, total) -> AdvantageOutput:
        """All-gather this step's reward vectors, run the estimator on the whole batch, keep this rank's slice."""
        local = {"total": total.tolist(), "comps": {k: v.tolist() for k, v in comps.items()},
                 "gids": [t.group_id for t in trajs], "roles": [t.role for t in trajs],
                 "lens": [int(t.response_ids.numel()) for t in trajs], "packs": [t.pack_id for t in trajs],
                 "weights": [t.view_weight for t in trajs]}
        parts = dist.all_gather_objects(local)
        cat = lambda key: [x for p in parts for x in p[key]]  # noqa: E731
        names = sorted({k for p in parts for k in p["comps"]})
        g_comps = {k: torch.tensor([x for p in parts for x in p["comps"].get(k, [])]) for k in names}
        inp = AdvantageInputs(rewards=torch.tensor(cat("total")), group_ids=torch.tensor(cat("gids")),
                              components=g_comps, roles=cat("roles"), accuracy=g_comps.get("accuracy"),
                              lengths=torch.tensor(cat("lens")), pack_ids=torch.tensor(cat("packs")),
                              view_weights=torch.tensor(cat("weights"), dtype=torch.float64))
        out = self.estimator(inp, self.cfg.algorithm)
        counts = [len(p["total"]) for p in parts]
        lo = sum(counts[: dist.rank()])
        hi = lo + counts[dist.rank()]
        self._global_batch = (inp, out)
        part = lambda x: None if x is None else x[lo:hi]  # noqa: E731
        return AdvantageOutput(advantages=out.advantages[lo:hi], train_mask=part(out.train_mask),
                               rewards=part(out.rewards), metrics=out.metrics)

    def train_step(self) -> Dict[str, float]:
        cfg = self.cfg
        t0 = time.perf_counter()
        si, trajs = self.rollout(self.stream.next(cfg.train.prompts_per_step))
        comps, total = self.rewards(si, trajs) if trajs else ({}, torch.zeros(0))
        t1 = time.perf_counter()
        n_local = len(trajs)
        n_global, skipped = dist.all_reduce([n_local, len(si.skipped)])
        metrics: Dict[str, float] = {"skipped_samples": skipped, "resample_rounds": 0.0}
        if n_global == 0:
            self.step += 1
            return {**metrics, "time/step": time.perf_counter() - t0}
        if n_local == 0:
            raise MMRLError(f"rank {dist.rank()} has no trajectories at step {self.step} (all its samples were skipped) "
                            f"while other ranks do; raise train.prompts_per_step or fix the data")
        out = self.advantages(trajs, comps, total)
        adv = out.advantages.float()
        keep = out.train_mask if out.train_mask is not None else torch.ones(n_local, dtype=torch.bool)
        train_idx = keep.nonzero().flatten().tolist()
        inputs = [r.inputs for r in si.requests]
        t_trajs = [trajs[i] for i in train_idx]
        items = [(inputs[t.inputs_key], t.response_ids) for t in t_trajs]
        fallback_item = (inputs[trajs[0].inputs_key], trajs[0].response_ids)
        ref_lps = old_lps = None
        with torch.no_grad():
            if cfg.algorithm.kl_coef > 0:
                if self.ref_model is None:  # LoRA: the policy with its adapter disabled
                    with self.model.disable_adapter():
                        ref_lps = self._score(self.ds_engine, items, fallback_item)
                else:
                    ref_lps = self._score(self._ref_engine or self.ref_model, items, fallback_item)
            if cfg.algorithm.ppo_epochs > 1:
                old_lps = self._score(self.ds_engine, items, fallback_item)
        t2 = time.perf_counter()
        upd: Dict[str, float] = {}
        for _ in range(cfg.algorithm.ppo_epochs):
            upd = ds_policy_update(self.ds_engine, t_trajs, inputs, adv[train_idx], cfg.algorithm, cfg.train,
                                   cfg.rollout.temperature, self.pad_id, old_lps, ref_lps, fallback=trajs[0])
        self.scheduler.step()
        self.sync_rollout_weights()
        t3 = time.perf_counter()
        self.step += 1
        g_inp, g_out = self._global_batch
        gen_tokens = float(g_inp.lengths.sum())
        shaped = g_out.rewards if g_out.rewards is not None else g_inp.rewards
        g_adv = g_out.advantages.float()
        metrics.update({f"reward/{k}": float(v.mean()) for k, v in g_inp.components.items()})
        metrics.update(_mean_over_ranks(self._view_metrics(trajs, si)))
        truncated = dist.all_reduce([sum(t.truncated for t in trajs)])[0]
        metrics.update({
            "reward/total": float(shaped.mean()), "adv/mean": float(g_adv.mean()),
            "adv/std": float(g_adv.std()) if g_adv.numel() > 1 else 0.0,
            "adv/zero_frac": float((g_adv.abs() < 1e-8).float().mean()),
            "response_len": gen_tokens / n_global, "truncated_frac": truncated / n_global,
            "tokens_per_s": gen_tokens / max(t1 - t0, 1e-9), "lr": self.scheduler.get_last_lr()[0],
            "time/rollout": t1 - t0, "time/scoring": t2 - t1, "time/update": t3 - t2, "time/step": t3 - t0,
            "time/decode": si.time_decode, "time/views": si.time_views, "ranks": float(dist.world_size()),
            **upd, **{f"algo/{k}": float(v) for k, v in g_out.metrics.items() if isinstance(v, (int, float))},
        })
        return metrics

    def _score(self, target, items, fallback):
        """Teacher-forced log-probs through an engine (every rank runs the same number of forwards) or a module."""
        from deepspeed.runtime.engine import DeepSpeedEngine

        r = self.cfg
        if not isinstance(target, DeepSpeedEngine):
            return response_logprobs(target, items, r.rollout.temperature, r.train.micro_batch, self.pad_id)
        return lockstep_logprobs(target, items, r.rollout.temperature, r.train.micro_batch, self.pad_id, fallback)

    def _view_metrics(self, trajs, si) -> Dict[str, float]:
        from mmrl.rollout.view_metrics import view_metrics

        return view_metrics(trajs, si, self.cfg.data.prompt.abstain_text if self.viewset is not None else None)

    # ---- checkpoints --------------------------------------------------------------------------------------------
    def save(self) -> Path:
        from mmrl.train.checkpoint import rng_state

        root = Path(self.cfg.train.out_dir) / "checkpoints"
        tag = f"step_{self.step:06d}"
        client = {"step": self.step, "data": self.stream.state_dict(), "scheduler": self.scheduler.state_dict()}
        self.ds_engine.save_checkpoint(str(root), tag=tag, client_state=client)
        torch.save(rng_state(), root / tag / f"rng_rank{dist.rank()}.pt")
        dist.barrier()
        keep = self.cfg.train.keep_checkpoints
        if dist.is_main() and keep > 0:
            for old in sorted(root.glob("step_*"))[:-keep]:
                shutil.rmtree(old, ignore_errors=True)
        dist.barrier()
        return root / tag

    def resume(self, path: Optional[str] = None) -> bool:
        from mmrl.train.checkpoint import set_rng_state

        root = Path(self.cfg.train.out_dir) / "checkpoints"
        if path:
            root, tag = Path(path).parent, Path(path).name
        else:
            latest = root / "latest"
            if not latest.exists():
                return False
            tag = latest.read_text().strip()
        load_path, client = self.ds_engine.load_checkpoint(str(root), tag=tag, load_optimizer_states=True,
                                                           load_lr_scheduler_states=False)
        if load_path is None:
            raise MMRLError(f"could not load the DeepSpeed checkpoint {root / tag}")
        self.step = int(client["step"])
        self.stream.load_state_dict(client["data"])
        self.scheduler.load_state_dict(client["scheduler"])
        rng = root / tag / f"rng_rank{dist.rank()}.pt"
        if rng.exists():
            set_rng_state(torch.load(rng, weights_only=False))
        self.sync_rollout_weights()
        return True

    def export(self, path: str) -> str:
        """Plain HF checkpoint (LoRA merged) written by rank 0; ZeRO-3 shards are gathered to rank 0 first."""
        if self.stage == 3:
            state = self.ds_engine._zero3_consolidated_16bit_state_dict()
            if dist.is_main():
                from mmrl.models.loading import export_merged, load_model

                m = self.cfg.model
                fresh = load_model(m.path, m.dtype, lora=m.lora)
                fresh.load_state_dict(state)
                export_merged(fresh, self.processor, path)
        elif dist.is_main():
            RLTrainer.export(self, path)
        dist.barrier()
        return path

    # ---- run ----------------------------------------------------------------------------------------------------
    def run(self, resume: bool = False, eval_fn=None) -> List[Dict[str, float]]:
        """``RLTrainer.run`` for N ranks: every rank trains; rank 0 logs, reports and writes the export."""
        from mmrl.train.metrics import MetricsLogger

        cfg = self.cfg
        out_dir = Path(cfg.train.out_dir)
        if dist.is_main():
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "config.yaml").write_text(to_yaml(cfg))
        dist.barrier()
        if resume:
            self.resume()
        logger = MetricsLogger(str(out_dir), resume_step=self.step) if dist.is_main() else None
        if eval_fn is None and cfg.train.eval_every and cfg.data.test:
            eval_fn = DeepSpeedTrainer.evaluate
        history = []
        while self.step < cfg.train.steps:
            m = self.train_step()
            if eval_fn is not None and cfg.train.eval_every and self.step % cfg.train.eval_every == 0:
                m.update(eval_fn(self))
            if logger is not None:
                logger.log(self.step, m)
                if not self.quiet:
                    print(f"[mmrl] step {self.step}/{cfg.train.steps} reward {m.get('reward/total', float('nan')):.4f} "
                          f"loss {m.get('loss', float('nan')):.5f} ({m['time/step']:.1f}s)", flush=True)
            history.append({"step": self.step, **m})
            if cfg.train.save_every and self.step % cfg.train.save_every == 0:
                self.save()
        self.save()
        self.export(str(out_dir / "final"))
        if logger is not None:
            logger.close()
            from mmrl.train.report import write_report

            write_report(str(out_dir), title=f"mmrl {cfg.algorithm.name} run ({dist.world_size()} ranks, ZeRO-{self.stage})")
        dist.barrier()
        return history

    def evaluate(self) -> Dict[str, float]:
        """Held-out accuracy (every rank evaluates the same samples; under ZeRO-3 with whole weights)."""
        with self.rollout_context():
            return RLTrainer.evaluate(self)


def _mean_over_ranks(metrics: Dict[str, float]) -> Dict[str, float]:
    parts = dist.all_gather_objects({k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})
    keys = sorted({k for p in parts for k in p})
    return {k: sum(p[k] for p in parts if k in p) / sum(1 for p in parts if k in p) for k in keys}


def run_deepspeed(cfg: Config, resume: bool = False, quiet: bool = False) -> List[Dict[str, float]]:
    """Entry point of ``mmrl train`` with ``train.backend: deepspeed`` (every rank runs it)."""
    return DeepSpeedTrainer(cfg, quiet=quiet).run(resume=resume)
