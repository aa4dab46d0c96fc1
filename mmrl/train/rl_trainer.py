"""The RL loop: rollout -> reward -> advantage -> (selection) -> loss -> AdamW step -> weight sync -> log/save.

``RLTrainer(cfg).run()``; each stage is a plain function over plain data (see DESIGN.md).
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch

from mmrl.algos.base import ADVANTAGES, AdvantageInputs
from mmrl.config import Config, to_yaml
from mmrl.data.annotations import load_samples
from mmrl.models.loading import load_model_and_processor
from mmrl.rewards import RewardContext, compute_rewards
from mmrl.rewards.base import RewardSpec
from mmrl.rollout.base import SamplingParams, build_engine
from mmrl.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from mmrl.train.data_stream import DataStream
from mmrl.train.metrics import MetricsLogger, progress
from mmrl.train.optim import build_optimizer
from mmrl.train.precision import autocast_factory
from mmrl.models.scoring import response_logprobs
from mmrl.rollout.step_inputs import StepInputs, build_step_inputs
from mmrl.train.update import policy_update
from mmrl.rollout.view_metrics import view_metrics


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
    def __init__(self, cfg: Config, quiet: bool = False):
        import mmrl.algos  # noqa: F401  (registers estimators and losses)

        self.cfg, self.quiet = cfg, quiet
        set_seed(cfg.train.seed, cfg.train.num_threads)
        self.model, self.processor = load_model_and_processor(cfg.model)
        self.pad_id = self.processor.tokenizer.pad_token_id
        extra = {}
        if cfg.rollout.engine == "vllm":
            from mmrl.rollout.vllm_engine import engine_options

            extra = engine_options(cfg)
        self.engine = build_engine(cfg.rollout.engine, model=self.model, processor=self.processor,
                                   max_batch_sequences=cfg.rollout.max_batch_sequences, **extra)
        self.samples, self.load_skipped = load_samples(cfg.data.train, cfg.data.media_root, on_error=cfg.data.on_error)
        self.stream = DataStream(self.samples, cfg.train.seed, cfg.data.shuffle)
        self.optimizer, self.scheduler = build_optimizer(self.model, cfg.train)
        self.ref_model = self._build_ref() if cfg.algorithm.kl_coef > 0 else None
        self.viewset = None
        if cfg.algorithm.viewset:
            from mmrl.views import ViewSet

            self.viewset = ViewSet.load(cfg.algorithm.viewset, abstain_text=cfg.data.prompt.abstain_text)
        self.estimator = ADVANTAGES.get(cfg.algorithm.name)
        self.reward_specs = [RewardSpec(r.name, r.weight, dict(r.params)) for r in cfg.rewards]
        self.autocast = autocast_factory(cfg.train.precision, next(self.model.parameters()).device)
        self.test_samples = None
        self.step = 0

    def _build_ref(self):
        from mmrl.models.loading import load_model, resolve_device

        if self.cfg.model.lora.enabled:
            return None  # reference = the base model with the adapter disabled (peft), no second copy
        ref = load_model(self.cfg.model.path, self.cfg.model.dtype, device=resolve_device(self.cfg.model.device))
        ref.eval().requires_grad_(False)
        return ref

    # ---- stages -------------------------------------------------------------------------------------------------
    def n_for_role(self, role: str) -> int:
        a, n = self.cfg.algorithm, self.cfg.rollout.n
        if self.viewset is None:
            return n
        if a.name == "tgrpo":
            return n if role == "anchor" else max(1, n // 2)
        return a.packs

    def rollout(self, samples, group_offset: int = 0):
        si = build_step_inputs(samples, self.processor, self.cfg.data, self.n_for_role, self.viewset,
                               seed=self.cfg.train.seed * 1000003 + self.step, group_offset=group_offset)
        r = self.cfg.rollout
        params = SamplingParams(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens)
        trajs = self.engine.generate(si.requests, params) if si.requests else []
        return si, trajs

    def rewards(self, si: StepInputs, trajs) -> tuple[Dict[str, torch.Tensor], torch.Tensor]:
        ctx = []
        for t in trajs:
            t.view_weight = si.views[(t.sample_id, t.view)].weight  # the view set's weight travels with the trajectory
            media = si.media[t.sample_id]
            info = {"num_frames": int(media.frames.shape[0]) if media.is_video else 0}
            ctx.append(RewardContext(sample=si.samples[t.sample_id], trajectory=t,
                                     candidates=si.candidates[(t.sample_id, t.view)], view=t.view, role=t.role,
                                     expected=t.expected, media_info=info))
        comps, total = compute_rewards(self.reward_specs, ctx)
        for t, i in zip(trajs, range(len(trajs))):
            t.rewards = {k: v[i] for k, v in comps.items()}
        return {k: torch.tensor(v) for k, v in comps.items()}, torch.tensor(total)

    def advantages(self, trajs, comps, total):
        inp = AdvantageInputs(rewards=total, group_ids=torch.tensor([t.group_id for t in trajs]), components=comps,
                              roles=[t.role for t in trajs], accuracy=comps.get("accuracy"),
                              lengths=torch.tensor([t.response_ids.numel() for t in trajs]),
                              pack_ids=torch.tensor([t.pack_id for t in trajs]),
                              view_weights=torch.tensor([t.view_weight for t in trajs], dtype=torch.float64))
        return self.estimator(inp, self.cfg.algorithm)

    @torch.no_grad()
    def _frozen_logprobs(self, trajs, inputs, reference: bool = False):
        """Old (behaviour-policy) or reference log-probs of the responses; the reference is the frozen copy, or
        the policy with its LoRA adapter disabled."""
        items = [(inputs[t.inputs_key], t.response_ids) for t in trajs]
        model = self.ref_model if (reference and self.ref_model is not None) else self.model
        adapter_off = self.model.disable_adapter() if (reference and self.ref_model is None) else contextlib.nullcontext()
        with adapter_off, self.autocast():
            return response_logprobs(model, items, self.cfg.rollout.temperature, self.cfg.train.micro_batch, self.pad_id)

    # ---- one step -----------------------------------------------------------------------------------------------
    def train_step(self) -> Dict[str, float]:
        cfg = self.cfg
        t0 = time.perf_counter()
        si, trajs = self.rollout(self.stream.next(cfg.train.prompts_per_step))
        comps, total = self.rewards(si, trajs) if trajs else ({}, torch.zeros(0))
        rounds = 0
        if cfg.algorithm.dynamic_sampling:
            si, trajs, comps, total, rounds = self._dynamic_sampling(si, trajs, comps, total)
        t1 = time.perf_counter()
        metrics: Dict[str, float] = {"skipped_samples": float(len(si.skipped)), "resample_rounds": float(rounds)}
        if not trajs:
            self.step += 1
            return {**metrics, "time/step": time.perf_counter() - t0}
        out = self.advantages(trajs, comps, total)
        adv = out.advantages.float()
        keep = out.train_mask if out.train_mask is not None else torch.ones(len(trajs), dtype=torch.bool)
        train_idx = keep.nonzero().flatten().tolist()
        inputs = [r.inputs for r in si.requests]
        t_trajs = [trajs[i] for i in train_idx]
        ref_lps = self._frozen_logprobs(t_trajs, inputs, reference=True) if cfg.algorithm.kl_coef > 0 else None
        old_lps = self._frozen_logprobs(t_trajs, inputs) if cfg.algorithm.ppo_epochs > 1 else None
        t2 = time.perf_counter()
        upd: Dict[str, float] = {}
        for _ in range(cfg.algorithm.ppo_epochs):
            upd = policy_update(self.model, self.optimizer, t_trajs, inputs, adv[train_idx], cfg.algorithm, cfg.train,
                                cfg.rollout.temperature, self.pad_id, old_lps, ref_lps, self.autocast)
        self.scheduler.step()
        self.engine.sync_weights(self.model)
        t3 = time.perf_counter()
        self.step += 1
        gen_tokens = sum(int(t.response_ids.numel()) for t in trajs)
        metrics.update({f"reward/{k}": float(v.mean()) for k, v in comps.items()})
        metrics.update(view_metrics(trajs, si, self.cfg.data.prompt.abstain_text if self.viewset is not None else None))
        shaped = out.rewards if out.rewards is not None else total
        metrics.update({
            "reward/total": float(shaped.mean()), "adv/mean": float(adv.mean()), "adv/std": float(adv.std()) if adv.numel() > 1 else 0.0,
            "adv/zero_frac": float((adv.abs() < 1e-8).float().mean()),
            "response_len": gen_tokens / len(trajs), "truncated_frac": sum(t.truncated for t in trajs) / len(trajs),
            # the work a step does: every distinct (media, prompt) is prefilled and scored once, each response decoded
            # and scored once (mmrl.models.scoring); step cost scales with their sum where compute dominates
            "work/prompts": float(len(si.requests)), "work/prompt_tokens": float(sum(r.inputs.num_tokens for r in si.requests)),
            "work/response_tokens": float(gen_tokens),
            "tokens_per_s": gen_tokens / max(t1 - t0, 1e-9), "lr": self.scheduler.get_last_lr()[0],
            "time/rollout": t1 - t0, "time/scoring": t2 - t1, "time/update": t3 - t2, "time/step": t3 - t0,
            "time/decode": si.time_decode, "time/views": si.time_views,
            "view_time_share": si.time_views / max(t3 - t0, 1e-9),
            **{k: v for k, v in upd.items()}, **{f"algo/{k}": float(v) for k, v in out.metrics.items() if isinstance(v, (int, float))},
        })
        return metrics

    def _dynamic_sampling(self, si, trajs, comps, total):
        """DAPO: keep groups with mixed accuracy; draw more prompts until the batch is full or rounds run out."""
        from mmrl.train.dynamic_sampling import refill

        return refill(self, si, trajs, comps, total)

    # ---- run ----------------------------------------------------------------------------------------------------
    def save(self) -> Path:
        return save_checkpoint(self.cfg.train.out_dir, self.step, self.model, self.optimizer, self.scheduler,
                               {"data": self.stream.state_dict()}, keep=self.cfg.train.keep_checkpoints)

    def resume(self, path: Optional[str] = None) -> bool:
        ckpt = Path(path) if path else latest_checkpoint(self.cfg.train.out_dir)
        if ckpt is None:
            return False
        state = load_checkpoint(ckpt, self.model, self.optimizer, self.scheduler)
        self.step = int(state["step"])
        self.stream.load_state_dict(state["data"])
        return True

    def evaluate(self) -> Dict[str, float]:
        """Greedy held-out accuracy on ``data.test`` (first ``train.eval_limit`` samples; 0 = all)."""
        from mmrl.eval.synthetic import evaluate_samples

        if self.test_samples is None:
            self.test_samples, _ = load_samples(self.cfg.data.test, self.cfg.data.media_root, on_error="skip")
            if self.cfg.train.eval_limit:
                self.test_samples = self.test_samples[: self.cfg.train.eval_limit]
        res = evaluate_samples(self.model, self.processor, self.test_samples, self.cfg.data,
                               max_new_tokens=self.cfg.rollout.max_new_tokens, viewset=None, engine=self.engine)
        return {"eval/accuracy": res["accuracy"], **{f"eval/acc_{k}": v for k, v in res["per_qtype"].items()}}

    def run(self, resume: bool = False, eval_fn=None) -> List[Dict[str, float]]:
        cfg = self.cfg
        out_dir = Path(cfg.train.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "config.yaml").write_text(to_yaml(cfg))
        if resume:
            self.resume()
        logger = MetricsLogger(str(out_dir), resume_step=self.step)
        history = []
        if eval_fn is None and cfg.train.eval_every and cfg.data.test:
            eval_fn = RLTrainer.evaluate
        with progress(cfg.train.steps, "train", disable=self.quiet) as bar:
            task = bar.add_task("train", total=cfg.train.steps, completed=self.step, info="")
            while self.step < cfg.train.steps:
                m = self.train_step()
                if eval_fn is not None and cfg.train.eval_every and self.step % cfg.train.eval_every == 0:
                    m.update(eval_fn(self))
                logger.log(self.step, m)
                history.append({"step": self.step, **m})
                bar.update(task, completed=self.step,
                           info=f"reward {m.get('reward/total', float('nan')):.3f} acc {m.get('reward/accuracy', float('nan')):.3f}")
                if cfg.train.save_every and self.step % cfg.train.save_every == 0:
                    self.save()
        self.save()
        logger.close()
        self.export(str(out_dir / "final"))
        from mmrl.train.report import write_report

        write_report(str(out_dir), title=f"mmrl {cfg.algorithm.name} run")
        return history

    def export(self, path: str) -> str:
        from mmrl.models.loading import export_merged

        if hasattr(self.model, "merge_and_unload"):
            import copy

            return export_merged(copy.deepcopy(self.model), self.processor, path)
        return export_merged(self.model, self.processor, path)
