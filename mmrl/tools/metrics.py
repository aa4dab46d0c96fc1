"""Per-step tool metrics from the trajectories' ``turns`` (each tool call's turn carries ``tool``, ``valid`` and,
when refused, ``reason``; see ``mmrl.tools.calls``). Single-turn trajectories give no metrics."""
from __future__ import annotations

from typing import Dict, List

from mmrl.tools.calls import REASONS


def tool_metrics(trajs: List) -> Dict[str, float]:
    """``tools/calls_per_episode``, ``tools/invalid_frac`` (refused calls / calls), ``tools/invalid/<reason>``
    (calls refused for that reason / calls, every reason always present), ``tools/turns_per_episode``,
    ``tools/media_tokens_per_episode`` (visual tokens the tools returned)."""
    episodes = [t for t in trajs if t.segments]
    if not episodes:
        return {}
    calls = [turn for t in episodes for turn in t.turns if "tool" in turn]
    n_calls, n = len(calls), len(episodes)
    out = {
        "tools/calls_per_episode": n_calls / n,
        "tools/invalid_frac": sum(not c["valid"] for c in calls) / max(n_calls, 1),
        "tools/turns_per_episode": sum(sum(s.trained for s in t.segments) for t in episodes) / n,
        "tools/media_tokens_per_episode": sum(int(c.get("call_media_tokens", 0)) for c in calls) / n,
    }
    for reason in REASONS:
        out[f"tools/invalid/{reason}"] = sum(c.get("reason") == reason for c in calls) / max(n_calls, 1)
    return out
