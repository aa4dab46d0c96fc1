"""The fixed-rollout counterfactual diagnostic (PACG abstract; specs/algorithms.md §2).

For each response (generated once, then held fixed) the same tokens are re-scored under an intervened media
(default VPPO's 14 px patch blackening, p = 0.5) and compared with their log-probs under the original media:

- EFS per token ``clamp(e^d − d − 1, 0, 10)`` with ``d = clamp(logp_int − logp_orig, ±20)``, and per claim;
- persistence per claim ``P_c = mean_{t∈c} min(1, e^{d_t})`` (claims: ``pacg_claims``, from the ``<think>``
  span, no labels), and ``persistence_content`` over the claim's content-word tokens where the ``extractor``
  marks them (NaN elsewhere; PACG's ``persistence: content``);
- where a ``labeler(sentence, sample.meta) -> True | False | None`` knows which claims the media supports:
  the share of correct responses with at least one unsupported claim (27.81% for Qwen2.5-VL-7B before RL in
  the paper) and the mean persistence of supported vs unsupported claims.

``diagnose_samples`` returns one record per response; ``summarize`` reduces records to the report's numbers.
``also={name: (transform, params)}`` re-scores the same responses under further interventions (e.g. ``full_mask``
next to the patch blackening): records then hold ``efs_tokens_<name>`` and per claim ``persistence_<name>`` and
``efs_<name>``, and ``summarize_all`` adds ``<key>_<name>`` for every intervention-dependent number.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from mmrl.algos.pacg_claims import PERCEPTION_LEXICON, extract_claims
from mmrl.algos.pacg_gate import claim_scores, efs_tokens, log_ratio, segments_of
from mmrl.data.schema import LETTERS
from mmrl.models.scoring import response_logprobs
from mmrl.rewards.parsing import parse_choice
from mmrl.rollout.base import SamplingParams, build_engine
from mmrl.rollout.step_inputs import build_step_inputs, intervened_inputs
from mmrl.views.patch_transforms import VPPO_PATCH

Labeler = Callable[[str, dict], Optional[bool]]
# the summary numbers that depend on the intervention (reported again per extra intervention of ``also``)
INTERVENTION_KEYS = ("efs_token_mean", "efs_claim_mean", "persistence_mean", "persistence_supported",
                     "persistence_unsupported", "efs_supported", "efs_unsupported")


def intervened_logprobs(model, processor, si, trajs, data_cfg, transform: str, params: Mapping, seed: int = 0,
                        micro_batch: int = 16) -> List[torch.Tensor]:
    """Per-token log-probs of each trajectory's response under its view's media after ``transform(**params)``
    (one seeded draw per (sample, view), the step's re-scoring stage: ``mmrl.rollout.step_inputs.intervened_inputs``)."""
    keys = sorted({(t.sample_id, t.view) for t in trajs})
    built = intervened_inputs(si, keys, processor, data_cfg, transform, dict(params), seed=seed)
    items = [(built[(t.sample_id, t.view)], t.response_ids) for t in trajs]
    return response_logprobs(model, items, 1.0, micro_batch, processor.tokenizer.pad_token_id)


def response_records(trajs, si, orig: Sequence[torch.Tensor], inter: Sequence[torch.Tensor], decode,
                     labeler: Optional[Labeler] = None, lexicon: Sequence[str] = PERCEPTION_LEXICON,
                     extractor=None) -> List[dict]:
    """Records for trajectories whose original and intervened per-token log-probs are given."""
    orig = [o.detach().float().cpu() for o in orig]
    inter = [x.detach().float().cpu() for x in inter]
    claims = extract_claims(decode, [t.response_ids.tolist() for t in trajs], lexicon, extractor)
    rows = torch.tensor([c.row for c in claims], dtype=torch.long)
    starts = torch.tensor([c.tok_start for c in claims], dtype=torch.long)
    ends = torch.tensor([c.tok_end for c in claims], dtype=torch.long)
    pers, cefs = claim_scores(list(inter), list(orig), rows, starts, ends)
    has = [k for k, c in enumerate(claims) if c.content]  # claims whose content words the extractor marked
    content = {}
    if has:
        owner, cs, ce = segments_of([claims[k].content for k in has])
        cp, _ = claim_scores(list(inter), list(orig), rows[has][owner], cs, ce, owner, len(has))
        content = {k: float(cp[j]) for j, k in enumerate(has)}
    recs = []
    for i, t in enumerate(trajs):
        sample = si.samples[t.sample_id]
        cands = si.candidates[(t.sample_id, t.view)]
        pred = parse_choice(t.text, LETTERS[: len(cands)])
        efs = efs_tokens(log_ratio(inter[i], orig[i]))
        recs.append({"id": t.sample_id, "qtype": sample.qtype, "response": t.text, "pred": pred,
                     "expected": t.expected, "correct": bool(pred is not None and pred == t.expected),
                     "truncated": bool(getattr(t, "truncated", False)), "length": int(t.response_ids.numel()),
                     "efs_tokens": [round(float(x), 5) for x in efs], "efs_mean": float(efs.mean()) if efs.numel() else 0.0,
                     "claims": []})
    for k, c in enumerate(claims):
        meta = si.samples[trajs[c.row].sample_id].meta
        recs[c.row]["claims"].append({"text": c.text, "tokens": [c.tok_start, c.tok_end],
                                      "persistence": float(pers[k]), "efs": float(cefs[k]),
                                      "persistence_content": content.get(k, float("nan")),
                                      "content_tokens": sum(e - s for s, e in c.content),
                                      "supported": labeler(c.text, meta) if labeler is not None else None})
    return recs


@torch.no_grad()
def diagnose_samples(model, processor, samples, data_cfg, intervention=VPPO_PATCH,
                     n: int = 1, max_new_tokens: int = 64, temperature: float = 1.0, greedy: bool = True, seed: int = 0,
                     labeler: Optional[Labeler] = None, lexicon: Sequence[str] = PERCEPTION_LEXICON, extractor=None,
                     batch_prompts: int = 16, engine=None,
                     also: Optional[Mapping[str, Tuple[str, Mapping]]] = None) -> List[dict]:
    """Generate ``n`` responses per sample, re-score them under ``intervention`` (and each of ``also``) and return
    per-response records."""
    engine = engine or build_engine("hf", model=model, processor=processor)
    tok = processor.tokenizer
    decode = lambda ids: tok.decode(ids, skip_special_tokens=False)  # noqa: E731
    pad = tok.pad_token_id
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, greedy=greedy)
    was_training = model.training
    model.eval()
    recs: List[dict] = []
    try:
        for s in range(0, len(samples), batch_prompts):
            si = build_step_inputs(samples[s : s + batch_prompts], processor, data_cfg, lambda role, *_: n, None, seed=seed)
            torch.manual_seed(seed + s)
            trajs = engine.generate(si.requests, params) if si.requests else []
            if not trajs:
                continue
            orig = response_logprobs(model, [(si.requests[t.inputs_key].inputs, t.response_ids) for t in trajs], 1.0, 16, pad)
            inter = intervened_logprobs(model, processor, si, trajs, data_cfg, intervention[0], intervention[1], seed + s)
            batch = response_records(trajs, si, orig, inter, decode, labeler, lexicon, extractor)
            for name, (transform, tparams) in (also or {}).items():
                extra = intervened_logprobs(model, processor, si, trajs, data_cfg, transform, tparams, seed + s)
                for r, x in zip(batch, response_records(trajs, si, orig, extra, decode, None, lexicon, extractor)):
                    r[f"efs_tokens_{name}"] = x["efs_tokens"]
                    for c, cx in zip(r["claims"], x["claims"]):
                        c[f"persistence_{name}"], c[f"efs_{name}"] = cx["persistence"], cx["efs"]
                        c[f"persistence_content_{name}"] = cx["persistence_content"]
            recs.extend(batch)
    finally:
        model.train(was_training)
    return recs


def _mean(xs: List[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def summarize(records: Sequence[Mapping], under: Optional[str] = None) -> Dict[str, float]:
    """The diagnostic's numbers over records (NaN where a quantity has no members); ``under``: those of the extra
    intervention ``under`` of ``diagnose_samples(also=...)``."""
    if under is not None:
        records = [{**r, "efs_tokens": r[f"efs_tokens_{under}"],
                    "claims": [{**c, "persistence": c[f"persistence_{under}"], "efs": c[f"efs_{under}"]} for c in r["claims"]]}
                   for r in records]
    correct = [r for r in records if r["correct"]]
    claims = [c for r in records for c in r["claims"]]
    sup = [c for c in claims if c["supported"] is True]
    uns = [c for c in claims if c["supported"] is False]
    labelled = any(c["supported"] is not None for c in claims)
    toks = [x for r in records for x in r["efs_tokens"]]
    out = {
        "n_responses": float(len(records)), "accuracy": _mean([float(r["correct"]) for r in records]),
        "n_claims": float(len(claims)), "claims_per_response": len(claims) / len(records) if records else float("nan"),
        "efs_token_mean": _mean(toks), "efs_claim_mean": _mean([c["efs"] for c in claims]),
        "persistence_mean": _mean([c["persistence"] for c in claims]),
    }
    if labelled:
        out.update({
            "n_supported": float(len(sup)), "n_unsupported": float(len(uns)),
            "persistence_supported": _mean([c["persistence"] for c in sup]),
            "persistence_unsupported": _mean([c["persistence"] for c in uns]),
            "efs_supported": _mean([c["efs"] for c in sup]), "efs_unsupported": _mean([c["efs"] for c in uns]),
            "correct_with_unsupported": _mean([float(any(c["supported"] is False for c in r["claims"])) for r in correct]),
        })
    return {k: (float(v) if not (isinstance(v, float) and math.isnan(v)) else float("nan")) for k, v in out.items()}


def summarize_all(records: Sequence[Mapping], also: Sequence[str] = ()) -> Dict[str, float]:
    """``summarize`` plus ``<key>_<name>`` of every ``INTERVENTION_KEYS`` number under each extra intervention."""
    out = summarize(records)
    for name in also:
        out.update({f"{k}_{name}": v for k, v in summarize(records, name).items() if k in INTERVENTION_KEYS})
    return out


def diagnose_eval(labeler: Optional[Labeler] = None,
                  intervention=VPPO_PATCH, limit: int = 0):
    """An ``eval_fn`` for ``RLTrainer.run``: the diagnostic's numbers on ``data.test`` every ``train.eval_every``
    steps, logged as ``diag/<name>`` next to the training metrics (``limit``: first samples only; 0 = all)."""
    cache: Dict[str, list] = {}

    def fn(trainer) -> Dict[str, float]:
        from mmrl.data.annotations import load_samples

        cfg = trainer.cfg
        if "samples" not in cache:
            samples, _ = load_samples(cfg.data.test, cfg.data.media_root, on_error="skip")
            cache["samples"] = samples[:limit] if limit else samples
        recs = diagnose_samples(trainer.model, trainer.processor, cache["samples"], cfg.data, intervention,
                                max_new_tokens=cfg.rollout.max_new_tokens, labeler=labeler, seed=cfg.train.seed)
        return {f"diag/{k}": v for k, v in summarize(recs).items()}

    return fn
