"""Rollout loops: what drives the engine during a step (``rollout.agent_loop``).

- ``single_turn``: one ``engine.generate(requests, params)`` call, one response per sample (today's fast path:
  each prompt is prefilled once and its ``n`` responses decoded side by side; scoring shares the prompt too).
- ``multi_turn`` (``mmrl.rollout.agent_loop_multi``): an ``Environment`` per episode answers each model turn with
  an ``Observation`` (text, optionally an image or a video inserted mid-trajectory) until it says the episode is
  done; the engine generates each turn. A trajectory is then a list of segments (model tokens, trained;
  observation tokens, masked) with the inputs of its whole interleaved sequence for the scorer.

A loop is a class registered here, built by ``build_agent_loop(name, **kwargs)``; an unknown name is an error
that lists the known ones.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from mmrl.data.schema import Media, Sample, Trajectory
from mmrl.registry import Registry
from mmrl.rollout.base import RolloutEngine, RolloutRequest, SamplingParams

AGENT_LOOPS = Registry("agent loop")


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


class AgentLoop(ABC):
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
    from mmrl.rollout import agent_loop_multi  # noqa: F401  (registers multi_turn)
    from mmrl.stream import loop  # noqa: F401  (registers stream)

    return AGENT_LOOPS.get(name)(**kwargs)


def agent_loop_names() -> List[str]:
    from mmrl.rollout import agent_loop_multi  # noqa: F401
    from mmrl.stream import loop  # noqa: F401

    return AGENT_LOOPS.names()
