"""Router stage 2, online imitation (DAgger; Ross et al. 2011) of the chain oracle (specs/algorithms.md §6).

Step i of N rolls out ``train.batch_size`` queries with the mixture policy: at every state the oracle acts with
probability β_i = 1 − i/(N−1) (linear 1 → 0), the router otherwise (``imitate.mode``: sampled or greedy). Every
visited state is labelled by the oracle (next gold hop, BACKTRACK off the gold path, STOP at the target) and the
loss is InfoNCE on those labels over the state's own action list (its top-K index hits, the label added when
the index missed it, BACKTRACK and STOP):  L = mean_states −log π(oracle(s) | s).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from mmrl.errors import ConfigError
from mmrl.retrieval.router import RouterParams
from mmrl.retrieval.router_policy import BACKTRACK, STOP
from mmrl.retrieval.train_common import StageData, StageModel, StageTrain


@dataclass
class ImitateParams:
    mode: str = "sample"  # how the router acts when the oracle does not: sample | greedy
    beta_start: float = 1.0  # β at the first step, decaying linearly ...
    beta_end: float = 0.0  # ... to this at the last


@dataclass
class ImitateStageConfig:
    STAGE: ClassVar[str] = "imitate"
    data: StageData = field(default_factory=StageData)
    model: StageModel = field(default_factory=StageModel)
    router: RouterParams = field(default_factory=RouterParams)
    train: StageTrain = field(default_factory=StageTrain)
    imitate: ImitateParams = field(default_factory=ImitateParams)

    def check(self) -> None:
        if self.imitate.mode not in ("sample", "greedy"):
            raise ConfigError(f"config key 'imitate.mode' must be 'sample' or 'greedy', got {self.imitate.mode!r}")
        for key in ("beta_start", "beta_end"):
            v = getattr(self.imitate, key)
            if not 0.0 <= v <= 1.0:
                raise ConfigError(f"config key 'imitate.{key}' must be in [0, 1], got {v}")


def beta_at(step: int, steps: int, start: float = 1.0, end: float = 0.0) -> float:
    """Linear decay from ``start`` (step 0) to ``end`` (step ``steps − 1``)."""
    return start + (end - start) * (step / max(1, steps - 1))


class ImitateLoss:
    def setup(self, cfg, router, corpus):
        return cfg

    def __call__(self, router, queries, step, gen, cfg):
        beta = beta_at(step, cfg.train.steps, cfg.imitate.beta_start, cfg.imitate.beta_end)
        picks = torch.randint(len(queries), (cfg.train.batch_size,), generator=gen).tolist()
        batch = [queries[i] for i in picks]
        router.eval()
        eps = router.rollout(batch, mode=cfg.imitate.mode, generator=gen, beta=beta, label_oracle=True)
        router.train()
        qs = [q for q, e in zip(batch, eps) for _ in e.steps]
        steps = [s for e in eps for s in e.steps]
        labels = [s.oracle for s in steps]
        logp = router.step_log_probs(qs, steps, labels)
        agree = sum(s.action == s.oracle for s in steps) / len(steps)
        return -logp.mean(), {"beta": beta, "states": float(len(steps)), "agree": agree,
                              "frac_backtrack": sum(l == BACKTRACK for l in labels) / len(labels),
                              "frac_stop": sum(l == STOP for l in labels) / len(labels)}
