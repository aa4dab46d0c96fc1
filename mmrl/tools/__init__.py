"""Tools for multi-turn rollouts: a registry of functions with JSON-schema arguments run on the episode's own state,
suites with budgets (``tools/*.yaml``), the checked call path and the built-in tools."""
from mmrl.tools.registry import TOOLS, ToolError, ToolOutput, ToolSpec, resolve_tool, tool
from mmrl.tools.episode import EpisodeState, StreamMemory, ToolBudget, media_tokens
from mmrl.tools.calls import CallRecord, run_call
from mmrl.tools.suite import ToolSuite, load_suite

__all__ = ["TOOLS", "ToolError", "ToolOutput", "ToolSpec", "resolve_tool", "tool", "EpisodeState", "StreamMemory", "ToolBudget",
           "media_tokens", "CallRecord", "run_call", "ToolSuite", "load_suite"]
