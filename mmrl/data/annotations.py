"""Read and write annotation files in MVBench format plus mmrl's extra fields.

A file is a JSON list of items or JSONL (one item per line). An item is
``{"video" | "image": str, "question": str, "candidates": [str, ...], "answer": str}`` (``answer`` is the
candidate text) with optional ``answer_type`` (``choice`` by default; ``text``, ``number`` or ``list`` for open
answers, where ``candidates`` may be omitted), ``id``, ``qtype``, ``start``/``end`` (seconds), ``frame_fps`` (JPEG frame
folders), ``evidence`` (``{"segments": [[s, e], ...], "boxes": [[t, [x0, y0, x1, y1]], ...],
"source_size": [w, h]}``) and ``meta``. Other fields are kept in ``meta["extra_fields"]`` and written back.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, List, Optional, Sequence, Tuple

from mmrl.data.schema import ANSWER_TYPES, Evidence, ImageRef, Sample, VideoRef
from mmrl.errors import DataError

KNOWN_FIELDS = (
    "id", "video", "image", "question", "candidates", "answer", "answer_type", "qtype",
    "start", "end", "frame_fps", "evidence", "meta",
)
EXTRA = "extra_fields"


class _ItemError(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(f"field '{field}': {message}")


class _BadLine:
    def __init__(self, lineno: int, error: str):
        self.lineno, self.error = lineno, error


# ---------------------------------------------------------------- reading
def _read_items(path: str) -> List[Any]:
    if not os.path.isfile(path):
        raise DataError("annotation file not found", path=path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    stripped = text.lstrip()
    if not path.endswith(".jsonl"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            if not stripped.startswith("{"):
                raise DataError(f"invalid JSON: {e}", path=path) from None
        else:
            if not isinstance(data, list):
                raise DataError(f"expected a JSON list of items (or JSONL), got {type(data).__name__}", path=path)
            return data
    items: List[Any] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError as e:
            items.append(_BadLine(lineno, str(e)))
    return items


def _num(v: Any, field: str, allow_none: bool = True) -> Optional[float]:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _ItemError(field, f"expected a number, got {v!r}")
    return v


def _text(v: Any, field: str) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    raise _ItemError(field, f"expected a string, got {v!r}")


def _evidence(raw: Any) -> Evidence:
    if raw is None:
        return Evidence()
    if not isinstance(raw, dict):
        raise _ItemError("evidence", f"expected an object, got {type(raw).__name__}")
    unknown = set(raw) - {"segments", "boxes", "source_size"}
    if unknown:
        raise _ItemError("evidence", f"unknown key(s) {sorted(unknown)}; known: segments, boxes, source_size")
    segments = []
    for j, seg in enumerate(raw.get("segments") or []):
        f = f"evidence.segments[{j}]"
        if not isinstance(seg, (list, tuple)) or len(seg) != 2:
            raise _ItemError(f, f"expected [start, end], got {seg!r}")
        s, e = _num(seg[0], f, False), _num(seg[1], f, False)
        if s < 0 or e < s:
            raise _ItemError(f, f"need 0 <= start <= end, got {seg!r}")
        segments.append((s, e))
    boxes = []
    for j, entry in enumerate(raw.get("boxes") or []):
        f = f"evidence.boxes[{j}]"
        if not isinstance(entry, (list, tuple)) or len(entry) != 2 or not isinstance(entry[1], (list, tuple)):
            raise _ItemError(f, f"expected [t, [x0, y0, x1, y1]], got {entry!r}")
        t, box = _num(entry[0], f, False), [_num(c, f, False) for c in entry[1]]
        if len(box) != 4 or box[2] < box[0] or box[3] < box[1]:
            raise _ItemError(f, f"expected [x0, y0, x1, y1] with x0 <= x1 and y0 <= y1, got {entry[1]!r}")
        boxes.append((t, box))
    size = raw.get("source_size")
    if size is not None:
        if (not isinstance(size, (list, tuple)) or len(size) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size)):
            raise _ItemError("evidence.source_size", f"expected [width, height] in pixels, got {size!r}")
        size = (size[0], size[1])
    return Evidence(segments=segments, boxes=boxes, source_size=size)


def _to_sample(item: Any, sid: str, root: str, nframes, fps, max_pixels) -> Sample:
    if not isinstance(item, dict):
        raise _ItemError("(item)", f"expected an object, got {type(item).__name__}")
    answer_type = item.get("answer_type", "choice")
    if answer_type not in ANSWER_TYPES:
        raise _ItemError("answer_type", f"expected one of {', '.join(ANSWER_TYPES)}, got {answer_type!r}")
    for key in ("question", "candidates", "answer") if answer_type == "choice" else ("question", "answer"):
        if key not in item:
            raise _ItemError(key, "missing")
    has_v, has_i = item.get("video") is not None, item.get("image") is not None
    if not has_v and not has_i:
        raise _ItemError("video", "missing (an item needs 'video' or 'image')")
    if has_v and has_i:
        raise _ItemError("image", "an item has either 'video' or 'image', not both")
    field = "video" if has_v else "image"
    rel = item[field]
    if not isinstance(rel, str) or not rel:
        raise _ItemError(field, f"expected a non-empty path, got {rel!r}")
    media = os.path.normpath(os.path.join(root, os.path.expanduser(rel)))
    if not os.path.exists(media):
        raise _ItemError(field, f"media file not found: {media}")
    question = item["question"]
    if not isinstance(question, str):
        raise _ItemError("question", f"expected a string, got {question!r}")
    cands, answer = _answer(item, answer_type)
    qtype = item.get("qtype", "generic")
    if not isinstance(qtype, str) or not qtype:
        raise _ItemError("qtype", f"expected a non-empty string, got {qtype!r}")
    meta = item.get("meta") or {}
    if not isinstance(meta, dict):
        raise _ItemError("meta", f"expected an object, got {type(meta).__name__}")
    extra = {k: v for k, v in item.items() if k not in KNOWN_FIELDS}
    if extra:
        meta = dict(meta, **{EXTRA: extra})
    evidence = _evidence(item.get("evidence"))
    video = image = None
    if has_v:
        start, end = _num(item.get("start"), "start"), _num(item.get("end"), "end")
        if start is not None and start < 0:
            raise _ItemError("start", f"must be >= 0, got {start}")
        if start is not None and end is not None and end <= start:
            raise _ItemError("end", f"must be > start ({start}), got {end}")
        frame_fps = _num(item.get("frame_fps"), "frame_fps")
        if frame_fps is not None and frame_fps <= 0:
            raise _ItemError("frame_fps", f"must be > 0, got {frame_fps}")
        video = VideoRef(path=media, start=start, end=end, fps=fps, nframes=nframes,
                         max_pixels=max_pixels, frame_fps=frame_fps)
    else:
        for key in ("start", "end", "frame_fps"):
            if item.get(key) is not None:
                raise _ItemError(key, "only valid for a video item")
        image = ImageRef(path=media, max_pixels=max_pixels)
    return Sample(id=sid, question=question, candidates=cands, answer=answer, qtype=qtype,
                  video=video, image=image, evidence=evidence, meta=meta, answer_type=answer_type)


def _answer(item: dict, answer_type: str):
    """Candidates and answer by ``answer_type``: a choice among >= 2 distinct candidates (the default), free text,
    a finite number, or a non-empty list of strings; open answers may list candidates too (shown in the prompt)."""
    cands = item.get("candidates", [] if answer_type != "choice" else None)
    if not isinstance(cands, list) or (answer_type == "choice" and len(cands) < 2):
        raise _ItemError("candidates", f"expected a list of at least 2 options, got {cands!r}")
    cands = [_text(c, f"candidates[{j}]") for j, c in enumerate(cands)]
    if len(set(cands)) != len(cands):
        raise _ItemError("candidates", f"duplicate options in {cands!r}")
    raw = item["answer"]
    if answer_type == "number":
        return cands, float(_num(raw, "answer", False))
    if answer_type == "list":
        if not isinstance(raw, list) or not raw:
            raise _ItemError("answer", f"expected a non-empty list for answer_type list, got {raw!r}")
        return cands, [_text(v, f"answer[{j}]") for j, v in enumerate(raw)]
    answer = _text(raw, "answer")
    if answer_type == "text":
        if not answer.strip():
            raise _ItemError("answer", "expected a non-empty text answer")
        return cands, answer
    if answer not in cands:
        raise _ItemError("answer", f"{answer!r} is not among the candidates {cands!r}")
    return cands, answer


def load_samples(
    path: str,
    media_root: Optional[str] = None,
    on_error: str = "raise",
    nframes: Optional[int] = None,
    fps: Optional[float] = None,
    max_pixels: Optional[int] = None,
) -> Tuple[List[Sample], List[Tuple[str, str]]]:
    """Load samples from a JSON list or JSONL annotation file.

    Relative media paths resolve against ``media_root`` (default: the annotation file's folder); the
    returned paths are absolute. ``nframes``/``fps``/``max_pixels`` set every sample's sampling budget.
    A bad item raises ``DataError`` naming the file, the item (index and id) and the field; with
    ``on_error="skip"`` it is left out and listed in the returned ``(sample_id, reason)`` pairs instead.
    Items without ``id`` are named ``"{file_stem}:{index}"``.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    items = _read_items(path)
    root = os.path.abspath(media_root if media_root is not None else os.path.dirname(os.path.abspath(path)))
    stem = os.path.splitext(os.path.basename(path))[0]
    samples: List[Sample] = []
    skipped: List[Tuple[str, str]] = []
    seen = set()
    for index, item in enumerate(items):
        sid = f"{stem}:{index}"
        try:
            if isinstance(item, _BadLine):
                raise _ItemError("(line)", f"invalid JSON on line {item.lineno}: {item.error}")
            if isinstance(item, dict) and item.get("id") is not None:
                sid = _text(item["id"], "id")
            if sid in seen:
                raise _ItemError("id", f"duplicate id {sid!r}")
            sample = _to_sample(item, sid, root, nframes, fps, max_pixels)
        except _ItemError as e:
            reason = f"item {index}: {e}"
            if on_error == "raise":
                raise DataError(reason, sample_id=sid, path=path) from None
            skipped.append((sid, reason))
            continue
        seen.add(sid)
        samples.append(sample)
    return samples, skipped


# ---------------------------------------------------------------- writing
def _media_path(p: str, root: str) -> str:
    p = os.path.abspath(p)
    rel = os.path.relpath(p, root)
    return p if rel == ".." or rel.startswith(".." + os.sep) else rel


def sample_to_item(sample: Sample, root: str) -> dict:
    """The annotation item of ``sample``; media paths relative to ``root`` when they lie under it."""
    item: dict = {"id": sample.id}
    if sample.video is not None:
        item["video"] = _media_path(sample.video.path, root)
    if sample.image is not None:
        item["image"] = _media_path(sample.image.path, root)
    item.update(question=sample.question, candidates=list(sample.candidates), answer=sample.answer,
                qtype=sample.qtype)
    if not sample.is_choice:
        item["answer_type"] = sample.answer_type
    if sample.video is not None:
        for key in ("start", "end", "frame_fps"):
            if getattr(sample.video, key) is not None:
                item[key] = getattr(sample.video, key)
    ev = sample.evidence
    if ev.segments or ev.boxes or ev.source_size is not None:
        item["evidence"] = {
            "segments": [list(s) for s in ev.segments],
            "boxes": [[t, list(b)] for t, b in ev.boxes],
            "source_size": list(ev.source_size) if ev.source_size is not None else None,
        }
    meta = {k: v for k, v in sample.meta.items() if k != EXTRA}
    if meta:
        item["meta"] = meta
    for k, v in (sample.meta.get(EXTRA) or {}).items():
        item.setdefault(k, v)
    return item


def save_samples(samples: Sequence[Sample], path: str, media_root: Optional[str] = None) -> None:
    """Write ``samples`` in the format ``load_samples`` reads (JSONL if ``path`` ends in ``.jsonl``).

    Media paths are written relative to ``media_root`` (default: the output file's folder) when they lie
    under it, so ``load_samples(path)`` returns equal samples.
    """
    path = os.path.abspath(path)
    root = os.path.abspath(media_root if media_root is not None else os.path.dirname(path))
    items = [sample_to_item(s, root) for s in samples]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            for it in items:
                f.write(json.dumps(it) + "\n")
        else:
            json.dump(items, f, indent=1)
            f.write("\n")
