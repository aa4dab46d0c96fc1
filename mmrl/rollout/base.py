"""The rollout-engine interface: batched generation over prompts x n samples.

Callers build ``RolloutRequest``s (processor inputs from ``mmrl.media.inputs.build_prompt_inputs`` plus the
number of samples) and receive one ``Trajectory`` per sample, in request order. Backends: ``hf``
(``transformers.generate`` semantics, batched with a shared prompt prefill) and ``vllm`` (GPU, optional).
An engine generates ONE model turn per sample. Multi-turn episodes (``mmrl.rollout.agent_loop_multi``) call
``generate`` once per turn with each episode's whole sequence so far (a ``PromptInputs`` holding every medium,
those inserted mid-trajectory included) as the prompt; only engines with ``supports_sequences`` (the HF and vLLM
engines) accept that, and the multi-turn loop refuses the others. The HF engine keeps each episode's KV cache across
turns instead (``supports_kv_reuse``, ``mmrl.rollout.hf_turns``).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from mmrl.data.schema import Sample, Trajectory
from mmrl.media.inputs import PromptInputs
from mmrl.registry import Registry

ENGINES = Registry("rollout engine", builtins={"mmrl.rollout.hf_engine": ("hf",),
                                               "mmrl.rollout.vllm_engine": ("vllm",)})  # vllm: raises without vLLM


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 8
    greedy: bool = False


@dataclass
class RolloutRequest:
    inputs: PromptInputs
    n: int = 1
    sample_id: str = "?"
    group_id: int = 0
    view: str = "original"
    role: str = "anchor"
    expected: str | None = None
    meta: Dict[str, Any] = field(default_factory=dict)
    sample: Optional[Sample] = None  # the sample itself, for environments of multi-turn episodes


class RolloutEngine(ABC):
    """Generates responses; ``sync_weights`` is called after every optimizer step."""

    supports_sequences = False  # True: a prompt may be a whole multi-turn sequence with several media

    @abstractmethod
    def generate(self, requests: List[RolloutRequest], params: SamplingParams) -> List[Trajectory]:
        ...

    def sync_weights(self, model, everything: bool = False) -> None:  # the HF engine shares the module: nothing to do
        return None


def build_engine(name: str, **kwargs) -> RolloutEngine:
    return ENGINES.get(name)(**kwargs)
