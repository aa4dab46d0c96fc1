"""Annotation validation, one row per boundary: each bad value is rejected naming its field, and the value just
inside the boundary loads unchanged (so an off-by-one in either direction fails a row)."""
import json
import re

import pytest

from mmrl.data.annotations import load_samples
from mmrl.errors import DataError


def item(**kw):
    it = {"id": "s", "video": "clip.mp4", "question": "Which way?", "candidates": ["left", "right"], "answer": "right"}
    it.update(kw)
    return {k: v for k, v in it.items() if v is not ...}


@pytest.fixture
def media(tmp_path):
    (tmp_path / "clip.mp4").write_bytes(b"\0")
    (tmp_path / "pic.png").write_bytes(b"\0")
    return tmp_path


def load_one(media, it):
    path = media / "a.json"
    path.write_text(json.dumps([it]))
    samples, skipped = load_samples(str(path))
    assert skipped == []
    return samples[0]


REJECTED = [
    # fields, the field named in the error
    (dict(evidence={"boxes": [[0.0, [1, 5, 3, 4]]]}), "evidence.boxes[0]"),  # y1 < y0
    (dict(evidence={"boxes": [[0.0, [5, 1, 3, 4]]]}), "evidence.boxes[0]"),  # x1 < x0
    (dict(evidence={"boxes": [[0.0, [1, 2, 3, 4, 5]]]}), "evidence.boxes[0]"),
    (dict(evidence={"boxes": [[0.0, [1, 2, 3, True]]]}), "evidence.boxes[0]"),
    (dict(evidence={"boxes": [[True, [1, 2, 3, 4]]]}), "evidence.boxes[0]"),
    (dict(evidence={"boxes": [[0.0, 1, 2, 3, 4]]}), "evidence.boxes[0]"),
    (dict(evidence={"boxes": [[0.0, "1,2,3,4"]]}), "evidence.boxes[0]"),
    (dict(evidence={"boxes": [[0.0, [1, 2, 3, "4"]]]}), "evidence.boxes[0]"),
    (dict(evidence={"segments": [[0.0, 1.0], [3.0, 2.0]]}), "evidence.segments[1]"),
    (dict(evidence={"segments": [[-0.5, 1.0]]}), "evidence.segments[0]"),
    (dict(evidence={"segments": [[True, 1.0]]}), "evidence.segments[0]"),
    (dict(evidence={"segments": [[0.0, 1.0, 2.0]]}), "evidence.segments[0]"),
    (dict(evidence={"segments": [[0.0, float("inf")]]}), "evidence.segments[0]"),
    (dict(evidence={"segments": [1.0]}), "evidence.segments[0]"),
    (dict(evidence={"source_size": [0, 8]}), "evidence.source_size"),
    (dict(evidence={"source_size": [8, True]}), "evidence.source_size"),
    (dict(evidence={"source_size": [8.0, 8]}), "evidence.source_size"),
    (dict(evidence={"source_size": [8, 8, 3]}), "evidence.source_size"),
    (dict(evidence={"source_size": 8}), "evidence.source_size"),
    (dict(evidence={"frames": []}), "evidence"),
    (dict(evidence=[[0, 1]]), "evidence"),
    (dict(start=1.0, end=1.0), "end"),  # end == start selects nothing
    (dict(start=2.0, end=1.0), "end"),
    (dict(start=-0.1), "start"),
    (dict(start=True), "start"),  # JSON true is not a number
    (dict(end=True), "end"),
    (dict(start="1"), "start"),
    (dict(end=float("nan")), "end"),
    (dict(frame_fps=0), "frame_fps"),
    (dict(frame_fps=-3), "frame_fps"),
    (dict(frame_fps=True), "frame_fps"),
    (dict(question=3), "question"),
    (dict(qtype=""), "qtype"),
    (dict(qtype=5), "qtype"),
    (dict(candidates="left,right"), "candidates"),
    (dict(candidates=["left", ["right"]]), "candidates[1]"),
    (dict(candidates=["left", True]), "candidates[1]"),
    (dict(answer=True), "answer"),
    (dict(id=["s"]), "id"),
    (dict(video=""), "video"),
    (dict(video=3), "video"),
    (dict(image="pic.png"), "image"),  # both video and image
]
# image items take no time range
REJECTED += [(dict(image="pic.png", video=..., start=0.0), "start"), (dict(image="pic.png", video=..., end=1.0), "end"),
             (dict(image="pic.png", video=..., frame_fps=3.0), "frame_fps")]


@pytest.mark.parametrize("fields,field", REJECTED, ids=[f"{i}-{r[1]}" for i, r in enumerate(REJECTED)])
def test_rejected_naming_the_field(media, fields, field):
    with pytest.raises(DataError, match=rf"item 0: field '{re.escape(field)}'"):
        load_one(media, item(**fields))


ACCEPTED = [
    # fields, check on the sample
    (dict(evidence={"boxes": [[0.0, [1, 2, 1, 2]]]}), lambda s: s.evidence.boxes == [(0.0, [1, 2, 1, 2])]),  # zero-area box
    (dict(evidence={"boxes": [[0.5, [1.5, 2, 3, 4.25]]]}), lambda s: s.evidence.boxes == [(0.5, [1.5, 2, 3, 4.25])]),
    (dict(evidence={"segments": [[0.0, 0.0], [1, 2.5]]}), lambda s: s.evidence.segments == [(0.0, 0.0), (1, 2.5)]),
    (dict(evidence={"source_size": [640, 360]}), lambda s: s.evidence.source_size == (640, 360)),
    (dict(evidence={"segments": None, "boxes": None}), lambda s: s.evidence.segments == [] and s.evidence.boxes == []),
    (dict(start=0, end=0.5), lambda s: (s.video.start, s.video.end) == (0, 0.5)),
    (dict(start=1.0, end=1.001), lambda s: (s.video.start, s.video.end) == (1.0, 1.001)),
    (dict(start=None, end=2), lambda s: (s.video.start, s.video.end) == (None, 2)),
    (dict(end=0.001), lambda s: s.video.end == 0.001),
    (dict(frame_fps=0.5), lambda s: s.video.frame_fps == 0.5),
    (dict(frame_fps=None), lambda s: s.video.frame_fps is None),
    (dict(candidates=["left", 2], answer=2), lambda s: s.candidates == ["left", "2"] and s.answer == "2"),
    (dict(qtype="direction"), lambda s: s.qtype == "direction"),
    (dict(meta=None), lambda s: s.meta == {}),
    (dict(meta={"a": 1}, extra=2), lambda s: s.meta == {"a": 1, "extra_fields": {"extra": 2}}),
    (dict(image="pic.png", video=None), lambda s: s.image is not None and s.video is None),
]


@pytest.mark.parametrize("fields,check", ACCEPTED, ids=[str(i) for i in range(len(ACCEPTED))])
def test_accepted_boundary(media, fields, check):
    assert check(load_one(media, item(**fields)))


def test_error_names_file_item_index_and_id(media):
    path = media / "b.json"
    path.write_text(json.dumps([item(id="ok"), item(id="bad-box", evidence={"boxes": [[0.0, [1, 5, 3, 4]]]})]))
    with pytest.raises(DataError) as e:
        load_samples(str(path))
    msg = str(e.value)
    assert "bad-box" in msg and "item 1:" in msg and str(path) in msg and "y0 <= y1" in msg


def test_skip_mode_keeps_good_items_and_lists_each_bad_one(media):
    path = media / "c.jsonl"
    rows = [item(id="a"), item(id="b", start=1.0, end=1.0), item(id="c", frame_fps=0), item(id="d", start=True),
            item(id="e")]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    samples, skipped = load_samples(str(path), on_error="skip")
    assert [s.id for s in samples] == ["a", "e"]
    assert [sid for sid, _ in skipped] == ["b", "c", "d"]
    assert [r.split(":")[0] for _, r in skipped] == ["item 1", "item 2", "item 3"]
