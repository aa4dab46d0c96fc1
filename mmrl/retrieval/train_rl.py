"""Router stage 3, RL on the chain reward with GRPO advantages and step-level PPO ratios (specs/algorithms.md §6).

Each step samples ``rl.group_size`` (G = 8) chains for each of ``train.batch_size`` queries and scores them with

    R = 1[chain contains the gold chain] − λ · max(0, #hops − L)          (λ = ``rl.hop_penalty`` = 0.05)
    A = GRPO advantage of R within the query's group                      (mmrl.algos.grpo)
    ℓ = token-mean over steps of −min(ρ_t A, clip(ρ_t, 1 ± ε) A) + β · k3(π_θ ‖ π_SFT)   (mmrl.algos.losses)

with ρ_t = π_θ(a_t | s_t) / π_old(a_t | s_t) per step (π_old: the log-prob recorded when the chain was sampled;
the corpus side of π_old is the index as last refreshed), ε = ``rl.clip`` = 0.2 and β = ``rl.kl_coef`` = 0.01
towards the frozen SFT router ``rl.ref_from``, scored on the same candidate lists.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

import torch

from mmrl.algos.grpo import grpo_advantages
from mmrl.algos.losses import kl_term, ppo_clip
from mmrl.errors import ConfigError
from mmrl.retrieval.router import RouterParams
from mmrl.retrieval.router_chain import chain_reward, contains_chain
from mmrl.retrieval.train_common import StageData, StageModel, StageTrain


@dataclass
class RLParams:
    group_size: int = 8  # sampled chains per query (G)
    clip: float = 0.2  # ε of the step-level ratio
    kl_coef: float = 0.01  # β of the k3 KL to the reference router (0 = no reference pass)
    hop_penalty: float = 0.05  # λ per hop beyond the gold chain's length
    ref_from: Optional[str] = None  # the SFT stage's out_dir (its final/router.pt): the KL reference


@dataclass
class RLStageConfig:
    STAGE: ClassVar[str] = "rl"
    data: StageData = field(default_factory=StageData)
    model: StageModel = field(default_factory=StageModel)
    router: RouterParams = field(default_factory=RouterParams)
    train: StageTrain = field(default_factory=StageTrain)
    rl: RLParams = field(default_factory=RLParams)

    def check(self) -> None:
        if self.rl.group_size < 2:
            raise ConfigError(f"config key 'rl.group_size' must be >= 2 (GRPO needs a group), got {self.rl.group_size}")
        if not 0 < self.rl.clip < 1 or self.rl.kl_coef < 0 or self.rl.hop_penalty < 0:
            raise ConfigError("config keys 'rl.clip' must be in (0, 1), 'rl.kl_coef' and 'rl.hop_penalty' >= 0")
        if self.rl.kl_coef > 0 and not self.rl.ref_from:
            raise ConfigError("config key 'rl.ref_from' is required when rl.kl_coef > 0 (the SFT stage's out_dir)")
        if self.rl.kl_coef == 0 and self.rl.ref_from:
            raise ConfigError("config key 'rl.ref_from' is set but rl.kl_coef = 0: it would change nothing")


def padded(values, lengths, fill=0.0) -> torch.Tensor:
    """Flat per-step values (chains back to back) -> ``[N chains, T_max]``, padded with ``fill``."""
    out = torch.full((len(lengths), max(lengths)), fill, dtype=values.dtype)
    s = 0
    for n, L in enumerate(lengths):
        out[n, :L] = values[s:s + L]
        s += L
    return out


class RLLoss:
    def setup(self, cfg, router, corpus):
        ref = None
        if cfg.rl.kl_coef > 0:
            from mmrl.retrieval.router import Router
            from mmrl.retrieval.train_common import load_embedder
            from mmrl.retrieval.train_common import load_router_weights

            ref = Router(load_embedder(cfg.model), corpus, cfg.router, seed=cfg.train.seed)
            load_router_weights(ref, cfg.rl.ref_from, "rl.ref_from")
            ref.requires_grad_(False).eval()
        return {"cfg": cfg, "ref": ref}

    def __call__(self, router, queries, step, gen, ctx):
        cfg, G = ctx["cfg"], ctx["cfg"].rl.group_size
        picks = torch.randint(len(queries), (cfg.train.batch_size,), generator=gen).tolist()
        batch = [queries[i] for i in picks for _ in range(G)]
        router.eval()
        eps = router.rollout(batch, mode="sample", generator=gen)
        router.train()
        rewards = torch.tensor([chain_reward(e.chain, e.hops, q.chain, cfg.rl.hop_penalty)
                                for q, e in zip(batch, eps)])
        groups = torch.arange(cfg.train.batch_size).repeat_interleave(G)
        adv = grpo_advantages(rewards, groups)
        qs = [q for q, e in zip(batch, eps) for _ in e.steps]
        steps = [s for e in eps for s in e.steps]
        lengths = [len(e.steps) for e in eps]
        logp = padded(router.step_log_probs(qs, steps), lengths)
        old = padded(torch.tensor([s.logp for s in steps]), lengths)
        mask = padded(torch.ones(len(steps)), lengths).bool()
        loss, m = ppo_clip(logp, old, adv, mask, cfg.rl.clip, cfg.rl.clip, agg="token-mean")
        if ctx["ref"] is not None:
            with torch.no_grad():
                ref = padded(ctx["ref"].step_log_probs(qs, steps), lengths)
            kl, km = kl_term(logp, ref, mask, cfg.rl.kl_coef)
            loss, m = loss + kl, {**m, **km}
        success = sum(contains_chain(e.chain, q.chain) for q, e in zip(batch, eps)) / len(eps)
        return loss, {"reward": float(rewards.mean()), "success": success, "clip_frac": m["clip_frac"],
                      "kl": m.get("kl", 0.0), "hops": sum(e.hops for e in eps) / len(eps)}
