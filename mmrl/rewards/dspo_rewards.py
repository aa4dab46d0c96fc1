"""DSPO's reward components (specs/algorithms.md §3): R = 1.0 acc + 0.1 fmt + 0.1 R_cf + 0.3 R_div.

Registered here (weights are set in the run config's ``rewards`` list):

- ``dspo_accuracy``: 1 if step 4's ``\\boxed{}`` names the gold emotion (its text, or its option letter), else 0.
- ``dspo_format``: 1 for a well-formed four-step response (``parse_dspo``), else 0; the malformed reasons are logged
  as ``dspo_format/<reason>`` components (fraction of the batch) that do not enter the total.
- ``dspo_div``: R_div (DEDR, Eq. 16) with **uniform** weights w_k = 1/K against the sample's VAD prior
  (``mmrl.data.affect.sample_prior``); it also logs the per-candidate terms
  ``dspo_div/t<k> = exp(-D_all^2/2 tau_ctr^2) [1 - exp(-Delta_k/tau_div)]`` so the ``dspo`` spec can re-weight them
  with CVIG's w after the re-scoring pass (rewards run before it). Malformed responses, K < 2, or a candidate the
  lexicon cannot resolve give 0 (counted in ``dspo_div/unresolved``); ``dspo_div/oov_fallback`` counts the
  candidates resolved through the stemmer or the nearest lexicon word.
- ``dspo_evidence``: IoU of step 1's box with the sample's evidence box (log-only by default), plus
  ``dspo_evidence/mask_area`` = S_region / S_image of the evidence box, which CVIG's Delta P uses.

R_cf and the CVIG-weighted R_div are added by the ``dspo`` algorithm spec (``mmrl/algos/dspo.py``).
"""
from __future__ import annotations

from functools import lru_cache
from typing import List, Optional

import torch

from mmrl.algos.dspo_math import dedr_terms
from mmrl.data.affect import VADLexicon, builtin_lexicon, load_lexicon, sample_prior
from mmrl.rewards.base import REWARDS, RewardContext
from mmrl.rewards.dspo_format import REASONS, TERM, normalize_emotion, parse_dspo


@lru_cache(maxsize=8)
def get_lexicon(path: str = "") -> VADLexicon:
    """The lexicon at ``path`` (NRC-VAD or Warriner layout), or the shipped one for ``""``; loaded once."""
    return load_lexicon(path) if path else builtin_lexicon()


def _gold(sample) -> str:
    return normalize_emotion(str(sample.answer))


def _parse(c: RewardContext, k: Optional[int]):
    return parse_dspo(c.trajectory.text, k=k, truncated=c.trajectory.truncated)


@REWARDS.register("dspo_accuracy")
def dspo_accuracy(ctx: List[RewardContext], k: Optional[int] = None) -> List[float]:
    """1 if the step-4 choice is the gold emotion (text, case-insensitive) or its option letter; 0 otherwise."""
    out = []
    for c in ctx:
        p = _parse(c, k)
        choice = normalize_emotion(p.choice or "") if p.ok else ""
        letter = c.expected if c.sample.is_choice else None
        out.append(1.0 if choice and (choice == _gold(c.sample) or (letter and choice.upper() == letter)) else 0.0)
    return out


@REWARDS.register("dspo_format")
def dspo_format(ctx: List[RewardContext], k: Optional[int] = None) -> dict:
    """1 for a well-formed four-step response (exactly ``k`` candidates when given), else 0; reasons logged."""
    parses = [_parse(c, k) for c in ctx]
    out = {"dspo_format": [1.0 if p.ok else 0.0 for p in parses]}
    for r in REASONS:
        out[f"dspo_format/{r}"] = [1.0 if p.reason == r else 0.0 for p in parses]
    return out


@REWARDS.register("dspo_div")
def dspo_div(ctx: List[RewardContext], lexicon: str = "", k: Optional[int] = None, k_max: int = 8,
             tau_ctr: float = 1.0, tau_div: float = 1.0, clamp: bool = True, sigma_default: float = 0.1,
             cov_mode: str = "printed", min_var: float = 1e-4) -> dict:
    """R_div with uniform w, plus the per-candidate terms (see the module docstring). ``k_max`` bounds K."""
    lex = get_lexicon(lexicon)
    total, unresolved, fallback = [], [], []
    terms = [[0.0] * len(ctx) for _ in range(k_max)]
    for i, c in enumerate(ctx):
        p = _parse(c, k)
        before = lex.oov["stem"] + lex.oov["nearest"]
        zs = [lex.lookup(e) for e in p.candidates] if p.ok else []
        fallback.append(float(lex.oov["stem"] + lex.oov["nearest"] - before))
        if not p.ok or len(zs) < 2 or len(zs) > k_max or any(z is None for z in zs):
            total.append(0.0)
            unresolved.append(1.0 if p.ok and any(z is None for z in zs) else 0.0)
            continue
        prior = sample_prior(lex, c.sample.meta, _gold(c.sample), sigma_default, cov_mode, min_var,
                             what=f"sample '{c.sample.id}'")
        d_all, delta = dedr_terms(torch.tensor(zs, dtype=torch.float64), prior.mu, prior.sigma)
        if clamp:
            delta = delta.clamp(min=-tau_div)
        t = torch.exp(-d_all ** 2 / (2 * tau_ctr ** 2)) * (1 - torch.exp(-delta / tau_div))
        for j, v in enumerate(t.tolist()):
            terms[j][i] = v
        total.append(float(t.mean()))
        unresolved.append(0.0)
    out = {"dspo_div": total, "dspo_div/unresolved": unresolved, "dspo_div/oov_fallback": fallback}
    out.update({TERM.format(j): terms[j] for j in range(k_max)})
    return out


def _iou(a, b) -> float:
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def evidence_box(sample, size) -> Optional[tuple]:
    """The sample's first evidence box as normalised (ymin, xmin, ymax, xmax); ``size`` = (width, height) fallback."""
    if not sample.evidence.boxes:
        return None
    x0, y0, x1, y1 = (float(v) for v in sample.evidence.boxes[0][1])
    w, h = sample.evidence.source_size or size or (None, None)
    if not w or not h:
        raise ValueError(f"sample '{sample.id}': evidence box without source_size")
    return (y0 / h, x0 / w, y1 / h, x1 / w)


@REWARDS.register("dspo_evidence")
def dspo_evidence(ctx: List[RewardContext], k: Optional[int] = None) -> dict:
    """IoU(step-1 box, evidence box) and the evidence box's area ratio; 0 without a parse or an evidence box."""
    iou, area = [], []
    for c in ctx:
        p = _parse(c, k)
        ev = evidence_box(c.sample, c.media_info.get("size"))
        iou.append(_iou(p.box, ev) if (p.ok and ev) else 0.0)
        area.append((ev[2] - ev[0]) * (ev[3] - ev[1]) if ev else 0.0)
    return {"dspo_evidence": iou, "dspo_evidence/mask_area": area}
