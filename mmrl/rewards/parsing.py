"""The answer-letter parsing rule used by the rewards and the synthetic evaluation.

Rule (in order):
1. If the text has ``<answer>...</answer>``, only its content is read.
2. The answer is the first option letter that stands alone: a letter of ``letters`` not adjacent to another
   letter or digit, optionally written ``(B)``, ``B.``, ``B)`` or ``B:``. Lower-case letters do not count.
3. No such letter -> ``None`` (no answer; scored wrong).
"""
from __future__ import annotations

import re
from typing import Optional

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)


def parse_choice(text: str, letters: str) -> Optional[str]:
    m = _ANSWER_TAG.search(text)
    if m:
        text = m.group(1)
    if not letters:
        return None
    pattern = re.compile(rf"(?<![A-Za-z0-9])([{re.escape(letters)}])(?![A-Za-z0-9])")
    found = pattern.search(text)
    return found.group(1) if found else None


_STRICT = re.compile(r"^\s*(?:<answer>\s*)?\(?([A-Z])\)?\.?\s*(?:</answer>)?\s*$")


def is_well_formed(text: str, letters: str) -> bool:
    """Format rule: the whole response is one option letter (optionally ``(B)``/``B.``/``<answer>B</answer>``)."""
    m = _STRICT.match(text)
    return bool(m) and m.group(1) in letters
