"""Tool episodes: the ``multi_turn`` loop with a ``ToolEnvironment`` per episode, built from a suite
(``rollout.tools: tools/video_seek.yaml``).

The suite's tool list goes into every prompt's system turn in Qwen2.5's format; each model turn with a
``<tool_call>{json}</tool_call>`` is checked and run on the episode's own state (``mmrl.tools.calls``) and answered
with a ``<tool_response>`` turn that carries the returned frames or image, or the error the call raised. A turn
without a call is the answer: the episode ends. Every call is recorded in the trajectory's ``turns``.
"""
from __future__ import annotations

import copy
from typing import Optional

from mmrl.data.schema import Media, Sample
from mmrl.errors import ConfigError
from mmrl.media.inputs import resize_factor
from mmrl.rollout.agent_loop import AgentLoop, Environment, Observation, agent_loop_names, build_agent_loop, loop_class
from mmrl.tools.calls import run_call
from mmrl.tools.episode import EpisodeState
from mmrl.tools.suite import ToolSuite, load_suite

RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>\n", "\n</tool_response>"


class ToolEnvironment(Environment):
    def __init__(self, suite: ToolSuite, factor: Optional[int] = None):
        self.suite = suite
        self.factor = factor  # the model's resize factor (returned frames are resized to multiples of it)
        self.state: Optional[EpisodeState] = None

    def reset(self, sample: Optional[Sample], media: Optional[Media]) -> None:
        budget = copy.copy(self.suite.config.budget)
        if self.factor is not None:
            budget.factor = self.factor
        self.state = EpisodeState(sample=sample, media=media, budget=budget, retriever=self.suite.retriever)
        return None  # the step's prompt (with the tool list in its system turn) opens the episode

    def step(self, model_text: str) -> Optional[Observation]:
        rec = run_call(model_text, self.suite.tools, self.state)
        if rec is None:
            return None
        if rec.valid:
            return Observation(prefix=RESPONSE_OPEN, text=rec.output.text + RESPONSE_CLOSE, media=rec.output.media,
                               info=rec.info())
        return Observation(prefix=RESPONSE_OPEN, text=f"error ({rec.reason}): {rec.message}{RESPONSE_CLOSE}",
                           info=rec.info())


def tool_loop(processor, suite: ToolSuite) -> AgentLoop:
    c = suite.config
    factor = resize_factor(processor)
    return build_agent_loop("multi_turn", processor=processor, env_factory=lambda: ToolEnvironment(suite, factor),
                            max_turns=c.max_turns, system_suffix=suite.system_block(),
                            max_total_tokens=c.max_total_tokens)


def check_rollout_config(rollout_cfg) -> str:
    """One line describing the rollout loop (for the run plan). ``rollout.agent_loop`` must name a registered loop
    and ``rollout.tools`` a loadable suite, else ``ConfigError`` naming the key (with the known loop names).
    Cheap: no model is loaded."""
    known = agent_loop_names()
    name = rollout_cfg.agent_loop
    if name not in known and ":" not in name:
        raise ConfigError(f"config key 'rollout.agent_loop' = {name!r}; expected one of {', '.join(known)} "
                          f"(or module:Class)")
    cls = loop_class(name)
    if cls.capabilities.tools != "suite" or not rollout_cfg.tools:
        return cls.describe(rollout_cfg)
    suite = load_suite(rollout_cfg.tools)
    c, b = suite.config, suite.config.budget
    return (f"rollout loop: {name} with {rollout_cfg.tools} ({', '.join(suite.tools)}): <= {c.max_turns} turns, "
            f"<= {b.max_calls} calls, <= {b.max_media_tokens} tool media tokens per episode")


def agent_loop_from_config(rollout_cfg, processor) -> AgentLoop:
    """``rollout.agent_loop`` with what it needs: a loop that runs a tool suite (``multi_turn``) runs tool episodes of
    the ``rollout.tools`` suite; any other builds itself from the config (``AgentLoop.from_config``)."""
    cls = loop_class(rollout_cfg.agent_loop)
    if cls.capabilities.tools == "suite":
        return tool_loop(processor, load_suite(rollout_cfg.tools))
    return cls.from_config(rollout_cfg, processor)
