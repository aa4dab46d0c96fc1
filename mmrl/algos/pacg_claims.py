"""PACG claim segmentation: which token spans of a response are direct visual claims (specs/algorithms.md §2).

**Our reading of the abstract (proposed spec).** The ``<think>...</think>`` span of a response is split into
sentences; a sentence is a *visual claim* if it matches a perception lexicon (see, shown, image, figure, color,
label, angle, length, count, ...) or a pluggable ``claim_extractor`` (``module:function``, called as
``fn(sentence: str)``) accepts it. No labels are read: a claim is a span of text, never "supported".

The extractor returns either a bool (the sentence is a claim or not) or the character spans ``[(a, b), ...]``
(offsets within the sentence) of the claim's **content words** (e.g. "red" in "I see a red square in the image."):
a non-empty list makes the sentence a claim and marks which of its tokens carry the claim, as opposed to the
template around them (PACG's ``persistence: content``; ``mmrl.data.synth_claims.claim_content`` for the claims
world). An empty list is "not a claim"; a sentence found by the lexicon only has no content span.

A response without a ``<think>`` span has no claims (its credit is never gated). An unclosed ``<think>`` (a
truncated response) runs to the end of the text.

Claims are returned as character spans of the response text and mapped to token spans with
``token_char_offsets`` (the tokenizer's own decoding of each token, so the spans index ``response_ids``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

PERCEPTION_LEXICON: Tuple[str, ...] = (
    "see", "sees", "seen", "saw", "show", "shows", "shown", "showing", "image", "picture", "photo", "figure",
    "diagram", "visible", "appear", "appears", "depicted", "depicts", "look", "looks", "observe", "observed",
    "color", "colour", "colored", "coloured", "label", "labeled", "labelled", "angle", "length", "count",
    "there is", "there are", "located", "left", "right", "top", "bottom", "corner", "center", "centre",
)

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
# a sentence ends at . ! ? (followed by space / end) or at a line break
_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|(?=\n)|$)")


@dataclass(frozen=True)
class Claim:
    """One visual claim of response ``row``: characters ``[char_start, char_end)`` and tokens
    ``[tok_start, tok_end)`` of that response (``tok_end == tok_start`` when no token overlaps it). ``content``:
    the token spans ``[(s, e), ...]`` of its content words (disjoint, sorted, inside the claim's span; empty when
    the extractor gave none)."""

    row: int
    char_start: int
    char_end: int
    tok_start: int
    tok_end: int
    text: str
    content: Tuple[Tuple[int, int], ...] = ()


def think_span(text: str) -> Optional[Tuple[int, int]]:
    """Character span of the content of the first ``<think>`` block, or ``None`` when there is none."""
    a = text.find(_THINK_OPEN)
    if a < 0:
        return None
    a += len(_THINK_OPEN)
    b = text.find(_THINK_CLOSE, a)
    return (a, len(text) if b < 0 else b)


def sentence_spans(text: str, start: int = 0, end: Optional[int] = None) -> List[Tuple[int, int]]:
    """Character spans of the sentences of ``text[start:end]`` (leading/trailing whitespace trimmed)."""
    end = len(text) if end is None else end
    out = []
    for m in _SENTENCE.finditer(text, start, end):
        a, b = m.start(), m.end()
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if b > a:
            out.append((a, b))
    return out


def lexicon_pattern(lexicon: Sequence[str]) -> Optional[re.Pattern]:
    """Case-insensitive whole-word pattern matching any lexicon entry (entries may be phrases)."""
    words = [w.strip() for w in lexicon if w.strip()]
    if not words:
        return None
    alt = "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in sorted(words, key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z])(?:{alt})(?![A-Za-z])", re.I)


Span = Tuple[int, int]


def _content_of(result, sentence: str) -> Tuple[bool, List[Span]]:
    """An extractor's answer for ``sentence``: (is a claim, content character spans within the sentence)."""
    if result is None or isinstance(result, bool):
        return bool(result), []
    spans = []
    for sp in result:
        a, b = (int(x) for x in sp)
        if not 0 <= a < b <= len(sentence):
            raise ValueError(f"claim extractor returned the span {sp!r} outside the sentence {sentence!r} "
                             f"(need 0 <= a < b <= {len(sentence)})")
        spans.append((a, b))
    return bool(spans), spans


def claims_in_text(text: str, pattern: Optional[re.Pattern],
                   extractor: Optional[Callable[[str], object]] = None) -> List[Tuple[int, int, List[Span]]]:
    """Sentences of the ``<think>`` span that are visual claims (lexicon match or the extractor's yes), each as
    ``(a, b, content)``: its characters ``[a, b)`` of ``text`` and its content words' character spans of ``text``."""
    span = think_span(text)
    if span is None:
        return []
    out = []
    for a, b in sentence_spans(text, *span):
        s = text[a:b]
        hit, content = _content_of(extractor(s), s) if extractor is not None else (False, [])
        if hit or (pattern is not None and pattern.search(s)):
            out.append((a, b, [(a + x, a + y) for x, y in content]))
    return out


def claim_char_spans(text: str, pattern: Optional[re.Pattern],
                     extractor: Optional[Callable[[str], object]] = None) -> List[Span]:
    """Sentences of the ``<think>`` span that are visual claims (lexicon match or ``extractor(sentence)``)."""
    return [(a, b) for a, b, _ in claims_in_text(text, pattern, extractor)]


def token_char_offsets(decode: Callable[[List[int]], str], ids: Sequence[int]) -> Tuple[str, List[Tuple[int, int]]]:
    """The decoded text of ``ids`` and each token's character span in it.

    Tokens are decoded one at a time; if their concatenation is not the decoding of the whole sequence
    (a multi-byte character split across tokens), prefixes are decoded instead (exact, quadratic).
    """
    ids = [int(i) for i in ids]
    full = decode(ids)
    pieces = [decode([i]) for i in ids]
    if "".join(pieces) != full:
        pieces, prev = [], ""
        for k in range(1, len(ids) + 1):
            cur = decode(ids[:k])
            pieces.append(cur[len(prev):] if cur.startswith(prev) else "")
            prev = cur
    offsets, pos = [], 0
    for p in pieces:
        offsets.append((pos, pos + len(p)))
        pos += len(p)
    return full, offsets


def chars_to_tokens(offsets: Sequence[Tuple[int, int]], a: int, b: int) -> Tuple[int, int]:
    """Token span ``[s, e)`` of the tokens overlapping characters ``[a, b)`` (empty span when none do)."""
    hits = [k for k, (x, y) in enumerate(offsets) if x < b and y > a and y > x]
    return (hits[0], hits[-1] + 1) if hits else (0, 0)


def content_token_spans(offsets: Sequence[Span], chars: Sequence[Span]) -> Tuple[Span, ...]:
    """Token spans of the tokens overlapping the character spans ``chars``, merged where they touch or overlap
    (a word split into several pieces is one span; a piece holding two words counts once)."""
    spans = sorted(sp for sp in (chars_to_tokens(offsets, a, b) for a, b in chars) if sp[1] > sp[0])
    merged: List[List[int]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return tuple((s, e) for s, e in merged)


def extract_claims(decode: Callable[[List[int]], str], response_ids: Sequence[Sequence[int]],
                   lexicon: Sequence[str] = PERCEPTION_LEXICON,
                   extractor: Optional[Callable[[str], object]] = None) -> List[Claim]:
    """Visual claims of every response, as token spans of its ``response_ids`` (claims with no token dropped),
    with the token spans of their content words where the extractor marks them."""
    pattern = lexicon_pattern(lexicon)
    claims: List[Claim] = []
    for row, ids in enumerate(response_ids):
        text, offsets = token_char_offsets(decode, ids)
        for a, b, chars in claims_in_text(text, pattern, extractor):
            s, e = chars_to_tokens(offsets, a, b)
            if e > s:
                claims.append(Claim(row, a, b, s, e, text[a:b], content_token_spans(offsets, chars)))
    return claims
