"""Zero-masking of post-encoder visual tokens (DSPO's CVIG, Eq. 8; specs/algorithms.md §3): V^CF = V with the
merged visual tokens inside a box set to 0, the paper's choice over mean-replace and noise.

``zero_visual_tokens(model, mask)`` is a context manager: while it is open, every forward of the model's vision
encoder (``Qwen2VisionTransformerPretrainedModel`` / ``Qwen2_5_VisionTransformerPretrainedModel``, found inside
any wrapper such as peft) returns its merged tokens with the rows where ``mask`` is True set to 0, so any scorer
run inside it (``mmrl.models.scoring.response_logprobs``) scores the counterfactual view. ``mask`` is the
concatenation, in the order the encoder sees the media, of one mask per image or video (``box_token_mask`` of
``mmrl.algos.dspo_math`` gives it for a normalised box: floor/ceil after the 2x2 merge). A mask whose length is
not the encoder's token count raises ``ValueError`` naming both.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch


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
