"""HF backend: all prompts of a step in a few batched calls, ``n`` samples each.

Each distinct prompt is prefilled once (vision tower + language model, ``mmrl.models.scoring.prefill_prompts``)
and its ``n`` samples are decoded from that cache with the sampling rules of ``transformers`` (suppressed tokens,
temperature, top-k, top-p; greedy = argmax). ``generate`` with ``num_return_sequences`` would instead prefill every
prompt ``n`` times. Two decode layouts, chosen by ``mmrl.models.scoring.scoring_strategy`` (the same rule and
trade-off as the scorer's):

- ``packed`` (short responses): the ``n`` samples side by side in their prompt's cache row, one key column per
  sample and step under a block mask; no copy of the prompt cache, but a step's attention reads ``P + n*t`` keys.
- ``expand`` (long responses): the prompt's keys/values gathered once per sample into a ``GrowingLayer`` cache
  (``mmrl.models.kv_cache``: preallocated, written in place, no per-step ``torch.cat`` of the whole cache), one
  row per sample reading ``P + t`` keys; rows whose sample has finished are dropped from the forward once they
  are a quarter of the rows still decoded (the sampler still draws for every row, so the RNG stream, and hence
  every token, is the same as without dropping).

Each decode step (both layouts) runs the text stack without ``transformers``' wrappers
(``mmrl.models.fused_decode.TextDecoder``: the model's own modules in ``transformers``' order, the same floats;
switched on per model by a self-check against ``transformers``' forward, ``fused_decode.self_check``) and
draws its tokens with ``mmrl.rollout.sampling.multinomial_rows`` (``torch.multinomial``'s draw, bit for bit, at
less cost): the same tokens and log-probs as the eager decode kept behind ``fast_decode=False``, faster on CPU
(``bench/decode_speed.py``, ``docs/performance.md``).

``shared_prefill=False`` uses ``model.generate`` (kept as the reference the tests compare against), with its
``get_rope_index`` swapped for ``mmrl.models.mrope``'s numbering (the one the shared-prefill path passes explicitly).

Multi-turn episodes (``start_episodes`` / ``continue_episodes``, ``mmrl.rollout.hf_turns``) decode in the ``expand``
layout and keep each row's cache for the episode's next turn (``_decode_rows(keep=...)``).
"""
from __future__ import annotations

import contextlib
from functools import partial
from typing import List

import torch

from mmrl.data.schema import Trajectory
from mmrl.media.inputs import collate_vision, pad_left
from mmrl.rollout.base import ENGINES, RolloutEngine, RolloutRequest, SamplingParams
from mmrl.models.fused_decode import TextDecoder, eager_step
from mmrl.models.policy_head import tokenizer_excluded_tokens
from mmrl.models.kv_cache import episode_rows, growing_cache
from mmrl.models.mrope import trained_numbering
from mmrl.models.scoring import backbone, prefill_prompts, scoring_strategy
from mmrl.rollout.sampling import multinomial_rows


@ENGINES.register("hf")
class HFEngine(RolloutEngine):
    drop_fraction = 0.25  # expand layout: drop finished rows from the forward once they are this share of live rows
    def __init__(self, model, processor, max_batch_sequences: int = 64, shared_prefill: bool = True,
                 layout: str = "auto", fast_decode: bool = True):
        if layout not in ("auto", "packed", "expand"):
            raise ValueError(f"HF engine layout must be auto, packed or expand; got {layout!r}")
        self.model = model
        self.fast_decode = fast_decode  # False: the eager decode kept as the reference (bench/decode_speed.py)
        self.shared_prefill = shared_prefill
        self.layout = layout
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.max_batch_sequences = max_batch_sequences
        self.eos_id = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_id
        self.suppress = tokenizer_excluded_tokens(self.tokenizer)  # outside the policy's support

    def _chunks(self, requests: List[RolloutRequest]):
        """Consecutive requests, at most max_batch_sequences sequences per chunk (and one n per chunk for
        ``model.generate``; the shared-prefill path mixes n, e.g. T-GRPO's G and G/2 groups)."""
        chunk: List[int] = []
        total = 0
        for i, r in enumerate(requests):
            if chunk and ((not self.shared_prefill and requests[chunk[0]].n != r.n)
                          or total + r.n > self.max_batch_sequences):
                yield chunk
                chunk, total = [], 0
            chunk.append(i)
            total += r.n
        if chunk:
            yield chunk

    supports_sequences = True  # prompts are any PromptInputs: several images/videos, positions by mmrl.models.mrope

    @property
    def supports_kv_reuse(self) -> bool:
        """Multi-turn episodes keep their KV cache across turns (``mmrl.rollout.hf_turns``); not with the
        ``model.generate`` reference path."""
        return self.shared_prefill

    @contextlib.contextmanager
    def inference(self):
        """No gradients, eval mode; the model's mode restored after."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            self.model.train(was_training)

    def generate(self, requests: List[RolloutRequest], params: SamplingParams) -> List[Trajectory]:
        out: List[Trajectory] = []
        with self.inference():
            gen = self._generate_chunk if self.shared_prefill else self._generate_chunk_hf
            for chunk in self._chunks(requests):
                out.extend(gen([requests[i] for i in chunk], [i for i in chunk], params))
        return out

    def start_episodes(self, requests: List[RolloutRequest], params: SamplingParams):
        """First turn of multi-turn episodes, keeping each episode's cache (``hf_turns.start_episodes``)."""
        from mmrl.rollout.hf_turns import start_episodes

        return start_episodes(self, requests, params)

    def continue_episodes(self, states, tails, params: SamplingParams, requests: List[RolloutRequest]):
        """A later turn from the kept caches plus each episode's new tokens (``hf_turns.continue_episodes``)."""
        from mmrl.rollout.hf_turns import continue_episodes

        return continue_episodes(self, states, tails, params, requests)

    def _sample(self, logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
        """One token per row from raw logits ``[N, V]``, as ``transformers`` samples (processors, then warpers)."""
        scores = logits.clone()
        if self.suppress:
            scores[:, self.suppress] = -float("inf")
        if params.greedy:
            return scores.argmax(dim=-1)
        if params.temperature != 1.0:  # x / 1.0 == x: the division is skipped, not changed
            scores = scores / params.temperature
        if params.top_k and params.top_k > 0:
            kth = torch.topk(scores, min(params.top_k, scores.shape[-1]), dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, -float("inf"))
        if params.top_p is not None and params.top_p < 1.0:
            sorted_scores, order = torch.sort(scores, descending=False)
            remove = sorted_scores.softmax(dim=-1).cumsum(dim=-1) <= (1 - params.top_p)
            remove[:, -1] = False  # keep at least one token
            scores = scores.masked_fill(remove.scatter(1, order, remove), -float("inf"))
        probs = torch.softmax(scores, dim=-1)
        return multinomial_rows(probs) if self.fast_decode else torch.multinomial(probs, num_samples=1).squeeze(1)

    def _generate_chunk(self, reqs: List[RolloutRequest], keys: List[int], params: SamplingParams) -> List[Trajectory]:
        """Prefill each prompt once, then decode its ``n`` samples in the layout that costs least."""
        core, head = backbone(self.model)
        device = next(self.model.parameters()).device
        last, cache, mask, start = prefill_prompts(core, [r.inputs for r in reqs], self.pad_id, device)
        owner = torch.tensor([u for u, r in enumerate(reqs) for _ in range(r.n)], dtype=torch.long, device=device)
        slot = torch.tensor([j for r in reqs for j in range(r.n)], dtype=torch.long, device=device)
        layout = self.layout
        if layout == "auto":
            layout = scoring_strategy(mask.shape[1], max(r.n for r in reqs), params.max_new_tokens)
        decode = self._decode_packed if layout == "packed" else self._decode_expand
        toks, lps = decode(core, head, head(last).float()[owner], cache, mask, start, owner, slot, params)
        return self._trajectories(reqs, keys, torch.stack(toks, dim=1).cpu(), torch.stack(lps, dim=1).cpu())

    def _step(self, logits: torch.Tensor, done: torch.Tensor, params: SamplingParams, toks: list, lps: list):
        """Sample one token per row of ``logits [N, V]`` (finished rows get padding), record it and its log-prob;
        returns the new tokens and the updated ``done``."""
        temp = 1.0 if params.greedy else params.temperature
        nxt = self._sample(logits, params)
        nxt = torch.where(done, torch.full_like(nxt, self.pad_id), nxt)
        toks.append(nxt)
        scaled = logits / temp if temp != 1.0 else logits
        lps.append(torch.log_softmax(scaled, dim=-1).gather(-1, nxt.unsqueeze(-1)).squeeze(-1))
        return nxt, done | (nxt == self.eos_id)

    def _decode_step(self, core):
        """The decode step: ``TextDecoder.step`` where it was built and passed its self-check against
        ``transformers``' forward on this model (once per model, dtype and device), else that forward
        (``eager_step``); always the forward with ``fast_decode=False``."""
        fused = TextDecoder.build(core) if self.fast_decode else None
        return fused.step if fused is not None else partial(eager_step, core)

    def _decode_packed(self, core, head, logits, cache, mask, start, owner, slot, params: SamplingParams):
        """Samples side by side in their prompt's cache row (one key column per sample and step, block mask: a
        sample sees the prompt and its own tokens)."""
        U, K = mask.shape[0], int(slot.max()) + 1
        prompt_keys = mask.bool()[:, None, None, :].expand(U, 1, K, mask.shape[1])
        own = torch.eye(K, dtype=torch.bool, device=mask.device)
        done = torch.zeros(len(owner), dtype=torch.bool, device=mask.device)
        toks, lps = [], []
        step = self._decode_step(core)
        for t in range(params.max_new_tokens):
            nxt, done = self._step(logits, done, params, toks, lps)
            if bool(done.all()) or t == params.max_new_tokens - 1:
                break
            ids = nxt.new_full((U, K), self.pad_id)
            ids[owner, slot] = nxt
            attn = torch.cat([prompt_keys, own.repeat(1, t + 1).expand(U, 1, K, K * (t + 1))], dim=-1)
            hid = step(ids, (start + t).view(U, 1).expand(U, K), cache, attn)
            logits = head(hid[owner, slot]).float()
        return toks, lps

    def _decode_expand(self, core, head, logits, cache, mask, start, owner, slot, params: SamplingParams):
        """One row per sample over a growing copy of its prompt's cache (gathered once)."""
        rows = growing_cache(cache, owner, mask.shape[1] + params.max_new_tokens)
        return self._decode_rows(core, head, logits, rows, mask.bool()[owner], start[owner], params)

    def _decode_rows(self, core, head, logits, cache, keymask, pos, params: SamplingParams, keep=None):
        """Decode one row per sample: row ``i`` continues ``cache`` row ``i`` (real columns ``keymask [N, C]``)
        from M-RoPE position ``pos[i]``, ``logits [N, V]`` predicting its first token. Finished rows leave the
        forward in batches (when they are ``drop_fraction`` of the live rows: each drop copies the live cache once,
        so the copies add up to at most ``1 / drop_fraction`` caches); the sampler keeps drawing for all rows, so
        the RNG stream, and hence every token, is the same as without dropping. A decode column is real for a row
        while its turn lasts (its closing token included), padding after. ``keep`` (a dict): each row's real
        keys/values as it leaves the forward, ``keep[i] = (keys, values, tokens of the turn in the cache)``
        (``mmrl.models.kv_cache.episode_rows``), for the row's next turn."""
        N, C, T = keymask.shape[0], keymask.shape[1], params.max_new_tokens
        device = keymask.device
        live = torch.arange(N, device=device)  # original row of each row still in the forward
        keys = torch.zeros((N, 1, 1, C + T), dtype=torch.bool, device=device)
        keys[:, 0, 0, :C] = keymask
        done = torch.zeros(N, dtype=torch.bool, device=device)
        toks, lps = [], []
        step = self._decode_step(core)

        def stash(local, fed):
            valid = keys[local, 0, 0, : C + fed]
            for r, kv, n in zip(live[local].tolist(), episode_rows(cache, local, valid), valid[:, C:].sum(1).tolist()):
                keep[r] = (*kv, int(n))

        for t in range(T):
            before = done
            nxt, done = self._step(logits, done, params, toks, lps)
            if bool(done.all()) or t == T - 1:
                break
            finished = done[live]
            if bool(finished.any()) and int(finished.sum()) >= self.drop_fraction * len(live):
                if keep is not None:
                    stash(finished.nonzero().squeeze(1), t)
                kept = (~finished).nonzero().squeeze(1)
                live = live[kept]
                cache.batch_select_indices(kept)
                keys, pos = keys[kept], pos[kept]
            keys[:, 0, 0, C + t] = ~before[live]  # the token fed now belongs to the row's turn
            hid = step(nxt[live], pos + t, cache, keys[..., : C + t + 1])
            if len(live) == N:
                logits = head(hid).float()
            else:
                logits = logits.new_zeros((N, logits.shape[-1]))
                logits[live] = head(hid).float()
        if keep is not None:
            stash(torch.arange(len(live), device=device), len(toks) - 1)
        return toks, lps

    def _generate_chunk_hf(self, reqs: List[RolloutRequest], keys: List[int], params: SamplingParams) -> List[Trajectory]:
        n = reqs[0].n
        ids, mask = pad_left([r.inputs.input_ids for r in reqs], self.pad_id)
        mm, _ = pad_left([r.inputs.mm_token_type_ids if r.inputs.mm_token_type_ids is not None
                          else torch.zeros_like(r.inputs.input_ids) for r in reqs], 0)
        vision = collate_vision([r.inputs for r in reqs])
        device = next(self.model.parameters()).device
        kwargs = dict(
            input_ids=ids.to(device), attention_mask=mask.to(device), mm_token_type_ids=mm.to(device),
            **{k: v.to(device) for k, v in vision.items()},
            max_new_tokens=params.max_new_tokens, num_return_sequences=n,
            return_dict_in_generate=True, output_logits=True,
            eos_token_id=self.eos_id, pad_token_id=self.pad_id, suppress_tokens=self.suppress,
        )
        if params.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or None)
        with trained_numbering(backbone(self.model)[0]):  # generate numbers positions through get_rope_index
            gen = self.model.generate(**kwargs)
        seqs = gen.sequences[:, ids.shape[1]:].cpu()
        temp = 1.0 if params.greedy else params.temperature
        logits = torch.stack(gen.logits, dim=1).float().cpu() / temp  # [B*n, L, V] (raw: before suppress_tokens)
        if self.suppress:  # the policy's distribution (mmrl.models.policy_head), as the fast path and the scorer
            logits[..., self.suppress] = -float("inf")
        logps = torch.log_softmax(logits, dim=-1).gather(-1, seqs.unsqueeze(-1)).squeeze(-1)
        return self._trajectories(reqs, keys, seqs, logps)

    def _trajectories(self, reqs, keys, seqs: torch.Tensor, logps: torch.Tensor) -> List[Trajectory]:
        """One trajectory per row; rows are the requests' samples in order (``n`` consecutive rows each)."""
        trajs = []
        rows = [(r, j) for r in range(len(reqs)) for j in range(reqs[r].n)]
        for row, (ri, pack) in enumerate(rows):
            req, key = reqs[ri], keys[ri]
            resp = seqs[row]
            stop = (resp == self.eos_id).nonzero()
            length = int(stop[0]) + 1 if stop.numel() else int(resp.numel())
            resp_ids = resp[:length].clone()
            trajs.append(Trajectory(
                sample_id=req.sample_id, group_id=req.group_id, view=req.view, role=req.role,
                prompt_ids=req.inputs.input_ids, response_ids=resp_ids, logprobs=logps[row, :length].clone(),
                loss_mask=torch.ones(length, dtype=torch.bool),
                text=self.tokenizer.decode(resp_ids, skip_special_tokens=True),
                truncated=not stop.numel(), expected=req.expected, inputs_key=key, pack_id=pack,
            ))
        return trajs
