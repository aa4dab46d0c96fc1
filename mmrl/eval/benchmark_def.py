"""Benchmark definitions as data: ``eval/<name>.yaml`` -> ``BenchmarkDef`` (the lmms-eval "task = YAML" idea).

A definition names its hooks (``mmrl.eval.hooks``), the tasks (annotation file, video folder, reader, bound,
mode), the data layout, the prompt (system text and its placement, user template, options format, post prompt,
assistant prefill, named templates), the response post-processing, the frame rule and its parameters
(``sampling``), the per-frame pixel budget (``pixels``), generation, the parser (and ``parser_mode``) and the
aggregate. Unknown keys, wrong types, unknown enum values and keys that contradict each other raise
``ConfigError`` naming the file and the key; ``overrides`` (dotted keys, from the command line) are applied
before validation. Which keys a benchmark's hooks honour is checked by ``mmrl.eval.protocol``.
``EvalQuery`` is what the driver generates for: media ref + messages + prefill + gold + parser.
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

READERS = ("video", "frame")
MODES = ("backward", "realtime", "forward")
PLACEMENTS = ("system_and_user", "system", "user", "none")
GOLDS = ("answer", "gt_letter", "probe.count", "probe.type")
UNITS = ("items", "probes")
LAYOUTS = ("auto", "official", "hf_video")
PARSER_MODES = ("text", "list")


@dataclass
class TaskDef:
    name: str
    json: Optional[str] = None  # MVBench official layout: annotation file under data.json_dir (default <name>.json)
    prefix: Optional[str] = None  # video folder under data.video_dir
    source_prefix: Optional[str] = None  # lmms-eval MVBench: the official layout's source folder of a _segment task
    reader: str = "video"  # video | frame (a folder of frames, sorted; MVBench tvqa %05d.jpg from 1)
    bound: bool = False  # items carry start/end seconds
    frame_fps: Optional[float] = None  # rate of a frame folder (MVBench tvqa: 3); required for reader=frame
    mode: Optional[str] = None  # OVO: backward | realtime | forward
    template: Optional[str] = None  # key of prompt.templates
    template_args: List[str] = field(default_factory=list)  # formatted with the item's fields, options, probe
    gold: str = "answer"  # answer | gt_letter | probe.count | probe.type
    parser: Optional[str] = None  # overrides the benchmark's parser
    weight_unit: Optional[str] = None  # OVO weighted overall (WTI reading): items | probes


@dataclass
class PromptDef:
    system: str = ""
    system_placement: str = "system"  # system_and_user (notebook) | system (VLMEvalKit) | user | none
    user_template: str = "{question}\n{options}"  # str.format with question=, options=
    option_format: str = "({letter}) {option}\n"
    option_joiner: str = ""
    options_suffix: str = ""
    rstrip: bool = False  # right-strip the filled template before the post prompt
    post_prompt: str = ""
    prefill: str = ""  # assistant-turn text the model continues from
    templates: Dict[str, str] = field(default_factory=dict)


@dataclass
class ResponseDef:
    """How a raw output becomes the parser's input: ``prefix + (first line of) (stripped) output``."""

    strip: bool = False
    first_line_only: bool = False
    prefix: str = ""  # the notebook's return_prompt: the prefill's tail given back to the parser


@dataclass
class SamplingDef:
    rule: str = "get_index"  # a name of mmrl.eval.frame_rules.FRAME_RULES
    num_segments: Optional[int] = None  # get_index: segments
    use_bound: bool = True  # honour start/end of bound tasks
    fps: Optional[float] = None  # qwen fps sampling (lmms-eval wrapper: qwen-vl-utils default 2.0)
    max_frames: Optional[int] = None  # cap: lmms wrapper max_num_frames; OVO Qwen2-VL min(max_frames, len - margin)
    frames_margin: Optional[int] = None  # OVO Qwen2-VL: nframes = min(max_frames, len(video) - frames_margin)


@dataclass
class PixelsDef:
    min_pixels: Optional[int] = None  # per frame; None = the rule's default
    max_pixels: Optional[int] = None

    def overrides(self) -> Dict[str, int]:
        """The bounds that are set, as ``DataConfig`` keyword arguments."""
        return {k: v for k, v in (("min_pixels", self.min_pixels), ("max_pixels", self.max_pixels)) if v is not None}


@dataclass
class GenerationDef:
    max_new_tokens: int = 100
    do_sample: bool = False  # False: greedy (argmax); True: temperature / top_p sampling, seeded
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0


@dataclass
class DataDef:
    layout: str = "auto"  # MVBench: auto | official (json/<task>.json) | hf_video (test.json)
    json_dir: str = "json"
    test_json: str = "test.json"
    video_dir: str = "video"  # under --data-root unless --video-root is given
    annotations: Optional[str] = None  # OVO: annotation file under --data-root unless --anno is given
    chunk_dir: Optional[str] = None  # OVO: pre-chunked files under --data-root (chunking.chunked)
    on_error: str = "raise"  # synthetic: raise | skip (and count) a bad sample


@dataclass
class ChunkDef:
    end: str = "ceil"  # prefix end: ceil(realtime) | exact
    chunked: bool = False  # read released chunks {qid}.mp4 instead of cutting the source video
    chunk_name: str = "{qid}.mp4"  # file name of a pre-chunked prefix


@dataclass
class BenchmarkDef:
    name: str
    hooks: str  # registered hooks name (mmrl/eval/benchmarks/<name>/hooks.py) or a module path
    protocol: str = ""
    description: str = ""
    tasks: List[TaskDef] = field(default_factory=list)
    data: DataDef = field(default_factory=DataDef)
    prompt: PromptDef = field(default_factory=PromptDef)
    response: ResponseDef = field(default_factory=ResponseDef)
    sampling: SamplingDef = field(default_factory=SamplingDef)
    pixels: PixelsDef = field(default_factory=PixelsDef)
    generation: GenerationDef = field(default_factory=GenerationDef)
    chunking: ChunkDef = field(default_factory=ChunkDef)
    parser: Optional[str] = None
    parser_mode: str = "text"  # text | list (the official Qwen2-VL OVO wrapper saves batch_decode's list)
    aggregate: Optional[str] = None  # the hooks' aggregate names (MVBench: micro | lmms_answered)
    path: Optional[str] = None
    given: List[str] = field(default_factory=list)  # dotted keys set in the YAML or by an override

    def task(self, name: str) -> TaskDef:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(f"benchmark '{self.name}' has no task '{name}'; known: {', '.join(self.task_names())}")

    def task_names(self, mode: Optional[str] = None) -> List[str]:
        return [t.name for t in self.tasks if mode is None or t.mode == mode]

    def parser_for(self, task: str) -> str:
        return self.task(task).parser or self.parser or ""


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
    response: ResponseDef = field(default_factory=ResponseDef)
    meta: Dict[str, Any] = field(default_factory=dict)

    def messages(self) -> List[Dict[str, Any]]:
        """Qwen-VL chat messages (system if any; user = [video, text]). The prefill is not included."""
        msgs: List[Dict[str, Any]] = []
        if self.system:
            msgs.append({"role": "system", "content": [{"type": "text", "text": self.system}]})
        msgs.append({"role": "user", "content": [{"type": "video", "video": self.video.path},
                                                 {"type": "text", "text": self.user}]})
        return msgs


# --- prompt helpers shared by the protocols ----------------------------------------------------------------------
def format_options(options: List[str], prompt: PromptDef) -> str:
    """``joiner.join(option_format.format(letter, option)) + suffix``; OVO gives ``"A. o0; B. o1;"``."""
    parts = [prompt.option_format.format(letter=LETTERS[i], option=o, index=i) for i, o in enumerate(options)]
    return prompt.option_joiner.join(parts) + prompt.options_suffix


def fill(template: str, args: List[Any] = (), **fields: Any) -> str:
    """``str.format`` with positional args (official ``{}`` templates) and named fields at once."""
    return template.format(*args, **fields)


def place_system(prompt: PromptDef, user: str) -> Dict[str, str]:
    """``{"system", "user"}`` after ``system_placement``.

    ``system_and_user``: the Ask-Anything notebook with ``system_llm=True`` (``infer_mvbench``: the system text is
    the conversation's system and also prefixes the question); ``system``: a system turn only (VLMEvalKit);
    ``user``: prefixed to the user text only; ``none``: no system turn (the chat template's default applies).
    """
    place = prompt.system_placement
    system = prompt.system if place in ("system_and_user", "system") else ""
    if place in ("system_and_user", "user"):
        user = prompt.system + user
    return {"system": system, "user": user}


# --- loading and validation --------------------------------------------------------------------------------------
_ENUMS = {"reader": READERS, "mode": MODES, "system_placement": PLACEMENTS, "gold": GOLDS, "weight_unit": UNITS,
          "end": ("ceil", "exact"), "layout": LAYOUTS, "parser_mode": PARSER_MODES,
          "on_error": ("raise", "skip")}
_NOT_KEYS = ("path", "given")


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


def _build(cls: type, raw: Any, where: str, path: str, given: List[str]) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: '{where}' must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.name not in _NOT_KEYS}
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
            val = _build(tp, val, dotted, path, given)
        elif key == "tasks":
            val = [_build(TaskDef, t, f"{dotted}[{i}]", path, given) for i, t in enumerate(val)]
        if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)) and key != "tasks":
            given.append(dotted)
        kwargs[key] = float(val) if tp is float else val
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in kwargs and f.name not in _NOT_KEYS
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{path}: missing key '{(where + '.') if where else ''}{missing[0]}'")
    return cls(**kwargs)


def _check(bdef: BenchmarkDef, path: str) -> None:
    """Checks across keys; each error names the key (parser names are checked once the hooks are imported:
    a hooks file may register its own parser; ``mmrl.eval.protocol.check_fields``)."""
    names = [t.name for t in bdef.tasks]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: key 'tasks' repeats a task name")
    if bdef.prompt.system and bdef.prompt.system_placement == "none":
        raise ConfigError(f"{path}: key 'prompt.system' is set but prompt.system_placement is 'none' (it would "
                          f"change nothing)")
    px = bdef.pixels
    if px.min_pixels is not None and px.max_pixels is not None and px.min_pixels > px.max_pixels:
        raise ConfigError(f"{path}: key 'pixels.min_pixels' = {px.min_pixels} is above pixels.max_pixels = "
                          f"{px.max_pixels}")
    for key in ("generation.temperature", "generation.top_p", "generation.seed"):
        if key in bdef.given and not bdef.generation.do_sample:
            raise ConfigError(f"{path}: key '{key}' is set but generation.do_sample is false (greedy decoding: it "
                              f"would change nothing)")
    if bdef.parser is not None and bdef.tasks and all(t.parser for t in bdef.tasks):
        raise ConfigError(f"{path}: key 'parser' is shadowed by every task's own parser (it would change nothing)")
    for i, t in enumerate(bdef.tasks):
        if t.template is not None and t.template not in bdef.prompt.templates:
            raise ConfigError(f"{path}: key 'tasks[{i}].template' = {t.template!r} is not in prompt.templates")
        if t.reader == "frame" and t.frame_fps is None:
            raise ConfigError(f"{path}: missing key 'tasks[{i}].frame_fps' (a frame folder has no rate of its own)")
        if t.frame_fps is not None and t.reader != "frame":
            raise ConfigError(f"{path}: key 'tasks[{i}].frame_fps' is set on a '{t.reader}' task (it would change "
                              f"nothing)")


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
    raise ConfigError(f"unknown benchmark '{name_or_path}'; known: {', '.join(known_benchmarks(dirs))} "
                      f"(or give a .yaml path)")


def known_benchmarks(search_dirs: Optional[List[Path]] = None) -> List[str]:
    """Names of the benchmark YAMLs in ``search_dirs`` (default: the repo's ``eval/``)."""
    dirs = list(search_dirs or [EVAL_DIR])
    return sorted({q.stem for d in dirs if Path(d).is_dir() for q in Path(d).glob("*.yaml")})


def set_dotted(raw: Dict[str, Any], key: str, value: Any, path: str) -> None:
    """Set ``a.b.c`` in a raw YAML mapping (an override); a non-mapping on the way is a ``ConfigError``."""
    node = raw
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{path}: override '{key}': '{part}' is not a mapping")
    node[parts[-1]] = value


def load_benchmark(name_or_path: Union[str, Path], search_dirs: Optional[List[Path]] = None,
                   overrides: Optional[Dict[str, Any]] = None) -> BenchmarkDef:
    """Load and validate a benchmark definition by name (``eval/<name>.yaml``) or path.

    ``overrides`` (dotted key -> value) replace YAML fields before validation, so a bad override is named like a
    bad YAML key. ``BenchmarkDef.given`` lists every key set in the YAML or by an override.
    """
    path = benchmark_path(name_or_path, search_dirs)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    raw = raw if raw is not None else {}
    for key, val in (overrides or {}).items():
        set_dotted(raw, key, val, str(path))
    given: List[str] = []
    bdef = _build(BenchmarkDef, raw, "", str(path), given)
    bdef.path, bdef.given = str(path), given
    _check(bdef, str(path))
    return bdef
