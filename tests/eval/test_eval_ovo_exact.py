"""The OVO-Bench scorer's printed outputs and errors, written out whole: the table and the summary line of a partial
run (only the backward mode: the official total is not computed), the result files' provenance, the None-response
count over several None items, and each load error's message with its file.

Hand values from ``data/ovo_small_results.json`` (see test_eval_ovo_small.py): backward EPM "A" 1, "B. A man" 1
(the substring quirk), None 0 -> 66.67 over 3 items; ASI "D" vs C -> 0.00 over 1 item; BT mean 33.33; weighted
(items) (66.67 * 3 + 0 * 1) / 4 = 50.00; task mean 33.33.
"""
import json
from pathlib import Path

import pytest

from mmrl.errors import DataError
from mmrl.eval.benchmarks.ovobench.score import format_table, score_result_files, summary_line

SMALL = Path(__file__).with_name("data") / "ovo_small_results.json"


def _backward_only(tmp_path, edit=None) -> Path:
    data = json.loads(SMALL.read_text())
    data["realtime"], data["forward"] = [], []
    if edit:
        edit(data)
    path = tmp_path / "backward.json"
    path.write_text(json.dumps(data))
    return path


def test_partial_run_table_and_summary_line_whole(tmp_path):
    path = _backward_only(tmp_path)
    s = score_result_files([path])
    assert s["files"] == [str(path)]
    labels = s["labels"]
    expected = "\n".join([
        f"OVO-Bench scores ({s['protocol']})",
        "",
        "| mode | task | acc (%) | n | unit |",
        "|---|---|---|---|---|",
        "| BT | EPM | 66.67 | 3 | items |",
        "| BT | ASI | 0.00 | 1 | items |",
        "| BT | **BT mean** | 33.33 | | tasks |",
        "",
        "- Total (official): not computed, the official total needs all three modes (present: BT); "
        "mean of the present modes 33.33 (not the official total)",
        f"- **Weighted overall** (N=4): 50.00: {labels['weighted_overall']}",
        f"- Task mean: 33.33: {labels['task_mean']}",
        "- None responses (scored 0): 1",
    ]) + "\n"
    assert format_table(s) == expected
    assert summary_line(s) == "EPM 66.67, ASI 0.00, BT 33.33; partial mean 33.33 (not the official total)"


def test_two_modes_are_both_named_in_the_partial_total(tmp_path):
    data = json.loads(SMALL.read_text())
    data["forward"] = []
    path = tmp_path / "two.json"
    path.write_text(json.dumps(data))
    s = score_result_files(str(path))
    assert s["files"] == [str(path)]
    assert "(present: BT, RT); mean of the present modes 41.67" in format_table(s)  # (33.33 + 50) / 2
    assert summary_line(s).endswith("BT 33.33, RT 50.00; partial mean 41.67 (not the official total)")


def test_complete_run_table_ends_with_the_labelled_totals():
    s = score_result_files([SMALL])
    lines = format_table(s).split("\n")
    assert lines[-1] == "" and lines[-6] == ""  # a blank line before the totals, one newline at the end
    assert lines[-5] == f"- **Total (official)**: 49.07: {s['labels']['total']}"
    assert lines[:4] == [f"OVO-Bench scores ({s['protocol']})", "", "| mode | task | acc (%) | n | unit |",
                         "|---|---|---|---|---|"]


def test_every_none_response_is_counted(tmp_path):
    def two_nones(d):
        d["backward"][0]["response"] = None  # EPM: None, "B. A man", None
    s = score_result_files([_backward_only(tmp_path, two_nones)])
    assert s["tasks"]["EPM"]["none"] == 2 and s["none_responses"] == 2
    assert s["tasks"]["EPM"]["acc"] == pytest.approx(100 / 3)


def test_load_errors_name_the_file_and_say_what_is_wrong(tmp_path):
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    with pytest.raises(DataError) as e:
        score_result_files([bad_json])
    assert str(e.value).startswith(f"file '{bad_json}': cannot read results: ")
    assert e.value.path == str(bad_json)

    not_lists = tmp_path / "list.json"
    not_lists.write_text(json.dumps({"backward": [], "realtime": {}, "forward": []}))
    with pytest.raises(DataError) as e:
        score_result_files([not_lists])
    assert str(e.value) == (f"file '{not_lists}': results must be an object with lists 'backward', 'realtime', "
                            "'forward'")


def test_an_unknown_task_lists_the_known_ones(tmp_path):
    from mmrl.eval.benchmarks.ovobench.score import score_results
    from mmrl.eval.benchmark_def import load_benchmark

    known = load_benchmark("ovobench").task_names()
    with pytest.raises(DataError, match=r"results\['backward'\]\[0\]: unknown task 'XYZ' \(known: "
                       + ", ".join(known) + r"\)"):
        score_results({"backward": [{"task": "XYZ", "response": "A", "ground_truth": "A"}], "realtime": [],
                       "forward": []})
