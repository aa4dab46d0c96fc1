"""The policy's support: the LM head as every sampler and the scorer use it, with the vision placeholders removed.

A response must never contain ``<|vision_start|>``, ``<|vision_end|>``, ``<|vision_pad|>``, ``<|image_pad|>`` or
``<|video_pad|>``: re-scoring it would misplace the image/video features. Every sampler suppresses them, so the
policy mmrl trains is the model's distribution restricted to the other tokens and renormalised::

    pi(y | x) = exp(z_y) / sum_{v not in E} exp(z_v)   for y not in E,   0 for y in E

(``z`` the logits over temperature, ``E`` the excluded tokens). The scorer (ratio, KL, re-scoring), the HF sampler
and vLLM (``logit_bias`` of -100 on ``E``: ``exp(-100)`` is below fp32 resolution, and vLLM's processed log-probs
are taken after it) all compute this one distribution. Before, the samplers drew from it while the scorer scored
the unrestricted one: the log-probs differed by ``-log(1 - p(E))`` at every token (9e-3 on the tiny vocabulary).

In Qwen's vocabulary (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) the five tokens are consecutive, from the config's
``vision_start_token_id`` to its ``video_token_id``; ``tests/models/test_policy_head.py`` checks this against each
family's tokenizer.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import List

import torch

from mmrl.errors import MMRLError

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")


_FULL_VOCABULARY = contextvars.ContextVar("mmrl_full_vocabulary", default=False)


@contextlib.contextmanager
def full_vocabulary():
    """Score over the whole vocabulary inside this block (``excluded_tokens`` returns nothing): supervised
    cross-entropy of given text (``mmrl.train.sft``), the standard objective, which no sampler's support bounds."""
    token = _FULL_VOCABULARY.set(True)
    try:
        yield
    finally:
        _FULL_VOCABULARY.reset(token)


def excluded_tokens(config) -> List[int]:
    """The ids of ``VISION_TOKENS`` from a Qwen-VL config: ``vision_start_token_id .. video_token_id`` (none inside
    ``full_vocabulary()``)."""
    if _FULL_VOCABULARY.get():
        return []
    start, video = getattr(config, "vision_start_token_id", None), getattr(config, "video_token_id", None)
    if start is None or video is None:
        return []
    ids = list(range(int(start), int(video) + 1))
    if len(ids) != len(VISION_TOKENS):
        raise MMRLError(f"model config: vision tokens {start}..{video} are not Qwen's five consecutive vision tokens")
    return ids


def tokenizer_excluded_tokens(tokenizer) -> List[int]:
    """The same ids read from a tokenizer (tokens it lacks are left out)."""
    ids = [tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS]
    return [i for i in ids if i is not None and i != tokenizer.unk_token_id]


class PolicyHead:
    """``head(h)`` with the excluded tokens' logits at ``-inf`` (written into the head's fresh output: nothing of it
    is saved for backward, so autograd allows it). Called like the head, never unpacked: ZeRO-3 and LoRA hooks fire
    as before."""

    def __init__(self, head, excluded: List[int]):
        self.head = head
        self.excluded = excluded
        self._index = {}

    def __getattr__(self, name):  # the head's own attributes (weight, hooks, ...): it is still the model's module
        if name == "head":
            raise AttributeError(name)
        return getattr(self.head, name)

    def _idx(self, device) -> torch.Tensor:
        if device not in self._index:
            self._index[device] = torch.tensor(self.excluded, dtype=torch.long, device=device)
        return self._index[device]

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.head(hidden)
        if self.excluded:
            logits.index_fill_(-1, self._idx(logits.device), float("-inf"))
        return logits

    def excluded_targets(self, targets: torch.Tensor):
        """A bool mask of the targets outside the support, or None when there are none (the usual case: responses
        are sampled from the support; an observation scored whole holds vision tokens)."""
        if not self.excluded or not targets.numel():
            return None
        sel = torch.isin(targets, self._idx(targets.device))
        return sel if bool(sel.any()) else None
