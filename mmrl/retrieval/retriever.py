"""Retriever backends by name (``RETRIEVERS``) and the single-step retriever, the baseline.

A backend is a ``Retriever``: it holds an ``Embedder`` (whose vectors its corpus index stores) and answers
``retrieve_batch(queries, index, k)`` with at most ``k`` corpus ids per query, best or hop order first. A suite's
``retriever: {name, model, options}`` (``tools/retrieval.yaml``) picks the backend: ``RETRIEVERS.get(name)`` is a
factory ``factory(model, device=None, **options) -> Retriever``; ``model`` is the checkpoint it loads (a Qwen
folder or ``tiny`` for ``single_step``; a backend with its own checkpoint format reads that). A new backend (the
VHOP router) registers itself with ``@RETRIEVERS.register("router")`` and needs no other change.

``single_step``: ``e_q = embed_state(query, [])`` and the top ``k`` corpus images by ``cos(e_q, e_d)`` from the
faiss index (the single-step retriever of the VHOP-Router paper's baseline: one text query, one ranked list).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import torch

from mmrl.registry import Registry
from mmrl.retrieval.embedder import Embedder
from mmrl.retrieval.index import CorpusIndex

RETRIEVERS = Registry("retriever", builtins={__name__: ("single_step",), "mmrl.retrieval.router_backend": ("router",)})


@dataclass
class Retrieval:
    ids: List[str]  # corpus ids: ranked (single step) or a chain in hop order (router)
    scores: List[float]  # one per id (cosine for single step)
    info: Dict[str, Any] = field(default_factory=dict)  # recorded with the tool call (e.g. the router's actions)


class Retriever(ABC):
    name = "?"

    def __init__(self, embedder: Embedder):
        self.embedder = embedder

    def build_index(self, corpus, batch_size: int = 32) -> CorpusIndex:
        """The faiss index of ``corpus`` under this backend's embedder."""
        return CorpusIndex.build(self.embedder, corpus, batch_size)

    @abstractmethod
    def retrieve_batch(self, queries: Sequence[str], index: CorpusIndex, k: int) -> List[Retrieval]:
        """At most ``k`` corpus ids for each query."""

    def retrieve(self, query: str, index: CorpusIndex, k: int) -> Retrieval:
        return self.retrieve_batch([query], index, k)[0]


class SingleStepRetriever(Retriever):
    """Top-``k`` corpus images by cosine to the query's text embedding (one step, no state)."""

    name = "single_step"

    def retrieve_batch(self, queries: Sequence[str], index: CorpusIndex, k: int,
                       batch_size: int = 32) -> List[Retrieval]:
        if not queries:
            return []
        with torch.no_grad():
            vecs = torch.cat([self.embedder.embed_texts(list(queries[i:i + batch_size]))
                              for i in range(0, len(queries), batch_size)])
        scores, ids = index.search(vecs, k)
        return [Retrieval(ids=row, scores=[float(s) for s in sc]) for row, sc in zip(ids, scores)]


@RETRIEVERS.register("single_step")
def single_step(model: str, device: Optional[str] = None, **options) -> SingleStepRetriever:
    """``single_step`` from suite options: ``dim``, ``pooling``, ``max_pixels`` of the embedder (a fresh head on
    checkpoint ``model``, or a saved embedder folder)."""
    known = {"dim", "pooling", "max_pixels", "min_pixels"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; single_step takes {', '.join(sorted(known))}")
    return SingleStepRetriever(Embedder.from_pretrained(model, device=device, **options).eval())


def build_retriever(name: str, model: str, device: Optional[str] = None, **options) -> Retriever:
    """The backend ``name`` (registered, or ``module:function``) loaded from ``model`` with its options."""
    factory = RETRIEVERS.get(name)
    retriever = factory(model, device=device, **options)
    if not isinstance(retriever, Retriever):
        raise TypeError(f"retriever '{name}' returned {type(retriever).__name__}, not a Retriever")
    return retriever
