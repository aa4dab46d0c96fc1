"""The recipe of the tiny base that can see (``mmrl base build``) and where its build is cached.

A recipe is a small dataclass (model sizes, the perception corpus, the SFT schedule, the seed). Its content hash
(sha256 of the recipe as sorted JSON plus ``BUILD_VERSION``, first 12 hex digits) names the cache folder
``$MMRL_CACHE/base-<hash>`` (default ``~/.cache/mmrl``), so any change of any field builds a new base and the same
recipe is reused. ``model.path: base`` resolves to the default recipe's build, ``model.path: base:<hash>`` to a
given build; neither builds anything at load time (a build takes CPU-minutes): an unbuilt base is a one-line error.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Dict

from mmrl.errors import ConfigError

BUILD_VERSION = 3  # bump when the corpus generator or the build changes what a recipe produces
PERCEPTION_ATTRS = ("color", "shape", "count", "location", "direction", "order", "time", "emblem", "null",
                    "caption", "yesno")
RECIPE_FILE = "mmrl_base_recipe.json"


def _default_mix() -> Dict[str, float]:
    # temporal types are the hardest at this scale: they get a larger share
    return {"color": 1.0, "shape": 1.0, "count": 1.0, "location": 1.0, "direction": 1.5, "order": 1.5, "time": 1.0,
            "emblem": 1.0, "null": 1.0, "caption": 1.0, "yesno": 1.0}


@dataclass
class BaseRecipe:
    # model (mmrl.models.tiny.TinySpec fields)
    text_hidden: int = 128
    text_layers: int = 3
    text_heads: int = 4
    text_kv_heads: int = 2
    text_intermediate: int = 256
    vision_hidden: int = 64
    vision_layers: int = 2
    vision_heads: int = 2
    vision_intermediate: int = 128
    bpe_vocab: int = 600
    # corpus (mmrl.data.synth_perception)
    size: int = 56  # frame side in pixels (the VHOP shapes and emblem stay legible at 56)
    n_frames: int = 8  # frames per clip (time clips: 2 fps, others 4 fps)
    n_train: int = 4000
    n_test: int = 440  # held out: 36-55 per attribute with the default mix
    mix: Dict[str, float] = field(default_factory=_default_mix)
    abstain_option_rate: float = 0.25  # share of answerable choice items that also list "cannot be determined"
    fixed_options: bool = True  # every choice lists its whole pool in canonical order (a letter = a value)
    direct_rate: float = 0.5  # share of train choice items also asked for the value itself (no options)
    # SFT (mmrl.train.sft)
    steps: int = 2000
    batch_size: int = 32
    lr: float = 3e-4  # 1e-3 collapses the vision features to a constant (docs/base_model.md)
    warmup_steps: int = 30
    eval_every: int = 400  # an intermediate held-out eval every N steps (0 = at the end only)
    seed: int = 0
    num_threads: int = 1  # torch intra-op threads (pinned: the build is bit-identical only at the same count)

    def validate(self) -> "BaseRecipe":
        bad = [k for k in self.mix if k not in PERCEPTION_ATTRS]
        if bad:
            raise ConfigError(f"base recipe 'mix': unknown attribute(s) {bad}; known: {', '.join(PERCEPTION_ATTRS)}")
        if not any(float(w) > 0 for w in self.mix.values()):
            raise ConfigError("base recipe 'mix': every weight is 0")
        if any(float(w) < 0 for w in self.mix.values()):
            raise ConfigError(f"base recipe 'mix': negative weight in {self.mix}")
        for k in ("text_hidden", "text_layers", "text_heads", "vision_hidden", "vision_layers", "vision_heads",
                  "n_train", "n_test", "steps", "batch_size", "num_threads"):
            if int(getattr(self, k)) < 1:
                raise ConfigError(f"base recipe '{k}' must be >= 1, got {getattr(self, k)}")
        if self.text_hidden % self.text_heads or self.vision_hidden % self.vision_heads:
            raise ConfigError("base recipe: text_hidden / vision_hidden must be divisible by their heads")
        if self.size < 56 or self.size % 28:
            raise ConfigError(f"base recipe 'size' must be a multiple of 28 and >= 56, got {self.size}")
        if self.n_frames < 8 or self.n_frames % 2:
            raise ConfigError(f"base recipe 'n_frames' must be even and >= 8, got {self.n_frames}")
        if not 0.0 <= self.abstain_option_rate < 1.0:
            raise ConfigError(f"base recipe 'abstain_option_rate' must be in [0, 1), got {self.abstain_option_rate}")
        if not 0.0 <= self.direct_rate <= 1.0:
            raise ConfigError(f"base recipe 'direct_rate' must be in [0, 1], got {self.direct_rate}")
        if self.lr <= 0:
            raise ConfigError(f"base recipe 'lr' must be > 0, got {self.lr}")
        return self

    def tiny_spec(self):
        from mmrl.models.tiny import TinySpec

        return TinySpec(text_hidden=self.text_hidden, text_layers=self.text_layers, text_heads=self.text_heads,
                        text_kv_heads=self.text_kv_heads, text_intermediate=self.text_intermediate,
                        vision_hidden=self.vision_hidden, vision_layers=self.vision_layers,
                        vision_heads=self.vision_heads, vision_intermediate=self.vision_intermediate,
                        bpe_vocab=self.bpe_vocab, min_pixels=28 * 28, max_pixels=self.size * self.size,
                        seed=self.seed)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["mix"] = {k: float(v) for k, v in sorted(self.mix.items())}
        return d


def _mix(v) -> Dict[str, float]:
    # YAML reads the key `null` (the null canvases) as None
    return {"null" if a is None else str(a): float(w) for a, w in dict(v).items()}


def recipe_from_dict(data: dict, where: str = "base recipe") -> BaseRecipe:
    """A validated recipe from a mapping (a YAML file's content); an unknown key is a ``ConfigError`` naming it."""
    known = {f.name: f for f in fields(BaseRecipe)}
    unknown = [k for k in data if k not in known]
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {', '.join(known)}")
    kw = {}
    for k, v in data.items():
        default = getattr(BaseRecipe(), k)
        if isinstance(default, bool) and not isinstance(v, bool):
            raise ConfigError(f"{where}: key '{k}' = {v!r} is not a bool (true or false)")
        try:
            kw[k] = _mix(v) if k == "mix" else type(default)(v)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: key '{k}' = {v!r} is not a {type(default).__name__}") from None
    return BaseRecipe(**kw).validate()


def load_recipe(path: str | os.PathLike | None = None, overrides=()) -> BaseRecipe:
    """The default recipe, or a YAML file's, with ``key=value`` overrides (``steps=10``, ``mix.null=2``)."""
    import yaml

    data: dict = {}
    if path:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"base recipe file not found: {p}")
        data = yaml.safe_load(p.read_text()) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"base recipe file {p}: expected a mapping of recipe fields")
    for ov in overrides:
        if "=" not in ov:
            raise ConfigError(f"base recipe override {ov!r}: expected key=value")
        key, val = ov.split("=", 1)
        val = yaml.safe_load(val)
        if key.startswith("mix."):
            data.setdefault("mix", dict(BaseRecipe().mix))[key[4:]] = val
        else:
            data[key] = val
    return recipe_from_dict(data, where=f"base recipe {path}" if path else "base recipe")


def recipe_hash(recipe: BaseRecipe) -> str:
    """First 12 hex digits of sha256 over the recipe's sorted JSON and ``BUILD_VERSION``."""
    blob = json.dumps({"build_version": BUILD_VERSION, "recipe": recipe.to_dict()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def cache_root() -> Path:
    return Path(os.environ.get("MMRL_CACHE", Path.home() / ".cache" / "mmrl"))


def base_path(digest: str) -> Path:
    return cache_root() / f"base-{digest}"


def is_built(path: Path) -> bool:
    return (path / RECIPE_FILE).is_file() and (path / "config.json").is_file()


def is_base_ref(path) -> bool:
    """``base`` or ``base:<hash>`` (a checkpoint folder given as a ``Path`` never is one)."""
    return isinstance(path, str) and (path == "base" or path.startswith("base:"))


def resolve_base(path: str, where: str = "config key 'model.path'") -> str:
    """``base`` (the default recipe's build) or ``base:<hash>`` to the cached checkpoint folder; unbuilt: an error."""
    digest = recipe_hash(BaseRecipe()) if path == "base" else path.split(":", 1)[1]
    folder = base_path(digest)
    if not is_built(folder):
        how = "mmrl base build" if path == "base" else "mmrl base build --recipe <the recipe of that hash>"
        raise ConfigError(f"{where} = {path!r}: the base model {digest} is not built in {folder}; "
                          f"run `{how}` (or `make base`) first")
    return str(folder)
