"""Spatial view transforms: for an image, or applied to every frame of a video.

Defaults follow VPPO's ``perc_utils.py``: 14 px patches blackened with p = 0.5, gray value 128, Gaussian blur
sigma 6, Gaussian noise std 189 (pass gentler values for a "stable" robustness view).
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

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


def local_background(x: torch.Tensor, mask: torch.Tensor, ring: int = 3) -> torch.Tensor:
    """Per frame and channel, the median of the pixels in a ``ring``-pixel band around ``mask`` (outside it).

    ``x`` uint8 ``[T, C, H, W]``, ``mask`` bool ``[T, H, W]``; returns uint8 ``[T, C]``. A frame whose band is
    empty (the mask reaches every border) uses every pixel outside the mask; a frame with no pixel outside the
    mask is an error (there is no background to fill from).
    """
    t, c = x.shape[:2]
    m = mask.float()[:, None]
    grown = F.max_pool2d(m, 2 * ring + 1, stride=1, padding=ring)[:, 0] > 0
    band = grown & ~mask
    out = torch.zeros(t, c, dtype=torch.uint8, device=x.device)
    for i in range(t):
        if not bool(mask[i].any()):
            continue
        sel = band[i] if bool(band[i].any()) else ~mask[i]
        if not bool(sel.any()):
            raise ValueError("occlusion covers the whole frame: no background left to fill it with")
        out[i] = x[i][:, sel].median(dim=1).values
    return out


@view_transform("occlude_box", effect=DESTROYED, needs=("boxes",))
def occlude_box(media: Media, sample: Sample, rng: torch.Generator, fill="local", margin: float = 0.0,
                ring: int = 3) -> Media:
    """Hide the target box(es) on every frame (BPO ``occlude_obj``).

    ``fill="local"`` (default) paints each frame's box with the median of a ``ring``-pixel band of background
    around it (``local_background``): on a uniform background the object is gone without a trace, where a
    constant (BPO's "filled with 0") would leave a dark square exactly where the object was. An int fills that
    value. ``margin`` widens the box by decoded pixels (codec ringing around the object's edge).
    """
    x = pixels(media)
    mask = box_mask(media, sample, margin)
    if isinstance(fill, str):
        if fill != "local":
            raise ValueError(f"occlude_box fill must be 'local' or an int 0..255, got {fill!r}")
        bg = local_background(x, mask, int(ring))
        out = torch.where(mask[:, None], bg[:, :, None, None], x)
    else:
        out = x.masked_fill(mask[:, None], int(fill))
    return with_pixels(media, out)


@view_transform("canvas", effect=DESTROYED)
def canvas(media: Media, sample: Sample, rng: torch.Generator, kind: str = "noise", value: int = 128) -> Media:
    """A content-free canvas of the media's shape (null views held out for evaluation; seeded).

    ``kind``: ``uniform`` (every pixel ``value``; what ``gray`` does), ``noise`` (i.i.d. uniform 0..255 per pixel
    and frame), ``gradient`` (a still linear ramp between two random colours: a blank clip unlike the gray
    one), ``texture`` (smooth random blobs that drift from frame to frame: an unrelated moving clip with no
    object of the world in it).
    """
    x = pixels(media)
    t, c, h, w = x.shape
    if kind == "uniform":
        return with_pixels(media, torch.full_like(x, int(value)))
    if kind == "noise":
        y = torch.randint(0, 256, (t, c, h, w), generator=rng, dtype=torch.int64)
    elif kind == "gradient":
        a, b = torch.rand(2, c, generator=rng) * 255
        ang = float(torch.rand(1, generator=rng)) * 2 * torch.pi
        yy, xx = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        r = ((xx * torch.cos(torch.tensor(ang)) + yy * torch.sin(torch.tensor(ang))) + 1.5) / 3.0  # 0..1
        y = (a[:, None, None] + (b - a)[:, None, None] * r[None]).round().long().expand(t, c, h, w)
    elif kind == "texture":
        g = 4
        base = torch.rand(1, c, g + 2, g + 2, generator=rng) * 255
        steps = torch.rand(t, 2, generator=rng) * 0.5
        k = F.interpolate(base, size=(h + h // 2, w + w // 2), mode="bicubic", align_corners=False)[0]
        frames = []
        for i in range(t):
            oy, ox = int(steps[: i + 1, 0].sum() * h / 4) % (h // 2), int(steps[: i + 1, 1].sum() * w / 4) % (w // 2)
            frames.append(k[:, oy:oy + h, ox:ox + w])
        y = torch.stack(frames).round().long()
    else:
        raise ValueError(f"canvas kind must be uniform, noise, gradient or texture, got {kind!r}")
    return with_pixels(media, y.clamp(0, 255).to(torch.uint8).to(x.device).contiguous())


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
