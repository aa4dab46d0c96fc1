"""The OVO-Bench scorer on a small hand-made results file (in the repo, so it runs without ../shared).

Every score below is computed by hand from ``data/ovo_small_results.json`` with the official rules
(``utils/OVOBenchScore.py``): multiple choice ``gt in response`` (a substring for strings, an element test for
the Qwen2-VL wrapper's lists), REC digits joined, SSR/CRR exact "N"/"Y" else case-sensitive "No"/"Yes".
"""
from pathlib import Path

import pytest

from mmrl.cli import main
from mmrl.eval.benchmarks.ovobench.score import score_result_files

RESULTS = str(Path(__file__).with_name("data") / "ovo_small_results.json")

# EPM: "A"==A 1, "B. A man" contains A 1 (the substring quirk), None 0 -> 2/3; ASI: "D" vs C -> 0
# OCR: "C" 1, ["C"] 1 (element) -> 1; STU: ["C. a cat"] is not the element "C" -> 0
# REC: "2"==2 1, "1 or 2" -> "12"==12 1, None 0 -> 2/3; SSR: "Y"/1 1, "Not sure" has "No" 1, "no" 0, "Yes" 1 -> 3/4
# CRR: "N"/0 1, "No" for type 1 -> 0 -> 1/2
ACC = {"EPM": 200 / 3, "ASI": 0.0, "OCR": 100.0, "STU": 0.0, "REC": 200 / 3, "SSR": 75.0, "CRR": 50.0}
BT, RT, FT = (200 / 3 + 0) / 2, (100 + 0) / 2, (200 / 3 + 75 + 50) / 3
# weights (WTI reading): EPM 3, ASI 1, OCR 2, STU 1 items; REC 1 item; SSR 4 probes; CRR 1 item -> N = 13
WEIGHTED = (200 / 3 * 3 + 0 + 100 * 2 + 0 + 200 / 3 * 1 + 75 * 4 + 50 * 1) / 13


def test_small_results_hand_computed():
    s = score_result_files(RESULTS)
    assert {t: v["acc"] for t, v in s["tasks"].items()} == pytest.approx(ACC)
    assert [m["acc"] for m in s["modes"].values()] == pytest.approx([BT, RT, FT])
    assert s["total"] == pytest.approx((BT + RT + FT) / 3)          # 49.07
    assert s["weighted_n"] == 13 and s["weighted_overall"] == pytest.approx(WEIGHTED)  # 62.82
    assert s["task_mean"] == pytest.approx(sum(ACC.values()) / 7)  # 51.19
    assert s["none_responses"] == 2 and s["tasks"]["REC"]["n"] == 3 and s["tasks"]["SSR"]["n"] == 4


def test_small_results_cli(capsys):
    assert main(["eval", "ovobench", "--score-only", RESULTS]) == 0
    out = capsys.readouterr().out
    assert "| BT | **BT mean** | 33.33 |" in out and "**Total (official)**: 49.07" in out
    assert out.splitlines()[-1].endswith("BT 33.33, RT 50.00, FT 63.89; total 49.07")


def test_response_section_reaches_the_final_score(tmp_path):
    """ovobench.yaml's ``response`` keys post-process before the official layout is assembled and scored."""
    from mmrl.eval.benchmarks.ovobench.hooks import score
    from mmrl.eval.protocol import load_protocol

    items = [{"id": 1, "task": "EPM", "video": "v.mp4", "question": "q", "options": ["a", "b"], "gt": 0,
              "realtime": 1.0}]
    records = [{"id": "1", "task": "EPM", "response": " A\nbecause"}]
    plain, _ = load_protocol("ovobench")
    cleaned, _ = load_protocol("ovobench", {"response.strip": True, "response.first_line_only": True})
    assert score(records, items, plain, tmp_path, {})["tasks"]["EPM"]["acc"] == 0.0     # [" A\nbecause"] != "A"
    assert score(records, items, cleaned, tmp_path, {})["tasks"]["EPM"]["acc"] == 100.0  # ["A"]
    assert (tmp_path / "results.json").is_file()


# per task, from the file (see the comment above): (mode, correct, n, unit, items, none, weight, weight unit)
TASKS = {"EPM": ("backward", 2, 3, "items", 3, 1, 3, "items"), "ASI": ("backward", 0, 1, "items", 1, 0, 1, "items"),
         "OCR": ("realtime", 2, 2, "items", 2, 0, 2, "items"), "STU": ("realtime", 0, 1, "items", 1, 0, 1, "items"),
         "REC": ("forward", 2, 3, "probes", 1, 1, 1, "items"), "SSR": ("forward", 3, 4, "probes", 1, 0, 4, "probes"),
         "CRR": ("forward", 1, 2, "probes", 1, 0, 1, "items")}


def test_small_results_per_task_counts_and_weighted_modes():
    s = score_result_files(RESULTS)
    for t, (mode, correct, n, unit, items, none, weight, wunit) in TASKS.items():
        got = s["tasks"][t]
        assert (got["mode"], got["correct"], got["n"], got["unit"], got["items"], got["none"], got["weight"],
                got["weight_unit"]) == (mode, correct, n, unit, items, none, weight, wunit), t
    m = s["modes"]
    assert [m[k]["tasks"] for k in ("backward", "realtime", "forward")] == [["EPM", "ASI"], ["OCR", "STU"], ["REC", "SSR", "CRR"]]
    assert [m[k]["weight"] for k in ("backward", "realtime", "forward")] == [4, 3, 6]
    # weighted mode accuracies: BT (66.67*3 + 0)/4, RT (100*2 + 0)/3, FT (66.67*1 + 75*4 + 50*1)/6
    assert [m[k]["weighted_acc"] for k in ("backward", "realtime", "forward")] == pytest.approx(
        [50.0, 200 / 3, (200 / 3 + 300 + 50) / 6])
    assert s["partial_mean"] is None and s["parsers"]["SSR"] == "ovo_yes_no" and s["parsers"]["REC"] == "ovo_rec"


def test_partial_run_has_no_official_total(tmp_path):
    import json

    data = json.loads(Path(RESULTS).read_text())
    data["forward"] = []  # a run of the backward and real-time modes only
    part = tmp_path / "partial.json"
    part.write_text(json.dumps(data))
    s = score_result_files(str(part))
    assert s["total"] is None and s["partial_mean"] == pytest.approx((BT + RT) / 2)
    from mmrl.eval.benchmarks.ovobench.score import format_table, summary_line

    line = summary_line(s)
    assert line.endswith(f"partial mean {(BT + RT) / 2:.2f} (not the official total)") and "FT" not in line
    table = format_table(s)
    assert "**Total (official)**" not in table and "Total (official): not computed" in table
    assert "mean of the present modes 41.67" in table and "**Weighted overall** (N=7): 57.14" in table  # (200+0+200)/7
    assert "| BT | **BT mean** | 33.33 |" in table
