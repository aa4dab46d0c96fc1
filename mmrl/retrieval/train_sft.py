"""Router stage 1, SFT: InfoNCE on gold chains with in-batch and hard negatives (specs/algorithms.md §6).

Each step draws ``train.batch_size`` gold states (query q, chain prefix g[:t]) with label d⁺ = g[t] and minimises

    L = −log softmax_k( cos(e_t, k) / T )[d⁺],   k ∈ {d⁺ of every state in the batch}
                                                     ∪ {the top-``sft.hard_negatives`` index hits of e_t, d⁺ left out}
                                                     ∪ {e_BACKTRACK, e_STOP}

Images in a state's own chain are not its negatives (the policy never offers them), nor is BACKTRACK on an
empty chain. Over many worlds (a ``CorpusUnion``) each step draws its states from one world (uniform over the
worlds), so the in-batch positives and the hard negatives all lie in the states' own corpus. (Masking the other
worlds' keys out of a mixed batch instead leaves a state a handful of negatives: the embeddings collapsed, mean
pairwise cosine 0.99, in an 800-step probe over 30 worlds.) The special embeddings are negatives here;
imitation teaches when they are right.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from mmrl.errors import ConfigError
from mmrl.retrieval.router import RouterParams
from mmrl.retrieval.router_policy import info_nce
from mmrl.retrieval.train_common import StageData, StageModel, StageTrain


@dataclass
class SFTParams:
    hard_negatives: int = 8  # index hits per state used as negatives (0 = in-batch only)


@dataclass
class SFTStageConfig:
    STAGE: ClassVar[str] = "sft"
    data: StageData = field(default_factory=StageData)
    model: StageModel = field(default_factory=StageModel)
    router: RouterParams = field(default_factory=RouterParams)
    train: StageTrain = field(default_factory=StageTrain)
    sft: SFTParams = field(default_factory=SFTParams)

    def check(self) -> None:
        if self.sft.hard_negatives < 0:
            raise ConfigError(f"config key 'sft.hard_negatives' must be >= 0, got {self.sft.hard_negatives}")


def gold_states(queries):
    """Every (query index, prefix length t) of the gold chains: the states whose label is the hop g[t]."""
    return [(n, t) for n, q in enumerate(queries) for t in range(len(q.chain))]


def states_by_world(router, queries):
    """The gold states grouped by the part of a ``CorpusUnion`` their query lives in (sorted keys); one group
    ``None`` over a single corpus."""
    groups = {}
    for n, t in gold_states(queries):
        groups.setdefault(router.query_scope(queries[n]), []).append((n, t))
    return [groups[k] for k in sorted(groups, key=str)]


class SFTLoss:
    def setup(self, cfg, router, corpus):
        return {"hard": cfg.sft.hard_negatives, "batch": cfg.train.batch_size}

    def __call__(self, router, queries, step, gen, ctx):
        if ctx.get("queries") is not queries:
            ctx["queries"], ctx["worlds"] = queries, states_by_world(router, queries)
        worlds = ctx["worlds"]
        pool = worlds[0] if len(worlds) == 1 else worlds[int(torch.randint(len(worlds), (1,), generator=gen))]
        picks = torch.randint(len(pool), (ctx["batch"],), generator=gen).tolist()
        batch = [pool[i] for i in picks]
        chains = [queries[n].chain[:t] for n, t in batch]
        pos = [queries[n].chain[t] for n, t in batch]
        states = router.state_embeddings([queries[n] for n, _ in batch], chains)
        keys = list(dict.fromkeys(pos))
        scope = router.scope(pos[0])  # one world per step
        if ctx["hard"]:
            for b, s in enumerate(states):
                keys += router.candidates(s, set(chains[b]) | {pos[b]}, k=ctx["hard"], scope=scope)
            keys = list(dict.fromkeys(keys))
        key_emb = torch.cat([router.image_embeddings(keys, grad=True), router.special.to(states.dtype)])
        where = {k: j for j, k in enumerate(keys)}
        labels = torch.tensor([where[p] for p in pos])
        mask = torch.ones(len(batch), len(keys) + 2, dtype=torch.bool)
        for b, ch in enumerate(chains):
            for c in ch:
                if c in where:
                    mask[b, where[c]] = False
            if not ch:
                mask[b, len(keys)] = False  # no BACKTRACK on an empty chain
        loss = info_nce(states, key_emb, labels, router.params.temperature, mask)
        with torch.no_grad():
            logits = torch.nn.functional.normalize(states, dim=-1) @ torch.nn.functional.normalize(key_emb, dim=-1).T
            acc = float((logits.masked_fill(~mask, -2).argmax(1) == labels).float().mean())
        return loss, {"acc": acc, "keys": float(len(keys))}
