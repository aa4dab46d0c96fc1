"""An optional reasoning span for the synthetic video world's SFT targets (FastRL's bench needs long responses).

``reasoning_target(item)`` writes a short, grounded chain of thought (built from the clip's own ``meta``: the
colours, the direction, the frames where the squares are on screen) followed by ``<answer>L</answer>``, 40-49
tokens of the tiny model's tokenizer. ``answer_first=True`` opens it with the chosen letter (``"L. I watch ..."``,
42-51 tokens): the decision comes first and the span after it justifies it, so a model warmed up on letter answers
keeps its perception (its first token is still the letter), which the tiny model loses when the decision sits
a dozen tokens into the text (FastRL's bench, ``bench/fastrl.py``). ``add_reasoning_targets(path)`` stores it as ``meta["sft_response"]`` in a
world's JSON split; the SFT warm-up (``mmrl.train.sft.sft_target``) trains on ``meta["sft_response"]`` when a sample
has one, on the bare letter otherwise. ``styles`` > 1 writes each item in one of several reasoning styles
(``STYLES``: nearly disjoint wording), so that sampled responses are diverse enough for FastRL's similarity test. The accuracy reward and the synthetic eval read the letter inside
``<answer>...</answer>`` (``mmrl.rewards.parsing``).
"""
from __future__ import annotations

import json
import random
from typing import Dict

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
WORDS = {"1": "one", "2": "two", "3": "three"}


# The reasoning styles: a frame (opening, closing) and one body per question type, with nearly disjoint wording,
# so that two well-formed responses in different styles are far apart in unigram Jaccard distance (FastRL's MDAP
# keeps a rollout only at distance >= tau, 0.8 by default, from every kept one of its partition; with one style
# every pair of well-formed responses sits near 0.4-0.5 and the similarity test can never act). Style 0 is the
# original text. Fields: g gold, c first colour, cs colours, n count word, f0/f1 evidence frames, s second colour.
STYLES = (
    ("I watch the video frame by frame. ", " So the answer is option {L}.", {
        "color": "The video shows one {g} square in every frame.",
        "count": "The video shows {n} {sq}: {cs}.",
        "location": "One {c} square is at the {g} of the frame.",
        "direction": "The {c} square appears in frame {f0} and moves {g} until frame {f1}.",
        "order": "The {g} square appears first, in frame {f0}, then the {s} square.",
        "other": "The option that fits the frames best is {g}."}),
    ("Scanning each shot carefully from start to finish reveals that ", "; therefore my pick becomes {L}", {
        "color": "a {g} block remains visible throughout all moments within this clip",
        "count": "exactly {n} shapes are present here, namely {cs}",
        "location": "a {c} block sits toward its {g} edge during most moments within this clip",
        "direction": "a {c} block enters around shot {f0}, drifting {g} through shot {f1}",
        "order": "a {g} block arrives before that {s} block shows up",
        "other": "{g} provides its closest fit among those choices"}),
    ("Evidence check after looking over these images sequentially: ", " — final verdict {L}", {
        "color": "a lone {g} tile persists across whole sequence without change",
        "count": "tally equals {n} when covering {cs}",
        "location": "{c} tile placed near {g} border for nearly whole sequence",
        "direction": "{c} tile heading {g} between images {f0} plus {f1} without stopping",
        "order": "{g} tile precedes {s} tile within sequence",
        "other": "{g} matches better than alternatives"}),
    ("Having reviewed these pictures myself, my notes say ", " => so pick {L} now", {
        "color": "colour stays {g} constantly over time",
        "count": "counted {n} objects total, i.e. {cs}",
        "location": "{c} object located on {g} side mostly",
        "direction": "{c} object travels {g} starting picture {f0}, ending picture {f1}",
        "order": "{g} object came earlier than {s} did",
        "other": "{g} looks right overall"}),
)


def reasoning_target(item: Dict, answer_first: bool = False, style: int = 0) -> str:
    """``<reasoning> <answer>L</answer>`` for one annotation item of the synthetic video world (``answer_first``:
    ``L. <reasoning> <answer>L</answer>``), in reasoning style ``style`` (an index into ``STYLES``)."""
    qtype, meta, gold = item["qtype"], item.get("meta") or {}, item["answer"]
    if not 0 <= style < len(STYLES):
        raise ValueError(f"sample '{item.get('id')}': reasoning style {style} is not in 0..{len(STYLES) - 1}")
    try:
        letter = LETTERS[item["candidates"].index(gold)]
    except ValueError:
        raise ValueError(f"sample '{item.get('id')}': answer {gold!r} is not one of its candidates") from None
    colours = meta.get("colors") or ["unknown"]
    f0, f1 = [f + 1 for f in meta.get("evidence_frames", [0, 0])]
    second = (meta.get("order") or [gold, "other"])[1]
    opening, closing, bodies = STYLES[style]
    body = bodies.get(qtype, bodies["other"]).format(
        g=gold, c=colours[0], cs=", ".join(colours), n=WORDS.get(gold, gold), sq="square" if gold == "1" else "squares",
        f0=f0, f1=f1, s=second)
    lead = f"{letter}. " if answer_first else ""
    return f"{lead}{opening}{body}{closing.format(L=letter)} <answer>{letter}</answer>"


def style_of(item: Dict, styles: int, seed: int = 0) -> int:
    """The reasoning style of ``item`` among the first ``styles``: a draw seeded by (seed, item id), so a split's
    styles are fixed by its seed and do not depend on the order of the items."""
    if not 1 <= styles <= len(STYLES):
        raise ValueError(f"reasoning styles must be in 1..{len(STYLES)}, got {styles}")
    return random.Random(f"{seed}:{item.get('id')}").randrange(styles)


def add_reasoning_targets(path: str, answer_first: bool = False, styles: int = 1, seed: int = 0) -> int:
    """Add ``meta["sft_response"]`` to every item of the JSON split at ``path`` (in place), each in the style
    ``style_of(item, styles, seed)`` (``styles`` = 1: style 0 for all); returns the count."""
    with open(path) as f:
        items = json.load(f)
    for it in items:
        target = reasoning_target(it, answer_first, style_of(it, styles, seed))
        it["meta"] = dict(it.get("meta") or {}, sft_response=target)
    with open(path, "w") as f:
        json.dump(items, f, indent=1)
    return len(items)
