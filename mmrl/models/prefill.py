"""The pieces the scorer (``mmrl.models.scoring``, ``mmrl.models.sequence_scoring``) and the HF samplers share:
the model's backbone and head, the M-RoPE positions of prompts as the models were trained with
(``mmrl.models.mrope``), one prefill of distinct prompts with a KV cache, and the LM head's log-probs at chosen
tokens::

    log pi(x_t | x_<t, media) = log_softmax(head(h_{t-1}) / T)[x_t]
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import torch
from torch.utils.checkpoint import checkpoint

from mmrl.media.inputs import PromptInputs, collate_vision, pad_right
from mmrl.models.compat import output_cache
from mmrl.models.mrope import RopeRule, vision_positions
from mmrl.models.policy_head import PolicyHead, excluded_tokens


def backbone(model):
    """The ``Qwen2_5_VLModel`` (vision + text stack) and the policy's LM head (``PolicyHead``: the vision placeholders
    excluded), through a peft wrapper if present."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model, PolicyHead(base.lm_head, excluded_tokens(base.config))


def positions(starts: torch.Tensor, length: int) -> torch.Tensor:
    """Text position ids ``[3, B, length]`` (the same on the three M-RoPE axes): row ``b`` counts from ``starts[b]``."""
    pos = starts.view(-1, 1) + torch.arange(length, device=starts.device).view(1, -1)
    return pos.unsqueeze(0).expand(3, -1, -1)


def prompt_rope(core, p: PromptInputs) -> tuple:
    """``(positions [3, P], next position)`` of one prompt by the numbering the models were trained with
    (``mmrl.models.mrope``), counted from 0; computed once per ``PromptInputs`` and kept on it (``rope``): the
    rollout's prefill and every scoring pass of the step reuse them."""
    if p.rope is None:
        if any(k in p.vision for k in ("image_grid_thw", "video_grid_thw")):
            pos, nxt = vision_positions(RopeRule.from_config(core.config), p.input_ids, p.vision)
        else:
            pos, nxt = torch.arange(p.num_tokens).view(1, -1).expand(3, -1).clone(), p.num_tokens
        p.rope = (pos, int(nxt))
    return p.rope


def prompt_positions(core, prompts: Sequence[PromptInputs], ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """M-RoPE positions ``[3, U, P]`` of right-padded prompts ``ids [U, P]`` (3-D for vision tokens:
    ``prompt_rope``; padding gets 1) and the position of each prompt's first response token ``[U]`` (its largest
    position + 1)."""
    out = torch.ones((3, len(prompts), ids.shape[1]), dtype=torch.long, device=ids.device)
    nxt = torch.empty(len(prompts), dtype=torch.long, device=ids.device)
    for u, p in enumerate(prompts):
        pos, nxt[u] = prompt_rope(core, p)
        out[:, u, : p.num_tokens] = pos.to(ids.device)
    return out, nxt


def sequence_positions(core, prompts: Sequence[PromptInputs], tails: Sequence[int], width: int, device
                       ) -> torch.Tensor:
    """Positions ``[3, B, width]`` of right-padded rows ``prompt + tails[b]`` text tokens (a response: it continues
    at the prompt's next position); padding gets 1."""
    out = torch.ones((3, len(prompts), width), dtype=torch.long, device=device)
    for b, (p, n) in enumerate(zip(prompts, tails)):
        pos, nxt = prompt_rope(core, p)
        out[:, b, : p.num_tokens] = pos.to(device)
        out[:, b, p.num_tokens : p.num_tokens + n] = torch.arange(nxt, nxt + n, device=device)
    return out


def unique_prompts(prompts: Sequence[PromptInputs]) -> Tuple[List[PromptInputs], torch.Tensor]:
    """Distinct prompt objects in first-seen order and, for each input, the index of its distinct prompt."""
    seen: Dict[int, int] = {}
    uniq: List[PromptInputs] = []
    owner = []
    for p in prompts:
        k = id(p)
        if k not in seen:
            seen[k] = len(uniq)
            uniq.append(p)
        owner.append(seen[k])
    return uniq, torch.tensor(owner, dtype=torch.long)


def right_padded(prompts: Sequence[PromptInputs], pad_id: int, device) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids ``[U, Pmax]`` right-padded with ``pad_id``, lengths ``[U]`` and the attention mask ``[U, Pmax]``."""
    ids = pad_right([p.input_ids for p in prompts], pad_id).to(device)
    lengths = torch.tensor([p.num_tokens for p in prompts], dtype=torch.long, device=device)
    return ids, lengths, (torch.arange(ids.shape[1], device=device).view(1, -1) < lengths.view(-1, 1)).long()


def prefill_prompts(core, prompts: Sequence[PromptInputs], pad_id: int, device):
    """Forward ``U`` prompts (right-padded) through vision + language model with a KV cache.

    Returns ``(last_hidden [U, H], cache, mask [U, Pmax] long, next_pos [U] long)``; ``last_hidden[u]`` is the
    final-norm hidden state at prompt ``u``'s last token (it predicts the first response token) and
    ``next_pos[u]`` the M-RoPE position of the first response token (the prompt's largest position + 1).
    """
    ids, lengths, mask = right_padded(prompts, pad_id, device)
    vision = {k: v.to(device) for k, v in collate_vision(prompts).items()}
    pos, next_pos = prompt_positions(core, prompts, ids)
    out = core(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **vision)
    last = out.last_hidden_state[torch.arange(len(prompts), device=device), lengths - 1]
    return last, output_cache(out), mask, next_pos


def can_cache(model) -> bool:
    """False under gradient checkpointing in training mode: ``transformers`` drops the KV cache then (a recomputed
    layer would append to it twice)."""
    flag = "is_activation_checkpointing" if hasattr(type(model), "is_activation_checkpointing") else "is_gradient_checkpointing"
    return not (model.training and getattr(model, flag, False))


def uses_flash(model) -> bool:
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == "flash_attention_2"


def can_share(model) -> bool:
    """A prompt's KV cache can be kept and shared (multi-turn scoring: ``mmrl.models.sequence_scoring``)."""
    return can_cache(model) and not uses_flash(model)


CHUNK_TOKENS = 4096  # the default of ``train.logprob_chunk_tokens``: 2.5 GB per fp32 copy of a chunk's logits at 151,936 words


def _rows_logprobs(head, rows: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    lp = torch.log_softmax(head(rows).float() / temperature, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if isinstance(head, PolicyHead):  # a vision token is never sampled; where one is scored (an observation's tokens
        sel = head.excluded_targets(targets)  # scored whole), it gets the unrestricted head's log-prob, not -inf
        if sel is not None:
            raw = torch.log_softmax(head.head(rows[sel]).float() / temperature, dim=-1)
            lp = lp.masked_scatter(sel, raw.gather(-1, targets[sel].unsqueeze(-1)).squeeze(-1))
    return lp


def token_logprobs(head, rows: torch.Tensor, targets: torch.Tensor, temperature: float,
                   chunk_tokens: int = CHUNK_TOKENS) -> torch.Tensor:
    """``log_softmax(head(rows) / T)[targets]`` of hidden rows ``[N, H]`` (fp32 ``[N]``), ``chunk_tokens`` rows at a
    time (0 = all at once). With grad enabled each chunk runs under ``torch.utils.checkpoint`` (non-reentrant):
    only its hidden rows are kept and its ``[chunk, V]`` logits are recomputed in backward, so one chunk's logits
    are alive at a time, at the cost of one extra head forward per chunk. At most ``chunk_tokens`` rows go through
    the head at once in one pass, as before chunking (no recompute, the same floats): the bound already holds.
    Any ``head`` module works (``nn.Linear``, tied embeddings, a LoRA-wrapped head): it is called, never unpacked.
    The head is called at least once, also on no rows (ZeRO-3 ranks make the same module calls)."""
    if chunk_tokens <= 0 or rows.shape[0] <= chunk_tokens:
        return _rows_logprobs(head, rows, targets, temperature)
    grad = torch.is_grad_enabled()
    out = []
    for s in range(0, rows.shape[0], chunk_tokens):  # two chunks or more here
        r, t = rows[s : s + chunk_tokens], targets[s : s + chunk_tokens]
        out.append(checkpoint(_rows_logprobs, head, r, t, temperature, use_reentrant=False) if grad
                   else _rows_logprobs(head, r, t, temperature))
    return torch.cat(out)


def head_logprobs(head, hidden, resp, rlen, temperature: float, pad_id: int, trained=None,
                  chunk_tokens: int = CHUNK_TOKENS) -> List[torch.Tensor]:
    """Log-probs of the response tokens from hidden states ``[N, R, H]`` (position t predicts token t), only at
    real tokens (the ``[N, R, V]`` logits are never formed for padding), ``chunk_tokens`` tokens at a time through
    the head (``token_logprobs``). ``trained`` (per item a bool ``[R_i]``, or None): only those tokens go through
    the LM head, the others get log-prob 0 (observations of multi-turn items)."""
    R = hidden.shape[1]
    valid = torch.arange(R, device=hidden.device).view(1, -1) < rlen.view(-1, 1)
    targets = pad_right(resp + [resp[0].new_zeros(0)], pad_id)[:-1] if R else resp[0].new_zeros((len(resp), 0))
    if trained is None:
        lp = token_logprobs(head, hidden[valid], targets[valid], temperature, chunk_tokens)
        return list(lp.split(rlen.tolist()))
    sel = pad_right([t.to(device=hidden.device, dtype=torch.long) for t in trained] + [rlen.new_zeros(R)], 0)[:-1]
    sel = sel.bool() & valid
    lp = token_logprobs(head, hidden[sel], targets[sel], temperature, chunk_tokens)
    full = lp.new_zeros(sel.shape).masked_scatter(sel, lp)
    return list(full[valid].split(rlen.tolist()))
