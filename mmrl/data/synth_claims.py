"""A world with checkable visual claims (PACG, issue 14): one coloured square per PNG image.

Each image shows one square with a known ``color`` (``PALETTE``) and ``location`` (left/right/top/bottom).
Questions ask one attribute and carry a **prior** the model can guess from without looking ("most squares here
are red", drawn per question): the gold answer equals the stated prior with probability ``prior_p`` (else a
uniform draw), so copying the prior is right ``prior_p + (1 - prior_p) / 4`` of the time and looking always is.

Every sample has an SFT trace (``meta.sft_response``)::

    <think>I see a red square in the image. The square is shown on the left. So I pick option B.</think><answer>B</answer>

with one claim sentence per attribute, in random order. The claim about the *asked* attribute is always
supported (the answer is right); the claim about the other attribute contradicts the image with probability
``unsupported_rate`` — a correct response with an unsupported claim, the case PACG is about. ``meta.claims``
lists each claim sentence with ``supported``.

Where an unsupported claim comes from (``unsupported_source``):

- ``"random"``: a uniformly drawn wrong value, nothing in the text predicts it (a perception error);
- ``"prior"``: the question also states a prior for the attribute NOT asked ("What colour is the square? (Most
  squares here are red.) (It is usually on the left.)") and an unsupported claim repeats that prior where it is
  wrong (a supported trace draws that prior uniformly). The unsupported claim is then predictable from the text
  alone and the supported one only from the image: the hallucination PACG's persistence is meant to find
  (P_c ≈ 1 when a claim survives the intervention). ``meta.priors`` holds both stated priors.

``claim_support(sentence, meta)`` tells whether the image supports ANY sentence that names a colour or a
location (None when it names neither), so the claims of model-generated responses can be labelled too (``mmrl
diagnose``); ``claim_content(sentence)`` gives the spans of its colour / location words (PACG's content-span
persistence). Deterministic given ``seed``.
"""
from __future__ import annotations

import os
import re
from typing import List, Optional, Tuple

import numpy as np
from PIL import Image

from mmrl.data.synth_video import (
    LOCATIONS,
    PALETTE,
    Balancer,
    check_world_args,
    place_region,
    render,
    split_rng,
    square_side,
    write_json,
)

ATTRIBUTES = {"color": list(PALETTE), "location": list(LOCATIONS)}
ASK = {"color": "What colour is the square?", "location": "Where is the square?"}
HINTS = {"color": "(Most squares here are {prior}.)", "location": "(It is usually on the {prior}.)"}
QUESTIONS = {a: ASK[a] + " " + HINTS[a] for a in ASK}
UNSUPPORTED_SOURCES = ("random", "prior")
CLAIMS = {
    "color": "I see a {value} square in the image.",
    "location": "The square is shown on the {value}.",
}
_WORDS = {a: re.compile(r"(?<![A-Za-z])(" + "|".join(v) + r")(?![A-Za-z])", re.I) for a, v in ATTRIBUTES.items()}


def claim_support(sentence: str, meta: dict) -> Optional[bool]:
    """Whether the image supports a sentence: every colour / location word it names must be the square's.

    ``meta`` holds ``color`` and ``location``. Returns None when the sentence names neither attribute.
    """
    named = False
    for attr, pat in _WORDS.items():
        for m in pat.finditer(sentence):
            named = True
            if m.group(1).lower() != str(meta[attr]).lower():
                return False
    return True if named else None


def claim_content(sentence: str) -> List[Tuple[int, int]]:
    """PACG's ``claim_extractor`` for this world: the character spans of the colour and location words of a
    sentence (its content words; "red" in "I see a red square in the image."), sorted; [] when it names neither.
    With ``persistence: content`` a claim's persistence is measured on these words' tokens only."""
    return sorted(m.span(1) for pat in _WORDS.values() for m in pat.finditer(sentence))


def trace(claims: List[str], letter: str) -> str:
    return "<think>" + " ".join(claims) + f" So I pick option {letter}.</think><answer>{letter}</answer>"


def make_claims_world(out_dir: str, n_train: int, n_test: int, seed: int = 0, size: int = 56,
                      unsupported_rate: float = 0.3, prior_p: float = 0.6, fixed_options: bool = True,
                      unsupported_source: str = "random") -> dict:
    """Write ``out_dir/images/*.png``, ``train.json`` and ``test.json``; return paths and claim statistics.

    ``fixed_options``: every question lists all values of its attribute in canonical order (a letter always means
    the same value, as in the demo world; a tiny model learns it in minutes); False shuffles 2-4 candidates.
    """
    check_world_args(size, 4, 1.0)
    if not 0.0 <= unsupported_rate <= 1.0 or not 0.0 <= prior_p <= 1.0:
        raise ValueError(f"unsupported_rate and prior_p must be in [0, 1], got {unsupported_rate}, {prior_p}")
    if unsupported_source not in UNSUPPORTED_SOURCES:
        raise ValueError(f"unsupported_source must be one of {', '.join(UNSUPPORTED_SOURCES)}, got {unsupported_source!r}")
    os.makedirs(os.path.join(out_dir, "images"), exist_ok=True)
    result = {"out_dir": out_dir, "stats": {}}
    s = square_side(size)
    for split, n in (("train", n_train), ("test", n_test)):
        rng = split_rng(seed, split)
        bal = Balancer(rng, fixed_options=fixed_options)
        items, n_unsup = [], 0
        for i in range(n):
            qtype = ("color", "location")[i % 2]
            pool = ATTRIBUTES[qtype]
            prior = pool[int(rng.integers(len(pool)))]  # stated in the question
            gold = prior if rng.random() < prior_p else pool[int(rng.integers(len(pool)))]
            other = "location" if qtype == "color" else "color"
            scene = {qtype: gold, other: ATTRIBUTES[other][int(rng.integers(len(ATTRIBUTES[other])))]}
            box = place_region(rng, size, s, scene["location"])
            rel = f"images/{split}_{i:05d}.png"
            Image.fromarray(render([(box, scene["color"])], size)).save(os.path.join(out_dir, rel))
            cands = bal.candidates(gold, pool)
            letter = "ABCD"[cands.index(gold)]
            said = dict(scene)
            unsupported = rng.random() < unsupported_rate
            if unsupported:
                wrong = [v for v in ATTRIBUTES[other] if v != scene[other]]
                said[other] = wrong[int(rng.integers(len(wrong)))]
                n_unsup += 1
            question, extra = QUESTIONS[qtype].format(prior=prior), {}
            if unsupported_source == "prior":  # the unasked attribute's stated prior; the unsupported claim repeats it
                pool_o = ATTRIBUTES[other]
                other_prior = said[other] if unsupported else pool_o[int(rng.integers(len(pool_o)))]
                question += " " + HINTS[other].format(prior=other_prior)
                extra = {"priors": {qtype: prior, other: other_prior}}
            order = [qtype, other] if rng.random() < 0.5 else [other, qtype]
            claims = [{"text": CLAIMS[a].format(value=said[a]), "attribute": a, "supported": said[a] == scene[a]}
                      for a in order]
            meta = dict(scene, prior=prior, seed=int(seed), size=size, **extra,
                        claims=claims, sft_response=trace([c["text"] for c in claims], letter))
            items.append({
                "id": f"{split}-{i:05d}", "image": rel, "question": question,
                "candidates": cands, "answer": gold, "qtype": qtype,
                "evidence": {"segments": [], "boxes": [[0.0, list(box)]], "source_size": [size, size]},
                "meta": meta,
            })
        path = os.path.join(out_dir, f"{split}.json")
        write_json(items, path)
        result[split] = path
        result["stats"][split] = {"n": n, "with_unsupported_claim": n_unsup,
                                  "gold_is_prior": sum(it["answer"] == it["meta"]["prior"] for it in items)}
    return result
