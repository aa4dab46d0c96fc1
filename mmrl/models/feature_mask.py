"""Zero-masking of post-encoder visual tokens (DSPO's CVIG, Eq. 8; specs/algorithms.md §3): V^CF = V with the
merged visual tokens inside a box set to 0, the paper's choice over mean-replace and noise.

``zero_visual_tokens(model, mask)`` is a context manager: while it is open, every forward of the model's vision
encoder (``Qwen2VisionTransformerPretrainedModel`` / ``Qwen2_5_VisionTransformerPretrainedModel``, found inside
any wrapper such as peft) returns its merged tokens with the rows where ``mask`` is True set to 0, so any scorer
run inside it (``mmrl.models.scoring.response_logprobs``) scores the counterfactual view. ``mask`` is the
concatenation, in the order the encoder sees the media, of one mask per image or video (``box_token_mask`` gives
it for a normalised box: floor/ceil after the 2x2 merge). ``score_with_masked_boxes`` re-scores responses, each
under its own box. A mask whose length is not the encoder's token count raises ``ValueError`` naming both.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable, List, Optional, Sequence, Tuple

import torch


def box_token_mask(box: Sequence[float], grid_thw: Sequence[int], merge: int = 2) -> torch.Tensor:
    """Bool mask ``[t * (h/merge) * (w/merge)]`` of the visual tokens (after the ``merge`` x ``merge`` merge, in
    Qwen2.5-VL's t-major, row-major order) that a normalised (ymin, xmin, ymax, xmax) box touches: rows
    floor(ymin H)..ceil(ymax H)-1, columns floor(xmin W)..ceil(xmax W)-1, so a full box masks the whole map."""
    t, h, w = (int(v) for v in grid_thw)
    if h % merge or w % merge:
        raise ValueError(f"grid {grid_thw} is not divisible by the merge size {merge}")
    hh, ww = h // merge, w // merge
    y0, x0, y1, x1 = (min(1.0, max(0.0, float(v))) for v in box)
    r0, r1 = math.floor(y0 * hh), min(hh, math.ceil(y1 * hh))
    c0, c1 = math.floor(x0 * ww), min(ww, math.ceil(x1 * ww))
    m = torch.zeros(hh, ww, dtype=torch.bool)
    m[r0:r1, c0:c1] = True
    return m.flatten().repeat(t)


def prompt_token_mask(vision: dict, box: Sequence[float], merge: int = 2) -> torch.Tensor:
    """The mask of one prompt's visual tokens (its images, then its videos, in the encoder's order) for ``box``
    applied to every image and every frame."""
    grids = [g for key in ("image_grid_thw", "video_grid_thw") if key in vision for g in vision[key].tolist()]
    if not grids:
        raise ValueError("the prompt has no image or video to mask")
    return torch.cat([box_token_mask(box, g, merge) for g in grids])


def vision_encoder(model) -> torch.nn.Module:
    """The model's vision transformer (the module that returns the merged visual tokens)."""
    for m in model.modules():
        if type(m).__name__.endswith("VisionTransformerPretrainedModel"):
            return m
    raise ValueError(f"{type(model).__name__} has no Qwen2-VL / Qwen2.5-VL vision encoder to mask")


@contextmanager
def zero_visual_tokens(model, mask: torch.Tensor):
    """Within the block, the vision encoder's merged tokens at ``mask`` (bool ``[N_tokens]``) are zero."""
    mask = mask.to(torch.bool).flatten()

    def hook(_mod, _args, out):
        feats = out.pooler_output if hasattr(out, "pooler_output") else out
        if feats.shape[0] != mask.numel():
            raise ValueError(f"visual token mask has {mask.numel()} entries but the encoder produced "
                             f"{feats.shape[0]} merged tokens")
        masked = feats.masked_fill(mask.to(feats.device)[:, None], 0.0)
        if hasattr(out, "pooler_output"):
            out.pooler_output = masked
            return out
        return masked

    handle = vision_encoder(model).register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def score_with_masked_boxes(model, score: Callable, items: Sequence[Tuple[object, torch.Tensor]],
                            boxes: Sequence[Optional[Sequence[float]]], merge: Optional[int] = None,
                            calls: Optional[int] = None) -> List[Optional[torch.Tensor]]:
    """Fixed-rollout re-scoring under V^CF, one response at a time: for each ``(PromptInputs, response_ids)`` with a
    normalised box, ``score([item])`` inside ``zero_visual_tokens`` with that box's token mask; ``None`` where the
    box is ``None`` (a response without a box). ``score`` is e.g. ``Backend.score`` or a ``response_logprobs``
    closure; ``merge`` defaults to the encoder's ``spatial_merge_size``. Under several ranks every rank must call
    ``score`` equally often: ``calls`` (the largest boxed count over ranks) pads with ``score([])``, for which the
    caller's closure supplies the lock-step fallback item."""
    merge = merge or int(getattr(vision_encoder(model), "spatial_merge_size", 2))
    out: List[Optional[torch.Tensor]] = []
    for (pi, ids), box in zip(items, boxes):
        if box is None:
            out.append(None)
            continue
        with zero_visual_tokens(model, prompt_token_mask(pi.vision, box, merge)):
            out.append(score([(pi, ids)])[0])
    for _ in range(max(0, (calls or 0) - sum(b is not None for b in boxes))):
        score([])
    return out
