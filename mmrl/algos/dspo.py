"""DSPO (Diversity-aware Subjective Policy Optimization; arXiv 2609.36775, specs/algorithms.md §3): the spec.

Reward (the paper): R = 1.0 acc + 0.1 fmt + 0.1 R_cf + 0.3 R_div, then the standard GRPO advantage.

The rewards ``dspo_accuracy``, ``dspo_format``, ``dspo_div`` (R_div with uniform w) and ``dspo_evidence`` run before
re-scoring (``mmrl/rewards/dspo_rewards.py``). With ``cvig: true`` this spec asks the step for two re-scoring
passes of the SAME response tokens (fixed rollout): ``cvig`` under V^CF and ``cvig_orig`` under the unchanged view
(``p_source: rescore``; ``sampling`` uses the rollout's log-probs instead and saves that pass). V^CF (``mask``):

- ``feature`` (default, the paper's Eq. 8): the post-encoder visual tokens inside the box the response names in
  step 1 are zeroed (``mmrl.models.feature_mask``; floor/ceil box-to-token mapping after the 2x2 merge), one
  re-scoring per response; S_region / S_image is that box's area;
- ``pixel``: the view transform ``intervention`` (default ``occlude_box``: the sample's evidence box painted over
  in pixels) per (sample, view); S_region / S_image is the evidence box's area (``dspo_evidence/mask_area``).

Per response, with candidates e_k of step 3 located in the response's tokens:

    p_k = exp(sum of log-probs over e_k's tokens),  Delta P_k = (p_k - p^CF_k)(1 - area),  R_cf = mean_k Delta P_k,
    w_k = softmax_k(Delta P_k / tau),   R_div^w = sum_k w_k t_k  (t_k: the logged per-candidate DEDR terms)
    R   = R_rewards + cf_weight * R_cf + div_weight * (R_div^w - mean_k t_k)

``div_weight`` defaults to the ``dspo_div`` reward's weight (read in ``bind``; 0.3 in the paper), so R is the
paper's; a different explicit value is a ConfigError naming both keys. Malformed responses (``dspo_format`` 0,
truncated ones included, or K < 2) get R_cf = 0 and keep their reward; they have no box to mask and are counted
(``cvig/no_box_frac``). p_k is the product of e_k's token probabilities at its position in the rollout (spec:
proposed). tau = 0.1 (proposed).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Dict, List, Optional, Tuple

import torch

from mmrl.algos.base import AdvantageOutput
from mmrl.algos.dspo_math import char_to_token_span, cvig_weights, delta_p, span_prob
from mmrl.algos.grpo import grpo_advantages, reward_metrics
from mmrl.algos.spec import AlgorithmSpec, Intervention, Needs, StepBatch, register_algorithm
from mmrl.errors import ConfigError
from mmrl.rewards.dspo_format import TERM, parse_dspo

P_SOURCES = ("rescore", "sampling")
MASKS = ("feature", "pixel")


@dataclass
class DSPOParams:
    cvig: bool = True  # counterfactual gating (R_cf and the weights w); false = the "without CVIG" ablation
    mask: str = "feature"  # V^CF: zero the visual tokens in the response's box (feature) or a view transform (pixel)
    intervention: str = ""  # mask: pixel only: the view transform of the counterfactual pass ("" = occlude_box)
    intervention_params: Dict[str, Any] = field(default_factory=dict)  # mask: pixel only
    p_source: str = "rescore"  # p_k from an unchanged-view re-scoring pass, or from the sampling log-probs
    tokenizer: str = ""  # model / tokenizer folder ("tiny" for the embedded model) used to find each candidate's tokens (required with cvig)
    tau: float = 0.1  # softmax temperature of w (proposed)
    cf_weight: float = 0.1
    div_weight: Optional[float] = None  # None: the dspo_div reward's weight (bind); another value is refused
    k: Optional[int] = None  # required number of candidates (None: any K >= 2)
    std_scale: str = "group"
    unbiased_std: bool = True
    eps: float = 1e-6

    def __post_init__(self):
        if self.p_source not in P_SOURCES:
            raise ValueError(f"p_source must be one of {P_SOURCES}, got {self.p_source!r}")
        if self.tau <= 0:
            raise ValueError(f"tau must be > 0, got {self.tau}")
        if self.mask not in MASKS:
            raise ValueError(f"mask must be one of {MASKS}, got {self.mask!r}")


@lru_cache(maxsize=4)
def _tokenizer(path: str):
    from transformers import AutoTokenizer

    from mmrl.models.loading import resolve_model_path

    return AutoTokenizer.from_pretrained(resolve_model_path(path))


def token_offsets(tokenizer, ids: List[int], upto: int) -> List[Tuple[int, int]]:
    """Character range of each response token in ``decode(ids, skip_special_tokens=True)`` (the rollout's text),
    by decoding prefixes (exact for any tokenizer); stops once ``upto`` characters are covered."""
    out, prev = [], 0
    for i in range(len(ids)):
        cur = len(tokenizer.decode(ids[: i + 1], skip_special_tokens=True))
        out.append((prev, cur))
        prev = cur
        if cur >= upto:
            break
    return out


def cvig_row(text: str, ids: List[int], lp: torch.Tensor, lp_cf: torch.Tensor, area: Optional[float],
             terms: List[float], tokenizer, tau: float, k: Optional[int]) -> Optional[Tuple[float, float, float]]:
    """``(R_cf, R_div^w, mean_k t_k)`` of one response, or None when it is malformed, has K < 2 or was not
    re-scored (NaN). ``area`` None: the area of the response's own box (feature masking)."""
    p = parse_dspo(text, k=k)
    if not p.ok or len(p.candidates) < 2 or len(p.candidates) > len(terms) or bool(torch.isnan(lp_cf).any()):
        return None
    if area is None:
        area = (p.box[2] - p.box[0]) * (p.box[3] - p.box[1])
    offs = token_offsets(tokenizer, ids, max(b for _, b in p.candidate_spans))
    spans = [char_to_token_span(offs, s) for s in p.candidate_spans]
    pk = torch.tensor([span_prob(lp, s) for s in spans], dtype=torch.float64)
    pcf = torch.tensor([span_prob(lp_cf, s) for s in spans], dtype=torch.float64)
    dp = delta_p(pk, pcf, area)
    w = cvig_weights(dp, tau)
    t = torch.tensor(terms[: len(spans)], dtype=torch.float64)
    return float(dp.mean()), float((w * t).sum()), float(t.mean())


def response_box(text: str, k: Optional[int]) -> Optional[Tuple[float, float, float, float]]:
    """The step-1 box of a well-formed response (what feature masking zeroes), else None."""
    p = parse_dspo(text, k=k)
    return p.box if p.ok else None


@register_algorithm("dspo")
class DSPO(AlgorithmSpec):
    """DSPO: GRPO advantage of the DSPO reward, with CVIG's R_cf and gated R_div (module docstring)."""

    Params = DSPOParams

    def __init__(self, params, loss, key: str = "algorithm.params"):
        super().__init__(params, loss, key)
        self.key = key
        p = self.params
        if p.cvig and not p.tokenizer:
            raise ConfigError(f"config key '{key}.tokenizer': dspo with cvig needs the model or tokenizer folder "
                              f"to find each candidate's tokens (or set {key}.cvig: false)")
        if p.mask == "feature" and (p.intervention or p.intervention_params):
            which = "intervention" if p.intervention else "intervention_params"
            raise ConfigError(f"config key '{key}.{which}' applies to {key}.mask: pixel (feature masking zeroes "
                              f"the visual tokens in each response's own box)")

    def bind(self, cfg) -> None:
        """``div_weight`` from the ``dspo_div`` reward's weight (0 without one); an explicit different value, or
        CVIG without the rewards it reads, is a ConfigError naming the keys."""
        names = [str(r.name) for r in cfg.rewards]
        div = [i for i, n in enumerate(names) if n == "dspo_div"]
        w = float(cfg.rewards[div[0]].weight) if div else 0.0
        if self.params.div_weight is None:
            self.params.div_weight = w
        elif abs(self.params.div_weight - w) > 1e-12:
            other = f"'rewards.{div[0]}.weight' (dspo_div) = {w}" if div else "no 'dspo_div' reward in 'rewards' (weight 0)"
            raise ConfigError(f"config key '{self.key}.div_weight' = {self.params.div_weight} differs from {other}: "
                              f"the two must be equal for R to be DSPO's (leave {self.key}.div_weight unset to use "
                              f"the reward's weight)")
        if self.params.cvig:
            need = ["dspo_div"] + (["dspo_evidence"] if self.params.mask == "pixel" else [])
            missing = [n for n in need if n not in names]
            if missing:
                raise ConfigError(f"config key 'rewards': algorithm 'dspo' with cvig (mask: {self.params.mask}) needs "
                                  f"the reward '{missing[0]}' (weight 0 logs it without adding it)")

    def needs(self) -> Needs:
        p = self.params
        if not p.cvig:
            return Needs()
        if p.mask == "feature":
            k = p.k
            cf = Intervention("identity", feature_box=lambda text: response_box(text, k))
        else:
            cf = Intervention(p.intervention or "occlude_box", dict(p.intervention_params))
        rescore = {"cvig": cf}
        if p.p_source == "rescore":
            rescore["cvig_orig"] = Intervention("identity")
        return Needs(rescore=rescore)

    def shaped_rewards(self, batch: StepBatch) -> Tuple[torch.Tensor, Dict[str, float]]:
        """The batch's rewards plus CVIG's terms (unchanged with ``cvig: false``) and CVIG metrics."""
        r = batch.rewards.to(torch.float64).clone()
        if not self.params.cvig or len(batch) == 0:
            return r, {}
        if self.params.div_weight is None:
            raise ConfigError(f"config key '{self.key}.div_weight' is unset and the spec was not bound to a run "
                              f"config (build it with build_algorithm(cfg.algorithm, cfg), or set it)")
        pixel = self.params.mask == "pixel"
        need = [TERM.format(0)] + (["dspo_evidence/mask_area"] if pixel else [])
        missing = [n for n in need if n not in batch.components]
        if missing:
            raise ConfigError(f"algorithm 'dspo' with cvig needs the rewards 'dspo_div'"
                              f"{' and dspo_evidence' if pixel else ''} in 'rewards' (missing component {missing[0]})")
        if "cvig" not in batch.rescored:
            raise ConfigError("algorithm 'dspo': the step gave no 'cvig' re-scoring pass")
        k_max = sum(1 for n in batch.components if n.startswith("dspo_div/t"))
        orig = batch.rescored["cvig_orig"] if self.params.p_source == "rescore" else batch.logprobs
        tok = _tokenizer(self.params.tokenizer)
        fmt = batch.components.get("dspo_format")  # 0 also for truncated responses, which the text alone hides
        rcf, shift, used, no_box = [], [], 0, 0
        for i in range(len(batch)):
            lp_cf = batch.rescored["cvig"][i]
            no_box += int(bool(torch.isnan(lp_cf).any()))
            if fmt is not None and float(fmt[i]) == 0.0:
                rcf.append(0.0)
                continue
            terms = [float(batch.components[TERM.format(j)][i]) for j in range(k_max)]
            area = float(batch.components["dspo_evidence/mask_area"][i]) if pixel else None
            res = cvig_row(batch.texts[i], batch.response_ids[i].tolist(), orig[i], lp_cf, area, terms, tok,
                           self.params.tau, self.params.k)
            if res is None:
                rcf.append(0.0)
                continue
            cf, div_w, div_u = res
            r[i] += self.params.cf_weight * cf + self.params.div_weight * (div_w - div_u)
            rcf.append(cf)
            shift.append(div_w - div_u)
            used += 1
        metrics = {"cvig/r_cf": sum(rcf) / len(rcf), "cvig/scored_frac": used / len(batch),
                   "cvig/div_shift": sum(shift) / len(shift) if shift else 0.0}
        if not pixel:  # responses without a box to zero (not re-scored)
            metrics["cvig/no_box_frac"] = no_box / len(batch)
        return r, metrics

    def advantages(self, batch: StepBatch) -> AdvantageOutput:
        r, metrics = self.shaped_rewards(batch)
        gids = batch.groups["prompt"]
        adv = grpo_advantages(r, gids, self.params.std_scale, self.params.unbiased_std, self.params.eps)
        r32 = r.to(batch.rewards.dtype)
        return AdvantageOutput(advantages=adv.to(batch.rewards.dtype), rewards=r32,
                               metrics={**reward_metrics(r32, gids, adv), **metrics})
