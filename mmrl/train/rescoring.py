"""Fixed-rollout re-scoring: the same response tokens, teacher-forced under an intervened view of the media.

For each trajectory, ``log π(y_t | prompt, I′, y_<t)`` with ``I′ = transform(I)`` and no resampling (PACG's
diagnostic, VPPO's ``aug_log_probs``, DSPO's CVIG). ``I`` is the media the response was generated from (the
view's media, ``PromptInputs.media``); the prompt text is reused, so the intervention must keep the media's
size (every registered pixel intervention does), and a changed token count is an error naming the sample.

One intervened media is drawn per rollout request (sample, view) and shared by its ``n`` responses, so the
shared-prefix scorer prefills ``U`` intervened prompts, not ``N``: one extra scoring pass per step, the cost of
the old-log-prob pass. (VPPO's code draws a fresh mask for every response row; ``per_response=True`` does that,
at ``N`` prefills.) The draw is seeded by ``(seed, request index[, response index])``, so it is reproducible.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch

from mmrl.data.schema import Sample, Trajectory
from mmrl.errors import DataError
from mmrl.media.inputs import PromptInputs, build_inputs_from_text
from mmrl.models.scoring import response_logprobs


def intervention_seed(seed: int, request: int, response: int = -1) -> int:
    return (int(seed) * 1_000_003 + int(request) * 7_919 + (int(response) + 1) * 104_729 + 29) % (2**31 - 1)


def intervened_prompts(processor, prompts: Sequence[PromptInputs], sample_ids: Sequence[str], transform: str,
                       params: Mapping[str, Any], seeds: Sequence[int],
                       samples: Optional[Mapping[str, Sample]] = None) -> List[PromptInputs]:
    """Each prompt rebuilt under ``transform(media, sample, rng(seed), **params)`` in one processor call."""
    from mmrl.views.transforms import apply_transform

    medias = []
    for p, sid, s in zip(prompts, sample_ids, seeds):
        if p.media is None:
            raise DataError("prompt inputs carry no media to intervene on", sample_id=sid)
        sample = (samples or {}).get(sid) or Sample(id=sid, question="", candidates=[], answer="")
        g = torch.Generator().manual_seed(int(s))
        medias.append(apply_transform(transform, p.media, sample, g, **dict(params)))
    out = build_inputs_from_text(processor, [p.text for p in prompts], medias) if prompts else []
    for p, q, sid in zip(prompts, out, sample_ids):
        if q.num_tokens != p.num_tokens or not torch.equal(q.input_ids, p.input_ids):
            raise DataError(f"intervention '{transform}' changed the prompt ({p.num_tokens} -> {q.num_tokens} tokens); "
                            "a re-scoring intervention must keep the media size", sample_id=sid)
        q.rope = p.rope  # same tokens and grids: same M-RoPE positions
    return out


@torch.no_grad()
def rescore_batch(model, processor, requests: Sequence, trajs: Sequence[Trajectory], transform: str,
                  params: Optional[Mapping[str, Any]] = None, seed: int = 0, temperature: float = 1.0,
                  micro_batch: int = 16, pad_id: int = 0, samples: Optional[Mapping[str, Sample]] = None,
                  autocast=None, per_response: bool = False) -> List[torch.Tensor]:
    """Per-token log-probs ``[R_i]`` of each trajectory's response under the intervened media of its request.

    ``requests[t.inputs_key]`` is the rollout request a trajectory came from (``RolloutRequest`` with
    ``inputs`` and ``sample_id``). ``autocast`` is the trainer's autocast factory (None = full precision).
    """
    params = dict(params or {})
    if per_response:
        prompts = [requests[t.inputs_key].inputs for t in trajs]
        sids = [t.sample_id for t in trajs]
        seeds = [intervention_seed(seed, t.inputs_key, i) for i, t in enumerate(trajs)]
        built = intervened_prompts(processor, prompts, sids, transform, params, seeds, samples)
        items = [(built[i], t.response_ids) for i, t in enumerate(trajs)]
    else:
        keys = sorted({int(t.inputs_key) for t in trajs})
        prompts = [requests[k].inputs for k in keys]
        sids = [requests[k].sample_id for k in keys]
        built = intervened_prompts(processor, prompts, sids, transform, params,
                                   [intervention_seed(seed, k) for k in keys], samples)
        by_key: Dict[int, PromptInputs] = dict(zip(keys, built))
        items = [(by_key[int(t.inputs_key)], t.response_ids) for t in trajs]
    was_training = model.training
    model.eval()
    try:
        with autocast() if autocast else contextlib.nullcontext():
            out = response_logprobs(model, items, temperature, micro_batch, pad_id)
    finally:
        model.train(was_training)
    return [x.float().cpu() for x in out]
