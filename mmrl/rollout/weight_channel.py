"""Weights from the trainer to a rollout worker process: bucketed point-to-point sends over a gloo group of two.

The group is its own ``ProcessGroupGloo`` on a ``TCPStore`` (rank 0 the trainer, rank 1 the worker), not the default
process group, so it lives next to DeepSpeed's or none (the "stateless group" verl and vLLM use for weight sync).
A message is a header ``[version, kind, tensors, bytes]`` then the tensors' bytes in buckets of at most
``bucket_bytes`` (a larger tensor goes alone): every tensor viewed as ``uint8`` and concatenated, so dtypes mix.
The receiver lays out the same buckets from its own tensors (same names, shapes and dtypes) and copies in place.
``kind``: ``FULL`` (``model.state_dict()`` values, once at start) or ``TRAINABLE`` (the parameters with
``requires_grad``, after each update: frozen weights never change).
"""
from __future__ import annotations

import datetime
from typing import List, Tuple

import torch

FULL, TRAINABLE = 0, 1


def model_tensors(model, kind: int) -> List[torch.Tensor]:
    """The tensors a message of ``kind`` carries, in the order both sides use."""
    if kind == FULL:
        return list(model.state_dict().values())
    return [p for p in model.parameters() if p.requires_grad]


def buckets(nbytes: List[int], bucket_bytes: int) -> List[Tuple[int, int]]:
    """Consecutive tensor ranges ``[lo, hi)`` of at most ``bucket_bytes`` bytes each (a larger tensor alone)."""
    out, lo, size = [], 0, 0
    for i, n in enumerate(nbytes):
        if i > lo and size + n > bucket_bytes:
            out.append((lo, i))
            lo, size = i, 0
        size += n
    if lo < len(nbytes):
        out.append((lo, len(nbytes)))
    return out


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


class WeightChannel:
    """One end of the trainer -> worker weight link (``rank`` 0 sends, 1 receives)."""

    def __init__(self, store, rank: int, timeout_s: float, bucket_bytes: int):
        opts = torch.distributed.ProcessGroupGloo._Options()
        opts._timeout = datetime.timedelta(seconds=timeout_s)
        opts._devices = [torch.distributed.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        self.pg = torch.distributed.ProcessGroupGloo(store, rank, 2, opts)
        self.bucket_bytes = bucket_bytes
        self.store = store  # kept alive as long as the group

    @staticmethod
    def host_store(timeout_s: float):
        """The trainer's store on a free local port (``store.port`` goes to the worker)."""
        return torch.distributed.TCPStore("127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=timeout_s),
                                          wait_for_workers=False)

    @staticmethod
    def join_store(port: int, timeout_s: float):
        return torch.distributed.TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=timeout_s))

    def send(self, version: int, kind: int, tensors: List[torch.Tensor]) -> None:
        sizes = [t.numel() * t.element_size() for t in tensors]
        header = torch.tensor([version, kind, len(tensors), sum(sizes)], dtype=torch.int64)
        self.pg.send([header], 1, 0).wait()
        for lo, hi in buckets(sizes, self.bucket_bytes):
            flat = torch.cat([_bytes(t) for t in tensors[lo:hi]])
            self.pg.send([flat], 1, 0).wait()

    def receive(self, model) -> int:
        """The next message, copied into ``model``'s tensors in place; returns its version."""
        header = torch.zeros(4, dtype=torch.int64)
        self.pg.recv([header], 0, 0).wait()
        version, kind, count, total = (int(x) for x in header)
        tensors = model_tensors(model, kind)
        sizes = [t.numel() * t.element_size() for t in tensors]
        if count != len(tensors) or total != sum(sizes):
            raise RuntimeError(f"weight message {version} has {count} tensors / {total} bytes, the worker's model "
                               f"{len(tensors)} / {sum(sizes)}: trainer and worker built different models")
        with torch.no_grad():
            for lo, hi in buckets(sizes, self.bucket_bytes):
                flat = torch.empty(sum(sizes[lo:hi]), dtype=torch.uint8)
                self.pg.recv([flat], 0, 0).wait()
                at = 0
                for t, n in zip(tensors[lo:hi], sizes[lo:hi]):
                    t.view(-1).view(torch.uint8).copy_(flat[at: at + n])
                    at += n
        return version
