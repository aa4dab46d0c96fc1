"""The one function that turns (chat messages, decoded media) into model inputs through the real processor.

Every engine (HF generate, the scorer, vLLM) builds its inputs here, so image/video token counts, grids
and M-RoPE inputs (``video_grid_thw``, ``second_per_grid_ts``) always agree.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union

import torch

from mmrl.data.schema import Media



@dataclass
class PromptInputs:
    """Processor output for ONE prompt: token ids plus its vision tensors."""

    input_ids: torch.Tensor  # [P]
    mm_token_type_ids: Optional[torch.Tensor] = None  # [P]: 0 text, 1 image, 2 video (for M-RoPE positions)
    vision: Dict[str, torch.Tensor] = field(default_factory=dict)  # pixel_values(_videos), *_grid_thw, second_per_grid_ts
    text: str = ""
    media: Optional[Media] = field(default=None, repr=False)  # what the processor got (vLLM re-processes it)
    rope: Optional[tuple] = field(default=None, repr=False, compare=False)  # (M-RoPE positions [3, P], next position), cached

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())


@dataclass
class SequenceInputs(PromptInputs):
    """Processor inputs of a WHOLE multi-turn sequence: the prompt, then every model turn and observation, with the
    vision tensors of all its media in order (the prompt's and those inserted mid-trajectory).

    ``input_ids[:prompt_len]`` is the prompt, the rest is the trajectory's ``response_ids``. Passed as the first
    element of a scorer item, it selects the full-sequence path (``mmrl.models.sequence_scoring``); passed to an
    engine as a prompt, generation continues the sequence. ``prompt`` is the prompt's own ``PromptInputs`` (the same
    object for every episode of a request): the scorer prefills it once for all of them.
    """

    prompt_len: int = 0
    prompt: Optional[PromptInputs] = field(default=None, repr=False, compare=False)
    # bool [len - prompt_len]: the response tokens the loss trains on (model turns); the scorer puts only these
    # through the LM head and gives the others (observations) log-prob 0, as the sampler does. None: every token.
    trained: Optional[torch.Tensor] = field(default=None, repr=False, compare=False)


VIDEO_SLOT = "<|vision_start|><|video_pad|><|vision_end|>"  # a video in a templated prompt, before expansion


def resize_factor(processor) -> int:
    """Sides of every frame and image must be multiples of this: patch size x spatial merge size, read from the
    processor (14 x 2 = 28 for Qwen2-VL / Qwen2.5-VL, 16 x 2 = 32 for Qwen3-VL)."""
    ip = processor.image_processor
    return int(ip.patch_size) * int(ip.merge_size)


def timestamped_video(processor) -> bool:
    """Qwen3-VL lays a video out as per-frame-pair blocks ``<t seconds><|vision_start|>pads<|vision_end|>`` (text
    timestamps) instead of one run of pads; Qwen2-VL / Qwen2.5-VL as one run."""
    return type(processor).__name__.startswith("Qwen3VL")


def chat_text(processor, messages: list, prefill: str = "") -> str:
    """The chat template applied to ``messages`` with the generation prompt, plus an assistant prefill."""
    return processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + prefill


def _check_sizes(medias: Sequence[Media], processor) -> None:
    """Frames and images go in unresized (``do_resize=False``): their sides must be multiples of the processor's
    resize factor, or the processor raises (Qwen3-VL) or mis-patches them."""
    from mmrl.errors import DataError

    f = resize_factor(processor)
    for m in medias:
        x = m.frames if m.is_video else m.image
        if x is not None and (x.shape[-2] % f or x.shape[-1] % f):
            raise DataError(f"{'frames' if m.is_video else 'image'} of {x.shape[-2]}x{x.shape[-1]} pixels: this model "
                            f"needs sides that are multiples of {f} (decode with MediaBudget(factor={f}); "
                            f"mmrl.media.inputs.resize_factor)", sample_id=m.sample_id)


def _media_kwargs(medias: Sequence[Media], processor=None) -> dict:
    """Processor keyword arguments for prompts whose media are already decoded and sampled (in prompt order)."""
    from transformers.video_utils import VideoMetadata

    videos = [m for m in medias if m.is_video]
    images = [m for m in medias if not m.is_video and m.image is not None]
    if processor is not None:
        _check_sizes(videos + images, processor)
    kwargs: dict = {}
    if videos:
        kwargs["videos"] = [m.frames for m in videos]
        kwargs["video_metadata"] = [VideoMetadata(total_num_frames=int(m.frames.shape[0]), fps=float(m.fps or 2.0),
                                                  frames_indices=list(range(int(m.frames.shape[0])))) for m in videos]
        kwargs["do_sample_frames"] = False
        if hasattr(getattr(processor, "video_processor", None), "cap_pixels_per_frame"):
            # qwen-vl-utils' per-frame cap, which mmrl.media.decode already applied (no resize happens here);
            # saying so silences transformers' warning about the uncapped default
            kwargs["cap_pixels_per_frame"] = True
    if images:
        kwargs["images"] = [m.image for m in images]
    if videos or images:
        kwargs["do_resize"] = False  # frames were resized by mmrl.media.decode (Qwen's smart_resize)
    return kwargs


def _split_batch(out, texts: Sequence[str], medias: Sequence[Media]) -> List[PromptInputs]:
    """Per-prompt ``PromptInputs`` from one batched processor output (padding dropped, vision rows sliced by grid)."""
    keep = out["attention_mask"].bool()
    mm_all = out.get("mm_token_type_ids")
    offsets = {"pixel_values": 0, "pixel_values_videos": 0}
    n_seen = {"image": 0, "video": 0}
    res = []
    for i, (text, media) in enumerate(zip(texts, medias)):
        vision: Dict[str, torch.Tensor] = {}
        kind = "video" if media.is_video else ("image" if media.image is not None else None)
        if kind is not None:
            pix, grid = ("pixel_values_videos", "video_grid_thw") if kind == "video" else ("pixel_values", "image_grid_thw")
            j = n_seen[kind]
            g = torch.as_tensor(out[grid])[j : j + 1]
            rows = int(g.prod())
            vision[pix] = torch.as_tensor(out[pix])[offsets[pix] : offsets[pix] + rows]
            vision[grid] = g
            if kind == "video" and "second_per_grid_ts" in out:
                vision["second_per_grid_ts"] = torch.as_tensor(out["second_per_grid_ts"])[j : j + 1]
            offsets[pix] += rows
            n_seen[kind] += 1
        mm = None if mm_all is None else torch.as_tensor(mm_all)[i][keep[i]]
        res.append(PromptInputs(input_ids=out["input_ids"][i][keep[i]], mm_token_type_ids=mm, vision=vision,
                                text=text, media=media))
    return res


def build_prompt_inputs_batch(processor, prompts: Sequence[tuple], max_prompt_tokens: Optional[int] = None
                              ) -> List[Union[PromptInputs, "DataError"]]:
    """Many prompts through ONE processor call; ``prompts`` holds ``(messages, media, sample_id[, prefill])``.

    Returns, in order, each prompt's ``PromptInputs`` or the ``DataError`` that prompt raised (over the
    token budget), so the caller can skip or raise per sample. One call instead of one per prompt: the
    processor's per-call overhead (kwarg merging and validation, per-video preprocessing) was ~1.4 ms per
    prompt, 0.13 s of a BPO step with 64 views (bench/README.md). If the batched call fails, each prompt is
    processed alone so the error names the sample at fault.
    """
    from mmrl.errors import DataError

    if not prompts:
        return []
    texts = [chat_text(processor, p[0], p[3] if len(p) > 3 else "") for p in prompts]
    medias = [p[1] for p in prompts]
    try:
        items = encode_texts(processor, texts, medias)
    except Exception:
        if len(prompts) == 1:
            raise
        res: List = []
        for p in prompts:  # attribute the failure: the prompt at fault raises with its sample id
            res.extend(build_prompt_inputs_batch(processor, [p], max_prompt_tokens))
        return res
    res = []
    for pi, p in zip(items, prompts):
        if max_prompt_tokens is not None and pi.num_tokens > max_prompt_tokens:
            res.append(DataError(f"prompt has {pi.num_tokens} tokens, over the budget of {max_prompt_tokens} "
                                 f"(lower data.nframes or data.max_pixels)", sample_id=p[2]))
        else:
            res.append(pi)
    return res


def encode_texts(processor, texts: Sequence[str], medias: Sequence[Media]) -> List[PromptInputs]:
    """Already-templated texts (each with at most one ``<|vision_start|>..<|vision_end|>`` placeholder, expanded to
    its media's token count) through ONE processor call; a ``Media`` with neither frames nor image is text only.

    Qwen3-VL: the processor expands ``<|video_pad|>`` into the timestamped frame-pair blocks, each with its own
    ``<|vision_start|>``/``<|vision_end|>``; the chat template's outer pair is dropped first, so the tokens are the
    layout the model was trained with and vLLM builds (transformers 5.x would keep the outer pair around the blocks).
    """
    if timestamped_video(processor):
        texts = [t.replace(VIDEO_SLOT, "<|video_pad|>") for t in texts]
    out = processor(text=list(texts), return_tensors="pt", padding=True, **_media_kwargs(medias, processor))
    return _split_batch(out, texts, medias)


def build_prompt_inputs(processor, messages: list, media: Media, prefill: str = "",
                        max_prompt_tokens: Optional[int] = None, sample_id: str = "?") -> PromptInputs:
    """Apply the chat template and run the processor on one prompt with its media (frames already sampled)."""
    (res,) = build_prompt_inputs_batch(processor, [(messages, media, sample_id, prefill)], max_prompt_tokens)
    if isinstance(res, Exception):
        raise res
    return res


def collate_vision(items: Sequence[PromptInputs], keys: Optional[Sequence[str]] = None) -> Dict[str, torch.Tensor]:
    """Concatenate the vision tensors of several prompts in order (the model splits them by grid); ``keys``
    restricts it to those entries (e.g. the grids alone, without copying pixels)."""
    out: Dict[str, List[torch.Tensor]] = {}
    for it in items:
        for k, v in it.vision.items():
            if keys is None or k in keys:
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
