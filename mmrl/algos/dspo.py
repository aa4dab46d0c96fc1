"""DSPO (Diversity-aware Subjective Policy Optimization; arXiv 2609.36775, specs/algorithms.md §3): the spec.

Reward (the paper): R = 1.0 acc + 0.1 fmt + 0.1 R_cf + 0.3 R_div, then the standard GRPO advantage.

The rewards ``dspo_accuracy``, ``dspo_format``, ``dspo_div`` (R_div with uniform w) and ``dspo_evidence`` run before
re-scoring (``mmrl/rewards/dspo_rewards.py``). With ``cvig: true`` this spec asks the step for two re-scoring
passes of the SAME response tokens (fixed rollout): ``cvig`` under ``intervention`` (the evidence region masked) and
``cvig_orig`` under the unchanged view (``p_source: rescore``; ``sampling`` uses the rollout's log-probs instead and
saves that pass). Per response, with candidates e_k of step 3 located in the response's tokens:

    p_k = exp(sum of log-probs over e_k's tokens),  Delta P_k = (p_k - p^CF_k)(1 - area),  R_cf = mean_k Delta P_k,
    w_k = softmax_k(Delta P_k / tau),   R_div^w = sum_k w_k t_k  (t_k: the logged per-candidate DEDR terms)
    R   = R_rewards + cf_weight * R_cf + div_weight * (R_div^w - mean_k t_k)

so that ``div_weight`` must equal the ``dspo_div`` reward's weight (0.3 in the paper) for R to be the paper's.
Malformed responses (``dspo_format`` 0, truncated ones included, or K < 2) get R_cf = 0 and keep their reward.

Our reading (not the paper): the masked region is the sample's **evidence box** in pixels (the default
intervention ``occlude_box``), not the response's own box, and not the post-encoder visual tokens the paper zeroes;
the step re-scores per (sample, view), so a per-response region needs a step hook that is not built yet.
p_k is the product of e_k's token probabilities at its position in the rollout (spec: proposed). tau = 0.1
(proposed).
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


@dataclass
class DSPOParams:
    cvig: bool = True  # counterfactual gating (R_cf and the weights w); false = the "without CVIG" ablation
    intervention: str = "occlude_box"  # view transform of the counterfactual pass
    intervention_params: Dict[str, Any] = field(default_factory=dict)
    p_source: str = "rescore"  # p_k from an unchanged-view re-scoring pass, or from the sampling log-probs
    tokenizer: str = ""  # model / tokenizer folder ("tiny" for the embedded model) used to find each candidate's tokens (required with cvig)
    tau: float = 0.1  # softmax temperature of w (proposed)
    cf_weight: float = 0.1
    div_weight: float = 0.3  # must equal the dspo_div reward's weight
    k: Optional[int] = None  # required number of candidates (None: any K >= 2)
    std_scale: str = "group"
    unbiased_std: bool = True
    eps: float = 1e-6

    def __post_init__(self):
        if self.p_source not in P_SOURCES:
            raise ValueError(f"p_source must be one of {P_SOURCES}, got {self.p_source!r}")
        if self.tau <= 0:
            raise ValueError(f"tau must be > 0, got {self.tau}")


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


def cvig_row(text: str, ids: List[int], lp: torch.Tensor, lp_cf: torch.Tensor, area: float, terms: List[float],
             tokenizer, tau: float, k: Optional[int]) -> Optional[Tuple[float, float, float]]:
    """``(R_cf, R_div^w, mean_k t_k)`` of one response, or None when it is malformed or has K < 2."""
    p = parse_dspo(text, k=k)
    if not p.ok or len(p.candidates) < 2 or len(p.candidates) > len(terms):
        return None
    offs = token_offsets(tokenizer, ids, max(b for _, b in p.candidate_spans))
    spans = [char_to_token_span(offs, s) for s in p.candidate_spans]
    pk = torch.tensor([span_prob(lp, s) for s in spans], dtype=torch.float64)
    pcf = torch.tensor([span_prob(lp_cf, s) for s in spans], dtype=torch.float64)
    dp = delta_p(pk, pcf, area)
    w = cvig_weights(dp, tau)
    t = torch.tensor(terms[: len(spans)], dtype=torch.float64)
    return float(dp.mean()), float((w * t).sum()), float(t.mean())


@register_algorithm("dspo")
class DSPO(AlgorithmSpec):
    """DSPO: GRPO advantage of the DSPO reward, with CVIG's R_cf and gated R_div (module docstring)."""

    Params = DSPOParams

    def __init__(self, params, loss, key: str = "algorithm.params"):
        super().__init__(params, loss, key)
        if self.params.cvig and not self.params.tokenizer:
            raise ConfigError(f"config key '{key}.tokenizer': dspo with cvig needs the model or tokenizer folder "
                              f"to find each candidate's tokens (or set {key}.cvig: false)")

    def needs(self) -> Needs:
        if not self.params.cvig:
            return Needs()
        rescore = {"cvig": Intervention(self.params.intervention, dict(self.params.intervention_params))}
        if self.params.p_source == "rescore":
            rescore["cvig_orig"] = Intervention("identity")
        return Needs(rescore=rescore)

    def shaped_rewards(self, batch: StepBatch) -> Tuple[torch.Tensor, Dict[str, float]]:
        """The batch's rewards plus CVIG's terms (unchanged with ``cvig: false``) and CVIG metrics."""
        r = batch.rewards.to(torch.float64).clone()
        if not self.params.cvig or len(batch) == 0:
            return r, {}
        need = [TERM.format(0), "dspo_evidence/mask_area"]
        missing = [n for n in need if n not in batch.components]
        if missing:
            raise ConfigError(f"algorithm 'dspo' with cvig needs the rewards 'dspo_div' and 'dspo_evidence' in "
                              f"'rewards' (missing component {missing[0]})")
        if "cvig" not in batch.rescored:
            raise ConfigError("algorithm 'dspo': the step gave no 'cvig' re-scoring pass")
        k_max = sum(1 for n in batch.components if n.startswith("dspo_div/t"))
        orig = batch.rescored["cvig_orig"] if self.params.p_source == "rescore" else batch.logprobs
        tok = _tokenizer(self.params.tokenizer)
        fmt = batch.components.get("dspo_format")  # 0 also for truncated responses, which the text alone hides
        rcf, wmax, used = [], [], 0
        for i in range(len(batch)):
            if fmt is not None and float(fmt[i]) == 0.0:
                rcf.append(0.0)
                continue
            terms = [float(batch.components[TERM.format(j)][i]) for j in range(k_max)]
            res = cvig_row(batch.texts[i], batch.response_ids[i].tolist(), orig[i], batch.rescored["cvig"][i],
                           float(batch.components["dspo_evidence/mask_area"][i]), terms, tok, self.params.tau,
                           self.params.k)
            if res is None:
                rcf.append(0.0)
                continue
            cf, div_w, div_u = res
            r[i] += self.params.cf_weight * cf + self.params.div_weight * (div_w - div_u)
            rcf.append(cf)
            wmax.append(div_w - div_u)
            used += 1
        metrics = {"cvig/r_cf": sum(rcf) / len(rcf), "cvig/scored_frac": used / len(batch),
                   "cvig/div_shift": sum(wmax) / len(wmax) if wmax else 0.0}
        return r, metrics

    def advantages(self, batch: StepBatch) -> AdvantageOutput:
        r, metrics = self.shaped_rewards(batch)
        gids = batch.groups["prompt"]
        adv = grpo_advantages(r, gids, self.params.std_scale, self.params.unbiased_std, self.params.eps)
        r32 = r.to(batch.rewards.dtype)
        return AdvantageOutput(advantages=adv.to(batch.rewards.dtype), rewards=r32,
                               metrics={**reward_metrics(r32, gids, adv), **metrics})
