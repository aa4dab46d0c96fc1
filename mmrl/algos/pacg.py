"""PACG — Persistence-Aware Credit Gating as a wrapper over any base (specs/algorithms.md §2, **proposed spec**).

``algorithm: {name: pacg, params: {base: dapo, kappa: 1.0, gamma: 0.5, eta: 0.5}}`` (also over ``vppo``, ``grpo``
or ``{name: ..., params: {...}}``). The step re-scores every response under the intervention (default VPPO's
14 px patch blackening, p = 0.5; ``intervention: full_mask`` is the option), sharing the pass with the base when
the base asks for the same one (VPPO). Then:

1. the base computes its advantages (with its own shaping: DAPO's sequence advantage, VPPO's TAS and TGF);
2. claims are the visual-claim sentences of each response's ``<think>`` span (``pacg_claims``: perception lexicon
   and/or a ``claim_extractor`` given as ``module:function``); no labels are read;
3. per claim (of the rows the base's ``select`` keeps) ``P_c = mean_{t∈c} min(1, e^{d_t})`` and ``EFS_c`` with ``d = clamp(logp_int − logp_orig, ±20)``, where
   ``logp_orig`` is the trainer's re-scoring of the unchanged view (``orig_source: rescore``, default: both sides
   from one scorer, as the actor's recomputation in verl; the sampler's bf16 numerics never enter the gate) or the
   step's sampling log-probs (``orig_source: sampling``, one pass fewer). ``persistence: claim`` (default, the
   paper's) averages over every token of the claim sentence; ``persistence: content`` over the claim's
   content-word tokens ``C(c)`` only, ``P_c = mean_{t∈C(c)} min(1, e^{d_t})`` (the spans the ``claim_extractor``
   returns, ``pacg_claims``; a claim without one is not gated). Why (issue 29): a claim of ~11.5 tokens has ~10.5
   template tokens whose retention is 1 whatever the image, so the sentence mean sits at 0.98–0.99 and the
   image-dependent token barely moves it; this option is ours, not the paper's;
4. the gate (``pacg_gate.persistence_gate``; batch-wide or ``per_group`` statistics, ``mode: zscore | quantile``)
   scales the positive per-token advantages of flagged claims by ``g_c = max(γ, 1 − η(z_c − κ))``, before the loss.

The result is a per-token advantage ``[N, T]``. Our reading of the abstract: the policy's own log-probs of the
unchanged view as ``logp_orig``; a sentence split on ``. ! ?`` and line breaks; the unbiased std over claims; the quantile variant's
gain measured from the quantile's z instead of κ.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch

from mmrl.algos.base import AdvantageOutput
from mmrl.algos.pacg_claims import PERCEPTION_LEXICON, extract_claims
from mmrl.algos.pacg_gate import claim_scores, efs_tokens, gate_advantages, log_ratio, persistence_gate, segments_of
from mmrl.algos.spec import Intervention, Needs, StepBatch, WrapperParams, WrapperSpec, register_algorithm
from mmrl.algos.vppo import (check_orig_source, default_intervention_params, intervention_key, original_logprobs,
                             with_original)
from mmrl.errors import ConfigError
from mmrl.registry import import_object

PERSISTENCE = ("claim", "content")


@dataclass
class PACGParams(WrapperParams):
    base: Any = "dapo"
    kappa: float = 1.0  # z threshold
    gamma: float = 0.5  # gain floor
    eta: float = 0.5  # gain slope beyond the threshold
    mode: str = "zscore"  # zscore | quantile
    q: float = 0.2  # quantile mode: flag the top q share of claims
    per_group: bool = False  # μ, σ per prompt group instead of over the batch
    lexicon: Optional[List[str]] = None  # perception lexicon (None = pacg_claims.PERCEPTION_LEXICON; [] = none)
    claim_extractor: Optional[str] = None  # module:function(sentence) -> bool, OR-ed with the lexicon
    intervention: str = "patch_mask"
    intervention_params: Optional[Dict[str, Any]] = None  # None: vppo.default_intervention_params(intervention)
    persistence: str = "claim"  # claim (the paper's: every token of the sentence) | content (its content words)
    orig_source: str = "rescore"  # logp_orig: the trainer's re-scoring of the unchanged view (rescore) or the sampler's (sampling)

    def __post_init__(self):
        self.intervention_params = default_intervention_params(self.intervention, self.intervention_params)
        check_orig_source(self.orig_source)
        if self.mode not in ("zscore", "quantile"):
            raise ValueError(f"pacg mode must be zscore or quantile, got {self.mode!r}")
        if not 0.0 < self.q < 1.0 or not 0.0 <= self.gamma <= 1.0 or self.eta < 0:
            raise ValueError(f"pacg needs 0 < q < 1, 0 <= gamma <= 1, eta >= 0; got q={self.q}, gamma={self.gamma}, "
                             f"eta={self.eta}")
        if self.lexicon is not None and not self.lexicon and self.claim_extractor is None:
            raise ValueError("pacg has neither a lexicon nor a claim_extractor: no sentence could be a claim")


@register_algorithm("pacg")
class PACG(WrapperSpec):
    """PACG (proposed spec): over any base algorithm, scales down the positive advantages of visual claims whose
    log-probs persist when the image is intervened on (re-scored), a text-driven claim."""

    Params = PACGParams

    def __init__(self, params: Any, loss: Any, key: str = "algorithm.params"):
        super().__init__(params, loss, key)
        p = self.params
        if p.persistence not in PERSISTENCE:
            raise ConfigError(f"config key '{key}.persistence' must be one of {', '.join(PERSISTENCE)}, "
                              f"got {p.persistence!r}")
        if p.persistence == "content" and not p.claim_extractor:
            raise ConfigError(f"config key '{key}.persistence' = content needs '{key}.claim_extractor' (a function "
                              f"that returns the content words' spans, e.g. mmrl.data.synth_claims:claim_content)")
        self.lexicon = list(PERCEPTION_LEXICON) if p.lexicon is None else list(p.lexicon)
        self.extractor = None
        if p.claim_extractor:
            try:
                self.extractor = import_object(p.claim_extractor, "claim extractor")
            except KeyError as e:
                raise ConfigError(f"config key '{key}.claim_extractor': {e.args[0]}") from None
        iv = Intervention(p.intervention, dict(p.intervention_params))
        base_rescore = self.base.needs().rescore
        # share the base's pass when it is the same intervention (VPPO's patch blackening)
        self.rescore_key = next((k for k, v in base_rescore.items()
                                 if v.transform == iv.transform and dict(v.params) == iv.params),
                                intervention_key(iv.transform, iv.params))
        self.intervention = iv

    def needs(self) -> Needs:
        base = self.base.needs()
        rescore = dict(base.rescore)
        rescore.setdefault(self.rescore_key, self.intervention)
        return Needs(old=base.old, ref=base.ref, rescore=with_original(rescore, self.params.orig_source))

    def advantages(self, batch: StepBatch) -> AdvantageOutput:
        out = self.base.advantages(batch)
        decode = getattr(batch, "decode", None)
        if decode is None:
            raise ValueError("PACG needs StepBatch.decode (the tokenizer's decode) to find the claims' tokens")
        inter = batch.rescored.get(self.rescore_key)
        if inter is None or len(inter) != len(batch):
            raise ValueError(f"PACG needs the re-scored log-probs '{self.rescore_key}' of every response "
                             f"(got {0 if inter is None else len(inter)} for {len(batch)})")
        p = self.params
        orig = original_logprobs(batch, p.orig_source, "PACG")
        # the gate's statistics run over the claims of the rows the base will train (its select: e.g. DAPO's
        # dynamic sampling drops uniform groups, whose advantages are 0 anyway)
        trained = self.base.select(batch, out).train_mask
        claims = [c for c in extract_claims(decode, [r.tolist() for r in batch.response_ids], self.lexicon, self.extractor)
                  if bool(trained[c.row])]
        n_found = len(claims)
        if p.persistence == "content":  # measured on the content words; a claim without any is not gated
            claims = [c for c in claims if c.content]
        rows = torch.tensor([c.row for c in claims], dtype=torch.long)
        starts = torch.tensor([c.tok_start for c in claims], dtype=torch.long)
        ends = torch.tensor([c.tok_end for c in claims], dtype=torch.long)
        if p.persistence == "content":
            owner, seg_s, seg_e = segments_of([c.content for c in claims])
            pers, cefs = claim_scores(list(inter), orig, rows[owner] if rows.numel() else rows,
                                      seg_s, seg_e, owner, len(claims))
        else:
            pers, cefs = claim_scores(list(inter), orig, rows, starts, ends)
        groups = batch.groups["prompt"][rows] if (p.per_group and rows.numel()) else None
        gate = persistence_gate(pers, groups, p.kappa, p.gamma, p.eta, p.mode, p.q)
        adv = gate_advantages(out.advantages, batch.lengths.tolist(), rows, starts, ends, gate.gain)
        tok_efs = torch.cat([efs_tokens(log_ratio(a, o)) for a, o in zip(inter, orig)]) if len(batch) else torch.zeros(0)
        n_c = int(rows.numel())
        metrics = {**out.metrics, "pacg/claims": float(n_c), "pacg/claims_not_measured": float(n_found - n_c),
                   "pacg/responses_with_claims": float(rows.unique().numel()) / max(len(batch), 1),
                   "pacg/flagged_frac": float(gate.flagged.float().mean()) if n_c else 0.0,
                   "pacg/persistence_mean": float(pers.mean()) if n_c else 0.0,
                   "pacg/efs_claim_mean": float(cefs.mean()) if n_c else 0.0,
                   "pacg/efs_token_mean": float(tok_efs.mean()) if tok_efs.numel() else 0.0,
                   "pacg/gain_flagged_mean": float(gate.gain[gate.flagged].mean()) if bool(gate.flagged.any()) else 1.0}
        return AdvantageOutput(advantages=adv, train_mask=out.train_mask, rewards=out.rewards, metrics=metrics)
