import json
import os

import pytest

from mmrl.data.annotations import load_samples, save_samples
from mmrl.data.synth_image import make_image_world
from mmrl.data.synth_video import make_video_world
from mmrl.errors import DataError


def good(**kw):
    item = {"video": "clip.mp4", "question": "Which way?", "candidates": ["left", "right"], "answer": "right"}
    item.update(kw)
    return item


@pytest.fixture
def media(tmp_path):
    (tmp_path / "clip.mp4").write_bytes(b"\0")
    (tmp_path / "pic.png").write_bytes(b"\0")
    return tmp_path


def write(path, items, jsonl=False):
    with open(path, "w") as f:
        if jsonl:
            f.write("\n".join(json.dumps(it) for it in items) + "\n")
        else:
            json.dump(items, f)
    return str(path)


def test_minimal_mvbench_items(media):
    path = write(media / "task.json", [good(start=1.0, end=3.5), good(id="x", qtype="direction")])
    samples, skipped = load_samples(path, nframes=8, max_pixels=3136)
    assert skipped == []
    a, b = samples
    assert a.id == "task:0" and a.qtype == "generic"
    assert a.video.path == str(media / "clip.mp4") and os.path.isabs(a.video.path)
    assert (a.video.start, a.video.end, a.video.nframes, a.video.max_pixels) == (1.0, 3.5, 8, 3136)
    assert a.answer_letter == "B" and a.image is None
    assert b.id == "x" and b.qtype == "direction" and b.video.start is None


def test_jsonl_image_media_root_and_extras(media, tmp_path_factory):
    ann_dir = tmp_path_factory.mktemp("ann")
    item = {"id": 7, "image": "pic.png", "question": "Colour?", "candidates": [1, 2, 3], "answer": 2,
            "evidence": {"boxes": [[0.0, [1, 2, 3, 4]]], "source_size": [8, 8]}, "source": "web"}
    path = write(ann_dir / "imgs.jsonl", [item, good(id="v")], jsonl=True)
    samples, _ = load_samples(path, media_root=str(media), fps=2.0)
    img, vid = samples
    assert img.id == "7" and img.candidates == ["1", "2", "3"] and img.answer == "2"
    assert img.image.path == str(media / "pic.png") and img.video is None
    assert img.evidence.boxes == [(0.0, [1, 2, 3, 4])] and img.evidence.source_size == (8, 8)
    assert img.meta == {"extra_fields": {"source": "web"}}
    assert vid.video.fps == 2.0
    out = str(ann_dir / "again.jsonl")
    save_samples(samples, out, media_root=str(media))
    assert load_samples(out, media_root=str(media), fps=2.0)[0] == samples
    with open(out) as f:
        first = json.loads(f.readline())
    assert first["source"] == "web" and first["image"] == "pic.png" and "meta" not in first


BAD = [
    ("missing question", lambda: {k: v for k, v in good(id="b").items() if k != "question"}, "question"),
    ("missing candidates", lambda: {k: v for k, v in good(id="b").items() if k != "candidates"}, "candidates"),
    ("missing answer", lambda: {k: v for k, v in good(id="b").items() if k != "answer"}, "answer"),
    ("missing media", lambda: {k: v for k, v in good(id="b").items() if k != "video"}, "video"),
    ("answer not a candidate", lambda: good(id="b", answer="up"), "answer"),
    ("media file missing", lambda: good(id="b", video="nope.mp4"), "video"),
    ("duplicate id", lambda: good(id="a"), "id"),
    ("one candidate", lambda: good(id="b", candidates=["right"]), "candidates"),
    ("duplicate candidates", lambda: good(id="b", candidates=["right", "right"]), "candidates"),
    ("bad segment", lambda: good(id="b", evidence={"segments": [[2.0, 1.0]]}), "evidence.segments[0]"),
    ("bad box", lambda: good(id="b", evidence={"boxes": [[0.0, [1, 2, 3]]]}), "evidence.boxes[0]"),
    ("end before start", lambda: good(id="b", start=2.0, end=1.0), "end"),
    ("meta not a dict", lambda: good(id="b", meta=[1]), "meta"),
]


@pytest.mark.parametrize("name,make,field", BAD, ids=[b[0] for b in BAD])
def test_bad_item_raises_naming_file_item_and_field(media, name, make, field):
    path = write(media / "bad.json", [good(id="a"), make()])
    with pytest.raises(DataError) as ei:
        load_samples(path)
    msg = str(ei.value)
    assert path in msg and "item 1" in msg and f"field '{field}'" in msg
    assert ei.value.sample_id == ("a" if name == "duplicate id" else "b")
    assert ei.value.path == path


def test_skip_mode_lists_every_bad_item(media):
    items = [good(id="a")] + [make() for _, make, _ in BAD] + [good(id="z")]
    path = write(media / "mixed.json", items)
    samples, skipped = load_samples(path, on_error="skip")
    assert [s.id for s in samples] == ["a", "z"]
    assert len(skipped) == len(BAD)
    reasons = " | ".join(r for _, r in skipped)
    assert "not among the candidates" in reasons and "media file not found" in reasons
    assert "duplicate id" in reasons and "field 'question': missing" in reasons
    assert all(r.startswith("item ") for _, r in skipped)


def test_file_level_errors(media):
    with pytest.raises(DataError, match="not found"):
        load_samples(str(media / "absent.json"))
    obj = media / "obj.json"
    obj.write_text('{"meta": {}, "root": {}}')
    with pytest.raises(DataError, match="expected a JSON list"):
        load_samples(str(obj))
    broken = media / "broken.json"
    broken.write_text('[{"video": ')
    with pytest.raises(DataError, match="invalid JSON"):
        load_samples(str(broken))
    with pytest.raises(ValueError, match="on_error"):
        load_samples(str(obj), on_error="ignore")


def test_jsonl_bad_line_raises_or_skips(media):
    path = media / "lines.jsonl"
    path.write_text(json.dumps(good(id="a")) + "\n{not json\n\n" + json.dumps(good(id="c")) + "\n")
    with pytest.raises(DataError, match=r"item 1: field '\(line\)': invalid JSON on line 2"):
        load_samples(str(path))
    samples, skipped = load_samples(str(path), on_error="skip")
    assert [s.id for s in samples] == ["a", "c"] and skipped[0][0] == "lines:1"


@pytest.mark.parametrize("ext", ["json", "jsonl"])
def test_round_trip_synthetic_video_world(tmp_path, ext):
    info = make_video_world(str(tmp_path / "w"), 10, 0, seed=4)
    samples, skipped = load_samples(info["train"], nframes=4)
    assert skipped == [] and len(samples) == 10
    s = samples[1]
    assert s.qtype == "direction" and s.meta["temporal"] is True
    assert s.evidence.segments and s.evidence.source_size == (56, 56)
    assert all(isinstance(seg, tuple) for seg in s.evidence.segments)
    out = str(tmp_path / "w" / f"copy.{ext}")
    save_samples(samples, out)
    again, _ = load_samples(out, nframes=4)
    assert again == samples
    with open(info["train"]) as f, open(out) as g:
        orig = json.load(f)
        copy = json.load(g) if ext == "json" else [json.loads(line) for line in g]
    assert [c["video"] for c in copy] == [o["video"] for o in orig]


def test_round_trip_outside_root_uses_absolute_paths(tmp_path):
    info = make_image_world(str(tmp_path / "w"), 3, 0, seed=4)
    samples, _ = load_samples(info["train"])
    out = str(tmp_path / "elsewhere" / "copy.json")
    save_samples(samples, out)
    with open(out) as f:
        assert all(os.path.isabs(it["image"]) for it in json.load(f))
    assert load_samples(out)[0] == samples
