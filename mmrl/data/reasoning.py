"""An optional reasoning span for the synthetic video world's SFT targets (FastRL's bench needs long responses).

``reasoning_target(item)`` writes a short, grounded chain of thought (built from the clip's own ``meta``: the
colours, the direction, the frames where the squares are on screen) followed by ``<answer>L</answer>``, 40-49
tokens of the tiny model's tokenizer. ``answer_first=True`` opens it with the chosen letter (``"L. I watch ..."``,
42-51 tokens): the decision comes first and the span after it justifies it, so a model warmed up on letter answers
keeps its perception (its first token is still the letter), which the tiny model loses when the decision sits
a dozen tokens into the text (FastRL's bench, ``bench/fastrl.py``). ``add_reasoning_targets(path)`` stores it as ``meta["sft_response"]`` in a
world's JSON split; the SFT warm-up (``mmrl.train.sft.sft_target``) trains on ``meta["sft_response"]`` when a sample
has one, on the bare letter otherwise. The accuracy reward and the synthetic eval read the letter inside
``<answer>...</answer>`` (``mmrl.rewards.parsing``).
"""
from __future__ import annotations

import json
from typing import Dict

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
WORDS = {"1": "one", "2": "two", "3": "three"}


def reasoning_target(item: Dict, answer_first: bool = False) -> str:
    """``<reasoning> <answer>L</answer>`` for one annotation item of the synthetic video world (``answer_first``:
    ``L. <reasoning> <answer>L</answer>``)."""
    qtype, meta, gold = item["qtype"], item.get("meta") or {}, item["answer"]
    try:
        letter = LETTERS[item["candidates"].index(gold)]
    except ValueError:
        raise ValueError(f"sample '{item.get('id')}': answer {gold!r} is not one of its candidates") from None
    colours = meta.get("colors") or ["unknown"]
    f0, f1 = [f + 1 for f in meta.get("evidence_frames", [0, 0])]
    if qtype == "color":
        body = f"The video shows one {gold} square in every frame."
    elif qtype == "count":
        body = f"The video shows {WORDS.get(gold, gold)} {'square' if gold == '1' else 'squares'}: {', '.join(colours)}."
    elif qtype == "location":
        body = f"One {colours[0]} square is at the {gold} of the frame."
    elif qtype == "direction":
        body = f"The {colours[0]} square appears in frame {f0} and moves {gold} until frame {f1}."
    elif qtype == "order":
        second = (meta.get("order") or [gold, "other"])[1]
        body = f"The {gold} square appears first, in frame {f0}, then the {second} square."
    else:
        body = f"The option that fits the frames best is {gold}."
    lead = f"{letter}. " if answer_first else ""
    return f"{lead}I watch the video frame by frame. {body} So the answer is option {letter}. <answer>{letter}</answer>"


def add_reasoning_targets(path: str, answer_first: bool = False) -> int:
    """Add ``meta["sft_response"]`` to every item of the JSON split at ``path`` (in place); returns the count."""
    with open(path) as f:
        items = json.load(f)
    for it in items:
        it["meta"] = dict(it.get("meta") or {}, sft_response=reasoning_target(it, answer_first))
    with open(path, "w") as f:
        json.dump(items, f, indent=1)
    return len(items)
