"""Multi-turn generation in the HF engine with each episode's KV cache kept across turns.

Without it, every turn of a multi-turn episode re-prefills the episode's whole sequence (the vision tower re-encodes
every earlier image and video, the language model re-reads every earlier token). Here:

- ``start_episodes`` (the first turn): each distinct prompt is prefilled once (``prefill_prompts``), its ``n``
  samples are decoded one row each (the engine's ``expand`` layout) and each episode keeps the real columns of its
  row (``mmrl.models.kv_cache.EpisodeKV``: prompt and model tokens; padding and tokens after the turn's end dropped).
- ``continue_episodes`` (every later turn): the active episodes' caches are gathered into one batch; only each
  episode's *tail* is prefilled on top, i.e. the tokens of its sequence not in its cache yet (the turn's closing
  token if it was sampled but never fed, the observation with its image or video through the vision tower), and the
  turn is decoded in the same batch.

Positions (``mmrl.models.mrope``, the numbering the models were trained with): a sequence is numbered block by
block, each block starting at the largest position so far + 1, and a block's positions are its start plus offsets
that depend on the block alone. So the M-RoPE positions of a tail are its own positions from 0 + ``next_pos``
(``next_pos``: the position the episode's next token takes, the prompt's largest position + 1 plus the tokens fed
since), and the position after the tail is ``next_pos`` + the tail's own next position: the positions a full
re-prefill of the whole sequence gives (``prompt_positions``) and the scorer uses (``mmrl.models.sequence_scoring``).
``tests/rollout/test_kv_reuse.py`` checks that greedy trajectories with and without reuse are equal.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch

from mmrl.data.schema import Trajectory
from mmrl.media.inputs import PromptInputs, collate_vision
from mmrl.models.compat import cache_kwargs
from mmrl.models.kv_cache import EpisodeKV, gather_episodes, growing_cache
from mmrl.models.scoring import backbone, prefill_prompts, prompt_positions, right_padded
from mmrl.rollout.base import RolloutRequest, SamplingParams


def _states(keep: dict, pos: torch.Tensor, seen: Sequence[int]) -> List[EpisodeKV]:
    """``EpisodeKV`` per decoded row from the rows' kept keys/values (``HFEngine._decode_rows``)."""
    out = []
    for i in range(len(seen)):
        keys, values, fed = keep[i]
        out.append(EpisodeKV(keys, values, int(pos[i]) + fed, seen[i] + fed))
    return out


def start_episodes(engine, requests: List[RolloutRequest], params: SamplingParams
                   ) -> Tuple[List[Trajectory], List[EpisodeKV]]:
    """The first turn of every episode (``n`` per request, shared prompt prefilled once): trajectories and states."""
    core, head = backbone(engine.model)
    device = next(engine.model.parameters()).device
    trajs, states = [], []
    with engine.inference():
        for chunk in engine._chunks(requests):
            reqs = [requests[i] for i in chunk]
            last, cache, mask, start = prefill_prompts(core, [r.inputs for r in reqs], engine.pad_id, device)
            owner = torch.tensor([u for u, r in enumerate(reqs) for _ in range(r.n)], dtype=torch.long, device=device)
            rows = growing_cache(cache, owner, mask.shape[1] + params.max_new_tokens)
            keep: dict = {}
            toks, lps = engine._decode_rows(core, head, head(last).float()[owner], rows, mask.bool()[owner],
                                            start[owner], params, keep=keep)
            trajs.extend(engine._trajectories(reqs, chunk, torch.stack(toks, 1).cpu(), torch.stack(lps, 1).cpu()))
            states.extend(_states(keep, start[owner], [reqs[int(u)].inputs.num_tokens for u in owner]))
    return trajs, states


def continue_episodes(engine, states: List[EpisodeKV], tails: List[PromptInputs], params: SamplingParams,
                      requests: List[RolloutRequest]) -> List[Trajectory]:
    """The next turn of each episode from its kept cache ``states[i]`` and its ``tails[i]`` (the tokens, with their
    media, that follow what the cache holds); ``requests[i]`` names the episode. The states are updated in place."""
    core, head = backbone(engine.model)
    device = next(engine.model.parameters()).device
    out: List[Trajectory] = []
    with engine.inference():
        for s in range(0, len(states), engine.max_batch_sequences):
            idx = list(range(s, min(s + engine.max_batch_sequences, len(states))))
            out.extend(_continue_chunk(engine, core, head, [states[i] for i in idx], [tails[i] for i in idx],
                                       params, [requests[i] for i in idx], idx, device))
    return out


def _continue_chunk(engine, core, head, states, tails, params, reqs, keys, device) -> List[Trajectory]:
    A, T = len(states), params.max_new_tokens
    ids, lengths, tail_mask = right_padded(tails, engine.pad_id, device)
    Q = ids.shape[1]
    vision = {k: v.to(device) for k, v in collate_vision(tails).items()}
    pos, after = prompt_positions(core, tails, ids)  # the tails' own positions, from 0
    offset = torch.tensor([st.next_pos for st in states], dtype=torch.long, device=device)
    cache, kept = gather_episodes(states, capacity=max(st.length for st in states) + Q + T)
    C = kept.shape[1]
    causal = torch.ones(Q, Q, dtype=torch.bool, device=device).tril()  # right padding: real queries see no pad
    attn = torch.cat([kept[:, None, None, :].expand(A, 1, Q, C), causal.expand(A, 1, Q, Q)], dim=-1)
    hid = core(input_ids=ids, attention_mask=attn, position_ids=pos + offset.view(1, A, 1),
               use_cache=True, **cache_kwargs(cache), **vision).last_hidden_state
    last = hid[torch.arange(A, device=device), lengths - 1]
    start = offset + after
    keep: dict = {}
    toks, lps = engine._decode_rows(core, head, head(last).float(), cache, torch.cat([kept, tail_mask.bool()], 1),
                                    start, params, keep=keep)
    new = _states(keep, start, [st.seen + int(n) for st, n in zip(states, lengths.tolist())])
    for st, nw in zip(states, new):
        st.keys, st.values, st.next_pos, st.seen = nw.keys, nw.values, nw.next_pos, nw.seen
    asked = [RolloutRequest(inputs=t, n=1, sample_id=r.sample_id, group_id=r.group_id, view=r.view, role=r.role,
                            expected=r.expected) for t, r in zip(tails, reqs)]
    return engine._trajectories(asked, keys, torch.stack(toks, 1).cpu(), torch.stack(lps, 1).cpu())
