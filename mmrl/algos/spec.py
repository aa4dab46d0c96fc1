"""An algorithm is a registered spec: a typed parameter section plus the hooks one RL step calls.

The step (``mmrl.train.step``) never tests an algorithm's name. It asks the spec:

- ``plan(role, n, n_views)``: how many responses per (sample, view of that role), from ``rollout.n``;
- ``needs()``: extra passes: old-policy or reference log-probs, and re-scoring of the SAME response tokens under a
  named intervened view of the media (fixed rollout; PACG, VPPO, DSPO's CVIG), optionally with the post-encoder
  visual tokens inside a box read from each response zeroed (DSPO's CVIG);
- ``advantages(batch)``: per sequence ``[N]`` or per token ``[N, T]``, grouped by named keys (``batch.groups``);
- ``select(batch, out)``: the train mask (rows that enter the old, reference and actor passes), pruning, and how many
  more prompts to roll out (DAPO's dynamic sampling);
- ``after_step(...)``: state updated once per step (FastRL's adaptive rollout count), saved with ``state_dict``;
- ``bind(cfg)``: once, with the whole run config, for what a spec reads outside ``algorithm`` (e.g. reward weights).

A spec may wrap another by name (``WrapperSpec``): ``{name: fastrl, params: {base: dapo}}`` or
``{base: {name: dapo, params: {...}}}``; every hook delegates to the base unless the wrapper overrides it.
Config: ``algorithm: {name, loss, <loss constants>, params: {<the spec's Params fields>}}`` (``mmrl.config``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Type

import torch

from mmrl.algos.base import AdvantageOutput
from mmrl.errors import ConfigError
from mmrl.registry import Registry

ALGORITHMS = Registry("algorithm", builtins={
    "mmrl.algos.grpo": ("grpo", "gspo", "drgrpo"), "mmrl.algos.gdpo": ("gdpo",), "mmrl.algos.dapo": ("dapo",),
    "mmrl.algos.tgrpo": ("tgrpo",), "mmrl.algos.bpo": ("bpo",), "mmrl.algos.vppo": ("vppo",),
    "mmrl.algos.pacg": ("pacg",), "mmrl.algos.dspo": ("dspo",), "mmrl.algos.fastrl": ("fastrl",),
    "mmrl.algos.stream_gdpo": ("stream_gdpo",),
})


def register_algorithm(name: str):
    """Class decorator: ``@register_algorithm("grpo") class GRPO(AlgorithmSpec): ...``."""

    return ALGORITHMS.register(name)


@dataclass
class Intervention:
    """A named re-scoring pass: the step applies view transform ``transform`` (``mmrl.views``, any registered name
    or ``module:function``) with ``params`` to each trajectory's view media and scores the same response tokens.

    With ``feature_box`` (response text -> normalised (ymin, xmin, ymax, xmax) box, or None) each response is scored
    on its own with the vision encoder's merged tokens inside its box zeroed (``mmrl.models.feature_mask``); a
    response it gives no box gets NaN log-probs (not scored)."""

    transform: str
    params: Dict[str, Any] = field(default_factory=dict)
    feature_box: Optional[Callable[[str], Optional[Sequence[float]]]] = None

    def describe(self) -> str:
        return self.transform + (" + visual tokens in each response's box zeroed" if self.feature_box else "")


@dataclass
class Needs:
    old: bool = False  # old-policy log-probs (``ppo_epochs > 1`` turns them on anyway)
    ref: bool = False  # reference log-probs (``kl_coef > 0`` turns them on anyway)
    rescore: Dict[str, Intervention] = field(default_factory=dict)


@dataclass
class StepBatch:
    """The step's whole batch of N trajectories (all ranks, in global order) as a spec sees it."""

    rewards: torch.Tensor  # [N] total reward
    components: Dict[str, torch.Tensor]  # reward component -> [N]
    groups: Dict[str, torch.Tensor]  # named group keys -> [N] long: "prompt" always, "pack" (views)
    roles: List[str]
    views: List[str]
    lengths: torch.Tensor  # [N] response lengths in tokens
    view_weights: Optional[torch.Tensor] = None  # [N] the view set's per-view ``weight`` (float64); None = all 1
    response_ids: List[torch.Tensor] = field(default_factory=list)
    texts: List[str] = field(default_factory=list)
    logprobs: List[torch.Tensor] = field(default_factory=list)  # sampling log-probs [R_i]
    rescored: Dict[str, List[torch.Tensor]] = field(default_factory=dict)  # intervention -> [R_i] log-probs
    step: int = 0
    epoch: int = 0
    world_size: int = 1
    target_groups: int = 0  # prompt groups a full batch holds (train.prompts_per_step); 0 = as many as present
    decode: Optional[Callable[[List[int]], str]] = None  # the tokenizer's decode (ids -> text): token spans of text (PACG)

    def __len__(self) -> int:
        return int(self.rewards.numel())

    def subset(self, idx: List[int]) -> "StepBatch":
        """The rows ``idx`` (in that order) as a batch of their own: every per-row field is subset (the scalars
        and ``decode`` are shared)."""
        sel = torch.tensor(idx, dtype=torch.long)
        pick = lambda xs: [xs[i] for i in idx]  # noqa: E731
        return dataclasses.replace(
            self, rewards=self.rewards[sel], components={k: v[sel] for k, v in self.components.items()},
            groups={k: v[sel] for k, v in self.groups.items()}, roles=pick(self.roles), views=pick(self.views),
            lengths=self.lengths[sel], view_weights=None if self.view_weights is None else self.view_weights[sel],
            response_ids=pick(self.response_ids) if self.response_ids else [],
            texts=pick(self.texts) if self.texts else [], logprobs=pick(self.logprobs) if self.logprobs else [],
            rescored={k: pick(v) for k, v in self.rescored.items()})


@dataclass
class Selection:
    train_mask: torch.Tensor  # [N] bool: rows that enter the old, reference and actor passes
    resample: int = 0  # more prompts wanted before the batch is final (DAPO dynamic sampling)
    metrics: Dict[str, float] = field(default_factory=dict)


@dataclass
class NoParams:
    """A spec without constants of its own."""


def parse_params(cls: Type, values: Optional[Dict[str, Any]], key: str = "algorithm.params"):
    """Build ``cls`` (a dataclass) from a config dict; unknown keys and wrong types are ``ConfigError`` naming the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(values, cls):
        return values
    values = dict(values or {})
    known = {f.name for f in dataclasses.fields(cls)}
    for k in values:
        if k not in known:
            raise ConfigError(f"config key '{key}.{k}' is not a parameter of this algorithm; known: "
                              f"{', '.join(sorted(known)) or '(none)'}")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), values))
    except OmegaConfBaseException as e:
        sub = getattr(e, "full_key", None)
        raise ConfigError(f"config key '{key}.{sub}': {str(e).splitlines()[0]}" if sub else f"{key}: {e}") from None


class AlgorithmSpec:
    """Base spec: GRPO-shaped defaults for every hook. ``advantages`` must be given by each method."""

    Params: Type = NoParams
    uses_view_weights = False  # True where the advantages read the view set's ``weight`` (BPO)
    needs_view_set = False  # True where it trains on counterfactual views and cannot run without algorithm.viewset

    def __init__(self, params: Any, loss: Any, key: str = "algorithm.params"):
        self.name = ALGORITHMS.name_of(type(self)) or type(self).__name__  # the registered name
        self.params = parse_params(self.Params, params, key) if not isinstance(params, self.Params) else params
        self.loss = loss  # LossParams-like: clip, loss_agg, kl_coef, ppo_epochs...

    # hooks ------------------------------------------------------------------------------------------------------
    def plan(self, role: str, n: int, n_views: int = 1) -> int:
        """Responses for one view of ``role`` of a sample with ``n_views`` views, given ``rollout.n = n``."""
        return n

    def needs(self) -> Needs:
        return Needs()

    def advantages(self, batch: StepBatch) -> AdvantageOutput:
        raise NotImplementedError(f"algorithm '{self.name}' gives no advantages")

    def select(self, batch: StepBatch, out: AdvantageOutput) -> Selection:
        mask = out.train_mask if out.train_mask is not None else torch.ones(len(batch), dtype=torch.bool)
        return Selection(train_mask=mask.to(torch.bool))

    def after_step(self, batch: StepBatch, selection: Selection, epoch_ended: bool) -> Dict[str, float]:
        return {}

    def max_resample_rounds(self) -> int:
        return 0

    def bind(self, cfg: Any) -> None:
        """Read what the spec needs of the whole run config ``cfg``; a ConfigError names inconsistent keys."""
        return None

    def state_dict(self) -> Dict[str, Any]:
        return {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        return None

    def describe(self) -> str:
        return f"{self.name} {dataclasses.asdict(self.params) if dataclasses.is_dataclass(self.params) else self.params}"


@dataclass
class WrapperParams:
    base: Any = "grpo"  # a registered algorithm name, or {name: ..., params: {...}}


class WrapperSpec(AlgorithmSpec):
    """A spec around a base spec (``params.base``); subclasses override the hooks they change.

    A wrapper's ``Params`` must subclass ``WrapperParams`` (the ``base`` field)."""

    Params: Type = WrapperParams

    def __init__(self, params: Any, loss: Any, key: str = "algorithm.params"):
        super().__init__(params, loss, key)
        base = self.params.base
        if isinstance(base, str):
            name, base_params = base, {}
        elif isinstance(base, dict) and "name" in base:
            name, base_params = base["name"], base.get("params") or {}
            extra = set(base) - {"name", "params"}
            if extra:
                raise ConfigError(f"config key '{key}.base.{sorted(extra)[0]}' is unknown; give base as a name or "
                                  f"{{name: ..., params: {{...}}}}")
        else:
            raise ConfigError(f"config key '{key}.base' must be an algorithm name or {{name: ..., params: {{...}}}}, got {base!r}")
        self.base = build_spec(name, base_params, loss, key=f"{key}.base.params", name_key=f"{key}.base")

    @property
    def uses_view_weights(self) -> bool:
        return self.base.uses_view_weights

    @property
    def needs_view_set(self) -> bool:
        return self.base.needs_view_set

    def plan(self, role: str, n: int, n_views: int = 1) -> int:
        return self.base.plan(role, n, n_views)

    def needs(self) -> Needs:
        return self.base.needs()

    def advantages(self, batch: StepBatch) -> AdvantageOutput:
        return self.base.advantages(batch)

    def select(self, batch: StepBatch, out: AdvantageOutput) -> Selection:
        return self.base.select(batch, out)

    def after_step(self, batch, selection, epoch_ended):
        return self.base.after_step(batch, selection, epoch_ended)

    def max_resample_rounds(self) -> int:
        return self.base.max_resample_rounds()

    def bind(self, cfg) -> None:
        self.base.bind(cfg)

    def state_dict(self):
        return {"base": self.base.state_dict()}

    def load_state_dict(self, state):
        self.base.load_state_dict(state.get("base", {}))

    def describe(self) -> str:
        return f"{super().describe()} over [{self.base.describe()}]"


def build_spec(name: str, params: Any, loss: Any, key: str = "algorithm.params",
               name_key: str = "algorithm.name") -> AlgorithmSpec:
    """The registered spec ``name`` with its parsed params; unknown names are a ``ConfigError`` naming ``name_key``."""
    try:
        cls = ALGORITHMS.get(name)
    except KeyError as e:
        raise ConfigError(f"config key '{name_key}': {e.args[0]}") from None
    return cls(params, loss, key=key)


def build_algorithm(algo_cfg, run_cfg: Any = None) -> AlgorithmSpec:
    """The spec of a run's ``algorithm`` config section, bound to the whole run config ``run_cfg`` when given."""
    spec = build_spec(algo_cfg.name, algo_cfg.params, algo_cfg)
    if run_cfg is not None:
        spec.bind(run_cfg)
    return spec


def derive_params(algo_cfg, run_cfg) -> List[str]:
    """Fill the ``algorithm.params`` that follow from another config key where the config leaves them unset (absent,
    0 or null): a spec's ``Params.DERIVED`` maps a field to its dotted source key (FastRL: ``total_steps`` ->
    ``train.steps``). An explicit value is kept (the override). Returns ``"key = value (from source)"`` lines of
    the values derived; an unknown algorithm name is left to the later check that names it."""
    try:
        cls = ALGORITHMS.get(algo_cfg.name)
    except (KeyError, ImportError):
        return []
    lines = []
    for param, source in getattr(getattr(cls, "Params", None), "DERIVED", {}).items():
        if algo_cfg.params.get(param) in (None, 0):
            value = run_cfg
            for part in source.split("."):
                value = getattr(value, part)
            algo_cfg.params[param] = value
            lines.append(f"algorithm.params.{param} = {value} (from {source}; set it to override)")
    return lines


def estimate(name: str, inp, **params):
    """Advantages of algorithm ``name`` on pure ``AdvantageInputs`` (``params`` as keywords), for specs whose
    advantage is a function of those alone (the GRPO family, BPO, T-GRPO, GDPO)."""
    from mmrl.algos.base import LossParams

    spec = build_spec(name, params, LossParams())
    if not hasattr(spec, "estimate"):
        raise TypeError(f"algorithm '{name}' needs a whole StepBatch: call its advantages(batch)")
    return spec.estimate(inp)
