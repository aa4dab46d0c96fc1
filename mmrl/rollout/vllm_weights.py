"""Weights into a running ``vllm.LLM`` worker (run there by ``LLM.collective_rpc``; ``self`` is the worker).

``reload_in_place`` is vLLM's own in-place reload (``vllm.model_executor.model_loader.reload``, vLLM >= 0.32; the
GPU and the CPU model runners share it): each layer given weights is restored to checkpoint format, loaded with the
model's own ``load_weights`` name mapping and processed again for its kernels; a layer given none keeps its
weights (a frozen vision tower costs nothing). Tied embeddings (``tie_word_embeddings``): vLLM's ``load_weights``
skips ``lm_head.*``, so the head is given nothing and keeps the kernel tensors it had (on the CPU build a packed copy
of the OLD embedding); ``retie_lm_head`` points it at the reloaded embedding and processes it again.

MoE experts on vLLM's CPU build (0.32.0): the first load prepacks each layer's ``w13_weight`` / ``w2_weight`` into
the CPU kernel's grouped-GEMM layout (``CPUUnquantizedExperts.process_weights_after_loading``, same shape), but a
reload skips that step (``UnquantizedFusedMoEMethod._setup_kernel`` calls it only while ``moe_kernel is None``) and
copies the unpacked weights into the packed storage: the experts then compute with scrambled weights (log-prob gap
0.065 on the tiny Qwen3-VL-MoE). ``repack_cpu_experts`` runs that kernel step for each layer whose reloaded tensors
still equal, exactly, the unpacked layout of what was sent (so a vLLM that repacks on reload is left alone).

vLLM 0.33.0 (the GPU extra) read at its source (the PyPI wheel, ``_version.py`` commit ``g4ba787ec9``) against the
installed 0.32.0: ``Worker.reload_weights(self, *args, **kwargs)``, the model runners' ``reload_weights(
weights_iterator=None, weights_path=None, is_checkpoint_format=True)``, the whole ``model_loader/reload`` package and
``LLM.collective_rpc`` are the same, and neither ties ``lm_head`` on reload; one path serves both
(``docs/install_gpu.md``, "Weight sync").
"""
from __future__ import annotations

import re
from typing import Dict, Iterable, Iterator, List, Tuple

import torch

# a fused-experts tensor of text layer i, as sent (hub names) and as vLLM names the layer's experts module
_SENT_EXPERTS = re.compile(r"\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$")
_VLLM_EXPERTS = re.compile(r"\.layers\.(\d+)\.mlp\.experts\b")


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


def _cpu_experts(model) -> List[Tuple[int, torch.nn.Module, object]]:
    """(text layer, module, its ``CPUUnquantizedExperts``) for each experts layer on vLLM's CPU kernel; [] elsewhere."""
    try:
        from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts
    except ImportError:  # a build without the CPU experts
        return []
    out = []
    for name, mod in model.named_modules():
        kernel = getattr(getattr(mod, "quant_method", None), "moe_kernel", None)
        experts, m = getattr(kernel, "fused_experts", None), _VLLM_EXPERTS.search(name)
        if isinstance(experts, CPUUnquantizedExperts) and m is not None:
            out.append((int(m.group(1)), mod, experts))
    return out


def repack_cpu_experts(model, sent: Dict[Tuple[int, str], torch.Tensor]) -> int:
    """Run the CPU MoE kernel's prepack for each experts layer the reload left unpacked; returns how many.
    ``sent``: the fused-expert tensors sent, by (text layer, ``gate_up_proj`` | ``down_proj``).

    Sent in the hub layout, ``gate_up_proj`` ``[E, H, 2I]`` and ``down_proj`` ``[E, I, H]`` are vLLM's unpacked
    ``w13_weight`` ``[E, 2I, H]`` and ``w2_weight`` ``[E, H, I]`` once transposed (``hub_layout``)."""
    done = 0
    for layer, mod, experts in _cpu_experts(model):
        gate_up, down = sent.get((layer, "gate_up_proj")), sent.get((layer, "down_proj"))
        if gate_up is None or down is None:
            continue
        w13, w2 = mod.w13_weight, mod.w2_weight
        if (w13.shape == gate_up.transpose(1, 2).shape and torch.equal(w13, gate_up.transpose(1, 2).to(w13))
                and w2.shape == down.transpose(1, 2).shape and torch.equal(w2, down.transpose(1, 2).to(w2))):
            experts.process_weights_after_loading(mod)
            done += 1
    return done


@torch.no_grad()
def reload_in_place(worker, weights: Iterable[Tuple[str, torch.Tensor]]) -> int:
    """Load HF-named ``weights`` into the worker's model in place; returns how many tensors were given. ``weights``
    is iterated once (a ``SyncWeights`` computes, and under ZeRO-3 gathers, each bucket as it streams); the
    fused-expert tensors are kept for ``repack_cpu_experts`` only where the model has CPU experts."""
    keep = bool(_cpu_experts(_runner_model(worker)))
    sent: Dict[Tuple[int, str], torch.Tensor] = {}
    given = 0

    def stream() -> Iterator[Tuple[str, torch.Tensor]]:
        nonlocal given
        for name, t in weights:
            m = _SENT_EXPERTS.search(name) if keep else None
            if m:
                sent[(int(m.group(1)), m.group(2))] = t
            given += 1
            yield name, t

    worker.model_runner.reload_weights(weights_iterator=stream(), is_checkpoint_format=True)
    model = _runner_model(worker)
    retie_lm_head(model)
    repack_cpu_experts(model, sent)
    return given
