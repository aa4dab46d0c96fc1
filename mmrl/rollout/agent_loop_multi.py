"""The ``multi_turn`` agent loop: environments answer model turns with observations that may carry images or video.

Per episode: ``env.reset(sample, media)`` gives the first observation (or keeps the request's prompt); then,
turn by turn, the engine generates the model's turn for every active episode of the step in one
``engine.generate`` call (the first turn keeps the shared-prefix fast path: episodes that start from the same
prompt are one request with ``n`` samples), and ``env.step(text)`` answers with the next observation or ends the
episode. An observation is rendered as a chat turn of the model's own template and run through the processor
with its media (one batched call per turn), so its ``<|image_pad|>``/``<|video_pad|>`` tokens match its pixel
values and grids exactly as in a prompt. A turn that hits ``max_new_tokens`` (the per-turn budget) without
``<|im_end|>`` is closed with an ``<|im_end|>`` the model did not write (masked out of the loss) and the episode
goes on; the trajectory is then ``truncated``. The ``max_turns``-th model turn ends the episode.

Each episode becomes one ``Trajectory`` whose ``segments`` alternate model turns (trained, ``loss_mask`` true)
and observations (masked), and whose ``sequence`` is the ``SequenceInputs`` of the whole interleaved sequence:
the scorer computes its log-probs in one forward with M-RoPE positions over all of it.

Generation: with an engine that keeps KV caches (``supports_kv_reuse``: the HF engine, ``mmrl.rollout.hf_turns``)
each episode keeps its cache across turns and a turn prefills only the episode's new tokens (``Episode.tail``: the
observation, with its media, and a closing token sampled but not yet fed), all active episodes in one batch;
``reuse_cache=False`` re-prefills each episode's whole sequence every turn instead (the reference the tests
compare against). Other engines (vLLM) get the whole sequence so far with every medium in order
(``ContextInputs``) and reuse its prefix through their own prefix cache; an engine with an ``awake()`` context
(vLLM colocated) stays awake for all the turns of the step.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import torch

from mmrl.advice import advice
from mmrl.data.schema import Media, Segment, Trajectory
from mmrl.media.inputs import PromptInputs, SequenceInputs, chat_text, collate_vision, encode_texts
from mmrl.rollout.agent_loop import AGENT_LOOPS, MULTI_TURN, AgentLoop, Environment, Observation
from mmrl.rollout.base import RolloutEngine, RolloutRequest, SamplingParams


def _message(obs: Observation) -> dict:
    content: List[dict] = [{"type": "text", "text": obs.prefix}] if obs.prefix else []
    if obs.media is not None and (obs.media.is_video or obs.media.image is not None):
        content.append({"type": "video"} if obs.media.is_video else {"type": "image"})
    content.append({"type": "text", "text": obs.text})
    return {"role": obs.role, "content": content}


def observation_text(processor, obs: Observation) -> str:
    """The observation as the chat template renders a turn after the model's ``<|im_end|>``: ``"\\n"``, the turn
    (``<|im_start|>role\\n<media placeholder>text<|im_end|>\\n``), then the next assistant header."""
    system = {"role": "system", "content": [{"type": "text", "text": "-"}]}
    full = processor.apply_chat_template([system, _message(obs)], tokenize=False, add_generation_prompt=True)
    head, sep, turn = full.partition("<|im_end|>\n")
    if not sep:
        raise ValueError("chat template: no '<|im_end|>\\n' after the system turn; cannot render an observation turn")
    return "\n" + turn


def _empty_media() -> Media:
    return Media(sample_id="observation")


def _types(p: PromptInputs) -> torch.Tensor:
    return p.mm_token_type_ids if p.mm_token_type_ids is not None else torch.zeros_like(p.input_ids)


@dataclass
class ContextInputs(PromptInputs):
    """An episode's sequence so far as a prompt for an engine to continue: ``medias`` holds every image or video of
    it in order (the prompt's, then those observations inserted), for engines that process media themselves (vLLM)."""

    medias: List[Media] = field(default_factory=list)


def _has_media(m: Optional[Media]) -> bool:
    return m is not None and (m.is_video or m.image is not None)


def sequence_inputs(prompt: PromptInputs, segments: List[Segment], for_scoring: bool = True) -> PromptInputs:
    """``prompt`` followed by ``segments`` (tokens, token types and vision, in order): a ``SequenceInputs`` for the
    scorer, or (``for_scoring=False``) a ``ContextInputs`` for the engine to continue, so that a scorer never
    mistakes an episode's context for a scored sequence."""
    ids = torch.cat([prompt.input_ids] + [s.ids.to(prompt.input_ids.dtype) for s in segments])
    mm = torch.cat([_types(prompt)] + [s.mm_token_type_ids if s.mm_token_type_ids is not None
                                       else torch.zeros_like(s.ids) for s in segments])
    fields = dict(input_ids=ids, mm_token_type_ids=mm, vision=collate_vision([prompt, *segments]), text=prompt.text,
                  media=None)
    if for_scoring:
        trained = torch.cat([torch.full((s.ids.numel(),), s.trained, dtype=torch.bool) for s in segments]
                            + [torch.zeros(0, dtype=torch.bool)])
        return SequenceInputs(**fields, prompt_len=prompt.num_tokens, prompt=prompt, trained=trained)
    medias = [m for m in [prompt.media] + [s.media for s in segments if s.vision] if _has_media(m)]
    return ContextInputs(**fields, medias=medias)


@dataclass
class Episode:
    request: int
    pack: int
    env: Environment
    sample_id: str = "?"
    prompt: Optional[PromptInputs] = None
    segments: List[Segment] = field(default_factory=list)
    turns: List[Dict[str, Any]] = field(default_factory=list)
    done: bool = False
    truncated: bool = False
    end: str = ""
    kv: Any = None  # the engine's kept cache of this episode (``EpisodeKV``) while it runs

    def tail(self) -> PromptInputs:
        """The tokens of the sequence after the ``kv.seen`` the cache holds, with the media of the segments among
        them (a segment with media is never split: its tokens come after the last token the cache holds)."""
        ids, types, vis, at = [], [], [], self.prompt.num_tokens
        if self.kv.seen < at:
            raise ValueError(f"multi_turn: episode of sample {self.sample_id}: the kept cache ({self.kv.seen} tokens) "
                             f"ends inside the prompt ({at} tokens)")
        for s in self.segments:
            n = int(s.ids.numel())
            if at + n > self.kv.seen:
                cut = max(self.kv.seen - at, 0)
                if cut and s.vision:
                    raise ValueError(f"multi_turn: episode of sample {self.sample_id}: the kept cache ends inside an "
                                     f"observation with media")
                ids.append(s.ids[cut:])
                types.append(s.mm_token_type_ids[cut:] if s.mm_token_type_ids is not None else torch.zeros_like(s.ids[cut:]))
                vis += [s] if s.vision else []
            at += n
        if not ids:
            raise ValueError(f"multi_turn: episode of sample {self.sample_id} has no new tokens to continue from")
        return PromptInputs(input_ids=torch.cat(ids).to(self.prompt.input_ids.dtype), mm_token_type_ids=torch.cat(types),
                            vision=collate_vision(vis))

    @property
    def num_tokens(self) -> int:
        return self.prompt.num_tokens + sum(int(s.ids.numel()) for s in self.segments)

    def inputs(self) -> PromptInputs:
        """What the engine continues: the prompt itself before the first turn (so episodes share it), then the
        whole sequence so far."""
        return self.prompt if not self.segments else sequence_inputs(self.prompt, self.segments, for_scoring=False)

    def finish(self, reason: str) -> None:
        """End the episode; ``turns[-1]["end"]`` says why (``done``, ``max_turns``, ``max_total_tokens``)."""
        self.done, self.end, self.kv = True, reason, None
        self.turns[-1]["end"] = reason


@AGENT_LOOPS.register("multi_turn")
class MultiTurnLoop(AgentLoop):
    """``env_factory()`` makes one episode's environment; ``max_turns`` model turns at most; ``system_suffix`` is
    appended to every prompt's system turn (a tool suite's descriptions); an episode stops before a turn whose
    prompt plus ``max_new_tokens`` would pass ``max_total_tokens``; ``reuse_cache`` keeps each episode's KV cache
    across turns when the engine can (``supports_kv_reuse``)."""

    capabilities = MULTI_TURN

    def __init__(self, processor, env_factory: Callable[[], Environment], max_turns: int = 4, system_suffix: str = "",
                 max_total_tokens: Optional[int] = None, reuse_cache: bool = True):
        if max_turns < 1:
            raise ValueError(f"multi_turn: max_turns must be >= 1, got {max_turns}")
        self.processor, self.env_factory, self.max_turns = processor, env_factory, max_turns
        self.system_suffix, self.max_total_tokens, self.reuse_cache = system_suffix, max_total_tokens, reuse_cache
        self.im_end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")

    def run(self, engine: RolloutEngine, requests: List[RolloutRequest], params: SamplingParams) -> List[Trajectory]:
        if not getattr(engine, "supports_sequences", False):
            raise ValueError(f"rollout.agent_loop=multi_turn: the {type(engine).__name__} cannot continue a sequence "
                             f"with media inserted mid-trajectory; use {advice('multi_turn_engine')}")
        episodes = self._reset(requests)
        reuse = self.reuse_cache and getattr(engine, "supports_kv_reuse", False)
        with getattr(engine, "awake", contextlib.nullcontext)():
            for turn in range(self.max_turns):
                if turn > 0 and self.max_total_tokens is not None:
                    for e in episodes:
                        if not e.done and e.num_tokens + params.max_new_tokens > self.max_total_tokens:
                            e.finish("max_total_tokens")
                active = [e for e in episodes if not e.done]
                if not active:
                    break
                order, trajs = self._generate(engine, active, requests, params, reuse)
                self._record(order, trajs, turn)
        return [self._trajectory(e, requests[e.request]) for e in episodes]

    def _generate(self, engine, active: List[Episode], requests: List[RolloutRequest], params: SamplingParams,
                  reuse: bool):
        """One model turn of every active episode, in one engine call: from their kept caches (``reuse``; the first
        turn starts them), or from their whole sequences."""
        if reuse and active[0].kv is not None:
            return active, engine.continue_episodes([e.kv for e in active], [e.tail() for e in active], params,
                                                    [requests[e.request] for e in active])
        reqs, order = self._turn_requests(active, requests)
        if not reuse:
            return order, engine.generate(reqs, params)
        trajs, states = engine.start_episodes(reqs, params)
        for e, st in zip(order, states):
            e.kv = st
        return order, trajs

    def _record(self, order: List[Episode], trajs: List[Trajectory], turn: int) -> None:
        """Append each episode's model turn, ask its environment, append the observations."""
        pending = []
        for e, t in zip(order, trajs):
            e.segments.append(Segment("model", t.response_ids, logprobs=t.logprobs,
                                      mm_token_type_ids=torch.zeros_like(t.response_ids), text=t.text))
            e.turns.append({"turn": turn, "model_text": t.text, "model_tokens": int(t.response_ids.numel())})
            if t.truncated:
                e.truncated = e.turns[-1]["truncated"] = True
            if turn == self.max_turns - 1:
                e.finish("max_turns")
            else:
                t0 = time.perf_counter()
                obs = e.env.step(t.text)
                e.turns[-1]["env_s"] = time.perf_counter() - t0
                if obs is None:
                    e.finish("done")
                else:
                    pending.append((e, obs, t.truncated))
        self._observe(pending)

    # ---- stages -------------------------------------------------------------------------------------------------
    def _reset(self, requests: List[RolloutRequest]) -> List[Episode]:
        episodes, firsts = [], []
        for ri, req in enumerate(requests):
            for j in range(req.n):
                env = self.env_factory()
                firsts.append(env.reset(req.sample, req.inputs.media))
                episodes.append(Episode(ri, j, env, sample_id=req.sample_id, prompt=req.inputs))
        own = [(e, o) for e, o in zip(episodes, firsts) if o is not None]
        if own:  # the environment's first observation is the prompt: one processor call for all of them
            texts = [self._system(chat_text(self.processor, [_message(o)])) for _, o in own]
            medias = [o.media if o.media is not None else _empty_media() for _, o in own]
            for (e, o), p in zip(own, encode_texts(self.processor, texts, medias)):
                e.prompt = p
                e.turns.append({"turn": -1, "observation": o.text, **o.info})
        kept = [e for e, o in zip(episodes, firsts) if o is None]
        if kept and self.system_suffix:  # the step's prompts, with the suffix in their system turn (one call)
            shared = list({id(e.prompt): e.prompt for e in kept}.values())
            new = encode_texts(self.processor, [self._system(p.text) for p in shared],
                               [p.media if p.media is not None else _empty_media() for p in shared])
            swap = {id(p): q for p, q in zip(shared, new)}
            for e in kept:
                e.prompt = swap[id(e.prompt)]
        return episodes

    def _system(self, text: str) -> str:
        """``text`` (a templated prompt) with ``system_suffix`` at the end of its leading system turn; a prompt without
        one (Qwen3-VL's template adds no default system turn) gets a system turn holding the suffix alone."""
        if not self.system_suffix:
            return text
        head = "<|im_start|>system\n"
        if text.startswith("<|im_start|>") and not text.startswith(head):
            return head + self.system_suffix.lstrip("\n") + "<|im_end|>\n" + text
        if not text.startswith(head) or "<|im_end|>" not in text:
            raise ValueError("multi_turn: the prompt does not start with a system turn; cannot add the tool list")
        i = text.index("<|im_end|>")
        return text[:i] + self.system_suffix + text[i:]

    @staticmethod
    def _turn_requests(active: List[Episode], requests: List[RolloutRequest]):
        """One request per run of consecutive episodes continuing the same inputs object (first turn from a shared
        prompt: one request with ``n`` samples), else one request per episode."""
        reqs: List[RolloutRequest] = []
        order: List[Episode] = []
        last = None
        for e in active:
            inputs = e.inputs()
            if last is not None and inputs is last.inputs:
                last.n += 1
            else:
                src = requests[e.request]
                last = RolloutRequest(inputs=inputs, n=1, sample_id=src.sample_id, group_id=src.group_id,
                                      view=src.view, role=src.role, expected=src.expected, sample=src.sample,
                                      meta=dict(src.meta))
                reqs.append(last)
            order.append(e)
        return reqs, order

    def _observe(self, pending) -> None:
        """Append each observation as a masked segment (one batched processor call for the turn); a truncated
        model turn gets its closing ``<|im_end|>`` at the head of that segment."""
        if not pending:
            return
        texts = [observation_text(self.processor, o) for _, o, _ in pending]
        medias = [o.media if o.media is not None else _empty_media() for _, o, _ in pending]
        close = torch.tensor([self.im_end], dtype=torch.long)
        try:
            encoded = encode_texts(self.processor, texts, medias)
        except Exception as err:  # name the episodes instead of a processor stack trace
            who = ", ".join(sorted({f"{e.sample_id} (turn {e.turns[-1]['turn']})" for e, _, _ in pending}))
            raise ValueError(f"multi_turn: the processor rejected the observations of {who}: "
                             f"{type(err).__name__}: {str(err)[:300]}") from err
        for (e, o, cut), enc in zip(pending, encoded):
            ids, types = enc.input_ids, _types(enc)
            if cut:
                ids, types = torch.cat([close.to(ids.dtype), ids]), torch.cat([types.new_zeros(1), types])
            seg = Segment("env", ids, mm_token_type_ids=types, vision=enc.vision, text=o.text, media=o.media)
            e.segments.append(seg)
            e.turns[-1].update({"observation": o.text, "role": o.role, "obs_tokens": int(seg.ids.numel()),
                                "media_tokens": int((seg.mm_token_type_ids != 0).sum()), **o.info})

    @staticmethod
    def _trajectory(e: Episode, req: RolloutRequest) -> Trajectory:
        segs = e.segments
        resp = torch.cat([s.ids for s in segs])
        lps = torch.cat([s.logprobs if s.trained else torch.zeros(s.ids.numel()) for s in segs])
        mask = torch.cat([torch.full((s.ids.numel(),), s.trained, dtype=torch.bool) for s in segs])
        last_text = next(s.text for s in reversed(segs) if s.trained)
        return Trajectory(
            sample_id=req.sample_id, group_id=req.group_id, view=req.view, role=req.role,
            prompt_ids=e.prompt.input_ids, response_ids=resp, logprobs=lps, loss_mask=mask, text=last_text,
            truncated=e.truncated, turns=e.turns, expected=req.expected, inputs_key=e.request,
            pack_id=e.pack, segments=segs, sequence=sequence_inputs(e.prompt, segs),
        )
