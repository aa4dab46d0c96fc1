"""The RL loop: ``RLTrainer(cfg).run()`` repeats ``mmrl.train.step.train_step`` over a backend, then saves, exports
and reports. The same class runs one process (``train.backend: torch``) and N DeepSpeed ranks (``deepspeed``).
"""
from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional

import torch

from mmrl.algos.spec import build_algorithm
from mmrl.config import Config, to_yaml
from mmrl.data.annotations import load_samples
from mmrl.errors import RewardError
from mmrl.models.loading import load_model_and_processor
from mmrl.rewards import RewardContext, compute_rewards
from mmrl.rewards.base import RewardSpec
from mmrl.rollout.agent_loop_tools import agent_loop_from_config
from mmrl.rollout.worker import RolloutSide, async_seeding, build_rollout_engine
from mmrl.rollout.vllm_client import RolloutServerError
from mmrl.train.data_stream import DataStream
from mmrl.train.async_rollout import RolloutWorkerError, async_rollouts_for, load_async_state, running
from mmrl.train.interrupt import graceful_stop, resume_command
from mmrl.train.metrics import MetricsLogger, system_metrics
from mmrl.train.optim import build_optimizer
from mmrl.train.precision import autocast_factory, check_training_precision, keep_fp32_master
from mmrl.train.preflight import preflight, preflight_log
from mmrl.train.progress import StepProgress
from mmrl.train.run_dir import Resume, open_run
from mmrl.train.skips import check_loaded, skip_log_for


def set_seed(seed: int, num_threads: int = 0) -> None:
    """Seed python, numpy and torch; fix the CPU thread count (results on CPU depend on it)."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if num_threads > 0:
        torch.set_num_threads(num_threads)


class RLTrainer:
    def __init__(self, cfg: Config, quiet: bool = False, checked: Optional[tuple] = None):
        """``checked``: the pre-flight's ``(samples, left out)`` when the caller ran it already (``mmrl train`` does,
        before torch is imported); else it runs here, still before DeepSpeed and the weights."""
        from mmrl.train.plan import describe_plan

        self.cfg = cfg
        describe_plan(cfg)  # the algorithm's plan rejects a bad config (e.g. rollout.n) before anything loads
        check_training_precision(cfg)
        self.spec = build_algorithm(cfg.algorithm, cfg)
        # the machine and the data, before DeepSpeed builds anything and before any weights load
        self.samples, self.load_skipped = checked if checked is not None else \
            preflight(cfg, "train", log=None if quiet else preflight_log())
        check_loaded(cfg.data, self.samples, self.load_skipped)
        self.viewset = None
        if cfg.algorithm.viewset:
            from mmrl.views import ViewSet

            self.viewset = ViewSet.load(cfg.algorithm.viewset, abstain_text=cfg.data.prompt.abstain_text)
            self.viewset.check_weights_used(cfg.algorithm.name, self.spec.uses_view_weights)
        deepspeed = cfg.train.backend == "deepspeed"
        ds_config = hf_ds = None
        if deepspeed:
            from mmrl.train.deepspeed_backend import init_deepspeed, zero3_init_context

            ds_config = init_deepspeed(cfg)
            hf_ds = zero3_init_context(ds_config)  # noqa: F841  (ZeRO-3: models load sharded while it lives)
        set_seed(cfg.train.seed, cfg.train.num_threads)
        self.model, self.processor = load_model_and_processor(cfg.model)
        pad_id = self.processor.tokenizer.pad_token_id
        self.engine = build_rollout_engine(cfg, self.model, self.processor)
        self.stream = DataStream(self.samples, cfg.train.seed, cfg.data.shuffle)
        if not deepspeed:  # DeepSpeed's bf16 mode keeps its own fp32 master copy of bf16 weights
            keep_fp32_master(self.model)
        optimizer, scheduler = build_optimizer(self.model, cfg.train)
        autocast = autocast_factory(cfg.train.precision, next(self.model.parameters()).device)
        if deepspeed:
            from mmrl.train.deepspeed_backend import DeepSpeedBackend

            self.backend = DeepSpeedBackend(self.model, optimizer, scheduler, autocast, cfg, pad_id, ds_config)
        else:
            from mmrl.train.backend import Backend

            ref = self._build_ref() if (cfg.algorithm.kl_coef > 0 or self.spec.needs().ref) else None
            self.backend = Backend(self.model, optimizer, scheduler, ref, autocast, cfg, pad_id)
        del hf_ds  # generation must not run in lockstep (HF's synced_gpus): rollouts gather full weights instead
        self.quiet = quiet or not self.backend.is_main()
        self.seed_per_group = deepspeed if cfg.rollout.seed_per_group is None else cfg.rollout.seed_per_group
        self.reward_specs = [RewardSpec(r.name, r.weight, dict(r.params)) for r in cfg.rewards]
        agent_loop = agent_loop_from_config(cfg.rollout, self.processor)
        # rollout.asynchronous.max_staleness >= 1: a worker process generates ahead (None: rollouts here)
        self.async_rollouts = async_rollouts_for(self)
        seeding = "group" if self.seed_per_group else "none"
        if self.async_rollouts is not None:  # seeded, so a batch is the same whichever process draws it
            seeding = async_seeding(cfg.rollout)
        self.side = RolloutSide(cfg, self.processor, self.engine, agent_loop, self.plan, self.viewset, seeding,
                                self.backend.rollout_context)
        self.test_samples = None
        self.skips = None  # the run's SkipLog (mmrl.train.skips), opened by run()
        self.details = None  # run(): a dict the step fills for TensorBoard/W&B (mmrl.train.step_details)
        self.step = 0

    @property
    def agent_loop(self):
        """The loop this trainer's rollouts run through: held once, by ``self.side`` (a loop set here reaches it)."""
        return self.side.agent_loop

    @agent_loop.setter
    def agent_loop(self, loop) -> None:
        self.side.agent_loop = loop

    def _build_ref(self):
        from mmrl.models.loading import load_model, resolve_device

        if self.cfg.model.lora.enabled:
            return None  # reference = the base model with the adapter disabled (peft), no second copy
        ref = load_model(self.cfg.model.path, self.cfg.model.dtype, device=resolve_device(self.cfg.model.device),
                         attn_implementation=self.cfg.model.attn_implementation)
        ref.eval().requires_grad_(False)
        return ref

    # ---- stages -------------------------------------------------------------------------------------------------
    def plan(self, role: str, n_views: int = 1) -> int:
        """Responses per (sample, view of ``role``), from ``rollout.n`` and the algorithm's plan."""
        return self.spec.plan(role, self.cfg.rollout.n, n_views)

    def rollout(self, samples, group_offset: int = 0):
        """This rank's block of ``samples`` (``Backend.shard``), expanded into views and generated here
        (``mmrl.rollout.worker.RolloutSide``)."""
        lo, hi = self.backend.shard(len(samples))
        return self.side.generate(samples[lo:hi], self.step, group_offset + lo)

    def rewards(self, si, trajs):
        if not trajs:
            return {}, torch.zeros(0)
        ctx = []
        for t in trajs:
            t.view_weight = si.views[(t.sample_id, t.view)].weight  # the view set's weight travels with the trajectory
            media = si.media[t.sample_id]
            info = {"num_frames": int(media.frames.shape[0]) if media.is_video else 0}
            ctx.append(RewardContext(sample=si.samples[t.sample_id], trajectory=t,
                                     candidates=si.candidates[(t.sample_id, t.view)], view=t.view, role=t.role,
                                     expected=t.expected, media_info=info))
        comps, total = compute_rewards(self.reward_specs, ctx)
        for i, t in enumerate(trajs):
            t.rewards = {k: v[i] for k, v in comps.items()}
        return {k: torch.tensor(v) for k, v in comps.items()}, torch.tensor(total)

    def step_context(self):
        """The context ``mmrl.train.step.train_step`` runs on: what the step reads and calls, not the trainer."""
        from mmrl.train.step import StepContext

        return StepContext(cfg=self.cfg, backend=self.backend, spec=self.spec, stream=self.stream,
                           processor=self.processor, engine=self.engine, rollout=self.rollout, rewards=self.rewards,
                           loop=self.agent_loop.capabilities, step=self.step, skips=self.skips,
                           abstain_text=self.cfg.data.prompt.abstain_text if self.viewset is not None else None,
                           details=self.details, detail_samples=self._detail_samples(),
                           prefetched=self.async_rollouts.take if self.async_rollouts is not None else None)

    def _detail_samples(self) -> bool:
        """Whether the coming step logs its completions table and contact sheet (step 1, then every
        ``train.log_samples_every``)."""
        every = self.cfg.train.log_samples_every
        return bool(every) and (self.step == 0 or (self.step + 1) % every == 0)

    def train_step(self) -> Dict[str, float]:
        from mmrl.train.step import train_step

        metrics = train_step(self.step_context())
        self.step += 1
        if self.async_rollouts is not None:  # the batch's weight version; the new weights go to the worker
            metrics.update(self.async_rollouts.last)
            self.async_rollouts.publish(self.step)
        return metrics

    # ---- state --------------------------------------------------------------------------------------------------
    def save(self) -> Path:
        extra = {"data": self.stream.state_dict(), "algorithm": self.spec.state_dict()}
        if self.async_rollouts is not None:  # the batches in flight, regenerated on resume
            extra["async_rollouts"] = self.async_rollouts.state_dict()
        return self.backend.save(self.cfg.train.out_dir, self.step, extra, keep=self.cfg.train.keep_checkpoints)

    def resume(self, path: Optional[str] = None) -> bool:
        ckpt = Path(path) if path else self.backend.latest(self.cfg.train.out_dir)
        if ckpt is None:
            return False
        state = self.backend.load(ckpt)
        self.step = int(state["step"])
        self.stream.load_state_dict(state["data"])
        self.spec.load_state_dict(state.get("algorithm", {}))
        load_async_state(self.async_rollouts, state.get("async_rollouts"))
        self.backend.sync_rollout_weights(self.engine, everything=self._served())
        return True

    def _served(self) -> bool:
        """Rollouts come from vLLM servers, which may hold another checkpoint's or an earlier run's weights."""
        return self.cfg.rollout.engine == "vllm" and self.cfg.rollout.vllm_mode == "server"

    def export(self, path: str) -> str:
        return self.backend.export(path, self.processor)

    def evaluate(self) -> Dict[str, float]:
        """Greedy held-out accuracy on ``data.test`` (first ``train.eval_limit`` samples; 0 = all); the predictions go
        to ``<out_dir>/predictions/step_N.jsonl`` (linked from the report)."""
        from mmrl.eval.synthetic import evaluate_samples

        if self.test_samples is None:
            self.test_samples, self.test_errors = load_samples(self.cfg.data.test, self.cfg.data.media_root, on_error="skip")
            if self.cfg.train.eval_limit:
                self.test_samples = self.test_samples[: self.cfg.train.eval_limit]
        preds = str(Path(self.cfg.train.out_dir) / "predictions" / f"step_{self.step:06d}.jsonl")
        if self.agent_loop.capabilities.tool_episodes:  # tool episodes, greedy, with the run's suite (mmrl.tools.evaluate)
            from mmrl.tools.evaluate import evaluate_tool_episodes

            with self.backend.rollout_context():
                res = evaluate_tool_episodes(self.model, self.processor, self.test_samples, self.cfg.data,
                                             self.cfg.rollout.tools, self.cfg.rollout.max_new_tokens, engine=self.engine,
                                             load_errors=self.test_errors,
                                             predictions_path=preds if self.backend.is_main() else None)
            tools = {f"eval/tools/{k}": float(v) for k, v in res.items() if k not in ("accuracy", "per_qtype", "n", "errors")}
            return {"eval/accuracy": res["accuracy"], **tools, **{f"eval/acc_{k}": v for k, v in res["per_qtype"].items()}}
        with self.backend.rollout_context():
            res = evaluate_samples(self.model, self.processor, self.test_samples, self.cfg.data,
                                   max_new_tokens=self.cfg.rollout.max_new_tokens, viewset=None, engine=self.engine,
                                   load_errors=self.test_errors,  # unusable test items count, scored wrong
                                   predictions_path=preds if self.backend.is_main() else None)
        return {"eval/accuracy": res["accuracy"], **{f"eval/acc_{k}": v for k, v in res["per_qtype"].items()}}

    # ---- run ----------------------------------------------------------------------------------------------------
    def run(self, resume: Resume = False, eval_fn=None, overwrite: bool = False) -> List[Dict[str, float]]:
        """Train to ``train.steps``. ``resume``: False, True (needs a checkpoint) or "auto"; ``overwrite`` replaces
        a previous run in ``train.out_dir`` (else refused): ``mmrl.train.run_dir``. SIGINT/SIGTERM checkpoint at
        the next step (``mmrl.train.interrupt``); skipped samples go to ``skipped.jsonl`` (``mmrl.train.skips``)."""
        cfg, be = self.cfg, self.backend
        out_dir = Path(cfg.train.out_dir)
        rd = open_run(cfg.train.out_dir, "train", resume, overwrite) if be.is_main() else None  # rank 0 first
        if be.is_main():
            (out_dir / "config.yaml").write_text(to_yaml(cfg))
        be.barrier()
        rd = rd or open_run(cfg.train.out_dir, "train", resume, overwrite, check_only=True, say=lambda _: None)
        if rd.checkpoint is not None:
            self.resume(str(rd.checkpoint))
            if be.is_main():
                from mmrl.tools.trajectory_log import truncate_after

                truncate_after(cfg.train.out_dir, self.step)
        elif self._served():  # step 1 samples from the trainer's weights, whatever the servers were started with
            be.sync_rollout_weights(self.engine, everything=True)
        self.skips = skip_log_for(str(out_dir), cfg.data, self.samples, self.load_skipped, self.step, write=be.is_main())
        self.stream.excluded = self.skips.excluded
        logger = MetricsLogger(str(out_dir), resume_step=self.step, wandb_project=cfg.train.wandb_project,
                               config=asdict(cfg)) if be.is_main() else None
        history = []
        if eval_fn is None and cfg.train.eval_every and cfg.data.test:
            eval_fn = type(self).evaluate
        start = time.time() - (logger.elapsed_before if logger is not None else 0.0)
        if eval_fn is not None and cfg.train.eval_every and self.step == 0:  # the starting model (SFT) as step 0
            m0 = eval_fn(self)
            if logger is not None:
                logger.log(0, {**m0, **system_metrics(start)})
        with StepProgress(cfg.train.steps, "train", start=self.step, every_s=cfg.train.log_every_s,
                          disable=self.quiet) as bar, graceful_stop() as stop, running(self.async_rollouts):
            while self.step < cfg.train.steps:
                self.details = {} if logger is not None else None
                m = self._guarded_step()
                if eval_fn is not None and cfg.train.eval_every and self.step % cfg.train.eval_every == 0:
                    m.update(eval_fn(self))
                m.update(system_metrics(start))
                if logger is not None:
                    logger.log(self.step, m)
                    logger.log_details(self.step, self.details)
                history.append({"step": self.step, **m})
                bar.update(self.step, m)
                if cfg.train.save_every and self.step % cfg.train.save_every == 0:
                    self.save()
                stop.check(self.save, self.step, cfg.train.out_dir, agree=lambda f: be.all_reduce([f], "max")[0] > 0)
        self.save()
        self.export(str(out_dir / "final"))
        if logger is not None:
            logger.close()
            from mmrl.train.report import write_report

            ranks = f" ({be.world_size} ranks, ZeRO-{be.stage})" if be.name == "deepspeed" else ""
            write_report(str(out_dir), title=f"mmrl {cfg.algorithm.name} run{ranks}")
            if self.skips.summary():
                print(self.skips.summary())
        be.barrier()
        return history

    def _guarded_step(self) -> Dict[str, float]:
        """One step. When it fails on a reward or a rollout server, a checkpoint of the last completed step is kept (written if
        missing) before the error stops the run."""
        try:
            return self.train_step()
        except (RewardError, RolloutServerError):  # a reward that failed, a rollout server dead or hanging
            if self.step and not (Path(self.cfg.train.out_dir) / "checkpoints" / f"step_{self.step:06d}").exists():
                self.save()
            raise
        except RolloutWorkerError as e:  # a dead or hung worker: nothing of this step was done; checkpoint, stop
            raise RolloutWorkerError(f"{e}: stopped after step {self.step}, checkpoint {self.save()}; resume with: "
                                     f"{resume_command(self.cfg.train.out_dir)}") from None
