"""Generating a step's rollouts, in the trainer or in the rollout worker process: ``RolloutSide``.

``RolloutSide.generate(samples, step, group_offset)`` is the one code path from drawn samples to ``(StepInputs,
trajectories)``: the step's views and prompts (``build_step_inputs``), then the engine through the agent loop under
the run's seeding. ``seeding``:

- ``group``: each prompt group under the seed of (seed, step, group id) (``mmrl.rollout.seeded``), the
  rank-count-invariant sampling of ``rollout.seed_per_group``;
- ``batch``: the whole call under one seed of (seed, step, group offset): one batched engine call (the HF engine
  runs ``group`` as one call per group), and the only choice for loops that draw per episode (``multi_turn``,
  ``stream``: ``LoopCapabilities.seed_per_group`` off);
- ``none``: the process's own torch RNG stream (today's default single-process run).

With asynchronous rollouts (``mmrl.train.async_rollout``) the seeding is ``group`` where ``rollout.seed_per_group``
is on, else ``batch`` (``async_seeding``): a batch is then a
function of (weights, step, samples) alone, the same whichever process draws it, so a batch lost in flight (Ctrl-C,
a worker crash) is regenerated bit for bit on resume from the weights it was due to use.

The worker process that serves ``RolloutJob``s is ``mmrl.train.rollout_worker.worker_main``.
"""
from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import Any, Callable, List

import torch


@dataclass
class RolloutJob:
    step: int  # the step whose rollouts these are
    samples: List[Any]  # the step's drawn samples (mmrl.data.schema.Sample)
    group_offset: int
    version: int  # the weights they are generated from: updates done (mmrl.train.async_rollout.due_version)
    plan_state: dict  # the trainer's algorithm state at submission (a plan may adapt, e.g. FastRL's ARS)


@dataclass
class RolloutSide:
    """What generating a step's rollouts reads: the run's config, the processor, the engine, the agent loop, the
    algorithm's plan and view set, the seeding and the context generation runs under."""

    cfg: Any
    processor: Any
    engine: Any
    agent_loop: Any
    plan: Callable[[str, int], int]
    viewset: Any
    seeding: str  # group | batch | none
    context: Callable[[], Any] = contextlib.nullcontext

    def generate(self, samples, step: int, group_offset: int = 0):
        from mmrl.rollout.base import SamplingParams
        from mmrl.rollout.seeded import generate_seeded, group_seed
        from mmrl.rollout.step_inputs import build_step_inputs

        seed = self.cfg.train.seed
        si = build_step_inputs(samples, self.processor, self.cfg.data, self.plan, self.viewset,
                               seed=seed * 1000003 + step, group_offset=group_offset)
        r = self.cfg.rollout
        params = SamplingParams(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens)
        with self.context():
            if self.seeding == "group":
                trajs = generate_seeded(self.engine, si.requests, params, lambda gid: group_seed(seed, step, gid))
            elif self.seeding == "batch":
                devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
                with torch.random.fork_rng(devices=devices):
                    torch.manual_seed(group_seed(seed, step, -1 - group_offset))
                    trajs = self.agent_loop.run(self.engine, si.requests, params)
            else:
                trajs = self.agent_loop.run(self.engine, si.requests, params)
        return si, trajs


def async_seeding(rollout_cfg) -> str:
    """The seeding of asynchronous rollouts: per group where ``rollout.seed_per_group`` is on (a loop that draws
    per episode refuses it, ``mmrl.config``), else per batch."""
    return "group" if rollout_cfg.seed_per_group else "batch"


def build_rollout_engine(cfg, model, processor):
    """The engine ``rollout.engine`` names, over ``model``."""
    from mmrl.rollout.base import build_engine

    extra = {}
    if cfg.rollout.engine == "vllm":
        from mmrl.rollout.vllm_engine import engine_options

        extra = engine_options(cfg)
    return build_engine(cfg.rollout.engine, model=model, processor=processor,
                        max_batch_sequences=cfg.rollout.max_batch_sequences, **extra)


def load_viewset(cfg):
    """The run's view set (``algorithm.viewset``), or None."""
    if not cfg.algorithm.viewset:
        return None
    from mmrl.views import ViewSet

    return ViewSet.load(cfg.algorithm.viewset, abstain_text=cfg.data.prompt.abstain_text)


def build_side(cfg, model, processor, spec, context=contextlib.nullcontext) -> RolloutSide:
    """The worker's ``RolloutSide``: over ``model``, with the engine of ``rollout.engine``, the run's agent loop and
    ``spec``'s plan, seeded (``async_seeding``)."""
    from mmrl.rollout.agent_loop_tools import agent_loop_from_config

    loop = agent_loop_from_config(cfg.rollout, processor)
    return RolloutSide(cfg, processor, build_rollout_engine(cfg, model, processor), loop,
                       lambda role, n_views=1: spec.plan(role, cfg.rollout.n, n_views), load_viewset(cfg),
                       async_seeding(cfg.rollout), context)


def dumps(obj) -> bytes:
    """``obj`` as bytes (``torch.save``): plain copies through the queue, no shared-memory handles to leak."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def loads(data: bytes):
    return torch.load(io.BytesIO(data), weights_only=False)
