"""Full-sequence scoring of multi-turn trajectories: one teacher-forced forward over the whole interleaved sequence.

A multi-turn trajectory is ``prompt, model turn, observation (text and/or media), model turn, ...``. Its tokens
are scored in one forward of the model over the whole sequence, with every image and video of it (the prompt's and
those inserted mid-trajectory) through the vision tower, and Qwen2.5-VL's 3-D M-RoPE positions computed by the
model's own ``get_rope_index`` over the whole sequence (``mmrl.models.scoring.prompt_positions``, which calls it
and caches the result on the ``SequenceInputs``)::

    log pi(x_t | x_<t, media)   for t = prompt_len .. L-1,   read from the hidden state at t-1

Observation tokens get log-probs too; the trajectory's ``loss_mask`` drops them from the loss. Only response
positions go through the LM head. The shared-prefix path (``mmrl.models.scoring``) stays the path for single-turn
items; ``response_logprobs`` sends items whose inputs are a ``SequenceInputs`` here.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch

from mmrl.media.inputs import PromptInputs, SequenceInputs, collate_vision
from mmrl.models.scoring import backbone, prompt_positions, response_logprobs, right_padded


def check_item(seq: SequenceInputs, response: torch.Tensor) -> None:
    """The response of a sequence item must be the sequence's tail after the prompt."""
    tail = seq.input_ids[seq.prompt_len:]
    if tail.numel() != response.numel() or not torch.equal(tail, response.to(tail.dtype).cpu()):
        raise ValueError(f"sequence item: response of {response.numel()} tokens is not the sequence's tail after its "
                         f"{seq.prompt_len}-token prompt ({tail.numel()} tokens)")


def score_sequences(core, head, chunk: Sequence[Tuple[SequenceInputs, torch.Tensor]], temperature: float,
                    pad_id: int, device) -> List[torch.Tensor]:
    """Log-probs ``[R_i]`` of each sequence's response tokens, one forward over the right-padded batch."""
    seqs = [s for s, _ in chunk]
    for s, r in chunk:
        check_item(s, r)
    ids, lengths, mask = right_padded(seqs, pad_id, device)
    vision = {k: v.to(device) for k, v in collate_vision(seqs).items()}
    pos, _ = prompt_positions(core, seqs, ids, mask, vision)
    hidden = core(input_ids=ids, attention_mask=mask, position_ids=pos, **vision).last_hidden_state
    rows = torch.cat([torch.full((int(lengths[i]) - s.prompt_len,), i, dtype=torch.long) for i, s in enumerate(seqs)])
    cols = torch.cat([torch.arange(s.prompt_len - 1, int(lengths[i]) - 1) for i, s in enumerate(seqs)])
    rows, cols = rows.to(device), cols.to(device)
    logits = head(hidden[rows, cols]).float() / temperature
    targets = ids[rows, cols + 1]
    lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return list(lp.split([int(lengths[i]) - s.prompt_len for i, s in enumerate(seqs)]))


def mixed_logprobs(model, items: Sequence[Tuple[PromptInputs, torch.Tensor]], temperature: float = 1.0,
                   micro_batch: int = 16, pad_id: int = 0) -> List[torch.Tensor]:
    """``response_logprobs`` over a mix of single-turn items (shared-prefix path) and ``SequenceInputs`` items
    (one full forward each, ``micro_batch`` sequences per forward); results in the items' order."""
    seq_idx = [i for i, (p, _) in enumerate(items) if isinstance(p, SequenceInputs)]
    other_idx = [i for i, (p, _) in enumerate(items) if not isinstance(p, SequenceInputs)]
    out: List[torch.Tensor] = [torch.empty(0)] * len(items)
    if other_idx:
        for i, lp in zip(other_idx, response_logprobs(model, [items[i] for i in other_idx], temperature,
                                                      micro_batch, pad_id)):
            out[i] = lp
    core, head = backbone(model)
    device = next(model.parameters()).device
    for s in range(0, len(seq_idx), micro_batch):
        idx = seq_idx[s : s + micro_batch]
        for i, lp in zip(idx, score_sequences(core, head, [items[i] for i in idx], temperature, pad_id, device)):
            out[i] = lp
    return out
