"""Reward registry. A reward function sees the samples, completions, views and media info, never files.

Signature: ``fn(ctx: list[RewardContext], **params) -> list[float] | dict[str, list[float]]``; a dict returns
several named components: if one is named like the function, only it enters the total (the others are logged),
else all of them are summed. ``compute_rewards`` calls every configured function, checks each value, and
returns the components plus their weighted total.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from mmrl.data.schema import Sample, Trajectory
from mmrl.errors import RewardError
from mmrl.registry import Registry

REWARDS = Registry("reward", builtins={
    "mmrl.rewards.builtin": ("accuracy", "format", "length"), "mmrl.rewards.reasoning": ("answer_tag_format",),
    "mmrl.rewards.bpo_contract": ("bpo_contract",), "mmrl.rewards.coin_flip": ("coin_flip", "dspo_coin_flip", "stream_coin_flip"),
    "mmrl.rewards.dspo_rewards": ("dspo_accuracy", "dspo_div", "dspo_evidence", "dspo_format"),
    "mmrl.rewards.tool_use": ("seek_iou", "tool_format"), "mmrl.rewards.stream": ("stream",),
    "mmrl.rewards.tgrpo_length": ("tgrpo_length",),
})


@dataclass
class RewardContext:
    sample: Sample
    trajectory: Trajectory
    candidates: List[str]  # the candidates shown in the prompt (may include an abstention option)
    view: str = "original"
    role: str = "anchor"
    expected: Optional[str] = None  # gold letter under the view, "abstain", or None (unknown)
    media_info: Dict[str, Any] = field(default_factory=dict)  # e.g. num_frames, size, timestamps

    @property
    def letters(self) -> str:
        from mmrl.data.schema import LETTERS

        return LETTERS[: len(self.candidates)]


@dataclass
class RewardSpec:
    name: str
    weight: float = 1.0
    params: Dict[str, Any] = field(default_factory=dict)


def compute_rewards(specs: Sequence[RewardSpec], ctx: List[RewardContext]) -> tuple[Dict[str, List[float]], List[float]]:
    """Components by name and the weighted total per trajectory. A function that raises or returns NaN fails
    the step with the function's name and the sample id."""
    comps: Dict[str, List[float]] = {}
    total = [0.0] * len(ctx)
    for spec in specs:
        fn = REWARDS.get(spec.name)
        try:
            res = fn(ctx, **spec.params)
        except Exception as e:
            raise RewardError(f"reward '{spec.name}' raised {type(e).__name__}: {e} "
                              f"(batch samples: {', '.join(sorted({c.sample.id for c in ctx}))[:300]})") from e
        named = res if isinstance(res, dict) else {spec.name: res}
        for key, values in named.items():
            if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
                raise RewardError(f"reward '{spec.name}' returned {type(values).__name__} {str(values)[:60]!r}; "
                                  f"expected a list of {len(ctx)} numbers (one per completion)")
            values = list(values)
            if len(values) != len(ctx):
                raise RewardError(f"reward '{spec.name}' returned {len(values)} values for {len(ctx)} completions")
            for c, v in zip(ctx, values):
                if isinstance(v, (str, bytes)) or not _is_number(v):
                    raise RewardError(f"reward '{spec.name}' returned {v!r} ({type(v).__name__}) for sample "
                                      f"'{c.sample.id}' (view {c.view}); expected a number")
                if v is None or not math.isfinite(float(v)):
                    raise RewardError(f"reward '{spec.name}' returned {v} for sample '{c.sample.id}' (view {c.view})")
            comps[key] = [float(v) for v in values]
            if key == spec.name or spec.name not in named:
                total = [t + spec.weight * float(v) for t, v in zip(total, values)]
    return comps, total


def _is_number(v) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True
