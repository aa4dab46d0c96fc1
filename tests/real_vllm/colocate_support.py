"""Shared pieces of the real-vLLM colocated tests (``make test-vllm``, vLLM's CPU build in ``.venv-vllm``): the
three prompt kinds the issue names (an image, a 4-frame video, a 16-frame 60 s video), an engine per family and
dtype built once, and the parity of the engine's sampling log-probs against the trainer's scorer."""
from __future__ import annotations

import os

import torch

from mmrl.data.schema import Media
from mmrl.media.inputs import build_prompt_inputs, resize_factor
from mmrl.media.prompts import build_messages
from mmrl.rollout.base import RolloutRequest, SamplingParams, build_engine
from mmrl.rollout.parity import logprob_parity

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
FP32_TOL = 1e-5  # the bound for fp32
BF16_TOL = 0.05  # bf16 rounds the logits differently in vLLM's kernels and the HF forward: measured 7.7e-3 max


def media(kind: str, proc, seed: int = 0) -> Media:
    """``image`` (2f x 3f), ``video4`` (4 frames at 2 fps, 2f x 2f) or ``video16`` (16 frames over 60 s, 2f x 2f);
    f the processor's resize factor."""
    g = torch.Generator().manual_seed(seed)
    f = resize_factor(proc)
    if kind == "image":
        return Media("img", image=torch.randint(0, 255, (3, 2 * f, 3 * f), dtype=torch.uint8, generator=g))
    n, fps = (4, 2.0) if kind == "video4" else (16, 16 / 60)
    return Media(kind, frames=torch.randint(0, 255, (n, 3, 2 * f, 2 * f), dtype=torch.uint8, generator=g),
                 timestamps=[i / fps for i in range(n)], fps=fps)


def requests(proc, kinds=("image", "video4", "video16"), n: int = 2):
    reqs = []
    for i, kind in enumerate(kinds):
        m = media(kind, proc, seed=i)
        pi = build_prompt_inputs(proc, build_messages("What colour is the square?", ["red", "green"], m), m)
        reqs.append(RolloutRequest(inputs=pi, n=n, sample_id=kind, group_id=i, meta={"seed": 100 + i}))
    return reqs


def vllm_engine(model, proc, dtype: str, **kw):
    return build_engine("vllm", model=model, processor=proc, dtype=dtype, max_model_len=2048, **kw)


def parity(engine, model, proc, reqs, max_new_tokens: int = 8):
    return logprob_parity(engine, model, reqs, SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens),
                          proc.tokenizer.pad_token_id)


def perturb(model, scale: float = 0.05, only=lambda name: True, seed: int = 0) -> int:
    """An optimizer step stand-in: add seeded noise to the trainable weights ``only`` selects; returns how many."""
    g = torch.Generator().manual_seed(seed)
    k = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and only(name):
                p.add_(torch.randn(p.shape, generator=g).to(p.dtype) * scale)
                k += 1
    return k


def row(family: str, prompt: str, dtype: str, when: str, report) -> str:
    """One line of the parity table, printed by the tests (``pytest -s`` or the captured output shows it)."""
    return (f"PARITY | {family} | {prompt} | {dtype} | {when} | max {report.max_abs:.3g} | mean {report.mean_abs:.3g} "
            f"| tokens {report.tokens}")
