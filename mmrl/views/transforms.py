"""View transforms: deterministic interventions on media that was decoded once.

A transform is ``fn(media, sample, rng, **params) -> Media``. It never re-decodes and never mutates its input;
all randomness comes from ``rng`` (a seeded ``torch.Generator``), so a seed fixes the output. Each transform
declares, through ``@view_transform``:

- ``effect`` on the expected answer: ``unchanged``, ``mapped`` (through the view set's ``answer_map``, e.g.
  reversal maps left<->right), ``destroyed`` (the answer is gone -> "abstain") or ``unknown``.
  A view in a view set may override it.
- ``needs``: evidence the sample must carry (``segments``, ``boxes``); a tuple, or ``fn(params) -> tuple``.
- ``kinds``: the media it applies to (``video``, ``image``).

Built-ins live in ``video_transforms.py`` (temporal), ``image_transforms.py`` (spatial, for images and
for every frame of a video), ``patch_transforms.py`` and ``region_transforms.py``; ``VIEW_TRANSFORMS`` names them and
imports one on the first lookup of its names. User code registers more with ``@view_transform("name")`` or names a function as
``module:function`` in the YAML (undecorated functions get effect ``unknown``, no needs, both kinds).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional, Tuple, Union

import torch
import torch.nn.functional as F

from mmrl.data.schema import Media, Sample
from mmrl.registry import Registry

VIEW_TRANSFORMS = Registry("view transform", builtins={
    "mmrl.views.video_transforms": ("drop_frames", "identity", "mask_evidence", "mask_outside", "mask_segment",
                                    "reverse", "shuffle"),
    "mmrl.views.image_transforms": ("blur", "canvas", "gray", "noise", "occlude_box", "occlude_region", "patch_mask"),
    "mmrl.views.patch_transforms": ("full_mask",),
    "mmrl.views.region_transforms": ("background_blur", "background_mask", "background_noise", "region_blur",
                                     "region_mask", "region_noise"),
})

UNCHANGED, MAPPED, DESTROYED, UNKNOWN = "unchanged", "mapped", "destroyed", "unknown"
EFFECTS = (UNCHANGED, MAPPED, DESTROYED, UNKNOWN)
NEEDS = ("segments", "boxes")
KINDS = ("video", "image")

Needs = Union[Tuple[str, ...], Callable[[dict], Tuple[str, ...]]]


def view_transform(name: Optional[str] = None, *, effect: str = UNKNOWN, needs: Needs = (),
                   kinds: Tuple[str, ...] = KINDS):
    """Register ``fn(media, sample, rng, **params) -> Media`` as a view transform with its declarations."""
    if effect not in EFFECTS:
        raise ValueError(f"view transform effect must be one of {EFFECTS}, got {effect!r}")
    if not callable(needs) and any(n not in NEEDS for n in needs):
        raise ValueError(f"view transform needs must be among {NEEDS}, got {needs!r}")

    def deco(fn):
        return VIEW_TRANSFORMS.register(name or fn.__name__, effect=effect, needs=needs, kinds=tuple(kinds))(fn)

    return deco


@dataclass(frozen=True)
class TransformInfo:
    name: str
    fn: Callable
    effect: str = UNKNOWN
    needs: Needs = ()
    kinds: Tuple[str, ...] = KINDS

    def needs_for(self, params: dict) -> Tuple[str, ...]:
        return tuple(self.needs(params)) if callable(self.needs) else tuple(self.needs)


def transform_info(name: str) -> TransformInfo:
    """Look up a transform by registered name or ``module:function`` (``KeyError`` lists the known names)."""
    fn = VIEW_TRANSFORMS.get(name)
    if not callable(fn):
        raise KeyError(f"view transform '{name}' is not callable")
    meta = VIEW_TRANSFORMS.meta(name)
    return TransformInfo(name, fn, meta.get("effect", UNKNOWN), meta.get("needs", ()), tuple(meta.get("kinds", KINDS)))


def apply_transform(name: str, media: Media, sample: Sample, rng: torch.Generator, **params) -> Media:
    """Apply a transform by name after checking it supports the media kind."""
    info = transform_info(name)
    kind = "video" if media.is_video else "image"
    if kind not in info.kinds:
        raise ValueError(f"view transform '{name}' does not apply to {kind} media (sample '{sample.id}')")
    return info.fn(media, sample, rng, **params)


# ---- shared helpers -------------------------------------------------------------------------------------


def pixels(media: Media) -> torch.Tensor:
    """The media as ``uint8 [T, C, H, W]`` (an image is one frame). A view, not a copy."""
    if media.frames is not None:
        return media.frames
    if media.image is None:
        raise ValueError(f"media of sample '{media.sample_id}' has neither frames nor an image")
    return media.image.unsqueeze(0)


def with_pixels(media: Media, x: torch.Tensor, timestamps=None) -> Media:
    """A new ``Media`` like ``media`` holding ``x`` (``[T, C, H, W]``; unwrapped for images)."""
    if media.frames is not None:
        ts = media.timestamps if timestamps is None else timestamps
        return replace(media, frames=x, timestamps=None if ts is None else list(ts))
    return replace(media, image=x[0])


def frame_times(media: Media) -> torch.Tensor:
    """Frame timestamps in seconds of the source video (float64 ``[T]``); ``i / fps`` when none were stored."""
    t = media.frames.shape[0]
    if media.timestamps is not None:
        if len(media.timestamps) != t:
            raise ValueError(f"sample '{media.sample_id}': {len(media.timestamps)} timestamps for {t} frames")
        return torch.tensor(media.timestamps, dtype=torch.float64)
    if media.fps:
        return torch.arange(t, dtype=torch.float64) / media.fps
    raise ValueError(f"sample '{media.sample_id}': frames have no timestamps and no fps")


TIME_EPS = 1e-5  # seconds; absorbs rounding of annotated times (e.g. 2/3 s stored as 0.666667)


def in_spans(times: torch.Tensor, spans) -> torch.Tensor:
    """Bool ``[T]``: frame time inside any half-open span ``[s, e)`` (seconds; a frame at ``t`` covers
    ``[t, t + 1/fps)``, so a segment ``[f0/fps, (f1+1)/fps]`` holds frames f0..f1)."""
    if not spans:
        return torch.zeros_like(times, dtype=torch.bool)
    s = torch.tensor([float(a) for a, _ in spans], dtype=torch.float64) - TIME_EPS
    e = torch.tensor([float(b) for _, b in spans], dtype=torch.float64) - TIME_EPS
    return ((times[:, None] >= s) & (times[:, None] < e)).any(dim=1)


def clip_extent(media: Media) -> tuple:
    """``(start, end)`` seconds covered by the frames: the last frame lasts one frame spacing (or 1/fps)."""
    times = frame_times(media)
    if len(times) > 1:
        step = float(times.diff().median())
    else:
        step = 1.0 / media.fps if media.fps else 0.0
    return float(times.min()), float(times.max()) + step


def gaussian_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur of ``uint8 [N, C, H, W]`` (replicate borders), returned as uint8."""
    if sigma <= 0 or x.numel() == 0:
        return x.clone()
    r = max(1, int(math.ceil(3 * sigma)))
    k = torch.exp(-(torch.arange(-r, r + 1, dtype=torch.float32) ** 2) / (2 * sigma**2))
    k = (k / k.sum()).to(x.device)
    n, c, h, w = x.shape
    y = x.float().reshape(n * c, 1, h, w)
    y = F.conv2d(F.pad(y, (r, r, 0, 0), mode="replicate"), k.view(1, 1, 1, -1))
    y = F.conv2d(F.pad(y, (0, 0, r, r), mode="replicate"), k.view(1, 1, -1, 1))
    return y.round().clamp(0, 255).to(torch.uint8).reshape(n, c, h, w)


FILLS = ("nearest", "black", "gray", "mean", "blur")


def nearest_unmasked(mask: torch.Tensor) -> torch.Tensor:
    """Long ``[T]``: for each frame, the index of the nearest frame where ``mask`` is false (ties: the earlier one).

    Raises ``ValueError`` when every frame is masked (there is nothing outside the mask to fill from).
    """
    keep = (~mask.cpu()).nonzero().flatten()
    if keep.numel() == 0:
        raise ValueError("fill 'nearest' needs at least one frame outside the masked span (the mask covers the "
                         "whole clip, so the view would be a blank clip, not a masked segment)")
    t = torch.arange(mask.shape[0])
    return keep[(t[:, None] - keep[None]).abs().argmin(dim=1)]


def fill_frames(x: torch.Tensor, mask: torch.Tensor, fill: Union[str, int] = "black",
                blur_sigma: float = 6.0) -> torch.Tensor:
    """Copy of ``x`` [T,C,H,W] with frames where ``mask`` [T] is true replaced.

    ``fill``: ``nearest`` (each masked frame becomes the nearest frame outside the mask: the clip holds still
    over the span, with no constant that marks where the span was; an error when every frame is masked),
    ``black`` (0), ``gray`` (128), an int value, ``mean`` (mean frame of the whole clip) or ``blur``.
    """
    out = x.clone()
    if not bool(mask.any()):
        return out
    mask = mask.to(x.device)
    if fill == "nearest":
        return x[nearest_unmasked(mask).to(x.device)]
    if isinstance(fill, (int, float)) and not isinstance(fill, bool):
        out[mask] = int(fill)
    elif fill == "black":
        out[mask] = 0
    elif fill == "gray":
        out[mask] = 128
    elif fill == "mean":
        out[mask] = x.float().mean(dim=0).round().to(torch.uint8)
    elif fill == "blur":
        out[mask] = gaussian_blur(x[mask], blur_sigma)
    else:
        raise ValueError(f"unknown fill {fill!r}; use one of {FILLS} or an int 0..255")
    return out

