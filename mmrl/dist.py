"""Multi-rank plumbing for the DeepSpeed backend: ranks, the group-ownership rule, gathers (seeded rollouts: ``mmrl.rollout.seeded``).

How a step's prompt groups are spread over ranks (the rule the tests check):

1. Every rank draws the SAME global list of ``train.prompts_per_step`` samples from its ``DataStream`` (same
   seed, same position), so no data is sent between ranks.
2. Rank ``r`` of ``W`` owns the contiguous block ``shard_range(P, W, r)`` of that list: whole prompt groups,
   all views and all ``n`` responses of a prompt stay on one rank. Group ids stay global
   (``group_offset`` = the block's start), so rank order = single-process order.
3. Each rank rolls out and scores its own groups. The per-trajectory reward vectors (total, components,
   group ids, roles, lengths, pack ids) are all-gathered in rank order and every rank runs the advantage
   estimator on the whole batch, then keeps its slice. Group statistics are local anyway; batch-level ones
   (``std_scale: batch``, BPO ``batch_std``, GDPO batch norm) are therefore exact too.
4. Sampling is seeded per (seed, step, global group id) (``generate_seeded``), so a group's responses do not
   depend on how many ranks there are: 2 ranks reproduce the 1-process run.

Loss normalisation: token / sequence counts are all-reduced, each rank weights its micro-batch losses by its
share of the GLOBAL count and multiplies by ``W`` because ZeRO averages gradients over ranks; the summed
gradient then equals the single-process one.
"""
from __future__ import annotations

import os
from typing import Any, List, Sequence, Tuple

import torch


# ---- ranks --------------------------------------------------------------------------------------------------------
def is_dist() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def rank() -> int:
    return torch.distributed.get_rank() if is_dist() else int(os.environ.get("RANK", 0))


def world_size() -> int:
    return torch.distributed.get_world_size() if is_dist() else int(os.environ.get("WORLD_SIZE", 1))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", 0))


def bind_cuda_device() -> torch.device:
    """This rank's GPU, ``cuda:LOCAL_RANK``, made the current device (``torch.cuda.set_device``).

    Called before anything touches CUDA (the NCCL process group, the model's ``.to``, DeepSpeed, vLLM): without it
    every rank of a node would use GPU 0 (``"cuda"`` = the current device, 0 by default). A ``LOCAL_RANK`` beyond the
    visible devices is a one-line ``ConfigError``.
    """
    from mmrl.errors import ConfigError

    lr, count = local_rank(), torch.cuda.device_count()
    if lr >= count:
        raise ConfigError(f"LOCAL_RANK={lr} but this node sees {count} CUDA device(s) "
                          f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): "
                          f"launch at most {count} ranks per node")
    torch.cuda.set_device(lr)
    return torch.device("cuda", lr)


def is_main() -> bool:
    return rank() == 0


def barrier() -> None:
    if is_dist():
        torch.distributed.barrier()


def launched_distributed() -> bool:
    """True under ``deepspeed`` / ``torchrun`` (they export RANK, WORLD_SIZE, MASTER_ADDR)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_distributed(device_type: str) -> None:
    """Initialise the process group once: gloo on CPU (the DeepSpeed CPU accelerator would pick oneCCL), nccl on GPU."""
    import deepspeed

    if is_dist():
        return
    if not launched_distributed():  # a plain `python -m mmrl train`: a world of one
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    if device_type == "cuda":  # each rank on its own GPU before NCCL (and anything else) touches one
        bind_cuda_device()
    deepspeed.init_distributed(dist_backend="gloo" if device_type == "cpu" else "nccl")
    if device_type == "cpu":  # share the cores between the ranks of this node
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world_size()))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, per_node)))


# ---- the ownership rule -------------------------------------------------------------------------------------------
def shard_range(n: int, world: int, r: int) -> Tuple[int, int]:
    """Contiguous block of ``n`` items owned by rank ``r``: sizes differ by at most one, lower ranks first."""
    base, extra = divmod(n, world)
    lo = r * base + min(r, extra)
    return lo, lo + base + (1 if r < extra else 0)


# ---- collectives (identity in a world of one) ---------------------------------------------------------------------
def all_gather_objects(obj: Any) -> List[Any]:
    """Every rank's ``obj`` in rank order (pickled through the process group; small payloads only)."""
    if not is_dist() or world_size() == 1:
        return [obj]
    out: List[Any] = [None] * world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def all_reduce(values: Sequence[float], op: str = "sum") -> List[float]:
    if not is_dist() or world_size() == 1:
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX if op == "max" else torch.distributed.ReduceOp.SUM)
    return t.tolist()
