"""Full-sequence scoring of multi-turn trajectories: one teacher-forced forward over the whole interleaved sequence.

A multi-turn trajectory is ``prompt, model turn, observation (text and/or media), model turn, ...``. Its tokens
are scored in one forward of the model over the whole sequence, with every image and video of it (the prompt's and
those inserted mid-trajectory) through the vision tower, and the 3-D M-RoPE positions the models were trained with
over the whole sequence (``mmrl.models.mrope``, through ``mmrl.models.prefill.prompt_positions``, which caches them
on the ``SequenceInputs``), passed explicitly::

    log pi(x_t | x_<t, media)   for t = prompt_len .. L-1,   read from the hidden state at t-1

Only the trained tokens (model turns: ``SequenceInputs.trained``, set by ``mmrl.rollout.agent_loop_multi``) go
through the LM head; observation tokens get log-prob 0, as the sampler records them (the trajectory's ``loss_mask``
drops them from the loss). Without ``trained`` every response token is scored.

The episodes of one request share their prompt (``SequenceInputs.prompt``, the same object): ``score_shared``
prefills each distinct prompt once (vision tower included) and forwards only each sequence's part after it over a
gathered copy of the prompt's cache, at the whole sequence's positions (the same result as one forward over each
whole sequence; ``score_sequences`` does that, under gradient checkpointing, which keeps no cache, or without
``prompt``). The shared-prefix path (``mmrl.models.scoring``) stays the path for single-turn items;
``mmrl.models.scoring.response_logprobs`` sends items whose inputs are a ``SequenceInputs`` here.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch

from mmrl.media.inputs import PromptInputs, SequenceInputs, collate_vision, pad_right
from mmrl.models.compat import cache_kwargs
from mmrl.models.kv_cache import select_rows
from mmrl.models.prefill import (CHUNK_TOKENS, head_logprobs, prefill_prompts, prompt_positions, right_padded, token_logprobs,
                                 unique_prompts)


def check_item(seq: SequenceInputs, response: torch.Tensor) -> None:
    """The response of a sequence item must be the sequence's tail after the prompt."""
    tail = seq.input_ids[seq.prompt_len:]
    if tail.numel() != response.numel() or not torch.equal(tail, response.to(tail.dtype).cpu()):
        raise ValueError(f"sequence item: response of {response.numel()} tokens is not the sequence's tail after its "
                         f"{seq.prompt_len}-token prompt ({tail.numel()} tokens)")


def score_sequences(core, head, chunk: Sequence[Tuple[SequenceInputs, torch.Tensor]], temperature: float,
                    pad_id: int, device, chunk_tokens: int = CHUNK_TOKENS) -> List[torch.Tensor]:
    """Log-probs ``[R_i]`` of each sequence's response tokens, one forward over the right-padded batch."""
    seqs = [s for s, _ in chunk]
    for s, r in chunk:
        check_item(s, r)
    ids, lengths, mask = right_padded(seqs, pad_id, device)
    vision = {k: v.to(device) for k, v in collate_vision(seqs).items()}
    pos, _ = prompt_positions(core, seqs, ids)
    hidden = core(input_ids=ids, attention_mask=mask, position_ids=pos, **vision).last_hidden_state
    rows = torch.cat([torch.full((int(lengths[i]) - s.prompt_len,), i, dtype=torch.long) for i, s in enumerate(seqs)])
    cols = torch.cat([torch.arange(s.prompt_len - 1, int(lengths[i]) - 1) for i, s in enumerate(seqs)])
    sel = torch.cat([trained_tokens(s) for s in seqs]).to(device)
    rows, cols = rows.to(device)[sel], cols.to(device)[sel]
    lp = token_logprobs(head, hidden[rows, cols], ids[rows, cols + 1], temperature, chunk_tokens)
    lp = lp.new_zeros(sel.shape).masked_scatter(sel, lp)  # observations: 0, as the sampler records them
    return list(lp.split([int(lengths[i]) - s.prompt_len for i, s in enumerate(seqs)]))


def trained_tokens(seq: SequenceInputs) -> torch.Tensor:
    """Bool ``[R]`` over a sequence's response: the tokens that go through the LM head (``seq.trained``, else all)."""
    R = int(seq.input_ids.numel()) - seq.prompt_len
    if seq.trained is None:
        return torch.ones(R, dtype=torch.bool)
    if seq.trained.numel() != R:
        raise ValueError(f"sequence item: trained mask of {seq.trained.numel()} tokens for a {R}-token response")
    return seq.trained.bool()


def tail_vision(seq: SequenceInputs) -> dict:
    """The vision tensors of the media after a sequence's prompt (the prompt's come first in ``seq.vision``)."""
    out, pv = {}, seq.prompt.vision
    for pix, grid in (("pixel_values", "image_grid_thw"), ("pixel_values_videos", "video_grid_thw")):
        n = int(pv[grid].shape[0]) if grid in pv else 0
        if grid not in seq.vision or seq.vision[grid].shape[0] == n:
            continue
        out[grid] = seq.vision[grid][n:]
        out[pix] = seq.vision[pix][int(pv[grid].prod(-1).sum()) if n else 0:]
        if grid == "video_grid_thw" and "second_per_grid_ts" in seq.vision:
            out["second_per_grid_ts"] = seq.vision["second_per_grid_ts"][n:]
    return out


def score_shared(core, head, chunk: Sequence[Tuple[SequenceInputs, torch.Tensor]], temperature: float,
                 pad_id: int, device, chunk_tokens: int = CHUNK_TOKENS) -> List[torch.Tensor]:
    """Like ``score_sequences``, with each distinct prompt prefilled once: every sequence's response (model turns
    and observations, with their media) is forwarded over its prompt's cache (``select_rows``: ``index_select`` on
    the batch axis, so gradients reach the prompt's keys/values, summed in a fixed order), at the positions
    ``mmrl.models.mrope`` gives the whole sequence."""
    seqs = [s for s, _ in chunk]
    for s, r in chunk:
        check_item(s, r)
    ids, lengths, mask = right_padded(seqs, pad_id, device)
    pos, _ = prompt_positions(core, seqs, ids)
    uniq, owner = unique_prompts([s.prompt for s in seqs])
    owner = owner.to(device)
    last, cache, pmask, _ = prefill_prompts(core, uniq, pad_id, device)
    resp = [r.to(device=device, dtype=torch.long) for _, r in chunk]
    rlen = torch.tensor([int(r.numel()) for r in resp], dtype=torch.long, device=device)
    N, P, W = len(seqs), pmask.shape[1], max(int(rlen.max()) - 1, 1)  # a dummy column when every response is 1 token
    cols = pad_right([r[:W] for r in resp] + [resp[0].new_full((W,), pad_id)], pad_id)[:-1]  # [N, W]
    tail_pos = torch.zeros((3, N, W), dtype=torch.long, device=device)
    for i, s in enumerate(seqs):
        k = min(W, int(rlen[i]))
        tail_pos[:, i, :k] = pos[:, i, s.prompt_len : s.prompt_len + k]
    select_rows(cache, owner)
    causal = torch.ones(W, W, dtype=torch.bool, device=device).tril()
    attn = torch.cat([pmask.bool()[owner][:, None, None, :].expand(N, 1, W, P), causal.expand(N, 1, W, W)], dim=-1)
    vision = {k: v.to(device) for k, v in collate_vision([PromptInputs(s.input_ids, vision=tail_vision(s))
                                                          for s in seqs]).items()}
    hid = core(input_ids=cols, attention_mask=attn, position_ids=tail_pos, use_cache=True,
               **cache_kwargs(cache), **vision).last_hidden_state
    hidden = torch.cat([last.index_select(0, owner).unsqueeze(1), hid], dim=1)[:, : int(rlen.max())]
    return head_logprobs(head, hidden, resp, rlen, temperature, pad_id, [trained_tokens(s) for s in seqs],
                         chunk_tokens)
