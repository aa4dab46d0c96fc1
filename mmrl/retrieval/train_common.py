"""What the three router stages share: the sections of their YAML config, building the router and its weights,
and the per-level evaluation (specs/algorithms.md §6). The stage table and config loading are in
``mmrl.retrieval.train_stages``; the optimisation loop with checkpoints and exact resume in
``mmrl.retrieval.train_loop``. ``out_dir/final/router.pt`` is a stage's result (``init_from`` of the next stage,
``ref_from`` of RL; ``retriever: router`` reads it with ``config.yaml``); ``final/embedder/`` is its embedder
alone (``Embedder.save``: a ``single_step`` model).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy as np
import torch

from mmrl.config import LoraConfig
from mmrl.errors import ConfigError
from mmrl.retrieval.router import Query, Router
from mmrl.retrieval.router_chain import contains_chain
from mmrl.retrieval.train_data import load_data  # noqa: F401  (re-exported: the stages' data, for the benches)


@dataclass
class StageData:
    # a query file (mmrl-vhop-queries JSON; it names its corpus), a glob pattern or a list of them: many worlds as
    # one set, each query over its own corpus (mmrl.retrieval.train_data)
    train: Any = ""
    eval: Any = None  # held-out queries (same forms) over their own corpus, evaluated at the end (and every eval_every)
    skip_bad: bool = False  # leave out missing/corrupt images and the queries naming them (counted), else an error


@dataclass
class StageModel:
    path: str = "tiny"  # a Qwen2.5-VL / Qwen2-VL checkpoint, "tiny" / "base", or a saved embedder (Embedder.save)
    dim: Optional[int] = None  # embedding size of the linear head (None = the backbone's hidden size)
    pooling: str = "mean"  # mean | last
    freeze_vision: bool = False
    max_pixels: int = 112 * 112  # pixel budget per corpus image
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class StageTrain:
    out_dir: str = ""
    steps: int = 100
    batch_size: int = 8  # queries (imitation, RL) or gold states (SFT) per step
    lr: float = 1e-4
    max_grad_norm: float = 1.0
    seed: int = 0
    save_every: int = 50
    keep: int = 2  # checkpoints kept
    index_refresh: int = 10  # re-embed the corpus and rebuild the index every this many steps
    eval_every: int = 0  # 0 = only at the end
    init_from: Optional[str] = None  # a previous stage's out_dir (its final/router.pt)


# -- building ----------------------------------------------------------------------------------------------
def load_embedder(m: StageModel):
    """``model.path``: a Qwen checkpoint (or ``tiny`` / ``base``) under a fresh head, or a saved embedder folder
    (``Embedder.save``, e.g. one pre-trained with attribute heads: ``bench/vhop_protocol.py``), loaded whole."""
    from mmrl.retrieval.embedder import Embedder

    if os.path.isfile(os.path.join(m.path, "embedder.json")):
        return load_saved_embedder(m)
    return Embedder.from_pretrained(m.path, dim=m.dim, pooling=m.pooling, lora=m.lora,
                                    freeze_vision=m.freeze_vision, max_pixels=m.max_pixels)


def load_saved_embedder(m: StageModel):
    """The saved embedder at ``model.path``: its ``embedder.json`` fixes pooling, dim, pixels and LoRA, and the
    config must agree (``model.dim`` unset agrees with any dim), else a ``ConfigError`` naming the key;
    ``model.freeze_vision`` freezes its vision tower."""
    from mmrl.retrieval.embedder import Embedder

    with open(os.path.join(m.path, "embedder.json")) as f:
        meta = json.load(f)
    for key, saved, given in (("model.pooling", meta["pooling"], m.pooling),
                              ("model.dim", meta["dim"], meta["dim"] if m.dim is None else m.dim),
                              ("model.max_pixels", meta["max_pixels"], m.max_pixels),
                              ("model.lora.enabled", bool(meta["lora"]), bool(m.lora.enabled))):
        if saved != given:
            raise ConfigError(f"config key '{key}' = {given!r}, but the saved embedder {m.path} has {saved!r} "
                              "(its embedder.json fixes it)")
    emb = Embedder.from_pretrained(m.path)
    if m.freeze_vision:
        for p in emb._backbone().visual.parameters():
            p.requires_grad_(False)
    return emb


def build_router(cfg, corpus) -> Router:
    torch.manual_seed(cfg.train.seed)
    router = Router(load_embedder(cfg.model), corpus, cfg.router, seed=cfg.train.seed)
    if cfg.train.init_from:
        load_router_weights(router, cfg.train.init_from, "train.init_from")
    return router


def trainable_state(router: Router) -> Dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in router.named_parameters() if p.requires_grad}


def save_router(router: Router, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(trainable_state(router), path)


def load_router_weights(router: Router, where: str, key: str) -> None:
    """Load ``final/router.pt`` of the stage run in ``where`` (or a ``router.pt`` file) into ``router``."""
    p = Path(where)
    p = p if p.is_file() else p / "final" / "router.pt"
    if not p.is_file():
        raise ConfigError(f"config key '{key}': no router weights at {p} (run that stage first)")
    state = torch.load(p, weights_only=True)
    missing = [n for n, q in router.named_parameters() if q.requires_grad and n not in state]
    if missing:
        raise ConfigError(f"config key '{key}': {p} lacks {len(missing)} trainable tensors (e.g. {missing[0]}); "
                          "was it trained with another model.* setting?")
    params = dict(router.named_parameters())
    with torch.no_grad():
        for n, t in state.items():
            if n not in params:
                raise ConfigError(f"config key '{key}': {p} holds '{n}', which this router does not have")
            params[n].copy_(t)
    router.index = None


# -- evaluation --------------------------------------------------------------------------------------------
@torch.no_grad()
def evaluate_router(router: Router, queries: Sequence[Query], corpus=None, batch: int = 16) -> Dict[str, float]:
    """Greedy chains on ``queries`` (over ``corpus``, e.g. the held-out split; the router's own corpus and index
    are restored afterwards): success (the chain contains the gold chain) overall and by level, mean hops."""
    kept = (router.corpus, router.index, router._images, router._scoped)
    was_training = router.training
    router.eval()
    try:
        if corpus is not None:
            router.set_corpus(corpus)
        router.refresh_index()
        eps = []
        for s in range(0, len(queries), batch):
            eps += router.rollout(queries[s:s + batch], mode="greedy")
    finally:
        router.corpus, router.index, router._images, router._scoped = kept
        router.train(was_training)
    return success_by_level(queries, [e.chain for e in eps], [e.hops for e in eps])


def success_by_level(queries: Sequence[Query], chains: Sequence[Sequence[str]],
                     hops: Optional[Sequence[int]] = None) -> Dict[str, float]:
    ok = [contains_chain(c, q.chain) for q, c in zip(queries, chains)]
    out = {"success": float(np.mean(ok)) if ok else float("nan"), "n": float(len(ok))}
    for lvl in sorted({q.level for q in queries}):
        sel = [o for o, q in zip(ok, queries) if q.level == lvl]
        out[f"success/L{lvl}"] = float(np.mean(sel))
    if hops is not None:
        out["hops"] = float(np.mean(hops)) if hops else float("nan")
    return out
