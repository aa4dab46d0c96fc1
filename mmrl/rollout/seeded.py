"""Rank-count-invariant sampling: every prompt group's responses are drawn under a seed of (seed, step, group id),
so a group's responses do not depend on how many ranks share the step (``mmrl.dist``)."""
from __future__ import annotations

from typing import Callable

import torch


# ---- rank-count-invariant sampling --------------------------------------------------------------------------------
def group_seed(seed: int, step: int, group_id: int) -> int:
    return (seed * 1_000_003 + step * 10_007 + group_id * 101 + 17) % (2**31 - 1)


def generate_seeded(engine, requests, params, seed_of: Callable[[int], int]):
    """Generate with the RNG reseeded per prompt group (requests of a group are consecutive).

    Engines that take per-request seeds (``supports_request_seeds``, e.g. vLLM) get them in ``meta["seed"]`` and
    one batched call; others are called once per group under a forked, reseeded torch RNG. ``inputs_key`` of the
    returned trajectories indexes ``requests`` as with a single call.
    """
    if not requests:
        return []
    if getattr(engine, "supports_request_seeds", False):
        for r in requests:
            r.meta["seed"] = seed_of(r.group_id)
        return engine.generate(requests, params)
    out, start = [], 0
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    while start < len(requests):
        end = start
        while end < len(requests) and requests[end].group_id == requests[start].group_id:
            end += 1
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed_of(requests[start].group_id))
            trajs = engine.generate(requests[start:end], params)
        for t in trajs:
            t.inputs_key += start
        out.extend(trajs)
        start = end
    return out
