"""Rollout loops: what drives the engine during a step (``rollout.agent_loop``).

- ``single_turn``: one ``engine.generate(requests, params)`` call, one response per sample (today's fast path:
  each prompt is prefilled once and its ``n`` responses decoded side by side; scoring shares the prompt too).
- ``multi_turn`` (``mmrl.rollout.agent_loop_multi``): an ``Environment`` per episode answers each model turn with
  an ``Observation`` (text, optionally an image or a video inserted mid-trajectory) until it says the episode is
  done; the engine generates each turn. A trajectory is then a list of segments (model tokens, trained;
  observation tokens, masked) with the inputs of its whole interleaved sequence for the scorer.

A loop is a class registered here, built by ``build_agent_loop(name, **kwargs)`` (or, for a run,
``loop_class(name).from_config(rollout_cfg, processor)``); an unknown name is an error that lists the known ones.
A loop declares its ``capabilities`` (``LoopCapabilities``); the config check, the trainer, the step and SFT ask them
and never test a loop's name.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from mmrl.data.schema import Media, Sample, Trajectory
from mmrl.registry import Registry
from mmrl.rollout.base import RolloutEngine, RolloutRequest, SamplingParams

AGENT_LOOPS = Registry("agent loop", builtins={
    __name__: ("single_turn",), "mmrl.rollout.agent_loop_multi": ("multi_turn",), "mmrl.stream.loop": ("stream",),
})


@dataclass
class Observation:
    """What the environment shows the model next: a turn of ``role`` with ``prefix``, at most one image or video
    (``media``; decoded and sized by the environment, e.g. frames a tool returned), then ``text``; and facts to record (``info``)."""

    text: str
    media: Optional[Media] = None
    role: str = "user"
    prefix: str = ""  # text before the media (e.g. "<tool_response>\n")
    info: Dict[str, Any] = field(default_factory=dict)  # recorded in the trajectory's turn (e.g. a tool call)


class Environment(ABC):
    """One episode's world. ``reset`` starts the episode on the sample and the media of its view and returns the
    first observation: ``None`` keeps the request's prompt (built by the step from the sample and its view) as the
    first turn; an ``Observation`` replaces it (e.g. a coarse overview of a long video). ``step`` gets the text of
    the model's last turn and returns the next observation, or ``None`` when the episode is over."""

    @abstractmethod
    def reset(self, sample: Optional[Sample], media: Optional[Media]) -> Optional[Observation]:
        ...

    @abstractmethod
    def step(self, model_text: str) -> Optional[Observation]:
        ...


@dataclass(frozen=True)
class LoopCapabilities:
    """What a rollout loop supports and needs (``AgentLoop.capabilities``)."""

    multi_turn: bool = False  # trajectories hold observation turns: no re-scoring under an intervened view
    backends: Tuple[str, ...] = ("torch", "deepspeed")  # train.backend values it runs under
    engines: Tuple[str, ...] = ("hf", "vllm")  # rollout.engine values it runs with
    seed_per_group: bool = True  # rollout.seed_per_group may be on
    tools: str = "none"  # what rollout.tools names: none (the key is refused) | suite (required) | stream (optional)
    sft_turns: bool = False  # sft.turns (scripted tool calls) run in its rollout.tools suite
    sft_teacher: bool = False  # SFT trains on the loop's teacher trajectories (mmrl.train.sft.teacher_items)
    tool_episodes: bool = False  # tool episodes of the rollout.tools suite: held-out eval runs them, the step logs them
    metrics: Tuple[Callable[[List[Trajectory]], Dict[str, float]], ...] = ()  # per-step metrics of its trajectories


def _tool_metrics(trajs: List[Trajectory]) -> Dict[str, float]:
    from mmrl.tools.metrics import tool_metrics

    return tool_metrics(trajs)


# the multi_turn loop's (mmrl.rollout.agent_loop_multi.MultiTurnLoop: tool episodes of a rollout.tools suite)
MULTI_TURN = LoopCapabilities(multi_turn=True, backends=("torch",), seed_per_group=False, tools="suite",
                              sft_turns=True, tool_episodes=True, metrics=(_tool_metrics,))


class AgentLoop(ABC):
    capabilities = LoopCapabilities()

    @classmethod
    def from_config(cls, rollout_cfg, processor) -> "AgentLoop":
        """The loop a run with ``rollout_cfg`` uses (a loop with needs of its own overrides this)."""
        return cls()

    @classmethod
    def describe(cls, rollout_cfg) -> str:
        """One line of the run plan about the loop."""
        return f"rollout loop: {rollout_cfg.agent_loop}"

    @abstractmethod
    def run(self, engine: RolloutEngine, requests: List[RolloutRequest], params: SamplingParams) -> List[Trajectory]:
        """``sum(r.n for r in requests)`` trajectories, ``n`` consecutive per request, in request order;
        ``inputs_key`` indexes ``requests``."""


@AGENT_LOOPS.register("single_turn")
class SingleTurnLoop(AgentLoop):
    """One ``engine.generate`` call: ``n`` responses per prompt, each prompt prefilled once."""

    def run(self, engine, requests, params):
        return engine.generate(requests, params) if requests else []


def build_agent_loop(name: str, **kwargs) -> AgentLoop:
    return AGENT_LOOPS.get(name)(**kwargs)


def agent_loop_names() -> List[str]:
    return AGENT_LOOPS.names()


def loop_class(name: str) -> type:
    """The registered (or ``module:Class``) loop class ``name``."""
    return AGENT_LOOPS.get(name)
