"""The ``stream`` agent loop: ``multi_turn`` episodes whose environment is a ``StreamEnvironment`` (one stream
block per episode; ``rollout.agent_loop: stream``, ``rollout.tools: tools/streaming.yaml``).

Trajectories are ordinary multi-turn trajectories (model turns trained: think, action and memory tokens;
observations masked: chunks, recalled frames, questions), so the scorer and the update use them unchanged. Each
carries its episode's ``EpisodeRecord`` (``record_of``), with the oracle's decisions on the same block
(``teacher_actions``) when ``with_teacher``. ``teacher_trajectory`` renders the oracle's episode as such a
trajectory (a replay engine feeds the teacher's turns through the same loop), for masked SFT.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch

from mmrl.data.schema import Sample, Trajectory
from mmrl.media.inputs import PromptInputs, resize_factor
from mmrl.rollout.agent_loop import AGENT_LOOPS, LoopCapabilities
from mmrl.rollout.agent_loop_multi import MultiTurnLoop
from mmrl.rollout.base import RolloutEngine, RolloutRequest, SamplingParams
from mmrl.stream.config import DEFAULT_PATH, StreamConfig, load_stream_config
from mmrl.stream.env import StreamEnvironment
from mmrl.stream.metrics import stream_metrics
from mmrl.stream.record import RECORD_KEY, EpisodeRecord, record_of  # noqa: F401  (RECORD_KEY, record_of: re-exported)
from mmrl.stream.teacher import teacher_episode, teacher_texts
from mmrl.tools.metrics import tool_metrics



def token_counter(processor):
    """Tokens of a text under the model's tokenizer (the memory budget's unit)."""
    tok = processor.tokenizer
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


@AGENT_LOOPS.register("stream")
class StreamLoop(MultiTurnLoop):
    """Streaming episodes: one stream block each, the model acting after every chunk (silence, response, recall),
    its memory rewritten at the block's end (``StreamEnvironment``, ``tools/streaming.yaml``)."""

    capabilities = LoopCapabilities(multi_turn=True, backends=("torch",), engines=("hf",), seed_per_group=False,
                                    tools="stream", sft_teacher=True, metrics=(tool_metrics, stream_metrics))

    @classmethod
    def from_config(cls, rollout_cfg, processor) -> "StreamLoop":
        return stream_loop_from_config(rollout_cfg, processor)

    @classmethod
    def describe(cls, rollout_cfg) -> str:
        path = rollout_cfg.tools or DEFAULT_PATH
        c = load_stream_config(path)
        return (f"rollout loop: stream with {path}: blocks of {c.block_chunks} x {c.chunk_seconds:g} s chunks at "
                f"{c.fps:g} fps, window {c.window_chunks} chunks, memory <= {c.memory_budget} tokens, <= "
                f"{c.max_turns} turns per episode")

    def __init__(self, processor, config: Optional[StreamConfig] = None, with_teacher: bool = True):
        self.cfg = config or load_stream_config(DEFAULT_PATH)
        self.count, self.with_teacher = token_counter(processor), with_teacher
        self._teacher: Dict[str, list] = {}  # sample id -> the oracle's decisions (per run)
        factor = resize_factor(processor)  # frames at the model's patch x merge size (32: Qwen3-VL)
        super().__init__(processor, env_factory=lambda: StreamEnvironment(self.cfg, self.count, factor=factor),
                         max_turns=self.cfg.max_turns + 1, max_total_tokens=self.cfg.max_total_tokens)
        # + 1: the multi_turn loop ends at its max_turns-th turn without passing it to the environment; the
        # environment ends every episode itself after the compaction (at most cfg.max_turns model turns)

    def _trajectory(self, e, req: RolloutRequest) -> Trajectory:
        t = MultiTurnLoop._trajectory(e, req)
        rec: EpisodeRecord = e.env.record
        rec.end = e.end
        if self.with_teacher:  # once per sample and run: the n episodes of a group share the oracle's
            if req.sample_id not in self._teacher:
                self._teacher[req.sample_id] = teacher_episode(req.sample, self.cfg, self.count).subturns
            rec.teacher_actions = self._teacher[req.sample_id]
        t.turns[-1][RECORD_KEY] = rec
        return t

    def run(self, engine: RolloutEngine, requests: List[RolloutRequest], params: SamplingParams) -> List[Trajectory]:
        self._teacher = {}
        return super().run(engine, requests, params)

    def run_samples(self, engine: RolloutEngine, samples: Sequence[Sample], params: SamplingParams,
                    n: int = 1) -> List[Trajectory]:
        """Episodes on stream samples directly (no step prompt: the environment's first observation opens them)."""
        empty = PromptInputs(input_ids=torch.zeros(0, dtype=torch.long))
        reqs = [RolloutRequest(inputs=empty, n=n, sample_id=s.id, group_id=i, sample=s) for i, s in enumerate(samples)]
        return self.run(engine, reqs, params)


def stream_loop_from_config(rollout_cfg, processor) -> StreamLoop:
    """``rollout.agent_loop: stream`` with ``rollout.tools`` naming the stream config (default
    ``tools/streaming.yaml``)."""
    return StreamLoop(processor, load_stream_config(rollout_cfg.tools or DEFAULT_PATH))


class ReplayEngine(RolloutEngine):
    """Plays given model turns (per sample id, in order) as if generated: the teacher's turns through the loop."""

    supports_sequences = True

    def __init__(self, processor, turns: Dict[str, List[str]]):
        self.tok = processor.tokenizer
        self.eos = self.tok.convert_tokens_to_ids("<|im_end|>")
        self.turns = {k: list(v) for k, v in turns.items()}

    def generate(self, requests: List[RolloutRequest], params: SamplingParams) -> List[Trajectory]:
        out = []
        for r in requests:
            for _ in range(r.n):
                queue = self.turns.get(r.sample_id)
                if not queue:
                    raise ValueError(f"replay: no teacher turn left for {r.sample_id}")
                text = queue.pop(0)
                ids = torch.tensor(self.tok(text, add_special_tokens=False)["input_ids"] + [self.eos])
                out.append(Trajectory(sample_id=r.sample_id, group_id=r.group_id, view=r.view, role=r.role,
                                      prompt_ids=r.inputs.input_ids, response_ids=ids,
                                      logprobs=torch.zeros(ids.numel()), loss_mask=torch.ones(ids.numel(), dtype=torch.bool),
                                      text=text, expected=r.expected))
        return out


def teacher_trajectory(processor, samples: Sequence[Sample], config: Optional[StreamConfig] = None
                       ) -> List[Trajectory]:
    """The oracle's episodes as multi-turn trajectories (teacher turns trained, observations masked)."""
    loop = StreamLoop(processor, config, with_teacher=False)
    turns = {s.id: teacher_texts(teacher_episode(s, loop.cfg, loop.count)) for s in samples}
    # the replay ignores max_new_tokens; the loop's token cap reads it
    trajs = loop.run_samples(ReplayEngine(processor, turns), samples, SamplingParams(max_new_tokens=1))
    for t in trajs:
        record_of(t).teacher = True
    return trajs
