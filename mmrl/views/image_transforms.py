"""Spatial view transforms: for an image, or applied to every frame of a video.

Defaults follow VPPO's ``perc_utils.py``: 14 px patches blackened with p = 0.5, gray value 128, Gaussian blur
sigma 6, Gaussian noise std 189 (pass gentler values for a "stable" robustness view).
"""
from __future__ import annotations

from typing import Sequence

import torch

from mmrl.data.schema import Media, Sample
from mmrl.views.transforms import DESTROYED, UNKNOWN, gaussian_blur, pixels, view_transform, with_pixels


@view_transform("gray", effect=DESTROYED)
def gray(media: Media, sample: Sample, rng: torch.Generator, value: int = 128) -> Media:
    """A uniform canvas (every frame): nothing left to see."""
    return with_pixels(media, torch.full_like(pixels(media), int(value)))


@view_transform("patch_mask", effect=UNKNOWN)
def patch_mask(media: Media, sample: Sample, rng: torch.Generator, patch: int = 14, p: float = 0.5,
               value: int = 0) -> Media:
    """VPPO: each ``patch`` x ``patch`` cell (edge cells cropped) set to ``value`` with probability ``p``.

    Every frame of a video draws its own mask.
    """
    x = pixels(media)
    t, _, h, w = x.shape
    gh, gw = -(-h // patch), -(-w // patch)
    cells = torch.rand(t, gh, gw, generator=rng) < float(p)
    mask = cells.repeat_interleave(patch, 1).repeat_interleave(patch, 2)[:, :h, :w].to(x.device)
    return with_pixels(media, x.masked_fill(mask[:, None], int(value)))


def box_mask(media: Media, sample: Sample, margin: float = 0.0) -> torch.Tensor:
    """Bool ``[T, H, W]``: the sample's target boxes mapped to the decoded frame size.

    Boxes are in source pixels (``evidence.source_size``, else ``media.source_size``, else the frame size); a
    frame takes the box(es) with the nearest timestamp; an image takes every box. Pixels covered by any part of
    a box are included (floor of the low edge, ceil of the high edge), widened by ``margin`` decoded pixels.
    """
    boxes = sample.evidence.boxes
    if not boxes:
        raise ValueError(f"sample '{sample.id}' has no evidence boxes")
    x = pixels(media)
    t, _, h, w = x.shape
    sw, sh = sample.evidence.source_size or media.source_size or (w, h)
    b = torch.tensor([list(map(float, bx)) for _, bx in boxes], dtype=torch.float64)
    b = b * torch.tensor([w / sw, h / sh, w / sw, h / sh], dtype=torch.float64)
    lo, hi = (b[:, :2] - margin).floor(), (b[:, 2:] + margin).ceil()
    cols, rows = torch.arange(w, dtype=torch.float64), torch.arange(h, dtype=torch.float64)
    in_c = (cols[None] >= lo[:, :1]) & (cols[None] < hi[:, :1])  # [B, W]
    in_r = (rows[None] >= lo[:, 1:]) & (rows[None] < hi[:, 1:])  # [B, H]
    if media.is_video and media.timestamps is not None:
        bt = torch.tensor([float(tb) for tb, _ in boxes], dtype=torch.float64)
        ft = torch.tensor(media.timestamps, dtype=torch.float64)
        d = (ft[:, None] - bt[None]).abs()
        sel = d <= d.min(dim=1, keepdim=True).values + 1e-9  # [T, B]
    else:
        sel = torch.ones(t, len(boxes), dtype=torch.bool)
    m = torch.einsum("tb,bh,bw->thw", sel.float(), in_r.float(), in_c.float()) > 0
    return m.to(x.device)


@view_transform("occlude_box", effect=DESTROYED, needs=("boxes",))
def occlude_box(media: Media, sample: Sample, rng: torch.Generator, value: int = 0, margin: float = 0.0) -> Media:
    """Fill the target box on every frame (BPO ``occlude_obj``) with ``value``."""
    x = pixels(media)
    return with_pixels(media, x.masked_fill(box_mask(media, sample, margin)[:, None], int(value)))


@view_transform("blur", effect=UNKNOWN)
def blur(media: Media, sample: Sample, rng: torch.Generator, sigma: float = 6.0) -> Media:
    """Gaussian blur of every frame."""
    return with_pixels(media, gaussian_blur(pixels(media), float(sigma)))


@view_transform("noise", effect=UNKNOWN)
def noise(media: Media, sample: Sample, rng: torch.Generator, std: float = 189.0, mean: float = 0.0) -> Media:
    """Seeded additive Gaussian noise, clipped to 0..255."""
    x = pixels(media)
    n = torch.randn(x.shape, generator=rng).to(x.device) * float(std) + float(mean)
    return with_pixels(media, (x.float() + n).round().clamp(0, 255).to(torch.uint8))


@view_transform("occlude_region", effect=UNKNOWN)
def occlude_region(media: Media, sample: Sample, rng: torch.Generator, box: Sequence[float] = (0.25, 0.25, 0.75, 0.75),
                   value: int = 0) -> Media:
    """Fill a fixed region given as fractions ``[x0, y0, x1, y1]`` of the frame (no evidence needed)."""
    x = pixels(media)
    h, w = x.shape[-2:]
    out = x.clone()
    out[..., int(box[1] * h):int(round(box[3] * h)), int(box[0] * w):int(round(box[2] * w))] = int(value)
    return with_pixels(media, out)
