"""Run by ``test_zero3_sync.py`` under ``torch.distributed.run`` (2 ranks, DeepSpeed's CPU accelerator, ZeRO-3 with
every parameter partitioned): one ``DeepSpeedBackend.sync_rollout_weights`` into a rollout "server" that is a thread
of rank 0, answering the client's HTTP calls in place and receiving the buckets over a real gloo transfer group
(what ``server_worker.mmrl_receive`` does, without vLLM). Rank 0 writes what it received and, at each bucket sent,
how many parameter elements ZeRO-3 held whole (``ds_status == AVAILABLE``: a counter, not a timer).

    python -m torch.distributed.run --nproc_per_node 2 tests/train/ds_zero3_sync.py MODEL OUT.pt LORA BUCKET DS.json
"""
from __future__ import annotations

import json
import os
import socket
import sys
from concurrent.futures import ThreadPoolExecutor

import torch


def fill_lora(model) -> None:
    """The same LoRA factors on every rank and in the 1-process model (peft draws ``A`` from the global RNG, and starts
    ``B`` at 0, where ``W + BA*alpha/r`` = ``W``)."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if ".lora_A." in name or ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def in_process_server(bucket_bytes: int):
    """A ``ServerClient`` whose one server is a thread of this process (nothing to reach over HTTP)."""
    from mmrl.rollout.transfer_group import join_group, receive_buckets
    from mmrl.rollout.vllm_client import ServerClient

    class InProcessServer(ServerClient):
        def __init__(self):
            self.urls, self.timeout, self.secret = ["http://in-process"], 120.0, None
            self.transfer, self.transfer_backend, self.bucket_bytes = "collective", "gloo", bucket_bytes
            self.group, self.member, self.received = None, None, []
            self.pool = ThreadPoolExecutor(max_workers=2)

        def _call(self, url, path, body, ctype="application/json", method="POST", timeout=None):
            msg = json.loads(body)
            if path == "/weights/init":
                self.member = join_group(msg["host"], msg["port"], msg["rank"], msg["world_size"], msg["timeout_s"],
                                         msg["backend"])
            elif path == "/weights/update":
                self.received += receive_buckets(self.member, msg["manifests"], "cpu")
            return None

    return InProcessServer()


def main(model_path: str, out: str, lora: str, bucket_bytes: int, ds_json: str) -> None:
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    from mmrl import dist
    from mmrl.config import load_config
    from mmrl.models.loading import load_model_and_processor
    from mmrl.rollout import transfer_group
    from mmrl.rollout.vllm_engine import VLLMEngine
    from mmrl.train.deepspeed_backend import DeepSpeedBackend, init_deepspeed, zero3_init_context
    from mmrl.train.optim import build_optimizer

    cfg = load_config([], [f"model.path={model_path}", f"model.lora.enabled={lora}", "model.freeze_vision=true",
                           "train.backend=deepspeed", f"train.deepspeed_config={ds_json}", "train.prompts_per_step=2",
                           "rollout.engine=vllm", "rollout.vllm_mode=server", "algorithm.kl_coef=0"])
    if cfg.model.lora.enabled:  # as the trainer's pre-flight: the targets checked on a meta model before zero.Init
        from mmrl.models.loading import resolve_model_path
        from mmrl.models.lora_targets import check_lora_targets

        check_lora_targets(resolve_model_path(model_path), list(cfg.model.lora.target_modules))
    ds_config = init_deepspeed(cfg)
    hf_ds = zero3_init_context(ds_config)  # noqa: F841  (the model loads sharded while it lives)
    model, processor = load_model_and_processor(cfg.model)
    fill_lora(model)
    optimizer, scheduler = build_optimizer(model, cfg.train)
    backend = DeepSpeedBackend(model, optimizer, scheduler, None, cfg, processor.tokenizer.pad_token_id, ds_config)
    del hf_ds

    names = {id(p): n for n, p in model.named_parameters()}
    gathered = []  # per bucket sent: (elements whole, of which vision)
    pack = transfer_group.pack

    def counting_pack(bucket, device):
        whole = [p for p in model.parameters() if p.ds_status == ZeroParamStatus.AVAILABLE]
        gathered.append((sum(p.ds_numel for p in whole), sum(p.ds_numel for p in whole if "visual" in names[id(p)])))
        return pack(bucket, device)

    transfer_group.pack = counting_pack
    client = in_process_server(bucket_bytes) if dist.rank() == 0 else None
    if dist.rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MMRL_TRANSFER_ADDR"] = f"127.0.0.1:{s.getsockname()[1]}"
    else:  # the other ranks only take part in the gathers: a client that reaches no server
        from mmrl.rollout.vllm_client import ServerClient

        client = ServerClient.__new__(ServerClient)
    client.bucket_bytes = bucket_bytes
    client.reset_caches = lambda: None
    engine = VLLMEngine(model, processor, backend=client, mode="server")
    backend.sync_rollout_weights(engine)
    if dist.rank() == 0:
        torch.save({"received": [(n, t.clone()) for n, t in client.received], "gathered": gathered,
                    "all_elements": sum(p.ds_numel for p in model.parameters())}, out)
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
