"""Weights into a running ``vllm.LLM`` worker (run there by ``LLM.collective_rpc``; ``self`` is the worker).

``reload_in_place`` is vLLM's own in-place reload (``vllm.model_executor.model_loader.reload``, vLLM >= 0.32; the
GPU and the CPU model runners share it): each layer given weights is restored to checkpoint format, loaded with the
model's own ``load_weights`` name mapping and processed again for its kernels; a layer given none keeps its
weights (a frozen vision tower costs nothing). Tied embeddings (``tie_word_embeddings``): vLLM's ``load_weights``
skips ``lm_head.*``, so the head is given nothing and keeps the kernel tensors it had (on the CPU build a packed copy
of the OLD embedding); ``retie_lm_head`` points it at the reloaded embedding and processes it again.
"""
from __future__ import annotations

from typing import List, Tuple

import torch


def _runner_model(worker):
    runner = worker.model_runner
    return runner.get_model() if hasattr(runner, "get_model") else runner.model


def _tied(model) -> bool:
    cfg = getattr(model, "config", None)
    text = cfg.get_text_config() if cfg is not None and hasattr(cfg, "get_text_config") else cfg
    return bool(getattr(cfg, "tie_word_embeddings", False) or getattr(text, "tie_word_embeddings", False))


def _embedding_and_head(model):
    """The input embedding and the LM head modules of a vLLM Qwen-VL model (found by name, any nesting)."""
    embed = head = None
    for name, mod in model.named_modules():
        if name.endswith("embed_tokens") and embed is None:
            embed = mod
        elif name.endswith("lm_head"):
            head = mod
    return embed, head


def retie_lm_head(model) -> bool:
    """Make a tied LM head use the embedding's current weight and redo its kernel processing; True if it acted."""
    if not _tied(model):
        return False
    embed, head = _embedding_and_head(model)
    if embed is None or head is None or head is embed:
        return False
    if head.weight is not embed.weight:
        head.weight = embed.weight
    method = getattr(head, "quant_method", None)
    if method is not None and hasattr(method, "process_weights_after_loading"):
        method.process_weights_after_loading(head)
    return True


@torch.no_grad()
def reload_in_place(worker, weights: List[Tuple[str, torch.Tensor]]) -> int:
    """Load HF-named ``weights`` into the worker's model in place; returns how many tensors were given."""
    worker.model_runner.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
    retie_lm_head(_runner_model(worker))
    return len(weights)
