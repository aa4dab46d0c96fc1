"""Tool suites: ``tools/*.yaml`` names the tools an episode may call and its budgets (``rollout.tools``).

    max_turns: 4            # model turns per episode
    prompt: full            # the system turn's tool list: full (Qwen2.5's <tools> JSON) or compact (one line a tool)
    max_total_tokens: 4096  # an episode stops before a turn that could pass this many tokens
    budget: {max_calls: 3, max_media_tokens: 512, max_frames: 8, frame_max_pixels: 12544}
    tools:
      - name: video_seek    # a registered tool ...
      - name: mypkg.tools:count_blinks   # ... or module:function (with `schema:` if it is a plain function)
    retriever: {name: single_step, model: tiny}   # visual_retrieve's backend (mmrl.tools.retrieve)

Every key is checked when the file is loaded; a bad one is a ``ConfigError`` naming the file and the key.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mmrl.errors import ConfigError
from mmrl.tools.episode import ToolBudget
from mmrl.tools.registry import ToolSpec, resolve_tool
from mmrl.tools.retrieve import RetrieverConfig, check_retriever


PROMPTS = ("full", "compact")
CALL_FORMAT = '<tool_call>{"name": <function-name>, "arguments": <args-json-object>}</tool_call>'


def _arg_types(schema: Dict[str, Any]) -> str:
    """``start: number, end: number, nframes?: integer``: a schema's properties, optional ones marked ``?``."""
    required = set(schema.get("required", []))
    props = schema.get("properties", {})
    return ", ".join(f"{k}{'' if k in required else '?'}: {v.get('type', 'any')}" for k, v in props.items())


@dataclass
class ToolEntry:
    name: str = ""
    schema: Optional[Dict[str, Any]] = None
    description: str = ""


@dataclass
class SuiteConfig:
    description: str = ""
    prompt: str = "full"  # PROMPTS: how the system turn lists the tools
    max_turns: int = 4
    max_total_tokens: Optional[int] = None
    budget: ToolBudget = field(default_factory=ToolBudget)
    tools: List[ToolEntry] = field(default_factory=list)
    retriever: Optional[RetrieverConfig] = None  # visual_retrieve's backend (tools/retrieval.yaml)


@dataclass
class ToolSuite:
    path: str
    config: SuiteConfig
    tools: Dict[str, ToolSpec]
    retriever: Optional[Any] = None  # the RetrievalService of ``config.retriever``

    def system_block(self) -> str:
        """The tool list and calling convention appended to the system turn. ``prompt: full``: as Qwen2.5's chat
        template renders ``tools`` (each signature's JSON inside ``<tools></tools>``); ``prompt: compact``: one line
        per tool, ``name(arg: type, optional?: type)``, then the same ``<tool_call>{json}</tool_call>`` format."""
        if self.config.prompt == "compact":
            lines = "\n".join(f"{name}({_arg_types(t.schema)})" for name, t in self.tools.items())
            return f"\n\n# Tools\n{lines}\nCall one as {CALL_FORMAT}"
        sigs = "\n".join(json.dumps(t.signature()) for t in self.tools.values())
        return ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" + sigs +
                "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
                "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                "<args-json-object>}\n</tool_call>")


def load_suite(path: str) -> ToolSuite:
    try:
        raw = OmegaConf.load(path)
    except FileNotFoundError:
        raise ConfigError(f"tool suite not found: {path}") from None
    try:
        cfg: SuiteConfig = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SuiteConfig), raw))
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        raise ConfigError(f"{path}: " + (f"key '{key}': " if key else "") + str(e).splitlines()[0]) from None
    if "factor" in (raw.get("budget") or {}):
        raise ConfigError(f"{path}: key 'budget.factor' is not a suite setting: the resize factor comes from the "
                          f"model's processor")
    if cfg.prompt not in PROMPTS:
        raise ConfigError(f"{path}: key 'prompt' = {cfg.prompt!r}; expected one of {', '.join(PROMPTS)}")
    if not cfg.tools:
        raise ConfigError(f"{path}: key 'tools' lists no tool")
    checks = {"max_turns": cfg.max_turns, "budget.max_calls": cfg.budget.max_calls,
              "budget.max_frames": cfg.budget.max_frames, "budget.max_call_chars": cfg.budget.max_call_chars,
              "budget.frame_max_pixels": cfg.budget.frame_max_pixels - cfg.budget.frame_min_pixels + 1}
    for key, value in checks.items():
        if value < 1:
            raise ConfigError(f"{path}: key '{key}' must be >= 1" + (" (and frame_max_pixels >= frame_min_pixels)"
                                                                     if "pixels" in key else ""))
    tools: Dict[str, ToolSpec] = {}
    for i, entry in enumerate(cfg.tools):
        try:
            spec = resolve_tool(entry.name, entry.schema, entry.description)
        except Exception as e:  # unknown name, failed import, invalid JSON schema
            raise ConfigError(f"{path}: key 'tools.{i}.name' = {entry.name!r}: {str(e).splitlines()[0]}") from None
        if spec.name in tools:
            raise ConfigError(f"{path}: key 'tools.{i}.name': tool '{spec.name}' is listed twice")
        tools[spec.name] = spec
    return ToolSuite(path=str(path), config=cfg, tools=tools, retriever=check_retriever(path, cfg, tools))
