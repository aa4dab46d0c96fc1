"""The rollout server's vLLM worker extension (``worker_extension_cls``): weights into the served model.

Its methods run in vLLM's worker (``self`` is the worker), called by the server through ``AsyncLLM.collective_rpc``:

- ``mmrl_join``: join the transfer group the trainer's rank 0 created (``mmrl.rollout.transfer_group``), once;
- ``mmrl_receive``: receive a sync's buckets from group rank 0, then load them all in one in-place reload;
- ``mmrl_load_blob``: the HTTP fallback, a safetensors blob of HF-named tensors.

Loading is the colocated engine's (``mmrl.rollout.vllm_weights.reload_in_place``: vLLM's ``reload_weights`` in
checkpoint format, then a tied LM head re-tied): the CPU build repacks linear weights for its kernels, so writing
``param.data`` would be wrong there. All buckets are received before the reload, so a layer whose weights span two
buckets is processed once, with all of them.
"""
from __future__ import annotations

from typing import List

from mmrl.rollout.transfer_group import join_group, receive_buckets
from mmrl.rollout.vllm_weights import _runner_model, reload_in_place


class WeightReceiver:
    def mmrl_join(self, host: str, port: int, rank: int, world_size: int, timeout_s: float, backend: str) -> int:
        self._mmrl_group = join_group(host, port, rank, world_size, timeout_s, backend)
        return rank

    def mmrl_receive(self, manifests: List[list]) -> int:
        group = getattr(self, "_mmrl_group", None)
        if group is None:
            raise RuntimeError("no weight-transfer group: the trainer must call /weights/init first")
        device = next(_runner_model(self).parameters()).device
        return reload_in_place(self, receive_buckets(group, manifests, device))

    def mmrl_load_blob(self, blob: bytes) -> int:
        from safetensors.torch import load

        return reload_in_place(self, list(load(blob).items()))
