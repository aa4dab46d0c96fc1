"""Re-scoring interventions of PACG and VPPO (fixed-rollout credit, specs/algorithms.md §2 and §7).

- ``patch_mask`` (``image_transforms.py``) with its defaults *is* VPPO's perturbation
  (``perc_utils.random_patch_blackening``: 14 px cells from the top-left corner, each set to 0 with p = 0.5, on
  the image at the resolution the processor sees, which is the resolution ``mmrl.media.decode`` stores).
  ``VPPO_PATCH`` names it with those parameters.
- ``full_mask``: PACG's ``full_mask`` option, every pixel of every frame set to ``value`` (default 0: the patch
  blackening with p = 1; VPPO's ``complete_masking`` uses gray 128, pass ``value: 128`` for it).
"""
from __future__ import annotations

import torch

from mmrl.data.schema import Media, Sample
from mmrl.views.transforms import DESTROYED, pixels, view_transform, with_pixels

VPPO_PATCH = ("patch_mask", {"patch": 14, "p": 0.5, "value": 0})
FULL_MASK = ("full_mask", {"value": 0})


@view_transform("full_mask", effect=DESTROYED)
def full_mask(media: Media, sample: Sample, rng: torch.Generator, value: int = 0) -> Media:
    """Every pixel of every frame set to ``value`` (0..255)."""
    if not 0 <= int(value) <= 255:
        raise ValueError(f"full_mask value must be in 0..255, got {value} (sample '{sample.id}')")
    return with_pixels(media, torch.full_like(pixels(media), int(value)))
