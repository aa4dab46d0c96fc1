"""The worked example of docs/adding_a_benchmark.md, written out from the page itself and run on the tiny model."""
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from mmrl.cli import main
from mmrl.data.synth_video import write_mp4

DOC = Path(__file__).resolve().parents[2] / "docs" / "adding_a_benchmark.md"


def _files():
    """``{path: text}`` of every code block preceded by ``<!-- file: PATH -->``."""
    return {m.group(1): m.group(2) for m in
            re.finditer(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)}


@pytest.fixture
def example(tmp_path, monkeypatch):
    files = _files()
    assert set(files) == {"my_benchmarks/yesno.py", "yesno.yaml"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = tmp_path / "data"
    (data / "videos").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(3):
        write_mp4(str(data / "videos" / f"c{i}.mp4"), rng.integers(0, 255, (8, 56, 56, 3), dtype=np.uint8), 4.0)
    items = [{"id": i, "video": f"c{i}.mp4", "question": "Is the square red?", "answer": ["yes", "no"][i % 2]}
             for i in range(3)]
    (data / "yesno.json").write_text(json.dumps(items))
    yield tmp_path, data
    sys.modules.pop("my_benchmarks.yesno", None)
    sys.modules.pop("my_benchmarks", None)


def test_worked_example_runs(example, capsys):
    root, data = example
    yaml_path = str(root / "yesno.yaml")
    assert main(["eval", yaml_path, "--show-protocol"]) == 0
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["hooks"] == "yesno" and lines["sampling.max_frames"] == "4" and lines["parser"] == '"yes_no_first_word"'
    out = root / "run"
    assert main(["eval", yaml_path, "--model", "tiny", "--data-root", str(data), "--out", str(out), "--device", "cpu",
                 "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scores"]["n"] == 3 and summary["parser"] == "yes_no_first_word" and summary["n_errors"] == 0
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["frames"] for r in rows] == [[0, 2, 5, 7]] * 3   # 4 of 8 frames: linspace(0, 7, 4).round()
    assert main(["eval", yaml_path, "prompt.prefill=x", "--show-protocol"]) == 2
    assert "'prompt.prefill' is not used by the 'yesno' hooks" in capsys.readouterr().err
