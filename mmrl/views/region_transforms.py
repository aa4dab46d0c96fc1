"""Region view transforms: blur, mask or noise inside a box, or everything outside the evidence box.

A region is ``box: evidence`` (the sample's evidence boxes mapped to the decoded frame, ``box_mask``, widened by
``margin`` pixels) or ``box: [x0, y0, x1, y1]`` as fractions of the frame (pixels whose centre lies inside).

- ``region_blur`` / ``region_mask`` / ``region_noise`` change the pixels inside the region only. Whether that
  changes the answer depends on the question (a mask hides an object's colour but its outline still tells
  where it was), so their declared effect is ``unknown``: a view set states it per view.
- ``background_blur`` / ``background_mask`` / ``background_noise`` change every pixel outside the evidence
  box(es) and none inside, so what the question asks about is still there: declared ``unchanged``.

Noise is seeded Gaussian (``std`` in grey levels), clipped to 0..255; blur is the separable Gaussian of
``gaussian_blur`` computed on the whole frame, then kept only where the region is.
"""
from __future__ import annotations

from typing import Sequence, Union

import torch

from mmrl.data.schema import Media, Sample
from mmrl.views.image_transforms import box_mask
from mmrl.views.transforms import UNCHANGED, UNKNOWN, gaussian_blur, pixels, view_transform, with_pixels

Box = Union[str, Sequence[float]]


def _box_needs(params: dict):
    """``boxes`` when the region is the evidence box (the default), else nothing."""
    return ("boxes",) if params.get("box", "evidence") == "evidence" else ()


def region_mask_of(media: Media, sample: Sample, box: Box, margin: float = 0.0) -> torch.Tensor:
    """Bool ``[T, H, W]``: the evidence box(es) (``box="evidence"``) or a fractional ``[x0, y0, x1, y1]`` box."""
    if isinstance(box, str):
        if box != "evidence":
            raise ValueError(f"region box must be 'evidence' or [x0, y0, x1, y1] fractions, got {box!r} "
                             f"(sample '{sample.id}')")
        return box_mask(media, sample, margin)
    x = pixels(media)
    t, _, h, w = x.shape
    if len(box) != 4 or not all(0.0 <= float(v) <= 1.0 for v in box) or not (box[0] < box[2] and box[1] < box[3]):
        raise ValueError(f"region box must be [x0, y0, x1, y1] fractions with x0 < x1 and y0 < y1, got {list(box)}")
    cols = (torch.arange(w, dtype=torch.float64) + 0.5) / w
    rows = (torch.arange(h, dtype=torch.float64) + 0.5) / h
    in_c = (cols >= float(box[0])) & (cols < float(box[2]))
    in_r = (rows >= float(box[1])) & (rows < float(box[3]))
    return (in_r[:, None] & in_c[None]).expand(t, h, w).to(x.device)


def _blurred(x: torch.Tensor, rng: torch.Generator, sigma: float) -> torch.Tensor:
    return gaussian_blur(x, float(sigma))


def _filled(x: torch.Tensor, rng: torch.Generator, value: int) -> torch.Tensor:
    if not 0 <= int(value) <= 255:
        raise ValueError(f"mask value must be in 0..255, got {value}")
    return torch.full_like(x, int(value))


def _noisy(x: torch.Tensor, rng: torch.Generator, std: float) -> torch.Tensor:
    n = torch.randn(x.shape, generator=rng).to(x.device) * float(std)
    return (x.float() + n).round().clamp(0, 255).to(torch.uint8)


def _apply(media: Media, where: torch.Tensor, changed: torch.Tensor) -> Media:
    x = pixels(media)
    return with_pixels(media, torch.where(where[:, None], changed, x))


@view_transform("region_blur", effect=UNKNOWN, needs=_box_needs)
def region_blur(media: Media, sample: Sample, rng: torch.Generator, box: Box = "evidence", sigma: float = 6.0,
                margin: float = 0.0) -> Media:
    """Gaussian blur (``sigma`` px) inside the region only: the evidence box(es) or a fractional box."""
    x = pixels(media)
    return _apply(media, region_mask_of(media, sample, box, margin), _blurred(x, rng, sigma))


@view_transform("region_mask", effect=UNKNOWN, needs=_box_needs)
def region_mask(media: Media, sample: Sample, rng: torch.Generator, box: Box = "evidence", value: int = 0,
                margin: float = 0.0) -> Media:
    """The region set to ``value`` (0..255) on every frame: the evidence box(es) or a fractional box."""
    x = pixels(media)
    return _apply(media, region_mask_of(media, sample, box, margin), _filled(x, rng, value))


@view_transform("region_noise", effect=UNKNOWN, needs=_box_needs)
def region_noise(media: Media, sample: Sample, rng: torch.Generator, box: Box = "evidence", std: float = 64.0,
                 margin: float = 0.0) -> Media:
    """Seeded Gaussian noise (``std`` grey levels) inside the region only: the evidence box(es) or a fractional box."""
    x = pixels(media)
    return _apply(media, region_mask_of(media, sample, box, margin), _noisy(x, rng, std))


@view_transform("background_blur", effect=UNCHANGED, needs=("boxes",))
def background_blur(media: Media, sample: Sample, rng: torch.Generator, sigma: float = 6.0,
                    margin: float = 0.0) -> Media:
    """Gaussian blur of everything outside the evidence box(es) (widened by ``margin`` px); the box untouched."""
    x = pixels(media)
    return _apply(media, ~box_mask(media, sample, margin), _blurred(x, rng, sigma))


@view_transform("background_mask", effect=UNCHANGED, needs=("boxes",))
def background_mask(media: Media, sample: Sample, rng: torch.Generator, value: int = 0,
                    margin: float = 0.0) -> Media:
    """Everything outside the evidence box(es) set to ``value``; the box untouched."""
    x = pixels(media)
    return _apply(media, ~box_mask(media, sample, margin), _filled(x, rng, value))


@view_transform("background_noise", effect=UNCHANGED, needs=("boxes",))
def background_noise(media: Media, sample: Sample, rng: torch.Generator, std: float = 64.0,
                     margin: float = 0.0) -> Media:
    """Seeded Gaussian noise on everything outside the evidence box(es); the box untouched."""
    x = pixels(media)
    return _apply(media, ~box_mask(media, sample, margin), _noisy(x, rng, std))
