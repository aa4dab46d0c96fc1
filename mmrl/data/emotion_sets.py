"""Loaders for the public emotion datasets' annotation layouts, into ``Sample`` lists (no data is downloaded).

**Emotion6** (Peng et al. 2015): ``<root>/ground_truth.txt``, tab-separated with a header line::

    [image_filename]  [valence]  [arousal]  [prob. anger]  [prob. disgust]  [prob. fear]  [prob. joy]
    [prob. sadness]  [prob. surprise]  [prob. neutral]

``image_filename`` is ``<emotion>/<n>.jpg`` under ``<root>/images`` (or ``<root>``); valence and arousal are on
the SAM 1-9 scale. A sample's ``answer`` is the folder's emotion, ``meta.emotion_dist`` the seven probabilities
(DSPO builds its prior from them) and ``meta.sam_va`` the (valence, arousal) pair.

**EmoSet** (Yang et al. 2023): ``<root>/<split>.json``, a list of ``[emotion, image_path, annotation_path]``
triples, paths relative to ``<root>``; the label is one of ``EMOSET8``. The annotation file (per-image
attributes) is not read.

A malformed row raises ``DataError`` naming the file and line (or entry), unless ``on_error="skip"``, in which case
it is left out and returned in the skipped list with its reason.
"""
from __future__ import annotations

import json
import os
from typing import List, Tuple

from mmrl.data.affect import EMOSET8, EMOTION6
from mmrl.data.schema import ImageRef, Sample
from mmrl.errors import DataError

QUESTION = "Which emotion does this image most likely evoke in a viewer?"
E6_COLUMNS = EMOTION6 + ("neutral",)


def _check(on_error: str) -> None:
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")


def load_emotion6(root: str, on_error: str = "raise") -> Tuple[List[Sample], List[Tuple[str, str]]]:
    """Samples of an Emotion6 folder (layout in the module docstring) and the skipped ``(id, reason)`` rows."""
    _check(on_error)
    path = os.path.join(root, "ground_truth.txt")
    if not os.path.isfile(path):
        raise DataError(f"Emotion6: {path} not found (expected the dataset's ground_truth.txt)")
    img_root = os.path.join(root, "images") if os.path.isdir(os.path.join(root, "images")) else root
    samples, skipped = [], []
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = line.split("\t")
        sid = parts[0].strip() or f"line{lineno}"
        try:
            if len(parts) != 10:
                raise ValueError(f"expected 10 tab-separated columns, got {len(parts)}")
            fname = parts[0].strip()
            label = fname.replace("\\", "/").split("/")[0].lower()
            if label not in EMOTION6:
                raise ValueError(f"image folder {label!r} is not an Emotion6 class {EMOTION6}")
            nums = [float(x) for x in parts[1:]]
            probs = nums[2:]
            if any(p < 0 for p in probs) or sum(probs) <= 0:
                raise ValueError(f"probabilities must be non-negative with a positive sum, got {probs}")
            img = os.path.join(img_root, fname)
            if not os.path.isfile(img):
                raise ValueError(f"image not found: {img}")
        except ValueError as e:
            if on_error == "raise":
                raise DataError(f"{path}:{lineno}: {e}") from None
            skipped.append((sid, f"{path}:{lineno}: {e}"))
            continue
        samples.append(Sample(id=f"emotion6/{fname}", question=QUESTION, candidates=list(EMOTION6), answer=label,
                              qtype="emotion", image=ImageRef(os.path.abspath(img)),
                              meta={"emotion_dist": dict(zip(E6_COLUMNS, probs)), "sam_va": nums[:2]}))
    return samples, skipped


def load_emoset(root: str, split: str = "train", on_error: str = "raise") -> Tuple[List[Sample], List[Tuple[str, str]]]:
    """Samples of an EmoSet split (layout in the module docstring) and the skipped ``(id, reason)`` entries."""
    _check(on_error)
    path = os.path.join(root, f"{split}.json")
    if not os.path.isfile(path):
        raise DataError(f"EmoSet: {path} not found (expected the dataset's {split}.json)")
    try:
        with open(path, encoding="utf-8") as f:
            entries = json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(entries, list):
        raise DataError(f"{path}: expected a list of [emotion, image_path, annotation_path] entries")
    samples, skipped = [], []
    for i, ent in enumerate(entries):
        try:
            if not (isinstance(ent, list) and len(ent) == 3 and all(isinstance(x, str) for x in ent)):
                raise ValueError(f"expected [emotion, image_path, annotation_path], got {ent!r}")
            label, rel, _ = ent
            if label.lower() not in EMOSET8:
                raise ValueError(f"emotion {label!r} is not an EmoSet class {EMOSET8}")
            img = os.path.join(root, rel)
            if not os.path.isfile(img):
                raise ValueError(f"image not found: {img}")
        except ValueError as e:
            if on_error == "raise":
                raise DataError(f"{path} entry {i}: {e}") from None
            skipped.append((f"{split}:{i}", f"{path} entry {i}: {e}"))
            continue
        samples.append(Sample(id=f"emoset/{rel}", question=QUESTION, candidates=list(EMOSET8), answer=label.lower(),
                              qtype="emotion", image=ImageRef(os.path.abspath(img))))
    return samples, skipped
