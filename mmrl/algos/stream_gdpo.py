"""Stream-GDPO (WTI, arXiv 2609.37035; specs/algorithms.md §5): GDPO's per-component group normalisation over the
four streaming rewards, without the batch step, broadcast to every assistant action-turn token::

    A_i = Σ_{c ∈ {out, fmt, tool, mem}} w_c (R_c^i − μ_c(G)) / (σ_c(G) + ε),   w_out = w_fmt = 1,
                                                                               w_tool = λ_tool, w_mem = λ_mem

with unbiased σ, ε = 1e-4 and λ_tool = λ_mem = 0.5 (the λ values and ε are the spec's proposal; the paper gives
none). A component with zero spread in a group contributes 0. The per-component normalisation is GDPO's
(``mmrl.algos.gdpo.gdpo_advantages``); ``batch_norm=True`` adds GDPO's batch renormalisation, which the paper does
not show (off by default).

The components are reward components of the run (``mmrl.rewards.stream``: ``stream_out``, ``stream_fmt``,
``stream_tool``, ``stream_mem``), named per role in ``params.components``.

**Action-branch loss weight (uncertain reading).** The paper states an "action-branch loss weight" of 0.15 without
defining it. Our reading (the spec's proposal): the per-token policy loss of the action tokens (``silence``,
``response(q, y)``, ``recall(τs, τe)``: the ``<action>...</action>`` element of the stream's action grammar,
``mmrl.stream.actions``, matched by ``action_pattern``) is multiplied by
``action_loss_weight`` relative to think and memory tokens (weight 1). It is applied as a per-token advantage
``A_i · w_t``: the PPO term ``−min(ρA, clip(ρ)A)`` is positively homogeneous in A, so this scales exactly the
policy-loss of those tokens by ``w_t``; the k3 KL term (``kl_coef``) is not scaled. ``1.0`` (default) turns it off;
the paper's value is 0.15. Another reading (a separate auxiliary "action head" loss) is not implemented.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from mmrl.algos.base import AdvantageOutput
from mmrl.algos.gdpo import gdpo_advantages
from mmrl.algos.grpo import reward_metrics
from mmrl.algos.spec import AlgorithmSpec, StepBatch, register_algorithm
from mmrl.errors import ConfigError

ROLES = ("out", "fmt", "tool", "mem")
SpanFinder = Callable[[str], List[Tuple[int, int]]]


@dataclass
class StreamGDPOParams:
    # role -> the reward component that carries it
    components: Dict[str, str] = field(default_factory=lambda: {
        "out": "stream_out", "fmt": "stream_fmt", "tool": "stream_tool", "mem": "stream_mem"})
    # w_c: w_out = w_fmt = 1, w_tool = λ_tool, w_mem = λ_mem (spec §5, proposed λ = 0.5)
    weights: Dict[str, float] = field(default_factory=lambda: {"out": 1.0, "fmt": 1.0, "tool": 0.5, "mem": 0.5})
    eps: float = 1e-4  # ε_norm
    unbiased_std: bool = True
    batch_norm: bool = False  # GDPO's batch renormalisation; the paper shows none
    action_loss_weight: float = 1.0  # the paper's 0.15 under our reading (module docstring); 1 = off
    action_pattern: str = r"<action>.*?</action>"  # the action tokens: the stream grammar's action tag (mmrl.stream.actions)


def stream_gdpo_advantages(components: Dict[str, torch.Tensor], group_ids: torch.Tensor,
                           weights: Optional[Dict[str, float]] = None, eps: float = 1e-4, unbiased: bool = True,
                           batch_norm: bool = False) -> torch.Tensor:
    """``A [N]`` from ``{role: R_c [N]}`` (roles ``out``, ``fmt``, ``tool``, ``mem``) grouped by ``group_ids``.

    Spec §5 vector: R_out=[1,.5,.5,0], R_fmt=[1,1,1,0], R_tool=[1,0,0,0], R_mem=[.2,.1,0,−.1], w=(1,1,.5,.5)
    gives A=[3.055, 0.443, 0.056, −3.555]."""
    w = {"out": 1.0, "fmt": 1.0, "tool": 0.5, "mem": 0.5} if weights is None else dict(weights)
    return gdpo_advantages(components, group_ids, w, eps=eps, unbiased=unbiased, batch_norm=batch_norm)


def token_pieces(ids: Sequence[int], decode: Callable[[List[int]], str]) -> List[str]:
    """Each token's own text (``decode([id])``); action grammars are ASCII, so spans found in their concatenation
    map back to tokens exactly."""
    return [decode([int(i)]) for i in ids]


def action_token_mask(ids: Sequence[int], decode: Callable[[List[int]], str], find_spans: SpanFinder) -> torch.Tensor:
    """``[R]`` bool: tokens that overlap an action span. The text is cut at ``<|im_end|>`` so that each model turn
    (and each observation) is searched on its own; ``find_spans(turn_text)`` gives ``(start, end)`` character spans
    of the actions in one turn."""
    pieces = token_pieces(ids, decode)
    starts, pos = [], 0
    for p in pieces:
        starts.append(pos)
        pos += len(p)
    text = "".join(pieces)
    hit = torch.zeros(len(pieces), dtype=torch.bool)
    chars = torch.zeros(len(text) + 1, dtype=torch.bool)
    base = 0
    for part in text.split("<|im_end|>"):
        for a, b in find_spans(part):
            chars[base + a: base + b] = True
        base += len(part) + len("<|im_end|>")
    for k, (s, p) in enumerate(zip(starts, pieces)):
        hit[k] = bool(chars[s: s + len(p)].any()) if p else False
    return hit


def action_weighted(adv: torch.Tensor, batch: StepBatch, weight: float, find_spans: SpanFinder) -> torch.Tensor:
    """``[N, T]``: ``A_i`` on every token, ``A_i · weight`` on action tokens (T = the longest response)."""
    if batch.decode is None or not batch.response_ids:
        raise ValueError("stream_gdpo: action_loss_weight needs the batch's response token ids and tokenizer decode")
    width = int(batch.lengths.max()) if len(batch) else 0
    out = adv.to(torch.float32)[:, None].repeat(1, width)
    for i, ids in enumerate(batch.response_ids):
        m = action_token_mask(ids.tolist(), batch.decode, find_spans)
        out[i, : m.numel()][m] *= weight
    return out


def pattern_spans(pattern: str) -> SpanFinder:
    """Character spans of the matches of ``pattern`` (dot matches newlines)."""
    rx = re.compile(pattern, re.DOTALL)
    return lambda text: [m.span() for m in rx.finditer(text)]


@register_algorithm("stream_gdpo")
class StreamGDPO(AlgorithmSpec):
    """Stream-GDPO: decoupled per-component group normalisation with weights, no batch step by default, the
    sequence advantage on every action-turn token, optional action-branch loss weight (module docstring)."""

    Params = StreamGDPOParams

    def __init__(self, params, loss, key: str = "algorithm.params"):
        super().__init__(params, loss, key)
        p = self.params
        for name, mapping in (("components", p.components), ("weights", p.weights)):
            bad = sorted(set(mapping) - set(ROLES))
            if bad:
                raise ConfigError(f"config key '{key}.{name}.{bad[0]}' is not a Stream-GDPO role; roles: {', '.join(ROLES)}")
        missing = sorted(set(p.weights) - set(p.components))
        if missing:
            raise ConfigError(f"config key '{key}.weights.{missing[0]}' weighs a role with no entry in {key}.components")
        if not p.action_loss_weight > 0:
            raise ConfigError(f"config key '{key}.action_loss_weight' must be > 0, got {p.action_loss_weight}")
        if p.eps < 0:
            raise ConfigError(f"config key '{key}.eps' must be >= 0, got {p.eps}")
        try:
            self.find_spans: SpanFinder = pattern_spans(p.action_pattern)
        except re.error as e:
            raise ConfigError(f"config key '{key}.action_pattern': not a regular expression ({e})") from None
        self.key = key

    def role_components(self, batch: StepBatch) -> Dict[str, torch.Tensor]:
        comps = {}
        for role, name in self.params.components.items():
            if float(self.params.weights.get(role, 1.0)) == 0.0:
                continue  # a role weighed 0 is dropped (its component need not exist)
            if name not in batch.components:
                raise ConfigError(f"config key '{self.key}.components.{role}' names reward component '{name}', which the "
                                  f"run's rewards do not produce; components: {', '.join(sorted(batch.components))}")
            comps[role] = batch.components[name]
        return comps

    def advantages(self, batch: StepBatch) -> AdvantageOutput:
        p = self.params
        comps = self.role_components(batch)
        gids = batch.groups["prompt"]
        weights = {r: float(p.weights.get(r, 1.0)) for r in comps}
        adv = stream_gdpo_advantages(comps, gids, weights, p.eps, p.unbiased_std, p.batch_norm)
        metrics = reward_metrics(batch.rewards, gids, adv)
        for role, r in comps.items():
            metrics[f"component/{role}_mean"] = float(r.double().mean()) if r.numel() else 0.0
        if p.action_loss_weight != 1.0:
            tok = action_weighted(adv, batch, p.action_loss_weight, self.find_spans)
            return AdvantageOutput(advantages=tok, rewards=batch.rewards, metrics=metrics)
        return AdvantageOutput(advantages=adv, rewards=batch.rewards, metrics=metrics)
