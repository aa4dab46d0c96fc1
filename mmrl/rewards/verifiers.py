"""Verifiers: does a response's answer match a sample's answer? One per answer type (``Sample.answer_type``),
registered in ``VERIFIERS``; a reward (``accuracy``'s ``verifier`` param) or a benchmark names the one it uses.

The answer span of a response: the content of ``<answer>...</answer>`` if present, else of the last
``\\boxed{...}``, else the whole text (``extract_answer``).

- ``choice``: the first stand-alone option letter equals the expected letter under the view (``parse_choice``).
- ``text_exact``: normalised strings are equal (lower case, punctuation and articles dropped, spaces collapsed;
  the SQuAD normalisation, Rajpurkar et al. 2016).
- ``number``: the first number in the span is within ``rel_tol`` (default 1e-2) relative or ``abs_tol``
  (default 1e-6) of the answer.
- ``list_f1``: F1 between the normalised sets of comma/semicolon/newline-separated items and the answer list
  (1.0 iff the sets are equal); ``list_exact`` pays only equal sets.
"""
from __future__ import annotations

import math
import re
import string
from typing import Any, Optional

from mmrl.registry import Registry
from mmrl.rewards.parsing import parse_choice

VERIFIERS = Registry("verifier", builtins={__name__: ("choice", "list_exact", "list_f1", "number", "text_exact")})
DEFAULT_VERIFIER = {"choice": "choice", "text": "text_exact", "number": "number", "list": "list_f1"}

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def extract_answer(text: str) -> str:
    m = _ANSWER_TAG.search(text)
    if m:
        return m.group(1).strip()
    boxed = _BOXED.findall(text)
    return boxed[-1].strip() if boxed else text.strip()


def normalize(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    return " ".join(_ARTICLES.sub(" ", text).split())


@VERIFIERS.register("choice")
def choice(text: str, answer: Any, letters: str = "", expected: Optional[str] = None) -> float:
    pred = parse_choice(text, letters)
    return 1.0 if expected is not None and pred == expected else 0.0


@VERIFIERS.register("text_exact")
def text_exact(text: str, answer: Any, **_) -> float:
    span = normalize(extract_answer(text))
    return 1.0 if span and span == normalize(str(answer)) else 0.0


@VERIFIERS.register("number")
def number(text: str, answer: Any, rel_tol: float = 1e-2, abs_tol: float = 1e-6, **_) -> float:
    m = _NUMBER.search(extract_answer(text).replace(",", ""))
    if not m:
        return 0.0
    value = float(m.group(0))
    return 1.0 if math.isfinite(value) and math.isclose(value, float(answer), rel_tol=rel_tol, abs_tol=abs_tol) else 0.0


def _items(text: str) -> set:
    return {normalize(x) for x in re.split(r"[,;\n]", extract_answer(text)) if normalize(x)}


@VERIFIERS.register("list_f1")
def list_f1(text: str, answer: Any, **_) -> float:
    pred, gold = _items(text), {normalize(str(x)) for x in answer}
    hit = len(pred & gold)
    if not hit:
        return 0.0
    p, r = hit / len(pred), hit / len(gold)
    return 2 * p * r / (p + r)


@VERIFIERS.register("list_exact")
def list_exact(text: str, answer: Any, **_) -> float:
    return 1.0 if _items(text) == {normalize(str(x)) for x in answer} else 0.0


def verify(name: Optional[str], text: str, sample, letters: str = "", expected: Optional[str] = None, **params) -> float:
    """Score ``text`` against ``sample`` with verifier ``name`` (default: by the sample's answer type)."""
    fn = VERIFIERS.get(name or DEFAULT_VERIFIER[sample.answer_type])
    if fn is choice:
        return choice(text, sample.answer, letters=letters, expected=expected)
    return float(fn(text, sample.answer, **params))
