"""Annotation validation, one row per boundary: each bad value is rejected naming its field, and the value just
inside the boundary loads unchanged (so an off-by-one in either direction fails a row)."""
import json
import os
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
    # fields, the field named in the error, what the error says
    (dict(evidence={"boxes": [[0.0, [1, 5, 3, 4]]]}), "evidence.boxes[0]", "x0 <= x1 and y0 <= y1, got [1, 5, 3, 4]"),
    (dict(evidence={"boxes": [[0.0, [5, 1, 3, 4]]]}), "evidence.boxes[0]", "x0 <= x1 and y0 <= y1"),  # x1 < x0
    (dict(evidence={"boxes": [[0.0, [1, 2, 3, 4, 5]]]}), "evidence.boxes[0]", "with x0 <= x1"),
    (dict(evidence={"boxes": [[0.0, [1, 2, 3, True]]]}), "evidence.boxes[0]", "expected a number, got True"),
    (dict(evidence={"boxes": [[0.0, [1, 2, 3, None]]]}), "evidence.boxes[0]", "expected a number, got None"),
    (dict(evidence={"boxes": [[True, [1, 2, 3, 4]]]}), "evidence.boxes[0]", "expected a number, got True"),
    (dict(evidence={"boxes": [[None, [1, 2, 3, 4]]]}), "evidence.boxes[0]", "expected a number, got None"),
    (dict(evidence={"boxes": [[0.0, 1, 2, 3, 4]]}), "evidence.boxes[0]", "expected [t, [x0, y0, x1, y1]], got [0.0, 1"),
    (dict(evidence={"boxes": [[0.0, [1, 2, 3, 4], 5]]}), "evidence.boxes[0]", "expected [t, [x0, y0, x1, y1]]"),
    (dict(evidence={"boxes": [{"t": 0.0, "box": [1, 2, 3, 4]}]}), "evidence.boxes[0]", "expected [t, [x0,"),
    (dict(evidence={"boxes": [[0.0, "1,2,3,4"]]}), "evidence.boxes[0]", "expected [t, [x0,"),
    (dict(evidence={"boxes": [[0.0, [1, 2, 3, "4"]]]}), "evidence.boxes[0]", "expected a number, got '4'"),
    (dict(evidence={"segments": [[0.0, 1.0], [3.0, 2.0]]}), "evidence.segments[1]", "need 0 <= start <= end, got [3.0, 2.0]"),
    (dict(evidence={"segments": [[-0.5, 1.0]]}), "evidence.segments[0]", "need 0 <= start <= end"),
    (dict(evidence={"segments": [[True, 1.0]]}), "evidence.segments[0]", "expected a number, got True"),
    (dict(evidence={"segments": [[None, 1.0]]}), "evidence.segments[0]", "expected a number, got None"),
    (dict(evidence={"segments": [[0.0, None]]}), "evidence.segments[0]", "expected a number, got None"),
    (dict(evidence={"segments": [[0.0, 1.0, 2.0]]}), "evidence.segments[0]", "expected [start, end], got [0.0, 1.0, 2.0]"),
    (dict(evidence={"segments": [[0.0, float("inf")]]}), "evidence.segments[0]", "expected a number, got inf"),
    (dict(evidence={"segments": [1.0]}), "evidence.segments[0]", "expected [start, end], got 1.0"),
    (dict(evidence={"source_size": [0, 8]}), "evidence.source_size", "expected [width, height] in pixels, got [0, 8]"),
    (dict(evidence={"source_size": [8, True]}), "evidence.source_size", "in pixels"),
    (dict(evidence={"source_size": [8.0, 8]}), "evidence.source_size", "in pixels"),
    (dict(evidence={"source_size": [8, 8, 3]}), "evidence.source_size", "in pixels"),
    (dict(evidence={"source_size": 8}), "evidence.source_size", "in pixels, got 8"),
    (dict(evidence={"frames": []}), "evidence", "unknown key(s) ['frames']; known: segments, boxes, source_size"),
    (dict(evidence=[[0, 1]]), "evidence", "expected an object, got list"),
    (dict(start=1.0, end=1.0), "end", "must be > start (1.0), got 1.0"),  # end == start selects nothing
    (dict(start=2.0, end=1.0), "end", "must be > start (2.0), got 1.0"),
    (dict(start=-0.1), "start", "must be >= 0, got -0.1"),
    (dict(start=True), "start", "expected a number, got True"),  # JSON true is not a number
    (dict(end=True), "end", "expected a number, got True"),
    (dict(start="1"), "start", "expected a number, got '1'"),
    (dict(end=float("nan")), "end", "expected a number, got nan"),
    (dict(frame_fps=0), "frame_fps", "must be > 0, got 0"),
    (dict(frame_fps=-3), "frame_fps", "must be > 0, got -3"),
    (dict(frame_fps=True), "frame_fps", "expected a number, got True"),
    (dict(question=3), "question", "expected a string, got 3"),
    (dict(qtype=""), "qtype", "expected a non-empty string, got ''"),
    (dict(qtype=5), "qtype", "expected a non-empty string, got 5"),
    (dict(candidates="left,right"), "candidates", "expected a list of at least 2 options, got 'left,right'"),
    (dict(candidates=["left", "left"], answer="left"), "candidates", "duplicate options in ['left', 'left']"),
    (dict(candidates=["left", ["right"]]), "candidates[1]", "expected a string, got ['right']"),
    (dict(candidates=["left", True]), "candidates[1]", "expected a string, got True"),
    (dict(answer=True), "answer", "expected a string, got True"),
    (dict(id=["s"]), "id", "expected a string, got ['s']"),
    (dict(video=""), "video", "expected a non-empty path, got ''"),
    (dict(video=3), "video", "expected a non-empty path, got 3"),
    (dict(video=...), "video", "missing (an item needs 'video' or 'image')"),
    (dict(image="pic.png"), "image", "an item has either 'video' or 'image', not both"),
    (dict(meta=[1]), "meta", "expected an object, got list"),
    # image items take no time range
    (dict(image="pic.png", video=..., start=0.0), "start", "only valid for a video item"),
    (dict(image="pic.png", video=..., end=1.0), "end", "only valid for a video item"),
    (dict(image="pic.png", video=..., frame_fps=3.0), "frame_fps", "only valid for a video item"),
]


@pytest.mark.parametrize("fields,field,says", REJECTED, ids=[f"{i}-{r[1]}" for i, r in enumerate(REJECTED)])
def test_rejected_naming_the_field(media, fields, field, says):
    with pytest.raises(DataError, match=rf"item 0: field '{re.escape(field)}': (.*\W)?{re.escape(says)}(\W.*)?$"):
        load_one(media, item(**fields))


ACCEPTED = [
    # fields, check on the sample
    (dict(evidence={"boxes": [[0.0, [1, 2, 1, 2]]]}), lambda s: s.evidence.boxes == [(0.0, [1, 2, 1, 2])]),  # zero-area box
    (dict(evidence={"boxes": [[0.5, [1.5, 2, 3, 4.25]]]}), lambda s: s.evidence.boxes == [(0.5, [1.5, 2, 3, 4.25])]),
    (dict(evidence={"segments": [[0.0, 0.0], [1, 2.5]]}), lambda s: s.evidence.segments == [(0.0, 0.0), (1, 2.5)]),
    (dict(evidence={"source_size": [640, 360]}), lambda s: s.evidence.source_size == (640, 360)),
    (dict(evidence={"source_size": [1, 1]}), lambda s: s.evidence.source_size == (1, 1)),
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


def test_an_item_that_is_not_an_object(media):
    path = media / "d.json"
    path.write_text(json.dumps([item(id="a"), ["not", "an", "item"]]))
    with pytest.raises(DataError, match=r"item 1: field '\(item\)': expected an object, got list"):
        load_samples(str(path))


def test_budgets_reach_video_and_image_refs(media):
    path = media / "e.json"
    path.write_text(json.dumps([item(id="v"), item(id="i", image="pic.png", video=...)]))
    v, i = load_samples(str(path), nframes=6, fps=1.5, max_pixels=3136)[0]
    assert (v.video.nframes, v.video.fps, v.video.max_pixels) == (6, 1.5, 3136)
    assert i.image.max_pixels == 3136


# ---- file formats -----------------------------------------------------------------------------------------------


def test_one_line_jsonl_and_jsonl_content_in_a_json_file(media):
    one = media / "one.jsonl"
    one.write_text(json.dumps(item(id="only")) + "\n")  # a JSONL line is a JSON object, not a list
    assert [s.id for s in load_samples(str(one))[0]] == ["only"]
    lines = media / "lines.json"  # JSONL under a .json name, after a blank first line
    lines.write_text("\n  " + json.dumps(item(id="a")) + "\n" + json.dumps(item(id="b")) + "\n")
    assert [s.id for s in load_samples(str(lines))[0]] == ["a", "b"]


def test_file_level_errors_name_the_file(media):
    for name, text, says in [("absent.json", None, "annotation file not found"),
                             ("obj.json", '"text"', "expected a JSON list of items (or JSONL), got str"),
                             ("broken.json", '[{"video": ', "invalid JSON: Expecting value")]:
        path = media / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(DataError) as e:
            load_samples(str(path))
        assert str(e.value).startswith(f"file '{path}': {says}"), name


def test_bad_jsonl_line_says_why(media):
    path = media / "bad.jsonl"
    path.write_text(json.dumps(item(id="a")) + "\n{oops\n")
    with pytest.raises(DataError, match=r"invalid JSON on line 2: Expecting property name"):
        load_samples(str(path))


def test_non_ascii_text_round_trips(media):
    from mmrl.data.annotations import save_samples

    path = media / "utf8.json"
    path.write_bytes(json.dumps([item(id="ü", question="¿Hacia dónde? 向左", candidates=["izq", "dcha"],
                                      answer="dcha")], ensure_ascii=False).encode("utf-8"))
    samples = load_samples(str(path))[0]
    assert samples[0].question == "¿Hacia dónde? 向左"
    out = media / "utf8_copy.jsonl"
    save_samples(samples, str(out))
    assert "¿Hacia dónde? 向左" in out.read_bytes().decode("utf-8") or "\\u00bf" in out.read_text()
    assert load_samples(str(out))[0] == samples


# ---- writing ----------------------------------------------------------------------------------------------------


def _sample(tmp_path, **video_kw):
    from mmrl.data.schema import Evidence, Sample, VideoRef

    return Sample(id="w", question="?", candidates=["a", "b"], answer="b",
                  video=VideoRef(str(tmp_path / "clip.mp4"), **video_kw), evidence=Evidence())


@pytest.mark.parametrize("video_kw,keys", [(dict(start=1.0, frame_fps=3.0), {"start": 1.0, "frame_fps": 3.0}),
                                           (dict(end=2.5), {"end": 2.5}), (dict(), {})])
def test_sample_to_item_writes_only_the_set_time_fields(media, video_kw, keys):
    from mmrl.data.annotations import sample_to_item

    it = sample_to_item(_sample(media, **video_kw), str(media))
    assert {k: it[k] for k in ("start", "end", "frame_fps") if k in it} == keys
    assert it["video"] == "clip.mp4" and "evidence" not in it and "meta" not in it


@pytest.mark.parametrize("ev,written", [
    (dict(boxes=[(0.5, [1, 2, 3, 4])]), {"segments": [], "boxes": [[0.5, [1, 2, 3, 4]]], "source_size": None}),
    (dict(segments=[(0.0, 1.0)]), {"segments": [[0.0, 1.0]], "boxes": [], "source_size": None}),
    (dict(source_size=(8, 6)), {"segments": [], "boxes": [], "source_size": [8, 6]}),
])
def test_sample_to_item_writes_any_evidence(media, ev, written):
    from mmrl.data.annotations import sample_to_item
    from mmrl.data.schema import Evidence

    s = _sample(media)
    s.evidence = Evidence(**ev)
    assert sample_to_item(s, str(media))["evidence"] == written


def test_media_path_relative_under_the_root_absolute_elsewhere(tmp_path):
    from mmrl.data.annotations import _media_path

    root = tmp_path / "ann"
    assert _media_path(str(root / "v" / "a.mp4"), str(root)) == os.path.join("v", "a.mp4")
    assert _media_path(str(tmp_path), str(root)) == str(tmp_path)  # the root's parent itself
    assert _media_path(str(tmp_path / "x.mp4"), str(root)) == str(tmp_path / "x.mp4")
    assert _media_path(str(tmp_path / "..x.mp4"), str(tmp_path)) == "..x.mp4"  # a name starting with dots
