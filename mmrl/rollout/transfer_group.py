"""The weight-transfer process group between trainer rank 0 and the rollout servers, and the bucket format.

Both sides build it the same way (torch's own ``TCPStore`` + ``ProcessGroupGloo`` / ``ProcessGroupNCCL``, outside
``torch.distributed``'s default group, as vLLM's ``stateless_init_torch_distributed_process_group`` does): the
trainer's rank 0 is group rank 0 and hosts the store; server ``k`` (of ``N``) is group rank ``k + 1``. The trainer's
own torchrun/DeepSpeed group is untouched, and the servers need no trainer process group.

A sync is a list of buckets (``mmrl.rollout.weight_sync.SyncWeights``: at most ``bucket_bytes`` each, a larger tensor
alone). Each bucket is one contiguous byte buffer that holds the tensors named in its ``manifest`` ([name, dtype,
shape] in order), broadcast from rank 0: every server receives it into a buffer of the announced size and cuts it
back into tensors (``unpack``).
"""
from __future__ import annotations

from datetime import timedelta
from typing import Iterable, List, Tuple

import torch

Manifest = List[Tuple[str, str, List[int]]]  # (HF name, dtype name, shape) per tensor of a bucket


def join_group(host: str, port: int, rank: int, world_size: int, timeout_s: float, backend: str = "gloo"):
    """This process's member of the transfer group (rank 0 hosts the store). Every operation on it, the rendezvous
    included, fails after ``timeout_s`` instead of waiting on a dead peer."""
    from torch.distributed import PrefixStore, TCPStore

    timeout = timedelta(seconds=timeout_s)
    store = TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout, wait_for_workers=False)
    prefix = PrefixStore("mmrl-weights", store)
    if backend == "gloo":
        from torch.distributed import ProcessGroupGloo

        return ProcessGroupGloo(prefix, rank, world_size, timeout)
    if backend == "nccl":
        from torch.distributed import ProcessGroupNCCL

        opts = ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return ProcessGroupNCCL(prefix, rank, world_size, opts)
    raise ValueError(f"transfer backend {backend!r}: expected gloo or nccl")


def broadcast(group, tensor: torch.Tensor) -> None:
    """Broadcast ``tensor`` in place from group rank 0."""
    from torch.distributed import BroadcastOptions

    opts = BroadcastOptions()
    opts.rootRank, opts.rootTensor = 0, 0
    group.broadcast([tensor], opts).wait()


def pack(bucket: Iterable[Tuple[str, torch.Tensor]], device) -> Tuple[Manifest, torch.Tensor]:
    """The bucket's manifest and its tensors' bytes, concatenated into one uint8 buffer on ``device``."""
    manifest: Manifest = []
    parts = []
    for name, t in bucket:
        t = t.detach().contiguous()
        manifest.append((name, str(t.dtype).removeprefix("torch."), list(t.shape)))
        parts.append(t.reshape(-1).view(torch.uint8))
    return manifest, torch.cat(parts).to(device)


def send_buckets(group, weights, device) -> int:
    """Broadcast each bucket of ``weights`` (``SyncWeights``) from rank 0 as it comes: packed while its parameters
    are gathered, sent before the next bucket is gathered. Returns the bytes sent."""
    sent = 0
    for bucket in weights.buckets():
        buf = pack(bucket, device)[1]
        broadcast(group, buf)
        sent += buf.numel()
    return sent


def receive_buckets(group, manifests: List[Manifest], device) -> List[Tuple[str, torch.Tensor]]:
    """A member's side of ``send_buckets``: every bucket of ``manifests``, received and cut back into tensors."""
    weights = []
    for manifest in manifests:
        buf = torch.empty(nbytes(manifest), dtype=torch.uint8, device=device)
        broadcast(group, buf)
        weights += unpack(manifest, buf)
    return weights


def nbytes(manifest: Manifest) -> int:
    return sum(torch.Size(shape).numel() * getattr(torch, dt).itemsize for _, dt, shape in manifest)


def unpack(manifest: Manifest, buffer: torch.Tensor) -> List[Tuple[str, torch.Tensor]]:
    """Inverse of ``pack``: views into ``buffer``, one per manifest entry."""
    out, at = [], 0
    for name, dt, shape in manifest:
        dtype = getattr(torch, dt)
        n = torch.Size(shape).numel() * dtype.itemsize
        out.append((name, buffer[at : at + n].view(dtype).reshape(shape)))
        at += n
    if at != buffer.numel():
        raise ValueError(f"weight bucket holds {buffer.numel()} bytes, its manifest {at}")
    return out
