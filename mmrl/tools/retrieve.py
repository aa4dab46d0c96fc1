"""``visual_retrieve(query, k)``: images of the episode's own corpus, ranked by a retriever backend over a faiss index.

The corpus is the sample's ``meta["corpus"]`` (a ``vhop_format`` corpus file set by the dataset, e.g.
``vhop_format.query_samples``; never a path from the model). The suite's ``retriever:`` section picks the backend
by name (``mmrl.retrieval.RETRIEVERS``: ``single_step`` here, the VHOP router registers ``router``), the checkpoint
it loads and its options; one ``RetrievalService`` per suite loads it on the first call and keeps one index per
corpus file (rebuilt when the file changes).

The images come back as one video of ``2k`` frames, each image twice in a row: Qwen's temporal patch is 2 frames,
so every image is one temporal patch of its own and costs ``(H/28)(W/28)`` visual tokens, as a separate image
would. All are resized to the first image's ``smart_resize`` size within the suite's frame pixel budget.
``k`` (default ``budget.max_images``) above ``budget.max_images`` is ``over_budget``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

import torch

from mmrl.data.schema import Media
from mmrl.errors import ConfigError
from mmrl.tools.episode import EpisodeState
from mmrl.tools.registry import ToolError, ToolOutput, tool

RETRIEVE_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 400, "pattern": r"\S",
                  "description": "what to look for, in words"},
        "k": {"type": "integer", "minimum": 1, "maximum": 64, "description": "how many images to return"},
    },
    "required": ["query"],
    "additionalProperties": False,
}


@dataclass
class RetrieverConfig:
    """A suite's ``retriever:`` section."""

    name: str = "single_step"  # a backend in mmrl.retrieval.RETRIEVERS, or module:function
    model: str = "tiny"  # the checkpoint the backend loads: a Qwen-VL folder, ``tiny``, a saved embedder/router
    device: Optional[str] = None  # where the backend runs (default: CPU)
    skip_bad_images: bool = False  # leave missing/corrupt corpus images out (counted in the call's info)
    options: Dict[str, Any] = field(default_factory=dict)  # passed to the backend's factory


class RetrievalService:
    """One suite's backend (loaded on first use) and its corpus indexes (one per corpus file and mtime)."""

    def __init__(self, cfg: RetrieverConfig):
        self.cfg = cfg
        self._backend = None
        self._indexes: Dict[Tuple[str, int], Any] = {}

    @property
    def backend(self):
        if self._backend is None:
            from mmrl.retrieval import build_retriever

            self._backend = build_retriever(self.cfg.name, self.cfg.model, device=self.cfg.device,
                                            **dict(self.cfg.options))
        return self._backend

    def index(self, corpus_file: str):
        from mmrl.data.vhop_format import load_corpus

        key = (os.path.abspath(corpus_file), os.stat(corpus_file).st_mtime_ns)
        if key not in self._indexes:
            corpus = load_corpus(corpus_file, skip_bad=self.cfg.skip_bad_images)
            self._indexes = {k: v for k, v in self._indexes.items() if k[0] != key[0]}
            self._indexes[key] = self.backend.build_index(corpus)
        return self._indexes[key]


def check_retriever(path: str, cfg, tool_names) -> Optional[RetrievalService]:
    """The suite's ``RetrievalService``, or ``None``; ``ConfigError`` naming the key when ``retriever:`` is missing
    for ``visual_retrieve``, given without it, or names an unknown backend or a missing checkpoint."""
    from mmrl.retrieval import RETRIEVERS

    rc = cfg.retriever
    if rc is None:
        if "visual_retrieve" in tool_names:
            raise ConfigError(f"{path}: key 'retriever' is required by tool 'visual_retrieve' "
                              f"(e.g. retriever: {{name: single_step, model: tiny}})")
        return None
    if "visual_retrieve" not in tool_names:
        raise ConfigError(f"{path}: key 'retriever' is set but no listed tool uses it (list visual_retrieve)")
    try:
        RETRIEVERS.get(rc.name)
    except KeyError as e:
        raise ConfigError(f"{path}: key 'retriever.name': {str(e).strip(chr(34) + chr(39))}") from None
    if rc.model != "tiny" and not os.path.exists(rc.model):
        raise ConfigError(f"{path}: key 'retriever.model': checkpoint folder not found: {rc.model}")
    if cfg.budget.max_images < 1:
        raise ConfigError(f"{path}: key 'budget.max_images' must be >= 1")
    return RetrievalService(rc)


def _as_video(images, budget, sample_id: str) -> Media:
    from mmrl.media.decode import _resize
    from mmrl.retrieval.embedder import _to_tensor

    first = _resize(_to_tensor(images[0]).unsqueeze(0), budget.frame_min_pixels, budget.frame_max_pixels,
                    budget.factor)
    h, w = first.shape[-2:]
    frames = [first[0]] + [_resize_to(_to_tensor(im), h, w) for im in images[1:]]
    video = torch.stack([f for f in frames for _ in range(2)])  # each image one temporal patch of 2 frames
    return Media(sample_id=sample_id, frames=video, timestamps=[i * 0.5 for i in range(video.shape[0])], fps=2.0)


def _resize_to(x: torch.Tensor, h: int, w: int) -> torch.Tensor:
    from torchvision.transforms.functional import InterpolationMode, resize

    if tuple(x.shape[-2:]) == (h, w):
        return x
    return resize(x, [h, w], interpolation=InterpolationMode.BICUBIC, antialias=True)


@tool("visual_retrieve", RETRIEVE_SCHEMA, "Images from the collection that match the query (up to k, best first).")
def visual_retrieve(state: EpisodeState, query: str, k: Optional[int] = None) -> ToolOutput:
    service: Optional[RetrievalService] = state.retriever
    if service is None:
        raise ToolError("tool_failed", "visual_retrieve has no retriever (the suite's 'retriever:' section)")
    corpus_file = (state.sample.meta or {}).get("corpus") if state.sample is not None else None
    if not isinstance(corpus_file, str) or not os.path.isfile(corpus_file):
        raise ToolError("out_of_range", "this episode has no image collection to search")
    b = state.budget
    k = b.max_images if k is None else k
    if k > b.max_images:
        raise ToolError("over_budget", f"at most {b.max_images} images per call; {k} were asked")
    index = service.index(corpus_file)
    if len(index) == 0:
        raise ToolError("out_of_range", "the collection holds no image")
    found = service.backend.retrieve(query, index, k)
    if not found.ids:
        return ToolOutput(text="No image found.", info={"retrieved": [], "retriever": service.cfg.name})
    media = _as_video([index.corpus.image(i) for i in found.ids], b, state.sample_id)
    listing = ", ".join(f"{i} ({s:.2f})" for i, s in zip(found.ids, found.scores))
    order = found.info.get("order", "best first")
    info = {"retrieved": list(found.ids), "scores": [round(float(s), 4) for s in found.scores],
            "retriever": service.cfg.name, "corpus_skipped": len(index.corpus.skipped), **found.info}
    return ToolOutput(text=f"{len(found.ids)} images ({order}): {listing}.", media=media, info=info)
