"""Benchmark definitions as data: ``eval/<name>.yaml`` -> ``BenchmarkDef`` (the lmms-eval "task = YAML" idea).

A definition names the tasks (annotation file, video folder, reader, bound, mode), the prompt (system, user
template, options format, post prompt, assistant prefill, named templates), frame sampling, generation settings,
the answer parser and the aggregate. Unknown keys, wrong types and unknown enum values raise ``ConfigError``
naming the file and the key. ``EvalQuery`` is what a driver generates for: media ref + messages + prefill.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import yaml

from mmrl.data.schema import LETTERS, VideoRef
from mmrl.errors import ConfigError

EVAL_DIR = Path(__file__).resolve().parents[2] / "eval"  # the repo's top-level eval/ folder

READERS = ("video", "frame", "gif")
MODES = ("backward", "realtime", "forward")
PLACEMENTS = ("system", "user", "none")
AGGREGATES = ("micro", "lmms_answered", "ovo_official")
KINDS = ("mcq", "ovo")
GOLDS = ("answer", "gt_letter", "probe.count", "probe.type")
UNITS = ("items", "probes")


@dataclass
class TaskDef:
    name: str
    json: Optional[str] = None  # MVBench: annotation file under data.json_dir
    prefix: Optional[str] = None  # MVBench: video folder under data.video_dir
    reader: str = "video"  # video | frame (JPEG folder %05d.jpg from 1) | gif
    bound: bool = False  # items carry start/end seconds
    frame_fps: Optional[float] = None  # rate of a frame folder (MVBench tvqa: 3)
    mode: Optional[str] = None  # OVO: backward | realtime | forward
    template: Optional[str] = None  # key of prompt.templates
    template_args: List[str] = field(default_factory=list)  # formatted with the item's fields, options, probe
    gold: str = "answer"  # answer | gt_letter | probe.count | probe.type
    parser: Optional[str] = None  # overrides the benchmark's parser
    unit: str = "items"  # what accuracy is averaged over: items | probes
    weight_unit: Optional[str] = None  # what the weighted overall counts (WTI reading); default = unit


@dataclass
class PromptDef:
    system: str = ""
    system_placement: str = "system"  # system message | prepended to the user text | none
    user_template: str = "{question}\n{options}"  # str.format with question=, options=
    option_format: str = "({letter}) {option}\n"
    option_joiner: str = ""
    options_suffix: str = ""
    rstrip: bool = False  # right-strip the filled template before the post prompt
    post_prompt: str = ""
    prefill: str = ""  # assistant-turn text the model continues from
    return_prefix: str = ""  # prepended to the output before parsing (the prefill's tail)
    first_line_only: bool = False
    templates: Dict[str, str] = field(default_factory=dict)


@dataclass
class SamplingDef:
    num_segments: Optional[int] = None  # MVBench get_index segments
    use_bound: bool = True  # honour start/end of bound tasks
    frame_fps: float = 3.0  # default rate of frame folders
    max_frames: Optional[int] = None  # uniform sampling cap (OVO wrappers: 64)
    max_pixels: Optional[int] = None


@dataclass
class GenerationDef:
    max_new_tokens: int = 100
    do_sample: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    repetition_penalty: float = 1.0


@dataclass
class ChunkDef:
    start: float = 0.0
    end: str = "ceil"  # ceil(realtime) | exact
    cap_at_duration: bool = True
    chunk_name: str = "{qid}.mp4"  # file name of a pre-chunked prefix


@dataclass
class BenchmarkDef:
    name: str
    kind: str  # mcq | ovo
    protocol: str  # human-readable source of the protocol, printed in every report
    tasks: List[TaskDef]
    parser: str
    aggregate: str
    description: str = ""
    data: Dict[str, Any] = field(default_factory=dict)
    prompt: PromptDef = field(default_factory=PromptDef)
    sampling: SamplingDef = field(default_factory=SamplingDef)
    generation: GenerationDef = field(default_factory=GenerationDef)
    chunking: ChunkDef = field(default_factory=ChunkDef)
    path: Optional[str] = None

    def task(self, name: str) -> TaskDef:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(f"benchmark '{self.name}' has no task '{name}'; known: {', '.join(self.task_names())}")

    def task_names(self, mode: Optional[str] = None) -> List[str]:
        return [t.name for t in self.tasks if mode is None or t.mode == mode]

    def parser_for(self, task: str) -> str:
        return self.task(task).parser or self.parser


@dataclass
class EvalQuery:
    """One generation request: media, prompt parts, the gold answer and the parser that scores it."""

    id: str
    task: str
    video: VideoRef
    user: str
    system: str = ""
    prefill: str = ""
    gold: Any = None
    parser: str = ""
    meta: Dict[str, Any] = field(default_factory=dict)

    def messages(self) -> List[Dict[str, Any]]:
        """Qwen-VL chat messages (system if any; user = [video, text]). The prefill is not included."""
        video: Dict[str, Any] = {"type": "video", "video": self.video.path}
        for key, val in (("nframes", self.video.nframes), ("fps", self.video.fps),
                         ("max_pixels", self.video.max_pixels), ("video_start", self.video.start),
                         ("video_end", self.video.end)):
            if val is not None:
                video[key] = val
        msgs: List[Dict[str, Any]] = []
        if self.system:
            msgs.append({"role": "system", "content": [{"type": "text", "text": self.system}]})
        msgs.append({"role": "user", "content": [video, {"type": "text", "text": self.user}]})
        return msgs


# --- prompt helpers shared by the protocols ----------------------------------------------------------------------
def format_options(options: List[str], prompt: PromptDef) -> str:
    """``joiner.join(option_format.format(letter, option)) + suffix``; OVO gives ``"A. o0; B. o1;"``."""
    parts = [prompt.option_format.format(letter=LETTERS[i], option=o, index=i) for i, o in enumerate(options)]
    return prompt.option_joiner.join(parts) + prompt.options_suffix


def fill(template: str, args: List[Any] = (), **fields: Any) -> str:
    """``str.format`` with positional args (official ``{}`` templates) and named fields at once."""
    return template.format(*args, **fields)


# --- loading and validation --------------------------------------------------------------------------------------
_ENUMS = {"reader": READERS, "mode": MODES, "system_placement": PLACEMENTS, "aggregate": AGGREGATES,
          "kind": KINDS, "gold": GOLDS, "unit": UNITS, "weight_unit": UNITS, "end": ("ceil", "exact")}


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin is Union:
        return any(_type_ok(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if origin in (list, List):
        (inner,) = typing.get_args(tp) or (Any,)
        return isinstance(value, list) and all(_type_ok(v, inner) for v in value)
    if origin in (dict, Dict):
        _, inner = typing.get_args(tp) or (Any, Any)
        return isinstance(value, dict) and all(isinstance(k, str) and _type_ok(v, inner) for k, v in value.items())
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    return isinstance(value, tp)


def _build(cls: type, raw: Any, where: str, path: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: '{where}' must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.name != "path"}
    kwargs: Dict[str, Any] = {}
    for key, val in raw.items():
        dotted = f"{where}.{key}" if where else str(key)
        if key not in names:
            raise ConfigError(f"{path}: unknown key '{dotted}' (known: {', '.join(sorted(names))})")
        tp = hints[key]
        if not _type_ok(val, tp):
            raise ConfigError(f"{path}: key '{dotted}' has the wrong type ({type(val).__name__}; expected {tp})")
        if key in _ENUMS and val is not None and val not in _ENUMS[key]:
            raise ConfigError(f"{path}: key '{dotted}' = {val!r} is not one of {', '.join(_ENUMS[key])}")
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            val = _build(tp, val, dotted, path)
        elif key == "tasks":
            val = [_build(TaskDef, t, f"{dotted}[{i}]", path) for i, t in enumerate(val)]
        kwargs[key] = float(val) if tp is float else val
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in kwargs and f.name != "path"
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{path}: missing key '{(where + '.') if where else ''}{missing[0]}'")
    return cls(**kwargs)


def _check(bdef: BenchmarkDef, path: str) -> None:
    from mmrl.eval.parsers import PARSERS

    names = [t.name for t in bdef.tasks]
    if not names:
        raise ConfigError(f"{path}: key 'tasks' is empty")
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: key 'tasks' repeats a task name")
    for i, t in enumerate(bdef.tasks):
        for key, name in (("parser", bdef.parser), (f"tasks[{i}].parser", t.parser)):
            if name is not None:
                try:
                    PARSERS.get(name)
                except KeyError as e:
                    raise ConfigError(f"{path}: key '{key}': {e.args[0]}") from None
        if t.template is not None and t.template not in bdef.prompt.templates:
            raise ConfigError(f"{path}: key 'tasks[{i}].template' = {t.template!r} is not in prompt.templates")
        if bdef.kind == "ovo" and t.mode is None:
            raise ConfigError(f"{path}: missing key 'tasks[{i}].mode'")
        if bdef.kind == "mcq" and t.json is None and bdef.data.get("layout", "official") == "official":
            raise ConfigError(f"{path}: missing key 'tasks[{i}].json'")


def benchmark_path(name_or_path: Union[str, Path], search_dirs: Optional[List[Path]] = None) -> Path:
    """A YAML path as given, or ``<dir>/<name>.yaml`` from ``search_dirs`` (default: the repo's ``eval/``)."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise ConfigError(f"benchmark definition '{p}' does not exist")
        return p
    dirs = list(search_dirs or [EVAL_DIR])
    for d in dirs:
        cand = Path(d) / f"{name_or_path}.yaml"
        if cand.is_file():
            return cand
    known = sorted({q.stem for d in dirs if Path(d).is_dir() for q in Path(d).glob("*.yaml")})
    raise ConfigError(f"unknown benchmark '{name_or_path}'; known: {', '.join(known)} (or give a .yaml path)")


def load_benchmark(name_or_path: Union[str, Path], search_dirs: Optional[List[Path]] = None) -> BenchmarkDef:
    """Load and validate a benchmark definition by name (``eval/<name>.yaml``) or path."""
    path = benchmark_path(name_or_path, search_dirs)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    bdef = _build(BenchmarkDef, raw if raw is not None else {}, "", str(path))
    bdef.path = str(path)
    _check(bdef, str(path))
    return bdef
