"""A faiss-cpu index over a corpus: exact inner product (``IndexFlatIP``) on L2-normalised vectors, i.e. cosine.

Row ``i`` of the faiss index is corpus item ``ids[i]``; ``search`` maps rows back to ids. ``build`` embeds the
corpus images with an ``Embedder`` (no grad); ``save``/``load`` write ``index.faiss`` (``faiss.write_index``)
and ``index.json`` (the ids, the dimension and the corpus file they came from).
"""
from __future__ import annotations

import json
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from mmrl.data.vhop_format import Corpus


def _rows(vectors) -> np.ndarray:
    x = vectors.detach().float().cpu().numpy() if isinstance(vectors, torch.Tensor) else np.asarray(vectors, "float32")
    x = np.ascontiguousarray(x, dtype="float32")
    if x.ndim == 1:
        x = x[None]
    if x.ndim != 2:
        raise ValueError(f"expected vectors [N, D], got shape {list(x.shape)}")
    if not np.isfinite(x).all():
        raise ValueError("vectors hold NaN or infinite values")
    return x


class CorpusIndex:
    def __init__(self, dim: int, corpus: Optional[Corpus] = None):
        import faiss

        self.dim = int(dim)
        self.index = faiss.IndexFlatIP(self.dim)
        self.ids: List[str] = []
        self.rows: dict = {}  # id -> row
        self.corpus = corpus  # the items the ids name (for their images), when known

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, ids: Sequence[str], vectors) -> None:
        """Append ``vectors [N, dim]`` (normalised here) for corpus ids ``ids``; an id may be added once."""
        x = _rows(vectors)
        if x.shape != (len(ids), self.dim):
            raise ValueError(f"{len(ids)} ids need vectors [{len(ids)}, {self.dim}], got {list(x.shape)}")
        dup = sorted({i for i in ids if i in self.rows})
        if dup or len(set(ids)) != len(ids):
            raise ValueError(f"ids already in the index or repeated: {dup[:5] or list(ids)[:5]}")
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        self.index.add(x)
        self.rows.update((i, len(self.ids) + j) for j, i in enumerate(ids))
        self.ids.extend(ids)

    def search(self, queries, k: int) -> Tuple[np.ndarray, List[List[str]]]:
        """Top ``k`` by cosine for each query vector: ``scores [Q, k']`` (descending) and the ids,
        ``k' = min(k, len(self))``."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        q = _rows(queries)
        if q.shape[1] != self.dim:
            raise ValueError(f"query vectors have dimension {q.shape[1]}, the index {self.dim}")
        q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        k = min(k, len(self))
        if k == 0:
            return np.zeros((len(q), 0), "float32"), [[] for _ in range(len(q))]
        scores, rows = self.index.search(q, k)
        return scores, [[self.ids[r] for r in row] for row in rows]

    def vectors(self, ids: Optional[Sequence[str]] = None) -> torch.Tensor:
        """The stored unit vectors ``[N, dim]`` (all, or of ``ids`` in that order)."""
        rows = range(len(self)) if ids is None else [self.rows[i] for i in ids]
        return torch.from_numpy(np.stack([self.index.reconstruct(int(r)) for r in rows])) if len(rows) else \
            torch.zeros(0, self.dim)

    @classmethod
    def build(cls, embedder, corpus: Corpus, batch_size: int = 32) -> "CorpusIndex":
        """Embed every corpus image with ``embedder`` (no grad) and index it."""
        index = cls(embedder.dim, corpus)
        with torch.no_grad():
            for i in range(0, len(corpus), batch_size):
                part = corpus.items[i:i + batch_size]
                index.add([it.id for it in part], embedder.embed_images([corpus.image(it.id) for it in part]))
        return index

    def save(self, out_dir: str) -> str:
        import faiss

        os.makedirs(out_dir, exist_ok=True)
        faiss.write_index(self.index, os.path.join(out_dir, "index.faiss"))
        with open(os.path.join(out_dir, "index.json"), "w") as f:
            json.dump({"dim": self.dim, "ids": self.ids, "corpus": self.corpus.path if self.corpus else None}, f)
        return out_dir

    @classmethod
    def load(cls, out_dir: str, corpus: Optional[Corpus] = None) -> "CorpusIndex":
        """Read an index written by ``save``; ``corpus`` (if given) must hold every id."""
        import faiss

        with open(os.path.join(out_dir, "index.json")) as f:
            meta = json.load(f)
        index = cls(meta["dim"], corpus)
        index.index = faiss.read_index(os.path.join(out_dir, "index.faiss"))
        index.ids = list(meta["ids"])
        index.rows = {i: r for r, i in enumerate(index.ids)}
        if index.index.ntotal != len(index.ids) or index.index.d != index.dim:
            raise ValueError(f"{out_dir}: index.faiss holds {index.index.ntotal} vectors of dimension "
                             f"{index.index.d}; index.json names {len(index.ids)} ids of dimension {index.dim}")
        if corpus is not None:
            missing = [i for i in index.ids if i not in corpus]
            if missing:
                raise ValueError(f"{out_dir}: ids not in corpus {corpus.path}: {missing[:5]}")
        return index
