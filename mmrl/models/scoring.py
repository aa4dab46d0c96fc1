"""Teacher-forced log-probs of given response tokens under any media (the Scorer).

One function serves the policy (with gradient, for the loss), old log-probs, the reference model, and
re-scoring the same response under an intervened view (PACG, VPPO, DSPO): pass that view's ``PromptInputs``.
Only response positions go through the LM head, so the ``[B, L, V]`` logits tensor is never materialised.

Shared prompts are computed once. The ``n`` responses of a group share one ``PromptInputs`` object, so a
micro-batch is scored in two passes: the distinct prompts (vision tower + language model, KV cache kept,
gradients flow through it) and then only the response tokens of every item, attending to its prompt's cached
keys/values. The result equals one forward over each full ``prompt + response`` sequence (same positions, same
causal attention), at the cost of ``U`` prompts instead of ``N`` (``U = N / n``). ``prefill_prompts`` is the
first pass; the HF rollout engine uses it too, so sampling and scoring read the model the same way.

The second pass has two layouts, picked per micro-batch by ``scoring_strategy`` (short responses: ``packed``, a
group's responses side by side in its prompt's row; long ones: ``expand``, one row per response over a gathered
copy of its prompt's cache). Every layout makes the same module calls (prefill, one response pass, the head), so
ZeRO-3 ranks stay in step even when their micro-batches pick different layouts. Under gradient checkpointing (no
KV cache) every rank scores in the ``onepass`` layout instead: each distinct prompt and its packed responses in one
forward (one module call and the head).
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import torch

from mmrl.media.inputs import PromptInputs, SequenceInputs, collate_vision, pad_right
from mmrl.models.compat import cache_kwargs
from mmrl.models.kv_cache import select_rows
from mmrl.models.prefill import (CHUNK_TOKENS, backbone, can_cache, can_share, head_logprobs,  # noqa: F401  (re-exported)
                                 positions, prefill_prompts, prompt_positions, prompt_rope, right_padded, sequence_positions,
                                 token_logprobs, unique_prompts, uses_flash)
from mmrl.models.sequence_scoring import score_sequences, score_shared


STRATEGIES = ("packed", "expand", "full", "onepass")


def scoring_strategy(prompt_tokens: int, n: int, response_tokens: int) -> str:
    """Which shared-prompt layout scores (and generates) ``n`` responses of up to ``response_tokens`` tokens after
    a ``prompt_tokens``-token prompt at the least cost.

    Per layer, the attention work of one prompt's group is, in key-query pairs (``W = response_tokens``):

    - ``packed``: the ``n`` continuations side by side in the prompt's row, ``n*W`` queries over ``P + n*W`` keys;
      no copy of the prompt's cache, one row per prompt. Its attention grows with ``(n*W)^2``.
    - ``expand``: the prompt's cache gathered once per response (a copy of ``n*P`` keys/values, and its
      backward), then ``n`` rows of ``W`` queries over ``P + W`` keys: ``n*W*(P + W)``, linear in ``n``.

    The extra attention of ``packed`` is ``n*W*(n-1)*W``; the extra cost of ``expand`` is the ``n*P`` cache copy
    plus a fixed per-row overhead. Measured on the tiny model (``bench/scoring_crossover.py`` and its ``--gen``,
    16 prompts of ~71 tokens x 8, CPU, 1 thread, median CPU s of 3): forward+backward packed / expand 0.200 / 0.211
    at 16 new tokens, 0.248 / 0.251 at 24, 0.277 / 0.271 at 32, 7.18 / 1.97 at 256; generation 0.215 / 0.228 at 24,
    0.339 / 0.321 at 32. So ``packed`` while ``(n-1)*W <= 192`` extra keys (``W <= 27`` at ``n = 8``), else
    ``expand``. A single response (``n == 1``) has nothing to pack: ``expand`` (which is then a plain cached
    continuation) is used.
    """
    if n <= 1:
        return "expand"
    return "packed" if (n - 1) * max(response_tokens, 1) <= PACKED_MAX_EXTRA_KEYS else "expand"


PACKED_MAX_EXTRA_KEYS = 192


def strategy_note(n: int, max_new_tokens: int) -> str:
    """One line for a run plan (``--dry-run``): the layout the HF engine decodes in and the scorer starts from
    (the scorer re-applies the rule per micro-batch to the longest response it holds, which EOS can make shorter)."""
    name = scoring_strategy(0, n, max_new_tokens)
    why = ("a single response per prompt" if n <= 1 else
           f"(n-1) x max_new_tokens = {(n - 1) * max_new_tokens} {'<=' if name == 'packed' else '>'} {PACKED_MAX_EXTRA_KEYS}")
    return f"shared-prompt layout: {name} ({why}; packed = responses side by side in the prompt's row, expand = the " \
           f"prompt's KV cache gathered per response)"


def response_logprobs(model, items: Sequence[Tuple[PromptInputs, torch.Tensor]], temperature: float = 1.0,
                      micro_batch: int = 16, pad_id: int = 0, strategy: str = "auto",
                      chunk_tokens: int = CHUNK_TOKENS) -> List[torch.Tensor]:
    """log pi(response_t | prompt, media, response_<t) for each (prompt inputs, response ids); grads flow if enabled.

    ``strategy``: ``auto`` (``scoring_strategy`` per micro-batch), ``packed``, ``expand``, ``full`` (one forward
    per whole sequence) or ``onepass`` (each distinct prompt and its responses packed after it in ONE forward, no KV
    cache). Under gradient checkpointing (no KV cache in training mode) the shared-prompt layouts become
    ``onepass``: prompts and the vision tower are still computed once per distinct prompt. With FlashAttention-2
    (``model.attn_implementation``; it takes no custom 4-D mask) every layout is ``full``. ``chunk_tokens``: the
    tokens of a micro-batch go through the LM head that many at a time (``mmrl.models.prefill.token_logprobs``;
    0 = all at once)."""
    if strategy not in ("auto",) + STRATEGIES:
        raise ValueError(f"scoring strategy must be one of auto, {', '.join(STRATEGIES)}; got {strategy!r}")
    out: List[torch.Tensor] = []
    if any(isinstance(p, SequenceInputs) for p, _ in items):  # multi-turn: one forward over each whole sequence
        return mixed_logprobs(model, items, temperature, micro_batch, pad_id, chunk_tokens)
    core, head = backbone(model)
    device = next(model.parameters()).device
    for s in range(0, len(items), micro_batch):
        chunk = items[s : s + micro_batch]
        name = strategy
        if uses_flash(model):
            name = "full"
        elif not can_cache(model) and name != "full":
            name = "onepass"
        if name == "auto":
            name = _chunk_strategy(chunk)
        out.extend(_SCORERS[name](core, head, chunk, temperature, pad_id, device, chunk_tokens=chunk_tokens))
    return out


def _chunk_strategy(chunk) -> str:
    uniq, owner = unique_prompts([p for p, _ in chunk])
    n = int(torch.bincount(owner).max())
    return scoring_strategy(max(p.num_tokens for p in uniq), n, max(int(r.numel()) for _, r in chunk))


def slots(owner: torch.Tensor) -> torch.Tensor:
    """For each item, its rank among the items of the same prompt (0, 1, ... in order)."""
    out = torch.zeros_like(owner)
    seen: Dict[int, int] = {}
    for i, u in enumerate(owner.tolist()):
        out[i] = seen.get(u, 0)
        seen[u] = int(out[i]) + 1
    return out


def packed_mask(prompt_mask: torch.Tensor, k: int, w: int) -> torch.Tensor:
    """Boolean attention mask ``[U, 1, k*w, P + k*w]`` for ``k`` continuations of ``w`` tokens packed after each
    cached prompt: every query sees its prompt's real tokens and the earlier tokens of its own continuation."""
    q = torch.arange(k * w, device=prompt_mask.device)
    own = (q.view(-1, 1) // w == q.view(1, -1) // w) & (q.view(1, -1) <= q.view(-1, 1))  # [Q, Q] block-causal
    u = prompt_mask.shape[0]
    return torch.cat([prompt_mask.bool()[:, None, None, :].expand(u, 1, k * w, -1), own.expand(u, 1, -1, -1)], dim=-1)


def _score_packed(core, head, chunk, temperature: float, pad_id: int, device,
                  chunk_tokens: int = CHUNK_TOKENS) -> List[torch.Tensor]:
    """Prompts once (cached), then the responses of each prompt packed side by side in that prompt's row
    (block-causal mask, positions restart at the prompt length for each response): no copy of the prompt cache."""
    uniq, owner = unique_prompts([p for p, _ in chunk])
    slot = slots(owner)
    owner, slot = owner.to(device), slot.to(device)
    last, cache, pmask, start = prefill_prompts(core, uniq, pad_id, device)
    resp = [r.to(device=device, dtype=torch.long) for _, r in chunk]
    rlen = torch.tensor([int(r.numel()) for r in resp], dtype=torch.long, device=device)
    R = int(rlen.max())
    # Always one call, even when no response has a second token (a dummy column): under ZeRO-3 every rank must
    # run the same sequence of module calls.
    W, K, U = max(R - 1, 1), int(slot.max()) + 1, len(uniq)
    cols = pad_right([r[:W] for r in resp] + [resp[0].new_full((W,), pad_id)], pad_id)[:-1]  # [N, W]
    ids = cols.new_full((U, K, W), pad_id)
    ids[owner, slot] = cols
    pos = (start.view(U, 1, 1) + torch.arange(W, device=device).view(1, 1, W)).expand(U, K, W).reshape(U, K * W)
    hid = core(input_ids=ids.view(U, K * W), attention_mask=packed_mask(pmask, K, W),
               position_ids=pos.unsqueeze(0).expand(3, -1, -1), use_cache=True, **cache_kwargs(cache)).last_hidden_state
    hid = hid.view(U, K, W, -1)[owner, slot]  # [N, W, H]
    # [N, R, H]: position t predicts token t
    hidden = torch.cat([last.index_select(0, owner).unsqueeze(1), hid], dim=1)[:, :R]
    return head_logprobs(head, hidden, resp, rlen, temperature, pad_id, chunk_tokens=chunk_tokens)


def _score_full(core, head, chunk, temperature: float, pad_id: int, device,
                chunk_tokens: int = CHUNK_TOKENS) -> List[torch.Tensor]:
    """One forward per full ``prompt + response`` sequence (used with FlashAttention-2)."""
    seqs = [torch.cat([p.input_ids, r.to(p.input_ids.dtype)]) for p, r in chunk]
    ids = pad_right(seqs, pad_id).to(device)
    attn = pad_right([torch.ones_like(x) for x in seqs], 0).to(device)
    vision = {k: v.to(device) for k, v in collate_vision([p for p, _ in chunk]).items()}
    pos = sequence_positions(core, [p for p, _ in chunk], [int(r.numel()) for _, r in chunk], ids.shape[1], device)
    hidden = core(input_ids=ids, attention_mask=attn, position_ids=pos, **vision).last_hidden_state
    # position t predicts token t+1: responses start at P, so read hidden states P-1 .. P+R-2
    rows, cols = [], []
    for i, (p, r) in enumerate(chunk):
        P, R = p.num_tokens, int(r.numel())
        rows.append(torch.full((R,), i, dtype=torch.long))
        cols.append(torch.arange(P - 1, P + R - 1))
    rows_t, cols_t = torch.cat(rows).to(device), torch.cat(cols).to(device)
    lp = token_logprobs(head, hidden[rows_t, cols_t], ids[rows_t, cols_t + 1], temperature, chunk_tokens)
    return list(lp.split([int(r.numel()) for _, r in chunk]))


def _score_onepass(core, head, chunk, temperature: float, pad_id: int, device,
                   chunk_tokens: int = CHUNK_TOKENS) -> List[torch.Tensor]:
    """``packed`` without a KV cache: row ``u`` = prompt ``u`` (right-padded to ``P``) then its ``K`` responses of
    ``W`` tokens, in one forward with the mask ``[[causal prompt, 0], [prompt keys, block-causal]]`` and positions
    ``[prompt's M-RoPE, start_u + j]``: the same keys, queries and positions as prefill + the packed pass, so the
    same log-probs; nothing is cached, so gradient checkpointing can recompute any layer. Vision tower and prompt
    once per distinct prompt (not once per response as in ``full``)."""
    uniq, owner = unique_prompts([p for p, _ in chunk])
    slot = slots(owner)
    owner, slot = owner.to(device), slot.to(device)
    pids, lengths, pmask = right_padded(uniq, pad_id, device)
    vision = {k: v.to(device) for k, v in collate_vision(uniq).items()}
    ppos, start = prompt_positions(core, uniq, pids)
    resp = [r.to(device=device, dtype=torch.long) for _, r in chunk]
    rlen = torch.tensor([int(r.numel()) for r in resp], dtype=torch.long, device=device)
    R = int(rlen.max())
    W, K, U, P = max(R - 1, 1), int(slot.max()) + 1, len(uniq), pids.shape[1]
    cols = pad_right([r[:W] for r in resp] + [resp[0].new_full((W,), pad_id)], pad_id)[:-1]  # [N, W]
    rids = cols.new_full((U, K, W), pad_id)
    rids[owner, slot] = cols
    rpos = (start.view(U, 1, 1) + torch.arange(W, device=device).view(1, 1, W)).expand(U, K, W).reshape(U, K * W)
    pos = torch.cat([ppos, rpos.unsqueeze(0).expand(3, -1, -1)], dim=2)
    top = torch.ones(P, P, dtype=torch.bool, device=device).tril() & pmask.bool()[:, None, :]  # [U, P, P]
    top = torch.cat([top, top.new_zeros(U, P, K * W)], dim=-1)
    mask = torch.cat([top, packed_mask(pmask, K, W)[:, 0]], dim=1)[:, None]  # [U, 1, P + KW, P + KW]
    hid = core(input_ids=torch.cat([pids, rids.view(U, K * W)], dim=1), attention_mask=mask, position_ids=pos,
               use_cache=False, **vision).last_hidden_state
    last = hid[torch.arange(U, device=device), lengths - 1]
    hid = hid[:, P:].reshape(U, K, W, -1)[owner, slot]  # [N, W, H]
    hidden = torch.cat([last.index_select(0, owner).unsqueeze(1), hid], dim=1)[:, :R]
    return head_logprobs(head, hidden, resp, rlen, temperature, pad_id, chunk_tokens=chunk_tokens)


def _score_expand(core, head, chunk, temperature: float, pad_id: int, device,
                  chunk_tokens: int = CHUNK_TOKENS) -> List[torch.Tensor]:
    """Prompts once (cached), then the cache gathered per response (``index_select`` on the batch axis: gradients of
    every response flow back into its prompt's keys/values) and each response scored in its own row, causal over
    its prompt and its own earlier tokens. Attention work ``N*W*(P + W)``: linear in the group size."""
    uniq, owner = unique_prompts([p for p, _ in chunk])
    owner = owner.to(device)
    last, cache, pmask, start = prefill_prompts(core, uniq, pad_id, device)
    resp = [r.to(device=device, dtype=torch.long) for _, r in chunk]
    rlen = torch.tensor([int(r.numel()) for r in resp], dtype=torch.long, device=device)
    R = int(rlen.max())
    W, N, P = max(R - 1, 1), len(chunk), pmask.shape[1]  # a dummy column when no response has a second token (ZeRO-3)
    cols = pad_right([r[:W] for r in resp] + [resp[0].new_full((W,), pad_id)], pad_id)[:-1]  # [N, W]
    select_rows(cache, owner)  # not cache.batch_select_indices: its backward is nondeterministic on CPU
    causal = torch.ones(W, W, dtype=torch.bool, device=device).tril()
    attn = torch.cat([pmask.bool()[owner][:, None, None, :].expand(N, 1, W, P), causal.expand(N, 1, W, W)], dim=-1)
    pos = start[owner].view(N, 1) + torch.arange(W, device=device).view(1, W)
    hid = core(input_ids=cols, attention_mask=attn, position_ids=pos.unsqueeze(0).expand(3, -1, -1),
               use_cache=True, **cache_kwargs(cache)).last_hidden_state  # [N, W, H]
    hidden = torch.cat([last.index_select(0, owner).unsqueeze(1), hid], dim=1)[:, :R]
    return head_logprobs(head, hidden, resp, rlen, temperature, pad_id, chunk_tokens=chunk_tokens)


_SCORERS = {"packed": _score_packed, "expand": _score_expand, "full": _score_full, "onepass": _score_onepass}


def mixed_logprobs(model, items: Sequence[Tuple[PromptInputs, torch.Tensor]], temperature: float = 1.0,
                   micro_batch: int = 16, pad_id: int = 0, chunk_tokens: int = CHUNK_TOKENS) -> List[torch.Tensor]:
    """``response_logprobs`` over a mix of single-turn items (shared-prefix path) and ``SequenceInputs`` items
    (``micro_batch`` sequences per forward: ``score_shared``, or ``score_sequences`` under gradient checkpointing);
    results in the items' order."""
    seq_idx = [i for i, (p, _) in enumerate(items) if isinstance(p, SequenceInputs)]
    other_idx = [i for i, (p, _) in enumerate(items) if not isinstance(p, SequenceInputs)]
    out: List[torch.Tensor] = [torch.empty(0)] * len(items)
    if other_idx:
        for i, lp in zip(other_idx, response_logprobs(model, [items[i] for i in other_idx], temperature,
                                                      micro_batch, pad_id, chunk_tokens=chunk_tokens)):
            out[i] = lp
    core, head = backbone(model)
    device = next(model.parameters()).device
    share = can_share(model)
    for s in range(0, len(seq_idx), micro_batch):
        idx = seq_idx[s : s + micro_batch]
        chunk = [items[i] for i in idx]
        scorer = score_shared if share and all(p.prompt is not None for p, _ in chunk) else score_sequences
        for i, lp in zip(idx, scorer(core, head, chunk, temperature, pad_id, device, chunk_tokens=chunk_tokens)):
            out[i] = lp
    return out
