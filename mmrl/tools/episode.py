"""The state one episode's tools see: its sample (whose media references come from the dataset, never from the
model), the media of its view, and its budgets with what has been spent."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Set, Tuple

from mmrl.data.schema import Media, Sample

FACTOR = 28  # one visual token covers a 28x28 patch (14-pixel patches merged 2x2; Qwen3-VL: 32x32); frames pair up


@dataclass
class ToolBudget:
    """Per-episode limits (``budget:`` in a suite YAML)."""

    max_calls: int = 4  # tool calls per episode, invalid ones included
    max_media_tokens: int = 1024  # visual tokens all tool results of an episode may add
    max_frames: int = 8  # frames one video_seek may return
    max_images: int = 4  # images one visual_retrieve may return
    frame_max_pixels: int = 112 * 112  # pixel budget of each returned frame or image
    frame_min_pixels: int = 28 * 28
    max_call_chars: int = 512  # longest <tool_call> body accepted
    factor: int = FACTOR  # the model's resize factor: set from the processor by the tool loop, not a suite key


def media_tokens(media: Media, factor: int = FACTOR) -> int:
    """Visual tokens the processor will insert: ``ceil(T/2) * (H/f) * (W/f)`` for video, ``(H/f) * (W/f)`` for an
    image (temporal patch 2; ``f`` = patch x merge: 28 for Qwen2/2.5-VL, 32 for Qwen3-VL)."""
    if media.is_video:
        t, _, h, w = media.frames.shape
        return -(-int(t) // 2) * (int(h) // factor) * (int(w) // factor)
    if media.image is not None:
        return (int(media.image.shape[-2]) // factor) * (int(media.image.shape[-1]) // factor)
    return 0


@dataclass
class StreamMemory:
    """A streaming episode's archive: chunks ``(start s, end s, frames as a video Media)`` in time order, the index
    of the chunk being shown now, and the chunks already recalled (``memory_recall`` returns each at most once)."""

    chunks: List[Tuple[float, float, Media]] = field(default_factory=list)
    current: int = 0
    recalled: Set[int] = field(default_factory=set)


@dataclass
class EpisodeState:
    sample: Optional[Sample]
    media: Optional[Media]  # what the prompt showed (the view's media)
    budget: ToolBudget
    calls: int = 0
    media_tokens_used: int = 0
    memory: Optional[StreamMemory] = None  # streaming episodes: set and advanced by their environment
    retriever: Optional[Any] = None  # retrieval suites: the suite's RetrievalService (mmrl.tools.retrieve)

    @property
    def sample_id(self) -> str:
        return self.sample.id if self.sample is not None else "?"
