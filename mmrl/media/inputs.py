"""The one function that turns (chat messages, decoded media) into model inputs through the real processor.

Every engine (HF generate, the scorer, vLLM) builds its inputs here, so image/video token counts, grids
and M-RoPE inputs (``video_grid_thw``, ``second_per_grid_ts``) always agree.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import torch

from mmrl.data.schema import Media

_VISION_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


@dataclass
class PromptInputs:
    """Processor output for ONE prompt: token ids plus its vision tensors."""

    input_ids: torch.Tensor  # [P]
    mm_token_type_ids: Optional[torch.Tensor] = None  # [P]: 0 text, 1 image, 2 video (for M-RoPE positions)
    vision: Dict[str, torch.Tensor] = field(default_factory=dict)  # keys from _VISION_KEYS
    text: str = ""
    media: Optional[Media] = field(default=None, repr=False)  # what the processor got (vLLM re-processes it)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())


def build_prompt_inputs(processor, messages: list, media: Media, prefill: str = "",
                        max_prompt_tokens: Optional[int] = None, sample_id: str = "?") -> PromptInputs:
    """Apply the chat template and run the processor on one prompt with its media (frames already sampled)."""
    from transformers.video_utils import VideoMetadata

    from mmrl.errors import DataError

    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + prefill
    kwargs = {}
    if media.is_video:
        n = int(media.frames.shape[0])
        kwargs["videos"] = [media.frames]
        kwargs["video_metadata"] = [VideoMetadata(total_num_frames=n, fps=float(media.fps or 2.0), frames_indices=list(range(n)))]
        kwargs["do_sample_frames"] = False
        kwargs["do_resize"] = False
    elif media.image is not None:
        kwargs["images"] = [media.image]
        kwargs["do_resize"] = False
    out = processor(text=[text], return_tensors="pt", **kwargs)
    ids = out["input_ids"][0]
    if max_prompt_tokens is not None and ids.numel() > max_prompt_tokens:
        raise DataError(f"prompt has {ids.numel()} tokens, over the budget of {max_prompt_tokens} "
                        f"(lower data.nframes or data.max_pixels)", sample_id=sample_id)
    vision = {k: torch.as_tensor(out[k]) for k in _VISION_KEYS if k in out}
    mm = out.get("mm_token_type_ids")
    return PromptInputs(input_ids=ids, mm_token_type_ids=None if mm is None else torch.as_tensor(mm)[0],
                        vision=vision, text=text, media=media)


def collate_vision(items: Sequence[PromptInputs]) -> Dict[str, torch.Tensor]:
    """Concatenate the vision tensors of several prompts in order (the model splits them by grid)."""
    out: Dict[str, List[torch.Tensor]] = {}
    for it in items:
        for k, v in it.vision.items():
            out.setdefault(k, []).append(v)
    return {k: torch.cat(v, dim=0) for k, v in out.items()}


def pad_left(seqs: Sequence[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(int(s.numel()) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, n - s.numel():] = s
        mask[i, n - s.numel():] = 1
    return ids, mask


def pad_right(seqs: Sequence[torch.Tensor], pad_value) -> torch.Tensor:
    n = max(int(s.numel()) for s in seqs)
    dtype = seqs[0].dtype
    out = torch.full((len(seqs), n), pad_value, dtype=dtype)
    for i, s in enumerate(seqs):
        out[i, : s.numel()] = s
    return out
