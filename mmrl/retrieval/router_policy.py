"""The VHOP-Router policy and its InfoNCE loss as pure tensor functions (specs/algorithms.md §6).

Action layout of one state: ``K`` corpus candidates (the top-K ANN hits of the state embedding), then the two
learned special actions ``BACKTRACK`` (index ``K``) and ``STOP`` (index ``K + 1``)::

    π(a | s_t) = softmax_a( cos(e_t, e_a) / T ),   a ∈ top-K(e_t) ∪ {BACKTRACK, STOP}

with T = 0.05 and K = 50 in the spec. Invalid actions (padding of a short candidate list, a visited image,
BACKTRACK on an empty chain) are masked to −inf before the softmax, so they get probability exactly 0.

InfoNCE (SFT and imitation, spec §6): ``L = −log softmax(s(e_t, d⁺)/T)`` over the positive and the negatives
of the state (in-batch positives of the other states plus hard negatives from the index): that is the same
cross-entropy as ``−log π(label | s_t)`` over a candidate list that holds the label.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

BACKTRACK, STOP = "BACKTRACK", "STOP"
N_SPECIAL = 2  # BACKTRACK, STOP (in this order, after the K candidates)


def action_logits(state: torch.Tensor, cands: torch.Tensor, special: torch.Tensor, temperature: float,
                  cand_mask: Optional[torch.Tensor] = None, special_mask: Optional[torch.Tensor] = None
                  ) -> torch.Tensor:
    """Logits ``[B, K + 2]`` = cos(e_t, e_a) / T for ``state [B, D]``, candidates ``cands [B, K, D]`` and the
    special embeddings ``special [2, D]`` (BACKTRACK, STOP). Masks (``[B, K]``, ``[B, 2]``, true = allowed) set
    the logits of disallowed actions to −inf."""
    if state.dim() != 2 or cands.dim() != 3 or cands.shape[0] != state.shape[0] or cands.shape[2] != state.shape[1]:
        raise ValueError(f"state must be [B, D] and cands [B, K, D], got {tuple(state.shape)} and {tuple(cands.shape)}")
    if special.shape != (N_SPECIAL, state.shape[1]):
        raise ValueError(f"special must be [2, D={state.shape[1]}], got {tuple(special.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    s = F.normalize(state, dim=-1)
    cand_cos = torch.einsum("bd,bkd->bk", s, F.normalize(cands, dim=-1))
    spec_cos = s @ F.normalize(special, dim=-1).T
    logits = torch.cat([cand_cos, spec_cos], dim=1) / temperature
    b, k = cand_cos.shape
    mask = torch.ones(b, k + N_SPECIAL, dtype=torch.bool, device=state.device)
    if cand_mask is not None:
        mask[:, :k] = cand_mask
    if special_mask is not None:
        mask[:, k:] = special_mask
    if not bool(mask.any(dim=1).all()):
        raise ValueError("every state needs at least one allowed action (STOP is always allowed in a chain)")
    return logits.masked_fill(~mask, float("-inf"))


def action_log_probs(logits: torch.Tensor) -> torch.Tensor:
    """log π(a | s) ``[B, K + 2]``; masked actions stay at −inf."""
    return torch.log_softmax(logits, dim=-1)


def info_nce(state: torch.Tensor, keys: torch.Tensor, labels: torch.Tensor, temperature: float,
             key_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Mean InfoNCE ``−log softmax(cos(e_t, k)/T)[label]`` for states ``[B, D]`` against a shared key set
    ``keys [M, D]`` (in-batch positives, hard negatives, special embeddings) with ``labels [B]`` indexing keys.
    ``key_mask [B, M]`` (true = in this state's softmax) drops keys that must not be negatives of a state
    (another positive that is also correct for it); the label is always kept."""
    if labels.shape != (state.shape[0],):
        raise ValueError(f"labels must be [B={state.shape[0]}], got {tuple(labels.shape)}")
    logits = F.normalize(state, dim=-1) @ F.normalize(keys, dim=-1).T / temperature
    if key_mask is not None:
        keep = key_mask.clone()
        keep[torch.arange(len(labels)), labels] = True
        logits = logits.masked_fill(~keep, float("-inf"))
    return F.cross_entropy(logits, labels)
