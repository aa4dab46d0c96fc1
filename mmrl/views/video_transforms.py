"""Temporal view transforms (video only): shuffle, reverse, time masks, frame dropping.

Timestamps stay those of the presented positions for shuffle and reverse (the model sees a normal timeline
carrying permuted content); frame dropping keeps the timestamps of the frames it keeps.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from mmrl.data.schema import Media, Sample
from mmrl.views.transforms import (DESTROYED, MAPPED, UNCHANGED, UNKNOWN, clip_extent, fill_frames, frame_times,
                                   in_spans, view_transform, with_pixels)

VIDEO = ("video",)


@view_transform("identity", effect=UNCHANGED)
def identity(media: Media, sample: Sample, rng: torch.Generator) -> Media:
    """The original media itself (not copied)."""
    return media


@view_transform("shuffle", effect=UNKNOWN, kinds=VIDEO)
def shuffle(media: Media, sample: Sample, rng: torch.Generator, derange: bool = True) -> Media:
    """Frames in a seeded random order.

    ``derange=False``: a plain uniform permutation (Video-R1's ``torch.randperm``; it may return the clip as it
    was). ``derange=True``: the permutation is redrawn (up to 64 times, then rolled) until the *pixels* differ
    from the original, not just the indices, so a clip with repeated frames is really reordered; a clip whose
    frames are all identical cannot change (the view set decides what that means, ``if_unchanged``).
    """
    x = media.frames
    t = x.shape[0]
    perm = torch.randperm(t, generator=rng)
    if derange and t > 1 and not bool((x == x[:1]).all()):
        for _ in range(64):
            if not torch.equal(x[perm.to(x.device)], x):
                break
            perm = torch.randperm(t, generator=rng)
        else:
            perm = torch.arange(t).roll(1)
    return with_pixels(media, x[perm.to(x.device)])


@view_transform("reverse", effect=MAPPED, kinds=VIDEO)
def reverse(media: Media, sample: Sample, rng: torch.Generator) -> Media:
    """Frames in reverse order (answers map through the view set's ``answer_map``, e.g. left<->right)."""
    return with_pixels(media, media.frames.flip(0))


def _span(media: Media, span: Optional[Sequence[float]], frac: Optional[Sequence[float]]):
    if (span is None) == (frac is None):
        raise ValueError("give exactly one of span=[start, end] (seconds) or frac=[a, b] (of the clip)")
    if span is not None:
        return [(float(span[0]), float(span[1]))]
    t0, t1 = clip_extent(media)
    return [(t0 + float(frac[0]) * (t1 - t0), t0 + float(frac[1]) * (t1 - t0))]


@view_transform("mask_segment", effect=UNKNOWN, kinds=VIDEO)
def mask_segment(media: Media, sample: Sample, rng: torch.Generator, span: Optional[Sequence[float]] = None,
                 frac: Optional[Sequence[float]] = None, fill="black", blur_sigma: float = 6.0) -> Media:
    """Mask the frames whose timestamp lies in ``span = [s, e)`` (seconds) or ``frac`` (fractions of the clip)."""
    mask = in_spans(frame_times(media), _span(media, span, frac))
    return with_pixels(media, fill_frames(media.frames, mask, fill, blur_sigma))


def _evidence_mask(media: Media, sample: Sample) -> torch.Tensor:
    times = frame_times(media)
    segs = sample.evidence.segments
    if not segs:
        raise ValueError(f"sample '{sample.id}' has no evidence segments")
    mask = in_spans(times, segs)
    # A segment shorter than the frame spacing holds no frame: mask the frame nearest to its middle.
    for s, e in segs:
        if not bool(in_spans(times, [(s, e)]).any()):
            mask[int((times - (float(s) + float(e)) / 2).abs().argmin())] = True
    return mask


@view_transform("mask_evidence", effect=DESTROYED, needs=("segments",), kinds=VIDEO)
def mask_evidence(media: Media, sample: Sample, rng: torch.Generator, fill="nearest",
                  blur_sigma: float = 6.0) -> Media:
    """Mask every frame inside the sample's evidence segments, and only those (BPO ``mask_support``).

    The default fill holds the nearest frame outside the evidence (``fill_frames``), so no constant marks the
    masked span; a sample whose evidence covers the whole clip has no such frame and is an error (masking it
    all would be a second blank view, not a masked support span).
    """
    return with_pixels(media, fill_frames(media.frames, _evidence_mask(media, sample), fill, blur_sigma))


def _outside_needs(params: dict):
    return () if params.get("span") is not None else ("segments",)


@view_transform("mask_outside", effect=UNCHANGED, needs=_outside_needs, kinds=VIDEO)
def mask_outside(media: Media, sample: Sample, rng: torch.Generator, span: Optional[Sequence[float]] = None,
                 fill="black", blur_sigma: float = 6.0) -> Media:
    """Mask every frame outside the evidence segments (or outside ``span``): the irrelevant-span view."""
    keep = in_spans(frame_times(media), [tuple(span)]) if span is not None else _evidence_mask(media, sample)
    return with_pixels(media, fill_frames(media.frames, ~keep, fill, blur_sigma))


@view_transform("drop_frames", effect=UNKNOWN, kinds=VIDEO)
def drop_frames(media: Media, sample: Sample, rng: torch.Generator, p: float = 0.5, min_keep: int = 2,
                mode: str = "remove", even: bool = True) -> Media:
    """Drop a seeded random fraction ``p`` of the frames.

    ``mode="remove"`` returns the kept frames and their timestamps (an even count when ``even``, as Qwen's
    2-frame temporal patches want); ``mode="hold"`` keeps T and repeats the last kept frame in each gap.
    """
    t = media.frames.shape[0]
    k = min(t, max(int(min_keep), int(round(t * (1.0 - float(p))))))
    if even and mode == "remove" and k % 2 and k < t:
        k += 1
    kept = torch.randperm(t, generator=rng)[:k].sort().values
    if mode == "remove":
        ts = None if media.timestamps is None else [media.timestamps[i] for i in kept.tolist()]
        return with_pixels(media, media.frames[kept.to(media.frames.device)], timestamps=ts)
    if mode != "hold":
        raise ValueError(f"drop_frames mode must be 'remove' or 'hold', got {mode!r}")
    is_kept = torch.zeros(t, dtype=torch.bool)
    is_kept[kept] = True
    idx = torch.where(is_kept, torch.arange(t), torch.zeros(t, dtype=torch.long))
    idx = torch.cummax(idx, dim=0).values
    idx = torch.where(torch.arange(t) < int(kept[0]), kept[0].expand(t), idx)  # before the first kept frame
    return with_pixels(media, media.frames[idx.to(media.frames.device)])
