"""DAPO dynamic sampling: keep only prompt groups with mixed accuracy (0 < #correct < G) and refill the batch
by drawing and rolling out more prompts, up to ``algorithm.max_resample_rounds`` extra rounds (DAPO, Yu et al. 2025)."""
from __future__ import annotations

from typing import List

import torch

from mmrl.algos.dapo import dynamic_sampling_keep


def _kept_groups(trajs, comps) -> List[int]:
    acc = comps["accuracy"]
    gids = torch.tensor([t.group_id for t in trajs])
    keep = dynamic_sampling_keep(acc, gids)
    return sorted({int(g) for g, k in zip(gids.tolist(), keep.tolist()) if k})


def _merge(si, trajs, comps, total, si2, trajs2, comps2, total2):
    offset = len(si.requests)
    for t in trajs2:
        t.inputs_key += offset
    si.requests.extend(si2.requests)
    for name in ("samples", "candidates", "media", "views"):
        getattr(si, name).update(getattr(si2, name))
    si.skipped.extend(si2.skipped)
    si.time_decode += si2.time_decode
    si.time_views += si2.time_views
    merged = {k: torch.cat([comps[k], comps2[k]]) for k in comps}
    return si, trajs + trajs2, merged, torch.cat([total, total2])


def refill(trainer, si, trajs, comps, total):
    target = trainer.cfg.train.prompts_per_step
    rounds = 0
    if "accuracy" not in comps:
        raise ValueError("algorithm.dynamic_sampling needs the 'accuracy' reward")
    kept = _kept_groups(trajs, comps)
    next_group = max((t.group_id for t in trajs), default=-1) + 1
    while len(kept) < target and rounds < trainer.cfg.algorithm.max_resample_rounds:
        rounds += 1
        si2, trajs2 = trainer.rollout(trainer.stream.next(target - len(kept)), group_offset=next_group)
        if not trajs2:
            continue
        comps2, total2 = trainer.rewards(si2, trajs2)
        si, trajs, comps, total = _merge(si, trajs, comps, total, si2, trajs2, comps2, total2)
        next_group = max(t.group_id for t in trajs) + 1
        kept = _kept_groups(trajs, comps)
    chosen = set(kept[:target])
    idx = [i for i, t in enumerate(trajs) if t.group_id in chosen]
    sel = torch.tensor(idx, dtype=torch.long)
    return si, [trajs[i] for i in idx], {k: v[sel] for k, v in comps.items()}, total[sel], rounds
