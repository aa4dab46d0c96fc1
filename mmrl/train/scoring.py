"""Teacher-forced log-probs of given response tokens under any media (the Scorer).

One function serves the policy (with gradient, for the loss), old log-probs, the reference model, and
re-scoring the same response under an intervened view (PACG, VPPO, DSPO): pass that view's ``PromptInputs``.
Only response positions go through the LM head, so the ``[B, L, V]`` logits tensor is never materialised.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch

from mmrl.media.inputs import PromptInputs, collate_vision, pad_right


def backbone(model):
    """The ``Qwen2_5_VLModel`` (vision + text stack) and the LM head, through a peft wrapper if present."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model, base.lm_head


def response_logprobs(model, items: Sequence[Tuple[PromptInputs, torch.Tensor]], temperature: float = 1.0,
                      micro_batch: int = 16, pad_id: int = 0) -> List[torch.Tensor]:
    """log pi(response_t | prompt, media, response_<t) for each (prompt inputs, response ids); grads flow if enabled."""
    out: List[torch.Tensor] = []
    core, head = backbone(model)
    device = next(model.parameters()).device
    for s in range(0, len(items), micro_batch):
        chunk = items[s : s + micro_batch]
        seqs = [torch.cat([p.input_ids, r.to(p.input_ids.dtype)]) for p, r in chunk]
        ids = pad_right(seqs, pad_id).to(device)
        attn = pad_right([torch.ones_like(x) for x in seqs], 0).to(device)
        vision = {k: v.to(device) for k, v in collate_vision([p for p, _ in chunk]).items()}
        hidden = core(input_ids=ids, attention_mask=attn, **vision).last_hidden_state
        # position t predicts token t+1: responses start at P, so read hidden states P-1 .. P+R-2
        rows, cols = [], []
        for i, (p, r) in enumerate(chunk):
            P, R = p.num_tokens, int(r.numel())
            rows.append(torch.full((R,), i, dtype=torch.long))
            cols.append(torch.arange(P - 1, P + R - 1))
        rows_t, cols_t = torch.cat(rows).to(device), torch.cat(cols).to(device)
        logits = head(hidden[rows_t, cols_t]).float() / temperature
        targets = ids[rows_t, cols_t + 1]
        lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        out.extend(lp.split([int(r.numel()) for _, r in chunk]))
    return out
