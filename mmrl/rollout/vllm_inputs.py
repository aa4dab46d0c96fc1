"""vLLM's view of a prompt: token ids with each run of ``<|image_pad|>`` / ``<|video_pad|>`` collapsed to ONE
placeholder (vLLM expands it itself) and, as ``multi_modal_data``, the very frames and images the HF processor got
(already resized: ``do_resize=False``), in the order their placeholders appear. A multi-turn context
(``mmrl.rollout.agent_loop_multi.ContextInputs``) carries every medium of the episode so far: the prompt's and those
the observations inserted.

vLLM numbers the M-RoPE positions itself (``get_mrope_input_positions``) from the grids of these frames and each
video's ``second_per_grid_ts`` (``temporal_patch_size / fps`` of its metadata, per video): the numbering the models
were trained with, which ``mmrl.models.mrope`` computes for the HF sampler and the scorer
(``tests/rollout/test_vllm_positions.py`` checks that the prompts sent here give vLLM those positions).

Qwen3-VL lays a video out as one block per frame pair, ``<t seconds><|vision_start|>pads<|vision_end|>``, with
``t`` the pair's mean time (``video_timestamps``). What that layout replaces depends on the transformers release, and
vLLM follows it (``Qwen3VLMultiModalProcessor._expands_only_video_token``): processors that override
``replace_video_token`` (transformers >= 5.10) replace only the bare ``<|video_pad|>`` and keep the template's outer
``<|vision_start|>``/``<|vision_end|>`` around the layout; older ones replace the three tokens
``<|vision_start|><|video_pad|><|vision_end|>``. So each video's layout, exactly as the HF processor produced it,
collapses to ``<|video_pad|>`` alone or to those three tokens (``VideoLayout.bare_pad``, the same test vLLM makes);
a block that differs is an error naming the video. (Collapsing to three tokens under transformers >= 5.10 made vLLM
expand every Qwen3-VL video two tokens longer than the processor: 76 vs 74.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch

from mmrl.data.schema import Media
from mmrl.errors import MMRLError
from mmrl.media.inputs import PromptInputs

PLACEHOLDERS = ("<|image_pad|>", "<|video_pad|>")


def _medias(inputs: PromptInputs) -> List[Media]:
    """The images and videos of a prompt in order: all of an episode's context (``ContextInputs``), else its one."""
    from mmrl.rollout.agent_loop_multi import ContextInputs

    if isinstance(inputs, ContextInputs):
        return list(inputs.medias)
    m = inputs.media
    return [m] if m is not None and (m.is_video or m.image is not None) else []


def collapse_placeholders(ids: torch.Tensor, placeholder_ids) -> List[int]:
    """Each run of one placeholder token becomes a single token (what vLLM expects before it expands)."""
    out: List[int] = []
    for t in ids.tolist():
        if t in placeholder_ids and out and out[-1] == t:
            continue
        out.append(t)
    return out


def video_timestamps(n_frames: int, fps: float, temporal_patch: int = 2) -> List[float]:
    """Seconds before each frame pair of a Qwen3-VL video: frame k at ``k / fps`` (mmrl passes the sampled frames as
    indices ``0..T-1`` at the sampled rate, so the first frame is at 0), the count padded to a multiple of the
    temporal patch by repeating the last frame, then the mean of each pair's first and last frame (transformers'
    ``Qwen3VLProcessor._calculate_timestamps`` and vLLM's ``Qwen3VLProcessingInfo._calculate_timestamps``)."""
    idx = list(range(n_frames))
    idx += [idx[-1]] * (-len(idx) % temporal_patch)
    ts = [i / fps for i in idx]
    return [(ts[i] + ts[i + temporal_patch - 1]) / 2 for i in range(0, len(ts), temporal_patch)]


def expands_only_video_token(processor) -> bool:
    """The processor's class overrides ``ProcessorMixin.replace_video_token`` (transformers >= 5.10): it replaces the
    bare ``<|video_pad|>``; vLLM asks the same question of the same class."""
    from transformers.processing_utils import ProcessorMixin

    base = getattr(ProcessorMixin, "replace_video_token", None)
    own = getattr(type(processor), "replace_video_token", None)
    return own is not None and own is not base


@dataclass
class VideoLayout:
    """How a processor lays out a video's tokens: ``timestamped`` (Qwen3-VL) or one run of pads (Qwen2/2.5-VL)."""

    timestamped: bool
    tokenizer: Any = None
    factor: int = 28
    temporal_patch: int = 2
    bare_pad: bool = True  # the processor replaces only <|video_pad|> (transformers >= 5.10), not the triple

    @classmethod
    def of(cls, processor) -> "VideoLayout":
        from mmrl.media.inputs import resize_factor, timestamped_video

        vp = getattr(processor, "video_processor", None)
        return cls(timestamped=timestamped_video(processor), tokenizer=processor.tokenizer,
                   factor=resize_factor(processor), temporal_patch=int(getattr(vp, "temporal_patch_size", 2)),
                   bare_pad=expands_only_video_token(processor))

    def ids(self, *tokens: str) -> List[int]:
        return [self.tokenizer.convert_tokens_to_ids(t) for t in tokens]

    def block(self, m: Media) -> List[int]:
        """The tokens of video ``m`` as the processor expands it (Qwen3-VL): per frame pair, its timestamp, then
        ``<|vision_start|>``, ``(H / factor) * (W / factor)`` pads and ``<|vision_end|>``."""
        vs, vp, ve = self.ids("<|vision_start|>", "<|video_pad|>", "<|vision_end|>")
        t, _, h, w = m.frames.shape
        per = (int(h) // self.factor) * (int(w) // self.factor)
        out: List[int] = []
        for sec in video_timestamps(int(t), float(m.fps or 2.0), self.temporal_patch):
            out += self.tokenizer.encode(f"<{sec:.1f} seconds>", add_special_tokens=False) + [vs] + [vp] * per + [ve]
        return out


def collapse_timestamped(ids: torch.Tensor, medias: List[Media], layout: VideoLayout, placeholder_ids) -> List[int]:
    """Each video's whole timestamped block becomes what vLLM's Qwen3-VL processor expands back into it:
    ``<|video_pad|>`` (``layout.bare_pad``) or ``<|vision_start|><|video_pad|><|vision_end|>``; each run of image
    pads one pad; a video whose tokens differ from its expected block raises ``MMRLError``."""
    vs, vp, ve = layout.ids("<|vision_start|>", "<|video_pad|>", "<|vision_end|>")
    videos = iter([m for m in medias if m.is_video])
    seq, out, i, k = ids.tolist(), [], 0, 0
    while i < len(seq):
        nxt = seq.index(vp, i) if vp in seq[i:] else len(seq)
        for t in seq[i:nxt]:  # text and image runs up to the next video's first pad
            if not (t in placeholder_ids and out and out[-1] == t):
                out.append(t)
        if nxt == len(seq):
            break
        m = next(videos, None)
        if m is None:
            raise MMRLError("vLLM engine: the prompt has more video blocks than videos")
        block = layout.block(m)
        first = block.index(vp)  # the block starts with the first pair's timestamp, before its vision_start
        start = nxt - first
        if start < i or seq[start : start + len(block)] != block:
            raise MMRLError(f"vLLM engine: video {k} (sample {m.sample_id}) is not laid out as Qwen3-VL's timestamped "
                            f"frame-pair blocks ({len(block)} tokens expected); the processor and vLLM would disagree")
        del out[len(out) - first :]  # the timestamp and vision_start already copied
        out += [vp] if layout.bare_pad else [vs, vp, ve]
        i, k = start + len(block), k + 1
    return out


def _video(m: Media):
    frames = m.frames.permute(0, 2, 3, 1).contiguous().numpy()  # [T, H, W, C] uint8
    fps, n = float(m.fps or 2.0), int(frames.shape[0])
    return frames, {"fps": fps, "total_num_frames": n, "frames_indices": list(range(n)), "duration": n / fps,
                    "video_backend": "mmrl", "do_sample_frames": False}


def vllm_prompt(inputs: PromptInputs, placeholder_ids, layout: Optional[VideoLayout] = None) -> Dict[str, Any]:
    """``TokensPrompt`` for one request: collapsed ids + the processor's own frames / images, in the order their
    placeholders appear (one of each kind as an item, several as a list: a multi-turn context). ``layout``: the
    processor's video layout (``VideoLayout.of``); Qwen3-VL's timestamped blocks collapse whole."""
    medias = _medias(inputs)
    if layout is not None and layout.timestamped:
        ids = collapse_timestamped(inputs.input_ids, medias, layout, placeholder_ids)
    else:
        ids = collapse_placeholders(inputs.input_ids, placeholder_ids)
    prompt: Dict[str, Any] = {"prompt_token_ids": ids}
    if not medias:
        if inputs.vision:
            raise MMRLError("vLLM engine: PromptInputs carry vision tensors but no media; build them with "
                            "build_prompt_inputs")
        return prompt
    slots = sum(t in placeholder_ids for t in prompt["prompt_token_ids"])
    if slots != len(medias):
        raise MMRLError(f"vLLM engine: the prompt has {slots} image/video placeholders but {len(medias)} media")
    videos = [_video(m) for m in medias if m.is_video]
    images = [m.image.permute(1, 2, 0).contiguous().numpy() for m in medias if not m.is_video]
    data: Dict[str, Any] = {}
    kwargs: Dict[str, Any] = {"do_resize": False}
    if videos:
        data["video"] = videos[0] if len(videos) == 1 else videos
        kwargs["do_sample_frames"] = False
        rates = {meta["fps"] for _, meta in videos}
        if len(rates) == 1:  # one rate for the prompt; else each video's metadata carries its own
            kwargs["fps"] = rates.pop()
    if images:
        data["image"] = images[0] if len(images) == 1 else images
    prompt["multi_modal_data"], prompt["mm_processor_kwargs"] = data, kwargs
    return prompt
