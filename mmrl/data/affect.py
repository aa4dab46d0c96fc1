"""The affect prior of DSPO (specs/algorithms.md §3, Eqs. 2-4): a VAD lexicon and the per-sample prior (mu*, Sigma*).

Values are valence, arousal, dominance in **[0, 1]** (the NRC-VAD v1 range). Loaders:

- NRC-VAD (Mohammad 2018): tab-separated ``Word  Valence  Arousal  Dominance`` (header optional), values in [0, 1];
  the v2 release (values in [-1, 1]) is mapped by ``(x + 1) / 2`` (``scale="pm1"``).
- Warriner et al. (2013): CSV with ``Word, V.Mean.Sum, A.Mean.Sum, D.Mean.Sum`` (and ``*.SD.Sum``) on a 1-9 scale,
  mapped by ``(x - 1) / 8`` (SDs by ``/ 8``); its SDs give sigma_sta.

``BUILTIN_VAD`` covers the Emotion6 / EmoSet classes and the synthetic mood world's vocabulary. Its numbers are
approximations written for this package in the NRC-VAD v1 range (not copied from the lexicon); name a real lexicon
file for real work. Out-of-vocabulary words fall back to the Snowball stem, then to the closest lexicon word by
string similarity (``difflib``); ``VADLexicon.oov`` counts how each lookup was resolved.

Prior (Eqs. 2-4, "proposed" where the paper is silent):
- from the label y: mu_sta = z(y), sigma_sta = the lexicon SD of y when known, else ``sigma_default`` (proposed);
- from a caption's VAD score mu_ctx: sigma_ctx = Var(mu_sta, mu_ctx) per dimension = (mu_sta - mu_ctx)^2 / 4
  (the population variance of the two points), mu* = (mu_sta + mu_ctx)/2, sigma* = (sigma_sta + sigma_ctx)/2;
- from an annotator distribution p over classes c (Emotion6; proposed): mu* = sum_c p_c z_c,
  sigma*^2 = sum_c p_c (z_c - mu*)^2 (sigma* its square root);
- Sigma* = diag(sigma*) exactly as printed (``cov_mode="printed"``) or diag(sigma*^2) (``cov_mode="var"``), floored
  at ``min_var`` so the Mahalanobis distance stays finite.
"""
from __future__ import annotations

import csv
import difflib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence, Tuple

import torch

from mmrl.errors import DataError

VAD = Tuple[float, float, float]
COV_MODES = ("printed", "var")

EMOTION6 = ("anger", "disgust", "fear", "joy", "sadness", "surprise")
EMOSET8 = ("amusement", "anger", "awe", "contentment", "disgust", "excitement", "fear", "sadness")

BUILTIN_VAD: Dict[str, VAD] = {
    "anger": (0.17, 0.87, 0.65), "disgust": (0.05, 0.77, 0.37), "fear": (0.07, 0.84, 0.29),
    "joy": (0.98, 0.82, 0.79), "sadness": (0.05, 0.29, 0.26), "surprise": (0.78, 0.86, 0.47),
    "neutral": (0.50, 0.25, 0.50), "amusement": (0.93, 0.72, 0.57), "awe": (0.83, 0.70, 0.46),
    "contentment": (0.88, 0.28, 0.62), "excitement": (0.90, 0.93, 0.71), "love": (1.00, 0.52, 0.67),
    "calm": (0.80, 0.10, 0.60), "anxiety": (0.15, 0.86, 0.27), "serenity": (0.94, 0.14, 0.65),
    "gloom": (0.10, 0.30, 0.25), "rage": (0.07, 0.96, 0.71), "delight": (0.96, 0.78, 0.70),
    "boredom": (0.16, 0.11, 0.29), "trust": (0.89, 0.36, 0.74), "anticipation": (0.70, 0.74, 0.60),
    "grief": (0.04, 0.60, 0.24), "happiness": (0.96, 0.73, 0.76), "melancholy": (0.20, 0.20, 0.30),
}


def _stem(word: str) -> str:
    import snowballstemmer

    return snowballstemmer.stemmer("english").stemWord(word)


@dataclass
class VADLexicon:
    """word -> (V, A, D) in [0, 1], optional word -> SDs; ``lookup`` resolves OOV words and counts how."""

    values: Dict[str, VAD]
    sds: Dict[str, VAD] = field(default_factory=dict)
    source: str = "builtin"
    oov: Counter = field(default_factory=Counter)  # "exact" | "stem" | "nearest" | "missing"

    def __post_init__(self):
        self._stems: Dict[str, str] = {}
        for w in sorted(self.values):
            self._stems.setdefault(_stem(w), w)

    def resolve(self, word: str) -> Optional[str]:
        """The lexicon word used for ``word``: itself, a word with the same stem, or the closest word (difflib
        ratio >= 0.6); ``None`` when nothing is close. Counts the outcome in ``oov``."""
        w = word.strip().lower()
        if w in self.values:
            self.oov["exact"] += 1
            return w
        s = self._stems.get(_stem(w))
        if s is not None:
            self.oov["stem"] += 1
            return s
        near = difflib.get_close_matches(w, list(self.values), n=1, cutoff=0.6)
        if near:
            self.oov["nearest"] += 1
            return near[0]
        self.oov["missing"] += 1
        return None

    def lookup(self, word: str) -> Optional[VAD]:
        r = self.resolve(word)
        return None if r is None else self.values[r]

    def sd(self, word: str) -> Optional[VAD]:
        r = self.resolve(word)
        return self.sds.get(r) if r is not None else None


def builtin_lexicon() -> VADLexicon:
    return VADLexicon(dict(BUILTIN_VAD), source="builtin")


def _floats(row: Mapping[str, str], cols: Sequence[str], path: str, line: int) -> list:
    try:
        return [float(row[c]) for c in cols]
    except (KeyError, TypeError, ValueError):
        raise DataError(f"{path}:{line}: expected numbers in columns {list(cols)}, got {dict(row)}") from None


def load_lexicon(path: str, scale: Optional[str] = None) -> VADLexicon:
    """Load an NRC-VAD (tab-separated) or Warriner (CSV, ``V.Mean.Sum``...) lexicon; layout detected from the
    header. ``scale``: ``"unit"`` ([0, 1]), ``"pm1"`` ([-1, 1]) or ``"warriner"`` (1-9); default by layout
    (NRC: unit, or pm1 when a negative value appears; Warriner: 1-9)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"VAD lexicon file not found: {path}")
    text = p.read_text(encoding="utf-8").splitlines()
    if not text:
        raise DataError(f"VAD lexicon file is empty: {path}")
    values: Dict[str, VAD] = {}
    sds: Dict[str, VAD] = {}
    if "V.Mean.Sum" in text[0]:
        rows = list(csv.DictReader(text))
        sc = scale or "warriner"
        for i, row in enumerate(rows, start=2):
            v = _floats(row, ("V.Mean.Sum", "A.Mean.Sum", "D.Mean.Sum"), path, i)
            word = (row.get("Word") or "").strip().lower()
            if not word:
                raise DataError(f"{path}:{i}: no 'Word' column value")
            values[word] = tuple(_rescale(x, sc, path) for x in v)
            if all(k in row for k in ("V.SD.Sum", "A.SD.Sum", "D.SD.Sum")):
                s = _floats(row, ("V.SD.Sum", "A.SD.Sum", "D.SD.Sum"), path, i)
                sds[word] = tuple(x / 8.0 if sc == "warriner" else x for x in s)
        return VADLexicon(values, sds, source=str(p))
    start = 1 if text[0].lower().startswith("word\t") or text[0].lower().startswith("term\t") else 0
    raw: Dict[str, list] = {}
    for i, line in enumerate(text[start:], start=start + 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 4:
            raise DataError(f"{path}:{i}: expected 'word<TAB>valence<TAB>arousal<TAB>dominance', got {line!r}")
        raw[parts[0].strip().lower()] = _floats(dict(zip("vad", parts[1:])), "vad", path, i)
    sc = scale or ("pm1" if any(x < 0 for v in raw.values() for x in v) else "unit")
    values = {w: tuple(_rescale(x, sc, path) for x in v) for w, v in raw.items()}
    return VADLexicon(values, source=str(p))


def _rescale(x: float, scale: str, path: str) -> float:
    if scale == "unit":
        return x
    if scale == "pm1":
        return (x + 1.0) / 2.0
    if scale == "warriner":
        return (x - 1.0) / 8.0
    raise DataError(f"{path}: unknown VAD scale {scale!r}; use unit, pm1 or warriner")


# ---- the prior ----------------------------------------------------------------------------------------------------
@dataclass
class Prior:
    mu: torch.Tensor  # [3]
    sigma: torch.Tensor  # [3] the diagonal of Sigma* (already per cov_mode)


def _cov(sigma: torch.Tensor, cov_mode: str, min_var: float) -> torch.Tensor:
    if cov_mode not in COV_MODES:
        raise ValueError(f"cov_mode must be one of {COV_MODES}, got {cov_mode!r}")
    return (sigma if cov_mode == "printed" else sigma ** 2).clamp(min=min_var)


def _vec(lex: VADLexicon, word: str, what: str) -> torch.Tensor:
    z = lex.lookup(word)
    if z is None:
        raise DataError(f"{what}: emotion '{word}' is not in the VAD lexicon ({lex.source}) and has no close word")
    return torch.tensor(z, dtype=torch.float64)


def prior_from_label(lex: VADLexicon, label: str, mu_ctx: Optional[Sequence[float]] = None,
                     sigma_default: float = 0.1, cov_mode: str = "printed", min_var: float = 1e-4,
                     what: str = "prior") -> Prior:
    """Eqs. 2-4: mu_sta, sigma_sta from the label; with a caption score ``mu_ctx`` the two are averaged."""
    mu_sta = _vec(lex, label, what)
    sd = lex.sd(label)
    sig_sta = torch.tensor(sd, dtype=torch.float64) if sd is not None else torch.full((3,), float(sigma_default),
                                                                                       dtype=torch.float64)
    if mu_ctx is None:
        return Prior(mu_sta, _cov(sig_sta, cov_mode, min_var))
    ctx = torch.tensor([float(x) for x in mu_ctx], dtype=torch.float64)
    if ctx.numel() != 3:
        raise DataError(f"{what}: caption VAD score must have 3 values (V, A, D), got {list(mu_ctx)}")
    sig_ctx = (mu_sta - ctx) ** 2 / 4.0
    return Prior((mu_sta + ctx) / 2.0, _cov((sig_sta + sig_ctx) / 2.0, cov_mode, min_var))


def prior_from_distribution(lex: VADLexicon, dist: Mapping[str, float], cov_mode: str = "printed",
                            min_var: float = 1e-4, what: str = "prior") -> Prior:
    """Proposed (Emotion6): mu* = sum_c p_c z_c, sigma*^2 = sum_c p_c (z_c - mu*)^2; p is renormalised."""
    total = sum(float(v) for v in dist.values())
    if total <= 0 or any(float(v) < 0 for v in dist.values()):
        raise DataError(f"{what}: label distribution must be non-negative with a positive sum, got {dict(dist)}")
    z = torch.stack([_vec(lex, c, what) for c in dist])
    p = torch.tensor([float(v) / total for v in dist.values()], dtype=torch.float64)
    mu = (p[:, None] * z).sum(0)
    var = (p[:, None] * (z - mu) ** 2).sum(0)
    return Prior(mu, _cov(var.sqrt(), cov_mode, min_var))


def sample_prior(lex: VADLexicon, meta: Mapping, label: Optional[str], sigma_default: float = 0.1,
                 cov_mode: str = "printed", min_var: float = 1e-4, what: str = "prior") -> Prior:
    """The prior of one sample: ``meta["emotion_dist"]`` (annotator distribution) when present, else the label
    with ``meta["caption_vad"]`` (mu_ctx) when present."""
    if meta.get("emotion_dist"):
        return prior_from_distribution(lex, meta["emotion_dist"], cov_mode, min_var, what)
    if not label:
        raise DataError(f"{what}: no label and no meta.emotion_dist to build the VAD prior from")
    return prior_from_label(lex, label, meta.get("caption_vad"), sigma_default, cov_mode, min_var, what)
