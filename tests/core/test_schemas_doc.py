"""Each worked example of docs/reference/schemas.md loads through the code that reads such files."""
import json
import re

import pytest

from support import REPO

DOC = REPO / "docs" / "reference" / "schemas.md"


def examples():
    text = DOC.read_text()
    return {m.group(1).strip(): m.group(2)
            for m in re.finditer(r"<!-- example: ([^>]+) -->\n```\w+\n(.*?)```", text, flags=re.S)}


def test_every_schema_has_an_example():
    assert set(examples()) == {"viewset", "suite", "annotation", "mvbench action_sequence", "ovobench"}


def test_view_set_example(tmp_path):
    from mmrl.views import ViewSet

    path = tmp_path / "example_views.yaml"
    path.write_text(examples()["viewset"])
    vs = ViewSet.load(path)
    assert [v.name for v in vs.qtypes["color"]] == ["original", "background", "hidden", "blank"]
    assert [v.weight for v in vs.qtypes["direction"]] == [1.0, 1.0, 0.5, 1.0]


def test_tool_suite_example(tmp_path):
    from mmrl.tools.suite import load_suite

    path = tmp_path / "suite.yaml"
    path.write_text(examples()["suite"])
    suite = load_suite(str(path))
    assert list(suite.tools) == ["video_seek", "zoom"] and suite.config.max_turns == 3


def test_annotation_example(tmp_path):
    from mmrl.data.annotations import load_samples

    path = tmp_path / "train.json"
    path.write_text(examples()["annotation"])
    for item in json.loads(path.read_text()):  # the loader checks that each media file exists
        media = tmp_path / item.get("video", item.get("image"))
        media.parent.mkdir(exist_ok=True)
        media.write_bytes(b"")
    samples, skipped = load_samples(str(path))
    assert not skipped and [s.id for s in samples] == ["clip-0001", "clip-0002", "img-0001"]
    assert samples[0].evidence.boxes and samples[0].answer_letter == "B"


def test_mvbench_item_example(tmp_path):
    from mmrl.eval.benchmark_def import load_benchmark
    from mmrl.eval.benchmarks.mvbench.hooks import load
    from mmrl.eval.hooks import EvalInputs

    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "action_sequence.json").write_text(examples()["mvbench action_sequence"])
    items, _ = load(load_benchmark("mvbench"), EvalInputs(data_root=str(tmp_path)), ["action_sequence"], 0)
    assert len(items) == 1


def test_ovobench_item_example(tmp_path):
    from mmrl.eval.benchmark_def import load_benchmark
    from mmrl.eval.benchmarks.ovobench.protocol import load_annotations

    path = tmp_path / "ovo_bench_new.json"
    path.write_text(examples()["ovobench"])
    items = load_annotations(str(path), load_benchmark("ovobench"))
    assert [it["task"] for it in items] == ["EPM", "CRR", "REC"]
    assert json.loads(path.read_text()) == items
