"""Chat messages for a multiple-choice question over a video or an image.

The user turn is ``<media>{question}\\nOptions:\\n(A) c0\\n(B) c1...\\n{instruction}``; the expected response is
the option letter (the rewards' parsing rule is in ``mmrl/rewards/parsing.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from mmrl.data.schema import LETTERS, Media


@dataclass
class PromptStyle:
    system: Optional[str] = None  # None = the chat template's default system turn
    instruction: str = "Answer with the option's letter from the given choices directly."
    option_format: str = "({letter}) {text}"
    prefill: str = ""  # text the assistant turn starts with (MVBench's "Best option:(")


def format_options(candidates: List[str], option_format: str = "({letter}) {text}") -> str:
    return "\n".join(option_format.format(letter=LETTERS[i], text=c) for i, c in enumerate(candidates))


def build_messages(question: str, candidates: List[str], media: Media, style: PromptStyle | None = None) -> list:
    style = style or PromptStyle()
    text = question
    if candidates:
        text += "\nOptions:\n" + format_options(candidates, style.option_format)
    if style.instruction:
        text += "\n" + style.instruction
    media_part = {"type": "video"} if media.is_video else {"type": "image"}
    messages = []
    if style.system is not None:
        messages.append({"role": "system", "content": [{"type": "text", "text": style.system}]})
    messages.append({"role": "user", "content": [media_part, {"type": "text", "text": text}]})
    return messages
