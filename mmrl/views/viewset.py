"""View sets: question type -> the views a sample is rolled out under (YAML files in ``views/``).

File format::

    name: bpo_video                       # optional (default: the file name)
    abstain_text: cannot be determined    # optional; added to the candidates when a view has role abstain
    roles: [my_role]                      # optional extra roles besides the built-in ones
    qtypes:
      direction:                          # a list of views, or {answer_map: {...}, views: [...]}
        - {name: original, role: anchor, transform: identity}
        - {name: reverse, role: sensitive, transform: reverse, answer_map: {left: right, right: left},
           answer_meta: reversed_answer}
        - {name: blank, role: abstain, transform: gray, params: {value: 128}}
      default: [...]                      # for question types without their own entry

A view: ``name``, ``role``, ``transform`` (registered name or ``module:function``), optional ``params``,
``effect`` (overrides the transform's declared effect on the answer), ``weight`` (>= 0, scales the BPO advantage of
the view's responses and its pack-score share; a weight != 1 under an algorithm that ignores it is a
``ConfigError``, ``ViewSet.check_weights_used``), ``if_unchanged`` (see below), and for ``mapped`` views
``answer_meta`` (a key of ``sample.meta`` holding the answer text under the view, used when the sample has it)
and/or ``answer_map`` (candidate text -> candidate text). A qtype without an anchor gets ``original`` (identity) prepended. Everything
is checked when loading; the evidence a view needs is checked per sample (``views_for``, ``check``).

A view whose transform leaves a sample's pixels exactly as they were (``shuffle`` or ``reverse`` on a static clip)
cannot have a declared effect that needs a change: effect ``destroyed``, role ``sensitive`` or ``abstain``, or a
``mapped`` answer that differs from the original one. ``if_unchanged`` says what happens on such a sample:
``error`` (the default for those declarations: a ``DataError`` naming sample and view), ``skip`` (the view is left
out for that sample and counted in ``skipped``), or ``keep`` (the default otherwise, e.g. a ``stable`` view: kept,
with ``View.pixels_differ = False`` so that metrics can leave it out).
"""
from __future__ import annotations

import hashlib
import inspect
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import torch

from mmrl.data.schema import ANSWER_ABSTAIN, LETTERS, Media, Sample, View
from mmrl.errors import ConfigError, DataError
from mmrl.registry import signature_params
from mmrl.views.transforms import (DESTROYED, EFFECTS, MAPPED, UNCHANGED, TransformInfo, transform_info)

ROLES = {"anchor", "stable", "sensitive", "abstain", "shuffled"}
DEFAULT_ABSTAIN = "cannot be determined"
_VIEW_KEYS = {"name", "role", "transform", "params", "effect", "answer_map", "answer_meta", "weight", "if_unchanged"}
IF_UNCHANGED = ("error", "skip", "keep")
_QTYPE_KEYS = {"views", "answer_map", "answer_meta"}
_TOP_KEYS = {"name", "abstain_text", "roles", "qtypes"}


def register_role(name: str) -> str:
    """Declare a view role an algorithm uses (e.g. ``shuffled`` for T-GRPO)."""
    ROLES.add(name)
    return name


@dataclass
class ViewSpec:
    """One declared view of a question type."""

    name: str
    role: str
    transform: str
    params: Dict = field(default_factory=dict)
    effect: str = UNCHANGED
    answer_map: Optional[Dict[str, str]] = None
    answer_meta: Optional[str] = None
    weight: float = 1.0
    needs: tuple = ()
    if_unchanged: Optional[str] = None  # error | skip | keep; None = by the declaration (module docstring)
    info: Optional[TransformInfo] = field(default=None, repr=False, compare=False)


def _norm(s: str) -> str:
    return " ".join(str(s).lower().split())


def map_answer(answer: str, answer_map: Dict[str, str], candidates: List[str]) -> Optional[str]:
    """Letter of the candidate that ``answer`` maps to, or None when the map does not decide it.

    The whole answer text is looked up first; otherwise every whole word/phrase key is swapped at once
    (``"moves left"`` -> ``"moves right"``). Case and spacing are ignored. An answer with no key, or one that
    maps to no candidate, is unknown (add ``x: x`` to declare a fixed point).
    """
    m = {_norm(k): _norm(v) for k, v in answer_map.items()}
    a = _norm(answer)
    if a in m:
        target = m[a]
    else:
        keys = sorted(m, key=len, reverse=True)
        pattern = re.compile(r"\b(" + "|".join(re.escape(k) for k in keys) + r")\b") if keys else None
        if pattern is None or not pattern.search(a):
            return None
        target = pattern.sub(lambda mo: m[mo.group(0)], a)
    for i, c in enumerate(candidates):
        if _norm(c) == target:
            return LETTERS[i]
    return None


def _same_pixels(a: Media, b: Media) -> bool:
    """True when two media hold the same frames (or image) and timestamps."""
    x = a.frames if a.frames is not None else a.image
    y = b.frames if b.frames is not None else b.image
    return x.shape == y.shape and bool(torch.equal(x, y)) and a.timestamps == b.timestamps


def view_seed(seed: int, sample_id: str, view_name: str) -> int:
    """A 63-bit seed fixed by (seed, sample id, view name), independent of order and process."""
    h = hashlib.blake2b(f"{seed}|{sample_id}|{view_name}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 63) - 1)


class ViewSet:
    """Views per question type, with the abstention option. Build with ``ViewSet.load(path)``."""

    def __init__(self, name: str, qtypes: Dict[str, List[ViewSpec]], abstain_text: str = DEFAULT_ABSTAIN,
                 source: Optional[str] = None):
        self.name, self.qtypes, self.abstain_text, self.source = name, qtypes, abstain_text, source

    # ---- loading ----------------------------------------------------------------------------------------

    @classmethod
    def load(cls, path, abstain_text: Optional[str] = None) -> "ViewSet":
        """Read and validate a view set file; ``abstain_text`` (e.g. from the run config) overrides the file's."""
        import yaml

        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"view set file '{path}': cannot read: {e}") from e
        return cls.from_dict(data, name=path.stem, source=str(path), abstain_text=abstain_text)

    @classmethod
    def from_dict(cls, data: dict, name: Optional[str] = None, source: Optional[str] = None,
                  abstain_text: Optional[str] = None) -> "ViewSet":
        where = f"view set '{(data or {}).get('name', name) if isinstance(data, dict) else name}'"
        where += f" ({source})" if source else ""

        def fail(msg: str):
            raise ConfigError(f"{where}: {msg}")

        if not isinstance(data, dict):
            fail("must be a mapping with a 'qtypes' key")
        extra = set(data) - _TOP_KEYS
        if extra:
            fail(f"unknown keys {sorted(extra)}; allowed: {sorted(_TOP_KEYS)}")
        roles = set(ROLES) | set(data.get("roles") or [])
        qtypes = data.get("qtypes")
        if not isinstance(qtypes, dict) or not qtypes:
            fail("'qtypes' must be a non-empty mapping of question type -> list of views")
        parsed = {str(q): cls._parse_qtype(q, entry, roles, fail) for q, entry in qtypes.items()}
        return cls(str(data.get("name") or name or "views"), parsed,
                   str(abstain_text or data.get("abstain_text") or DEFAULT_ABSTAIN), source)

    @staticmethod
    def _parse_qtype(q, entry, roles, fail) -> List[ViewSpec]:
        qdef = {}
        if isinstance(entry, dict):
            extra = set(entry) - _QTYPE_KEYS
            if extra:
                fail(f"qtype '{q}': unknown keys {sorted(extra)}; allowed: {sorted(_QTYPE_KEYS)}")
            qdef, entry = entry, entry.get("views")
        if not isinstance(entry, list) or not entry:
            fail(f"qtype '{q}': needs a non-empty list of views")
        specs: List[ViewSpec] = []
        for i, v in enumerate(entry):
            specs.append(ViewSet._parse_view(q, i, v, qdef, roles, fail))
        names = [s.name for s in specs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            fail(f"qtype '{q}': duplicate view names {dup}")
        anchors = [s for s in specs if s.role == "anchor"]
        if len(anchors) > 1:
            fail(f"qtype '{q}': more than one anchor view ({[s.name for s in anchors]})")
        if not anchors:
            if "original" in names:
                fail(f"qtype '{q}': has no anchor, and the name 'original' is taken by a non-anchor view")
            anchors = [ViewSpec("original", "anchor", "identity", info=transform_info("identity"))]
        return anchors + [s for s in specs if s.role != "anchor"]

    @staticmethod
    def _parse_view(q, i, v, qdef, roles, fail) -> ViewSpec:
        if not isinstance(v, dict):
            fail(f"qtype '{q}', view #{i}: must be a mapping")
        name = v.get("name")
        if not isinstance(name, str) or not name:
            fail(f"qtype '{q}', view #{i}: needs a string 'name' (quote names like \"null\")")
        at = f"qtype '{q}', view '{name}'"
        extra = set(v) - _VIEW_KEYS
        if extra:
            fail(f"{at}: unknown keys {sorted(extra)}; allowed: {sorted(_VIEW_KEYS)}")
        role = v.get("role")
        if role not in roles:
            fail(f"{at}: unknown role {role!r}; known: {sorted(roles)} (declare more under 'roles:')")
        tname = v.get("transform", "identity")
        try:
            info = transform_info(str(tname))
        except KeyError as e:
            fail(f"{at}: {e.args[0]}")
        params = v.get("params") or {}
        if not isinstance(params, dict):
            fail(f"{at}: 'params' must be a mapping")
        try:
            inspect.signature(info.fn).bind(None, None, None, **params)
        except TypeError as e:
            fail(f"{at}: bad params {params} for transform '{tname}': {e}; its parameters: "
                 f"{', '.join(signature_params(info.fn, 3)) or 'none'}")
        effect = v.get("effect", info.effect)
        if effect not in EFFECTS:
            fail(f"{at}: unknown effect {effect!r}; known: {list(EFFECTS)}")
        amap = v.get("answer_map", qdef.get("answer_map"))
        ameta = v.get("answer_meta", qdef.get("answer_meta"))
        if ameta is not None and not isinstance(ameta, str):
            fail(f"{at}: 'answer_meta' must name a key of the sample's meta")
        if amap is not None and not (isinstance(amap, dict) and all(isinstance(k, str) and isinstance(x, str)
                                                                     for k, x in amap.items())):
            fail(f"{at}: 'answer_map' must map candidate text to candidate text")
        if effect == MAPPED and not (amap or ameta):
            fail(f"{at}: transform '{tname}' maps the answer; give an 'answer_map' (or 'answer_meta') "
                 f"or an explicit 'effect'")
        if role == "anchor" and info.fn is not transform_info("identity").fn:
            fail(f"{at}: the anchor view shows the original media; its transform must be 'identity'")
        if role == "abstain" and effect != DESTROYED:
            fail(f"{at}: role 'abstain' needs effect 'destroyed' (got {effect!r})")
        try:
            weight = float(v.get("weight", 1.0))
        except (TypeError, ValueError):
            fail(f"{at}: 'weight' must be a number")
        if not weight >= 0:
            fail(f"{at}: 'weight' must be >= 0, got {weight}")
        if role == "anchor" and weight != 1.0:
            fail(f"{at}: the anchor's weight is fixed at 1 (weigh the other views)")
        iu = v.get("if_unchanged")
        if iu is not None and iu not in IF_UNCHANGED:
            fail(f"{at}: 'if_unchanged' must be one of {list(IF_UNCHANGED)}, got {iu!r}")
        return ViewSpec(name, role, str(tname), dict(params), effect, amap, ameta, weight,
                        info.needs_for(params), iu, info)

    # ---- per sample ---------------------------------------------------------------------------------------

    @property
    def has_abstain(self) -> bool:
        return any(s.role == "abstain" for specs in self.qtypes.values() for s in specs)

    @property
    def roles(self) -> set:
        return {s.role for specs in self.qtypes.values() for s in specs}

    def candidates_for(self, sample: Sample) -> List[str]:
        """The sample's candidates, plus the abstention text (last) when the set has an abstain role."""
        cands = list(sample.candidates)
        if self.has_abstain and _norm(self.abstain_text) not in {_norm(c) for c in cands}:
            cands.append(self.abstain_text)
        return cands

    def views_for(self, sample: Sample) -> List[ViewSpec]:
        """The views of the sample's qtype (or ``default``), checked against the evidence the sample has."""
        specs = self.qtypes.get(sample.qtype) or self.qtypes.get("default")
        if specs is None:
            raise DataError(f"view set '{self.name}': no views for qtype '{sample.qtype}' and no 'default' entry "
                            f"(qtypes: {sorted(self.qtypes)})", sample_id=sample.id)
        kind = "video" if sample.video is not None else ("image" if sample.image is not None else None)
        for s in specs:
            self._check(s, sample, kind)
        return specs

    def _check(self, s: ViewSpec, sample: Sample, kind: Optional[str]) -> None:
        at = f"view set '{self.name}', view '{s.name}' (transform '{s.transform}')"
        ev = sample.evidence
        if "segments" in s.needs and not ev.segments:
            raise DataError(f"{at} needs evidence segments, which the sample lacks", sample_id=sample.id)
        if "boxes" in s.needs and not ev.boxes:
            raise DataError(f"{at} needs evidence boxes, which the sample lacks", sample_id=sample.id)
        if kind is not None and s.info is not None and kind not in s.info.kinds:
            raise DataError(f"{at} does not apply to {kind} media", sample_id=sample.id)

    def check_weights_used(self, algorithm: str, uses_weights: bool) -> None:
        """A view ``weight`` other than 1 under an algorithm that ignores view weights (every one but BPO, whose
        estimator scales the view's advantage by it) would change nothing: a ``ConfigError`` naming file and view."""
        if uses_weights:
            return
        for q, specs in self.qtypes.items():
            for s in specs:
                if s.weight != 1.0:
                    raise ConfigError(f"view set '{self.name}' ({self.source or 'in memory'}): qtype '{q}', view "
                                      f"'{s.name}' has weight {s.weight:g}, but algorithm '{algorithm}' does not use "
                                      "view weights (only bpo scales a view's advantage by it); remove the weight")

    def fallback_warning(self, samples: Iterable[Sample]) -> str:
        """A warning naming each question type of ``samples`` that has no entry of its own and so gets the
        ``default`` views, with its sample count ('' when every qtype has its own entry or none falls back):
        a set keyed to other question types (the synthetic world's) would otherwise train them on the default
        views alone, silently."""
        default = self.qtypes.get("default")
        counts = Counter(s.qtype for s in samples if s.qtype not in self.qtypes)
        if default is None or not counts:
            return ""
        total = sum(counts.values())
        which = ", ".join(f"'{q}' ({k})" for q, k in counts.most_common())
        views = ", ".join(f"{v.name} ({v.role})" for v in default)
        return (f"view set '{self.name}' ({self.source or 'in memory'}) has no entry for qtype {which}: these "
                f"{total} samples get its 'default' views only: {views}; give each qtype its own entry under "
                f"'qtypes:' (docs/own_videos.md), or keep the default on purpose")

    def check(self, samples: Iterable[Sample]) -> None:
        """Check a whole dataset up front (raises on the first sample a view cannot be built for)."""
        for sample in samples:
            self.views_for(sample)

    def expected_for(self, spec: ViewSpec, sample: Sample) -> Optional[str]:
        """Gold letter under the view (against ``candidates_for``), ``"abstain"``, or None when unknown."""
        cands = self.candidates_for(sample)
        if sample.answer not in cands:
            raise DataError(f"answer {sample.answer!r} is not among the candidates {cands}", sample_id=sample.id)
        if spec.role == "anchor" or spec.effect == UNCHANGED:
            return LETTERS[cands.index(sample.answer)]
        if spec.effect == DESTROYED:
            return ANSWER_ABSTAIN
        if spec.effect == MAPPED:
            if spec.answer_meta and sample.meta.get(spec.answer_meta) is not None:
                target = _norm(sample.meta[spec.answer_meta])
                return next((LETTERS[i] for i, c in enumerate(cands) if _norm(c) == target), None)
            return map_answer(sample.answer, spec.answer_map or {}, cands)
        return None

    def expand(self, sample: Sample, media: Media, seed: int = 0, skipped: Optional[list] = None) -> List[View]:
        """All views of the sample, the anchor first (its media is ``media`` itself, not a copy).

        Deterministic for (seed, sample id, view name). A view that leaves the pixels unchanged is handled by its
        ``if_unchanged`` (module docstring); a skipped one is appended to ``skipped`` as ``(view name, reason)``.
        """
        specs = self.views_for(sample)
        self._check_kind(specs, sample, media)
        views = []
        anchor_expected = None
        for s in specs:
            if s.role == "anchor":
                anchor_expected = self.expected_for(s, sample)
                views.append(View(s.name, s.role, media, anchor_expected, s.transform, s.weight, False))
                continue
            rng = torch.Generator().manual_seed(view_seed(seed, sample.id, s.name))
            try:
                out = s.info.fn(media, sample, rng, **s.params)
            except (ValueError, IndexError, RuntimeError) as e:
                raise DataError(f"view set '{self.name}', view '{s.name}': transform '{s.transform}' failed: {e}",
                                sample_id=sample.id) from e
            if not isinstance(out, Media):
                raise DataError(f"view set '{self.name}', view '{s.name}': transform '{s.transform}' returned "
                                f"{type(out).__name__}, not Media", sample_id=sample.id)
            expected = self.expected_for(s, sample)
            differ = not _same_pixels(out, media)
            if not differ and not self._keep_unchanged(s, sample, expected, anchor_expected, skipped):
                continue
            views.append(View(s.name, s.role, out, expected, s.transform, s.weight, differ))
        return views

    def _keep_unchanged(self, s: ViewSpec, sample: Sample, expected, anchor_expected, skipped) -> bool:
        """A view left the pixels as they were: keep it, skip it (counted) or raise (module docstring)."""
        needs_change = []
        if s.effect == DESTROYED:
            needs_change.append("effect 'destroyed'")
        if s.role in ("sensitive", "abstain"):
            needs_change.append(f"role '{s.role}'")
        if s.effect == MAPPED and expected != anchor_expected:
            needs_change.append(f"a mapped answer ({expected} instead of {anchor_expected})")
        mode = s.if_unchanged or ("error" if needs_change else "keep")
        why = (f"view set '{self.name}', view '{s.name}': transform '{s.transform}' leaves this sample's pixels "
               f"unchanged (e.g. a static clip)")
        if mode == "skip":
            if skipped is not None:
                skipped.append((s.name, why))
            return False
        if mode == "error" or needs_change:
            what = ", ".join(needs_change) if needs_change else "if_unchanged: error"
            raise DataError(f"{why}, but the view declares {what}; set 'if_unchanged: skip' to leave it out on "
                            f"such samples, or choose a transform that changes them", sample_id=sample.id)
        return True

    def _check_kind(self, specs, sample, media) -> None:
        kind = "video" if media.is_video else "image"
        for s in specs:
            self._check(s, sample, kind)

    def __repr__(self) -> str:
        return f"ViewSet({self.name!r}, qtypes={sorted(self.qtypes)}, abstain={self.has_abstain})"
