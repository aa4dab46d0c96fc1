"""The streaming environment's settings (``tools/streaming.yaml``; WTI setting, specs/algorithms.md section 5).

Chunks of ``chunk_seconds`` at ``fps`` (1 s at 2 fps: 2 frames, one temporal patch), an active window of
``window_chunks`` (8 chunks = 16 frames), a controller boundary every ``block_chunks`` chunks (one episode is one
block: its prompt carries the ``window_chunks - block_chunks`` chunks before it, so the window is full at the
block's last decision), a text memory of at most ``memory_budget`` tokens, and at most ``max_recalls_per_chunk``
recalls (each followed by a re-decision at the same time) per chunk. Every key is checked on load; a bad one is a
``ConfigError`` naming the file and the key.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mmrl.errors import ConfigError

DEFAULT_PATH = "tools/streaming.yaml"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class StreamConfig:
    chunk_seconds: float = 1.0
    fps: float = 2.0
    window_chunks: int = 8
    block_chunks: int = 4
    memory_budget: int = 64  # tokens of the rendered memory (the processor's tokenizer)
    max_recalls_per_chunk: int = 2
    max_think_words: int = 24
    frame_max_pixels: int = 56 * 56  # per frame, for the window, the chunks and recalled frames
    frame_min_pixels: int = 28 * 28
    max_total_tokens: int = 4096  # an episode stops before a turn that could pass this many tokens
    max_new_tokens: int = 64  # per model turn when the eval runs the stream (training: rollout.max_new_tokens)

    @property
    def frames_per_chunk(self) -> int:
        return int(round(self.chunk_seconds * self.fps))

    @property
    def carry_chunks(self) -> int:
        """Chunks before the block shown with its first decision (the rest of the window)."""
        return self.window_chunks - self.block_chunks

    @property
    def max_turns(self) -> int:
        """Model turns of one block: every chunk with all its recalls, then the compaction."""
        return self.block_chunks * (1 + self.max_recalls_per_chunk) + 1

    def check(self, where: str = "stream config") -> "StreamConfig":
        checks = [("chunk_seconds", self.chunk_seconds > 0, "> 0"), ("fps", self.fps > 0, "> 0"),
                  ("fps", self.frames_per_chunk >= 2 and self.frames_per_chunk % 2 == 0 and
                   abs(self.frames_per_chunk - self.chunk_seconds * self.fps) < 1e-9,
                   "such that chunk_seconds * fps is an even whole number of frames (temporal patches of 2)"),
                  ("window_chunks", self.window_chunks >= 1, ">= 1"),
                  ("block_chunks", 1 <= self.block_chunks <= self.window_chunks, "between 1 and window_chunks"),
                  ("memory_budget", self.memory_budget >= 1, ">= 1"),
                  ("max_recalls_per_chunk", self.max_recalls_per_chunk >= 0, ">= 0"),
                  ("max_think_words", self.max_think_words >= 1, ">= 1"),
                  ("frame_max_pixels", self.frame_max_pixels >= max(self.frame_min_pixels, 784),
                   ">= frame_min_pixels and >= 784 (one 28x28 patch)"),
                  ("max_total_tokens", self.max_total_tokens >= 64, ">= 64"),
                  ("max_new_tokens", self.max_new_tokens >= 1, ">= 1")]
        for key, ok, need in checks:
            if not ok:
                raise ConfigError(f"{where}: key '{key}' must be {need}")
        return self


def load_stream_config(path: str = DEFAULT_PATH, **overrides) -> StreamConfig:
    """``tools/streaming.yaml`` (or another file) merged over the defaults, then ``overrides``; checked. A relative
    path missing from the working directory is looked up in the repository (``tools/streaming.yaml`` by default)."""
    if not os.path.isabs(path) and not os.path.exists(path):
        in_repo = os.path.join(REPO, path)
        path = in_repo if os.path.exists(in_repo) else path
    try:
        raw = OmegaConf.load(path)
    except FileNotFoundError:
        raise ConfigError(f"stream config not found: {path}") from None
    try:
        merged = OmegaConf.merge(OmegaConf.structured(StreamConfig), raw, overrides)
        cfg: StreamConfig = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        raise ConfigError(f"{path}: " + (f"key '{key}': " if key else "") + str(e).splitlines()[0]) from None
    return cfg.check(str(path))
