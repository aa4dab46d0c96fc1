"""Run reports name protocol and parser, list and count errors; JSONL responses resume by id."""
import json

import pytest

from mmrl.errors import DataError
from mmrl.eval.benchmark_def import load_benchmark
from mmrl.eval.benchmarks.mvbench.protocol import score_records
from mmrl.eval.benchmarks.mvbench.hooks import table
from mmrl.eval.benchmarks.ovobench.score import format_table, score_result_files
from mmrl.eval.report import append_jsonl, build_summary, markdown, read_jsonl, responses_by_id, write_report


def test_mvbench_report(tmp_path):
    b = load_benchmark("mvbench")
    recs = [{"id": "action_sequence/0", "task": "action_sequence", "response": "D)", "score": 1},
            {"id": "action_sequence/1", "task": "action_sequence", "response": None, "score": 0,
             "error": "cannot decode video | bad header"}]
    summary = build_summary(b.name, b.protocol, b.parser, score_records(recs, b.aggregate), records=recs,
                            errors=[{"id": "x/9", "task": "x", "error": "missing file"}], meta={"model": "tiny"})
    paths = write_report(tmp_path / "run", summary, table(summary["scores"]))
    data = json.loads(open(paths["json"]).read())
    assert data["protocol"] == b.protocol and data["parser"] == "mvbench_check_ans"
    assert data["n_errors"] == 2 and [e["id"] for e in data["errors"]] == ["action_sequence/1", "x/9"]
    md = open(paths["md"]).read()
    assert f"- protocol: {b.protocol}" in md and "- parser: mvbench_check_ans" in md and "- errors: 2" in md
    assert "| action_sequence | 50.00 | 1 | 2 |" in md and "| **Avg** (total correct / total) | 50.00 |" in md
    assert "| action_sequence/1 | action_sequence | cannot decode video / bad header |" in md


def test_ovobench_report(ovo_dir):
    s = score_result_files(sorted(str(p) for p in ovo_dir.glob("Gemini_*_offline*.json")))
    md = markdown(build_summary("ovobench", s["protocol"], s["parsers"], s), format_table(s))
    assert "- parser: EPM: ovo_mcq" in md and "REC: ovo_rec" in md and "SSR: ovo_yes_no" in md
    assert "| FT | REC | 35.53 | 698 | probes |" in md and "**Total (official)**: 63.00" in md
    assert "- errors: 0" in md


def test_jsonl_resume(tmp_path):
    p = tmp_path / "responses.jsonl"
    assert read_jsonl(p) == [] and responses_by_id(p) == {}
    append_jsonl(p, {"id": "1", "response": "A"})
    append_jsonl(p, {"id": "2_0", "response": None, "error": "oom"})
    append_jsonl(p, {"id": "1", "response": "B"})
    with open(p, "a") as f:
        f.write('{"id": "3", "resp')          # a torn last line from a killed run
    assert [r["id"] for r in read_jsonl(p)] == ["1", "2_0", "1"]
    assert responses_by_id(p)["1"]["response"] == "B" and set(responses_by_id(p)) == {"1", "2_0"}
    p.write_text('{"id": 1}\nnot json\n{"id": 2}\n')
    with pytest.raises(DataError, match="line 2"):
        read_jsonl(p)
