"""vLLM's view of a prompt: token ids with each run of ``<|image_pad|>`` / ``<|video_pad|>`` collapsed to ONE
placeholder (vLLM expands it itself) and, as ``multi_modal_data``, the very frames and images the HF processor got
(already resized: ``do_resize=False``), in the order their placeholders appear. A multi-turn context
(``mmrl.rollout.agent_loop_multi.ContextInputs``) carries every medium of the episode so far: the prompt's and those
the observations inserted.

vLLM numbers the M-RoPE positions itself (``get_mrope_input_positions``) from the grids of these frames and each
video's ``second_per_grid_ts`` (``temporal_patch_size / fps`` of its metadata, per video): the numbering the models
were trained with, which ``mmrl.models.mrope`` computes for the HF sampler and the scorer
(``tests/rollout/test_vllm_positions.py`` checks that the prompts sent here give vLLM those positions)."""
from __future__ import annotations

from typing import Any, Dict, List

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


def _video(m: Media):
    frames = m.frames.permute(0, 2, 3, 1).contiguous().numpy()  # [T, H, W, C] uint8
    fps, n = float(m.fps or 2.0), int(frames.shape[0])
    return frames, {"fps": fps, "total_num_frames": n, "frames_indices": list(range(n)), "duration": n / fps,
                    "video_backend": "mmrl", "do_sample_frames": False}


def vllm_prompt(inputs: PromptInputs, placeholder_ids) -> Dict[str, Any]:
    """``TokensPrompt`` for one request: collapsed ids + the processor's own frames / images, in the order their
    placeholders appear (one of each kind as an item, several as a list: a multi-turn context)."""
    prompt: Dict[str, Any] = {"prompt_token_ids": collapse_placeholders(inputs.input_ids, placeholder_ids)}
    medias = _medias(inputs)
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
