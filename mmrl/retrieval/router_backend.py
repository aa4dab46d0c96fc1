"""The ``router`` retriever backend: one ``visual_retrieve`` call returns the VHOP-Router's whole chain.

Suite (``tools/retrieval_router.yaml``)::

    retriever: {name: router, model: runs/vhop/rl, options: {max_hops: 6}}

``model`` is a router stage's ``train.out_dir`` (its ``config.yaml`` names the embedder backbone and the router
parameters, ``final/router.pt`` holds the trained weights). ``options`` may override ``top_k``, ``max_hops`` and
``temperature``. The chain is the greedy rollout from the query (``Router.rollout``), in hop order; ``k`` caps how
many images come back, keeping the end of the chain (the target) when the chain is longer. Each image's score
is π(a | s) of the step that added it; ``info`` records the actions taken (BACKTRACK/STOP included).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence

import torch

from mmrl.data.vhop_format import VhopQuery
from mmrl.retrieval.retriever import RETRIEVERS, Retrieval, Retriever

ROUTER_OPTIONS = ("top_k", "max_hops", "temperature")


class RouterRetriever(Retriever):
    name = "router"

    def __init__(self, router):
        super().__init__(router.embedder)
        self.router = router
        self._for = None  # the CorpusIndex the router's own index was last built from

    def _use(self, index) -> None:
        if self._for is not index:
            self.router.set_corpus(index.corpus)
            self.router.refresh_index_from(index.vectors(list(index.corpus.ids)))
            self._for = index

    @torch.no_grad()
    def retrieve_batch(self, queries: Sequence[str], index, k: int) -> List[Retrieval]:
        if not queries:
            return []
        if index.corpus is None:
            raise ValueError("the router backend needs an index that knows its corpus (CorpusIndex.build)")
        self._use(index)
        qs = [VhopQuery(id=f"call{n}", query=q, kind="exact", level=1, chain=[]) for n, q in enumerate(queries)]
        out = []
        for ep in self.router.rollout(qs, mode="greedy"):
            prob = {}
            for st in ep.steps:  # the probability of the step that last added each image of the final chain
                if st.action not in ("BACKTRACK", "STOP"):
                    prob[st.action] = float(torch.tensor(st.logp).exp())
            chain = ep.chain[-k:] if k < len(ep.chain) else list(ep.chain)
            out.append(Retrieval(ids=chain, scores=[prob[i] for i in chain],
                                 info={"order": "hop order", "actions": [st.action for st in ep.steps],
                                       "hops": ep.hops, "chain_len": len(ep.chain)}))
        return out


def load_router(run_dir: str, device: Optional[str] = None, **overrides):
    """The router trained in stage folder ``run_dir`` (its config.yaml and final/router.pt)."""
    from omegaconf import OmegaConf

    from mmrl.retrieval.router import Router
    from mmrl.retrieval.train_common import load_embedder, load_router_weights
    from mmrl.retrieval.train_stages import load_stage_config

    cfg_file = Path(run_dir) / "config.yaml"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"{run_dir} is not a router stage folder (no config.yaml)")
    raw = OmegaConf.load(cfg_file)
    stage = next(s for s in ("rl", "imitate", "sft") if s in raw)
    cfg = load_stage_config(stage, [str(cfg_file)], [f"router.{k}={v}" for k, v in overrides.items()])
    router = Router(load_embedder(cfg.model), _EmptyCorpus(), cfg.router, seed=cfg.train.seed)
    load_router_weights(router, run_dir, "retriever.model")
    router.eval()
    return router.to(device) if device else router


class _EmptyCorpus:
    """Until the first call names the episode's corpus."""

    ids: List[str] = []


@RETRIEVERS.register("router")
def router_backend(model: str, device: Optional[str] = None, **options) -> RouterRetriever:
    """``router`` from suite options (``top_k``, ``max_hops``, ``temperature``) and a stage folder ``model``."""
    unknown = sorted(set(options) - set(ROUTER_OPTIONS))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; router takes {', '.join(ROUTER_OPTIONS)}")
    return RouterRetriever(load_router(model, device, **options))
