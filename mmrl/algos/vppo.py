"""VPPO as a registered algorithm (``algorithm: {name: vppo, params: {...}}``); formulas in ``vppo_core.py``.

VPPO is DAPO (GRPO advantage, clip-higher token-mean loss, dynamic sampling on accuracy, no KL) plus one re-scoring
pass of the same response tokens under the VPPO patch blackening, from which each response's advantage is
shaped (TAS) and restricted to its most vision-dependent tokens (TGF): a per-token advantage ``[N, T]``.

``logp_old`` is, by default (``orig_source: rescore``), the trainer's own re-scoring of the unchanged view, as in
VPPO's code (verl's ``old_log_probs``, recomputed by the actor): then both sides of the dependency score come from
one scorer and the sampler's numerics (vLLM in bf16) never enter it. ``orig_source: sampling`` takes the rollout's
log-probs instead and saves that pass (exact with the HF engine, which samples with the trainer's weights and kernels). TAS statistics are taken over the rows that
dynamic sampling can keep (groups with mixed accuracy) when it is on, as VPPO filters the batch before its
update; rows of uniform groups have advantage 0 anyway.

Not here: the code's extra loss term ``0.06 · mean(−log π)`` ("entropy penalty"); it belongs to the loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch

from mmrl.algos.base import AdvantageOutput
from mmrl.algos.dapo import DAPO, DAPOParams, dynamic_sampling_keep
from mmrl.algos.spec import Intervention, Needs, StepBatch, register_algorithm
from mmrl.algos.vppo_core import padded, tas_scales, tgf_mask, trajectory_scores, visual_dependency
from mmrl.views.patch_transforms import VPPO_PATCH


@dataclass
class VPPOParams(DAPOParams):
    alpha_min: float = 0.9  # TAS lower scale (7B script; config default 0.8)
    top_k_ratio: float = 0.4  # TGF: share of each response's tokens that keep their gradient (script; config 0.2)
    shaping: bool = True  # TAS on/off (ablation)
    filtering: bool = True  # TGF on/off (ablation)
    intervention: str = "patch_mask"  # view transform of the re-scoring pass
    intervention_params: Optional[Dict[str, Any]] = None  # None: default_intervention_params(intervention)
    orig_source: str = "rescore"  # logp_old: the trainer's re-scoring of the unchanged view (rescore) or the sampler's (sampling)

    def __post_init__(self):
        super().__post_init__()
        self.intervention_params = default_intervention_params(self.intervention, self.intervention_params)
        check_orig_source(self.orig_source)
        if not 0.0 <= self.alpha_min <= 1.0:
            raise ValueError(f"alpha_min must be in [0, 1], got {self.alpha_min}")
        if not 0.0 < self.top_k_ratio <= 1.0:
            raise ValueError(f"top_k_ratio must be in (0, 1], got {self.top_k_ratio}")


def default_intervention_params(transform: str, params: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The re-scoring transform's parameters: ``params`` when given (whole: a config dict is not merged key by key
    into a default meant for another transform), else VPPO's for ``patch_mask`` and the transform's own defaults
    (``{}``) for any other."""
    if params is not None:
        return dict(params)
    return dict(VPPO_PATCH[1]) if transform == VPPO_PATCH[0] else {}


def intervention_key(transform: str, params: Dict[str, Any]) -> str:
    """A re-scoring pass's name from its content, so specs asking for the same intervention share one pass."""
    return transform + "".join(f"|{k}={params[k]}" for k in sorted(params))


ORIG_SOURCES = ("rescore", "sampling")
ORIGINAL = Intervention("identity")  # the unchanged view, re-scored by the trainer: logp_orig of VPPO and PACG
ORIGINAL_KEY = intervention_key(ORIGINAL.transform, ORIGINAL.params)


def check_orig_source(source: str) -> None:
    if source not in ORIG_SOURCES:
        raise ValueError(f"orig_source must be one of {', '.join(ORIG_SOURCES)}, got {source!r}")


def with_original(rescore: Dict[str, Intervention], source: str) -> Dict[str, Intervention]:
    """``rescore`` plus the unchanged-view pass when ``logp_orig`` comes from the trainer (``source == rescore``)."""
    return {**rescore, ORIGINAL_KEY: ORIGINAL} if source == "rescore" else dict(rescore)


def original_logprobs(batch: StepBatch, source: str, method: str) -> List[torch.Tensor]:
    """``logp_orig`` of every response: the trainer's re-scoring of the unchanged view (``rescore``) or the sampler's
    log-probs (``sampling``)."""
    if source == "sampling":
        return list(batch.logprobs)
    lps = batch.rescored.get(ORIGINAL_KEY)
    if lps is None or len(lps) != len(batch):
        raise ValueError(f"{method} needs the unchanged-view re-scoring '{ORIGINAL_KEY}' of every response (orig_source: "
                         f"rescore; got {0 if lps is None else len(lps)} for {len(batch)})")
    return list(lps)


@register_algorithm("vppo")
class VPPO(DAPO):
    """VPPO: DAPO whose per-token advantages are shaped by a re-scoring pass under the patch blackening (TAS) and
    kept on the most vision-dependent tokens (TGF)."""

    Params = VPPOParams

    @property
    def rescore_key(self) -> str:
        return intervention_key(self.params.intervention, dict(self.params.intervention_params))

    def needs(self) -> Needs:
        base = super().needs()
        rescore = dict(base.rescore)
        rescore[self.rescore_key] = Intervention(self.params.intervention, dict(self.params.intervention_params))
        return Needs(old=base.old, ref=base.ref, rescore=with_original(rescore, self.params.orig_source))

    def advantages(self, batch: StepBatch) -> AdvantageOutput:
        out = super().advantages(batch)
        aug = batch.rescored.get(self.rescore_key)
        if aug is None or len(aug) != len(batch):
            raise ValueError(f"VPPO needs the re-scored log-probs '{self.rescore_key}' of every response "
                             f"(got {0 if aug is None else len(aug)} for {len(batch)})")
        p = self.params
        orig = original_logprobs(batch, p.orig_source, "VPPO")
        for i, (a, o) in enumerate(zip(aug, orig)):
            if a.shape != o.shape:
                raise ValueError(f"response {i}: re-scored log-probs {tuple(a.shape)} vs original {tuple(o.shape)}")
        aug_t, mask = padded(list(aug))
        old_t, _ = padded(orig)
        s = visual_dependency(aug_t, old_t, mask)
        stats_rows = mask.any(1)
        if p.dynamic_sampling and "accuracy" in batch.components:
            stats_rows = stats_rows & dynamic_sampling_keep(batch.components["accuracy"], batch.groups["prompt"],
                                                            p.correct_threshold)
        sbar = trajectory_scores(s, mask)
        scale = tas_scales(sbar, stats_rows, p.alpha_min) if p.shaping else torch.ones(len(batch))
        keep = tgf_mask(s, mask, p.top_k_ratio) if p.filtering else mask
        adv = out.advantages.float().view(-1, 1) * scale.view(-1, 1) * keep.float()
        valid = s[mask]
        metrics = {**out.metrics, "vppo/dependency_mean": float(valid.mean()) if valid.numel() else 0.0,
                   "vppo/scale_min": float(scale[stats_rows].min()) if bool(stats_rows.any()) else 1.0,
                   "vppo/scale_max": float(scale[stats_rows].max()) if bool(stats_rows.any()) else 1.0,
                   "vppo/token_frac": float(keep.sum()) / max(int(mask.sum()), 1)}
        return AdvantageOutput(advantages=adv, train_mask=out.train_mask, rewards=out.rewards, metrics=metrics)
