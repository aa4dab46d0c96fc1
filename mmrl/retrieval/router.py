"""VHOP-Router: an embedding model turned into a multi-step retriever (specs/algorithms.md §6).

    e_t = f_θ(query, images of the chain so far)          (``embedder.embed_state``)
    e_a = f_θ(image a) for corpus items                    (``embedder.embed_images``), e_BACKTRACK, e_STOP learned
    π(a | s_t) = softmax(cos(e_t, e_a) / T) over the top-K ANN candidates of e_t (faiss) ∪ {BACKTRACK, STOP}

``rollout`` runs a batch of episodes to the end (greedy, sampled, or DAgger-mixed with an oracle) and returns each
whole chain with its step records; ``step_log_probs`` recomputes log π of recorded steps with gradients (the
training stages). The corpus index holds the embeddings of the current weights: call ``refresh_index`` after an
update (the stages do it every ``index_refresh`` steps and before every evaluation). Over a ``CorpusUnion`` (many
worlds, ``mmrl.data.vhop_union``) a query's candidates come from its own corpus only (one faiss index per part).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set

import torch
import torch.nn as nn

from mmrl.data.vhop_format import VhopQuery as Query
from mmrl.retrieval.router_chain import Episode, StepRecord, oracle_label
from mmrl.retrieval.router_policy import BACKTRACK, N_SPECIAL, STOP, action_log_probs, action_logits


@dataclass
class RouterParams:
    """``router:`` in a stage config."""

    temperature: float = 0.05  # T of the policy softmax (spec §6)
    top_k: int = 50  # K ANN candidates per state
    max_hops: int = 6  # non-STOP actions per episode


class Router(nn.Module):
    def __init__(self, embedder: nn.Module, corpus, params: RouterParams, seed: int = 0):
        """``corpus``: ``ids`` (list of str) and ``image(id) -> PIL.Image``; ``embedder``: ``embed_images`` and
        ``embed_state`` (L2-normalised, differentiable)."""
        super().__init__()
        if params.temperature <= 0 or params.top_k < 1 or params.max_hops < 1:
            raise ValueError(f"router params need temperature > 0, top_k >= 1, max_hops >= 1, got {params}")
        self.embedder, self.corpus, self.params = embedder, corpus, params
        with torch.no_grad():
            dim = int(embedder.dim)
        g = torch.Generator().manual_seed(seed)
        self.special = nn.Parameter(nn.functional.normalize(torch.randn(N_SPECIAL, dim, generator=g), dim=-1))
        self.index = None  # (CorpusIndex, embeddings [N, D], id -> row) of the weights at the last refresh
        self._scoped: Dict[str, object] = {}  # part key -> CorpusIndex of that part (a CorpusUnion), same refresh
        self._images: Dict[str, object] = {}

    # -- the corpus side -------------------------------------------------------------------------------------
    def set_corpus(self, corpus) -> None:
        """Route over another corpus (a held-out split); the index is rebuilt on next use."""
        self.corpus, self.index, self._images, self._scoped = corpus, None, {}, {}

    def image(self, item_id: str):
        if item_id not in self._images:  # decoded once per corpus (the corpora are small; states reuse images)
            self._images[item_id] = self.corpus.image(item_id)
        return self._images[item_id]

    @torch.no_grad()
    def refresh_index(self, batch_size: int = 64) -> None:
        """Embed the whole corpus with the current weights and rebuild the ANN index."""
        ids = list(self.corpus.ids)
        embs = torch.cat([self.embedder.embed_images([self.image(i) for i in ids[s:s + batch_size]])
                          for s in range(0, len(ids), batch_size)]).float()
        self.refresh_index_from(embs)

    def refresh_index_from(self, embs: torch.Tensor) -> None:
        """Build the index from given corpus embeddings ``[N, D]`` (in ``corpus.ids`` order; a resumed stage)."""
        from mmrl.retrieval.index import CorpusIndex

        ids = list(self.corpus.ids)
        if embs.shape[0] != len(ids):
            raise ValueError(f"{embs.shape[0]} corpus embeddings for {len(ids)} corpus images")
        index = CorpusIndex(embs.shape[1], self.corpus)
        index.add(ids, embs)
        pos = {c: n for n, c in enumerate(ids)}
        self.index = (index, embs, pos)
        self._scoped = {}
        for key, part in getattr(self.corpus, "parts", {}).items():
            self._scoped[key] = CorpusIndex(embs.shape[1], self.corpus)
            self._scoped[key].add(part, embs[[pos[i] for i in part]])

    def _index(self):
        if self.index is None:
            self.refresh_index()
        return self.index

    def scope(self, item_id: str) -> Optional[str]:
        """The part of a ``CorpusUnion`` that ``item_id`` (e.g. a query's first gold image) belongs to; ``None``
        over a single corpus."""
        return self.corpus.part_of(item_id) if hasattr(self.corpus, "part_of") else None

    def query_scope(self, query: Query) -> Optional[str]:
        """The query's own corpus within a ``CorpusUnion`` (the part of its gold chain); ``None`` otherwise."""
        if not hasattr(self.corpus, "part_of"):
            return None
        if not query.chain:
            raise ValueError(f"query {query.id!r}: over joined corpora a query needs its gold chain to name its corpus")
        return self.corpus.part_of(query.chain[0])

    def candidates(self, state: torch.Tensor, excluded: Set[str], k: Optional[int] = None,
                   scope: Optional[str] = None) -> List[str]:
        """The top-``k`` corpus ids by cosine with ``state [D]`` (faiss search), leaving out ``excluded``; with
        ``scope`` (a part key of a ``CorpusUnion``) only ids of that part."""
        index, _, _ = self._index()
        if scope is not None:
            index = self._scoped[scope]
        k = min(k or self.params.top_k, len(index))
        _, hits = index.search(state.detach().float()[None], k + len(excluded))
        return [h for h in hits[0] if h not in excluded][:k]

    def image_embeddings(self, ids: Sequence[str], grad: bool) -> torch.Tensor:
        """``[len(ids), D]``: fresh (with gradients) for training, else the index's cached rows."""
        if not grad:
            _, embs, pos = self._index()
            return embs[[pos[i] for i in ids]]
        return self.embedder.embed_images([self.image(i) for i in ids])

    def state_embeddings(self, queries: Sequence[Query], chains: Sequence[Sequence[str]]) -> torch.Tensor:
        """``[B, D]``: e_t = f(query, images of the chain so far), in one batched forward."""
        return self.embedder.embed_states([(q.query, [self.image(i) for i in ch]) for q, ch in zip(queries, chains)])

    # -- the policy ------------------------------------------------------------------------------------------
    def logits(self, states: torch.Tensor, chains: Sequence[Sequence[str]], cands: Sequence[Sequence[str]],
               grad: bool) -> torch.Tensor:
        """Logits ``[B, K_max + 2]`` of B states (candidate lists padded and masked to the longest)."""
        k_max = max(1, max(len(c) for c in cands))
        uniq = sorted({c for cs in cands for c in cs})
        table = self.image_embeddings(uniq, grad) if uniq else states.new_zeros(0, states.shape[1])
        where = {c: n for n, c in enumerate(uniq)}
        idx = torch.zeros(len(cands), k_max, dtype=torch.long)
        cmask = torch.zeros(len(cands), k_max, dtype=torch.bool)
        for b, cs in enumerate(cands):
            idx[b, :len(cs)] = torch.tensor([where[c] for c in cs], dtype=torch.long)
            cmask[b, :len(cs)] = True
        cand_emb = table.index_select(0, idx.view(-1)).view(*idx.shape, -1) if uniq else states.new_zeros(len(cands), k_max, states.shape[1])
        smask = torch.tensor([[bool(ch), True] for ch in chains], dtype=torch.bool)
        return action_logits(states, cand_emb.to(states.dtype), self.special.to(states.dtype),
                             self.params.temperature, cmask, smask)

    def step_log_probs(self, queries: Sequence[Query], steps: Sequence[StepRecord],
                       labels: Optional[Sequence[str]] = None) -> torch.Tensor:
        """log π(a | s) ``[S]`` with gradients for recorded steps (``labels``: score these actions instead of the
        taken ones; a label image missing from a step's candidates is appended to them)."""
        cands, targets = [], []
        for n, st in enumerate(steps):
            act = st.action if labels is None else labels[n]
            cs = list(st.candidates)
            if act not in (BACKTRACK, STOP) and act not in cs:
                cs.append(act)
            cands.append(cs)
            targets.append(act)
        states = self.state_embeddings(queries, [st.chain for st in steps])
        logp = action_log_probs(self.logits(states, [st.chain for st in steps], cands, grad=True))
        k_max = logp.shape[1] - N_SPECIAL
        col = [k_max if a == BACKTRACK else k_max + 1 if a == STOP else cs.index(a) for a, cs in zip(targets, cands)]
        return logp[torch.arange(len(steps)), torch.tensor(col)]

    @torch.no_grad()
    def rollout(self, queries: Sequence[Query], mode: str = "greedy", generator: Optional[torch.Generator] = None,
                beta: float = 0.0, label_oracle: bool = False) -> List[Episode]:
        """Run one episode per query to its end. ``mode``: ``greedy`` (argmax) or ``sample``. With ``beta > 0``
        each step takes the oracle's action with probability β (DAgger mixing; needs the gold chains and the
        generator). ``label_oracle`` stores the oracle's label in every step record."""
        if mode not in ("greedy", "sample"):
            raise ValueError(f"rollout mode must be 'greedy' or 'sample', got {mode!r}")
        if (mode == "sample" or beta > 0) and generator is None:
            raise ValueError("sampled or mixed rollouts need a torch.Generator (seeded) for reproducibility")
        eps = [Episode(q.id, self.params.max_hops) for q in queries]
        while True:
            live = [n for n, e in enumerate(eps) if not e.done]
            if not live:
                return eps
            states = self.state_embeddings([queries[n] for n in live], [eps[n].chain for n in live]).float()
            cands = [self.candidates(states[j], eps[n].excluded(), scope=self.query_scope(queries[n]))
                     for j, n in enumerate(live)]
            logp = action_log_probs(self.logits(states, [eps[n].chain for n in live], cands, grad=False))
            k_max = logp.shape[1] - N_SPECIAL
            if mode == "greedy":
                picks = logp.argmax(dim=1)
            else:
                picks = torch.multinomial(logp.exp(), 1, generator=generator)[:, 0]
            for j, n in enumerate(live):
                ep, cs = eps[n], cands[j]
                label = oracle_label(ep.chain, queries[n].chain) if (beta > 0 or label_oracle) else None
                if beta > 0 and float(torch.rand((), generator=generator)) < beta:
                    action, col, lp = label, -1, float("nan")  # the oracle acts: not a policy sample
                    if action not in (BACKTRACK, STOP) and action not in cs:
                        cs = cs + [action]
                else:
                    col = int(picks[j])
                    action = BACKTRACK if col == k_max else STOP if col == k_max + 1 else cs[col]
                    lp = float(logp[j, col])
                ep.steps.append(StepRecord(tuple(ep.chain), tuple(cs), action, col, lp, label))
                ep.apply(action, force=col < 0)
