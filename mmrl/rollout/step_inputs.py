"""From samples to rollout requests: decode each sample's media once, expand its views, build processor inputs.

Bad samples raise ``DataError`` (naming sample and file) or, with ``data.on_error: skip``, are skipped and counted.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

from mmrl.data.schema import Media, Sample, View
from mmrl.errors import DataError
from mmrl.media.decode import MediaBudget, load_media
from mmrl.media.inputs import build_prompt_inputs_batch, resize_factor
from mmrl.media.prompts import PromptStyle, build_messages
from mmrl.rollout.base import RolloutRequest


@dataclass
class StepInputs:
    requests: List[RolloutRequest] = field(default_factory=list)
    samples: Dict[str, Sample] = field(default_factory=dict)
    candidates: Dict[tuple, List[str]] = field(default_factory=dict)  # (sample id, view) -> shown candidates
    media: Dict[str, Media] = field(default_factory=dict)
    views: Dict[tuple, View] = field(default_factory=dict)
    skipped: List[tuple] = field(default_factory=list)  # (sample id, reason)
    skipped_views: List[tuple] = field(default_factory=list)  # (sample id, view, reason): ``if_unchanged: skip``
    time_decode: float = 0.0
    time_views: float = 0.0
    time_processor: float = 0.0


def budget_from(data_cfg, processor=None) -> MediaBudget:
    """The data section's frame and pixel budget; frames resized to the processor's factor (28, or 32: Qwen3-VL)."""
    factor = resize_factor(processor) if processor is not None else MediaBudget.factor
    return MediaBudget(nframes=data_cfg.nframes, fps=data_cfg.fps, min_pixels=data_cfg.min_pixels,
                       max_pixels=data_cfg.max_pixels, factor=factor)


def style_from(data_cfg) -> PromptStyle:
    return PromptStyle(system=data_cfg.prompt.system, instruction=data_cfg.prompt.instruction)


def build_step_inputs(samples: List[Sample], processor, data_cfg, plan: Callable[[str, int], int],
                      viewset=None, seed: int = 0, group_offset: int = 0) -> StepInputs:
    """One group per sample; one request per (sample, view) with ``plan(view.role, number of views)`` responses.

    Each sample's media is decoded once and its views are built from the decoded frames; then every prompt of
    the step (all samples, all views) goes through one batched processor call.
    """
    out = StepInputs()
    budget, style = budget_from(data_cfg, processor), style_from(data_cfg)
    pending = []  # (group index, sample, media, views, candidates)
    for gi, sample in enumerate(samples):
        try:
            t0 = time.perf_counter()
            media = load_media(sample, budget)
            t1 = time.perf_counter()
            if viewset is not None:
                dropped: List[tuple] = []
                views = viewset.expand(sample, media, seed, skipped=dropped)
                out.skipped_views.extend((sample.id, v, why) for v, why in dropped)
                cands = viewset.candidates_for(sample)
            else:
                views = [View(name="original", role="anchor", media=media, expected=sample.expected_letter)]
                cands = list(sample.candidates)
            out.time_decode += t1 - t0
            out.time_views += time.perf_counter() - t1
        except DataError as e:
            _skip_or_raise(out, data_cfg, sample, e)
            continue
        pending.append((gi, sample, media, views, cands))
    t2 = time.perf_counter()
    prompts = [(build_messages(sample.question, cands, view.media, style), view.media, sample.id)
               for _, sample, _, views, cands in pending for view in views]
    built = iter(build_prompt_inputs_batch(processor, prompts, max_prompt_tokens=data_cfg.max_prompt_tokens))
    for gi, sample, media, views, cands in pending:
        inputs = [next(built) for _ in views]
        err = next((x for x in inputs if isinstance(x, DataError)), None)
        if err is not None:
            _skip_or_raise(out, data_cfg, sample, err)
            continue
        # BPO's packs = rollout.n / views: count the views the set declares, so a view skipped on this sample
        # (``if_unchanged: skip``) lowers its budget instead of changing the pack count
        n_declared = len(viewset.views_for(sample)) if viewset is not None else 1
        for view, pi in zip(views, inputs):
            req = RolloutRequest(inputs=pi, n=plan(view.role, n_declared), sample_id=sample.id, group_id=group_offset + gi,
                                 view=view.name, role=view.role, expected=view.expected)
            req.sample = sample  # for the environments of multi-turn episodes
            out.views[(sample.id, view.name)] = view
            out.candidates[(sample.id, view.name)] = cands
            if req.n > 0:
                out.requests.append(req)
        out.samples[sample.id] = sample
        out.media[sample.id] = media
    out.time_processor += time.perf_counter() - t2
    return out


def _skip_or_raise(out: StepInputs, data_cfg, sample: Sample, err: DataError) -> None:
    if data_cfg.on_error != "skip":
        raise err
    out.skipped.append((sample.id, str(err)))


def intervened_inputs(si: StepInputs, keys: List[tuple], processor, data_cfg, transform: str, params: dict,
                      seed: int = 0) -> Dict[tuple, object]:
    """Prompt inputs of each ``(sample id, view)`` in ``keys`` with view transform ``transform(**params)`` applied to
    that view's media (the fixed-rollout intervention of PACG / VPPO / DSPO): same question, candidates and prompt
    style, one batched processor call. The transform's RNG is seeded by (seed, sample id, view name + transform)."""
    import torch

    from mmrl.views.transforms import apply_transform
    from mmrl.views.viewset import view_seed

    style = style_from(data_cfg)
    prompts = []
    for sid, view_name in keys:
        view, sample = si.views[(sid, view_name)], si.samples[sid]
        rng = torch.Generator().manual_seed(view_seed(seed, sid, f"{view_name}|{transform}"))
        media = apply_transform(transform, view.media, sample, rng, **params)
        prompts.append((build_messages(sample.question, si.candidates[(sid, view_name)], media, style), media, sid))
    built = build_prompt_inputs_batch(processor, prompts, max_prompt_tokens=data_cfg.max_prompt_tokens)
    for (sid, _), pi in zip(keys, built):
        if isinstance(pi, DataError):
            raise pi
    return dict(zip(keys, built))
