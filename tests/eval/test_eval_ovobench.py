"""OVO-Bench: query construction from the official annotations and THE golden test on the Gemini predictions."""
import json
from collections import Counter

import pytest

from mmrl.errors import DataError
from mmrl.eval.benchmark_def import load_benchmark
from mmrl.eval.benchmarks.ovobench.protocol import (assemble_results, build_queries, count_queries, load_annotations, pending,
                                         prefix_end, query_id)
from mmrl.eval.benchmarks.ovobench.score import format_table, score_result_files, score_results, summary_line

EXPECTED = {"ASI": "76.35", "EPM": "58.59", "HLD": "52.69", "ATR": "79.31", "ACR": "66.97", "OCR": "85.91",
            "STU": "58.43", "OJR": "61.96", "FPD": "63.37", "REC": "35.53", "SSR": "74.24", "CRR": "61.67"}
COUNTS = {"ASI": 148, "EPM": 297, "HLD": 186, "ATR": 116, "ACR": 109, "OCR": 149, "STU": 178, "OJR": 184,
          "FPD": 101, "REC": 698, "SSR": 629, "CRR": 240}


@pytest.fixture
def bdef():
    return load_benchmark("ovobench")


@pytest.fixture
def anno(ovo_dir, bdef):
    return load_annotations(str(ovo_dir / "ovo_bench_new.json"), bdef)


def gemini_files(ovo_dir):
    files = sorted(str(p) for p in ovo_dir.glob("Gemini_*_offline*.json"))
    assert len(files) == 6
    return files


def test_gemini_scores_reproduce_readme(ovo_dir, capsys):
    s = score_result_files(gemini_files(ovo_dir))
    print(summary_line(s))
    print(format_table(s))
    assert {t: f"{v['acc']:.2f}" for t, v in s["tasks"].items()} == EXPECTED
    assert {t: v["n"] for t, v in s["tasks"].items()} == COUNTS
    assert {m["abbr"]: f"{m['acc']:.2f}" for m in s["modes"].values()} == {"BT": "62.54", "RT": "69.32",
                                                                            "FT": "57.15"}
    assert f"{s['total']:.2f}" == "63.00"
    # weighted overall (WTI reading): N = 631 + 837 + REC 82 items + SSR 629 probes + CRR 48 items = 2227
    assert s["weighted_n"] == 2227
    assert {t: v["weight"] for t, v in s["tasks"].items() if v["mode"] == "forward"} == {
        "REC": 82, "SSR": 629, "CRR": 48}
    expected_w = sum(s["tasks"][t]["acc"] * w for t, w in {**COUNTS, "REC": 82, "CRR": 48}.items()) / 2227
    assert s["weighted_overall"] == pytest.approx(expected_w) and f"{s['weighted_overall']:.2f}" == "66.71"
    assert f"{s['task_mean']:.2f}" == "64.58"
    assert s["none_responses"] == 35 and "official" in s["labels"]["total"]
    out = capsys.readouterr().out
    for t, v in EXPECTED.items():
        assert f"| {t} | {v} |" in out and f"{t} {v}" in out
    assert "BT 62.54, RT 69.32, FT 57.15; total 63.00" in out
    assert "**Total (official)**: 63.00" in out and "**Weighted overall** (N=2227): 66.71" in out


def test_query_counts(anno, bdef):
    assert len(anno) == 1640
    qs = build_queries(anno, bdef, video_root="/videos")
    counts = count_queries(qs)
    modes = Counter()
    for t, n in counts.items():
        modes[bdef.task(t).mode] += n
    assert modes == {"backward": 631, "realtime": 837, "forward": 698 + 629 + 240}
    assert (counts["REC"], counts["SSR"], counts["CRR"]) == (698, 629, 240)
    items = Counter(a["task"] for a in anno)
    assert (items["REC"], items["SSR"], items["CRR"]) == (82, 42, 48)
    ids = [q.id for q in qs]
    assert len(ids) == len(set(ids)) == 3035
    assert ids == [q.id for q in build_queries(anno, bdef, video_root="/videos")]   # stable


def test_multiple_choice_query(anno, bdef, ovo_dir):
    official = json.loads((ovo_dir / "prompts.json").read_text(encoding="utf-8"))
    qs = {q.id: q for q in build_queries(anno, bdef, video_root="/videos")}
    q = qs["0"]   # EPM, realtime 215
    opts = ("A. a person with brown shirt; B. a person with green shirt; C. a person with blue shirt; "
            "D. a person with white shirt;")
    assert q.user == official["BR_PROMPT_TEMPLATE"].format("Who did I communicate to  when chopping egg plants?", opts)
    assert q.user.startswith("\nQuestion: Who did I") and f"Options:\n{opts}\n\nRespond only" in q.user
    assert q.gold == "C" and q.parser == "ovo_mcq" and q.system == "" and q.prefill == ""
    assert q.video.path == "/videos/Ego4D/clips/ec4a3ba3-eb00-4aa8-9b41-36043ece98f7.mp4"
    assert (q.video.start, q.video.end, q.meta["end"]) == (0.0, 215.0, 215.0)
    assert qs["1109"].meta["end"] == 89.0 and qs["1109"].meta["realtime"] == 88.43      # ceil
    assert q.meta["as_list"] and not qs["1558_0"].meta["as_list"]   # list mode, but REC keeps strings


def test_forward_queries(anno, bdef, ovo_dir):
    official = json.loads((ovo_dir / "prompts.json").read_text(encoding="utf-8"))
    qs = {q.id: q for q in build_queries(anno, bdef, video_root="/v")}
    rec = next(a for a in anno if a["id"] == 1558)
    for j, probe in enumerate(rec["test_info"]):
        q = qs[query_id(1558, j)]
        assert q.id == f"1558_{j}" and q.gold == probe["count"] and q.parser == "ovo_rec"
        assert q.user == official["REC_PROMPT_TEMPLATE"].format("How many times did they breaking something?")
        assert q.video.end == float(-(-probe["realtime"] // 1))
    ssr = next(a for a in anno if a["id"] == 1516)
    q = qs["1516_2"]
    assert q.user == official["SSR_PROMPT_TEMPLATE"].format(ssr["test_info"][2]["step"]) and q.gold == 0
    assert "“Yes” or “No”" in q.user
    crr = next(a for a in anno if a["id"] == 1468)
    assert qs["1468_4"].user == official["CRR_PROMPT_TEMPLATE"].format(crr["question"])
    assert [qs[f"1468_{j}"].gold for j in range(5)] == [0, 0, 1, 1, 1]
    assert [qs[f"1468_{j}"].video.end for j in range(5)] == [297.0, 302.0, 310.0, 318.0, 338.0]


def test_chunks_and_resume(anno, bdef):
    qs = build_queries(anno, bdef, chunk_dir="/chunks", tasks=["CRR"])
    assert {q.task for q in qs} == {"CRR"} and len(qs) == 240
    assert qs[0].video.path == "/chunks/1468_0.mp4" and qs[0].meta["end"] is None   # a chunk is read whole
    assert prefix_end(3.2, bdef.chunking) == 4.0 and prefix_end(3.0, bdef.chunking) == 3.0
    exact = load_benchmark("ovobench", overrides={"chunking.end": "exact"})
    assert prefix_end(3.2, exact.chunking) == 3.2
    assert len(pending(qs, ["1468_0", "1468_1"])) == 238


def test_assemble_roundtrip_reproduces_gemini(ovo_dir, anno, bdef):
    """Our queries + Gemini's responses by query id -> the official layout -> the same scores.

    The Gemini files list each task's items in annotation order, but 5 records carry stale ids (EPM 194, 240,
    283 and HLD 463, 467 appear as 192, 239, 225, 427, 424, duplicating those), so align by position per task.
    """
    by_task = {}
    for path in gemini_files(ovo_dir):
        data = json.loads(open(path, encoding="utf-8").read())
        for rec in data["backward"] + data["realtime"] + data["forward"]:
            by_task.setdefault(rec["task"], []).append(rec)
    responses, stale = {}, 0
    for task, recs in by_task.items():
        items = [a for a in anno if a["task"] == task]
        assert len(items) == len(recs)
        for a, rec in zip(items, recs):
            assert a.get("question") == rec.get("question") and rec["video"].endswith(a["video"].split("/")[-1])
            stale += a["id"] != rec["id"]
            if "test_info" in a:
                for j, p in enumerate(rec["test_info"]):
                    responses[query_id(a["id"], j)] = p["response"]
            else:
                responses[query_id(a["id"])] = rec["response"]
    assert stale == 5
    assert set(responses) == {q.id for q in build_queries(anno, bdef)}
    bdef = load_benchmark("ovobench", overrides={"parser_mode": "text"})  # Gemini's wrapper returns strings
    results = assemble_results(anno, responses, bdef)
    assert {k: len(v) for k, v in results.items()} == {"backward": 631, "realtime": 837, "forward": 172}
    s = score_results(results, bdef)
    assert {t: f"{v['acc']:.2f}" for t, v in s["tasks"].items()} == EXPECTED and f"{s['total']:.2f}" == "63.00"
    missing = assemble_results(anno, {}, bdef, tasks=["ASI"])
    assert score_results(missing, bdef)["tasks"]["ASI"]["acc"] == 0.0     # None scores 0


def test_malformed_annotations(tmp_path, bdef):
    good = {"id": 1, "task": "EPM", "video": "v.mp4", "realtime": 3, "question": "q", "options": ["a", "b"], "gt": 1}
    cases = [
        (dict(good, gt=5), "'gt'"),
        (dict(good, task="XYZ"), "no task 'XYZ'"),
        ({k: v for k, v in good.items() if k != "realtime"}, "realtime"),
        ({"id": 2, "task": "SSR", "video": "v", "test_info": [{"realtime": 1, "type": 1}]}, "test_info[0] needs 'step'"),
        ({"id": 3, "task": "REC", "video": "v", "test_info": [{"realtime": 1, "count": 1}]}, "'activity'"),
        ({"id": 4, "task": "CRR", "video": "v", "question": "q", "test_info": []}, "test_info"),
    ]
    for bad, msg in cases:
        p = tmp_path / "anno.json"
        p.write_text(json.dumps([good, bad]))
        with pytest.raises(DataError) as err:
            load_annotations(str(p), bdef)
        assert str(p) in str(err.value) and "item 1" in str(err.value) and msg in str(err.value)


def test_results_layout_errors(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"backward": []}))
    with pytest.raises(DataError, match="r.json"):
        score_result_files([str(p)])
    p.write_text(json.dumps({"backward": [{"task": "NOPE", "response": "A", "ground_truth": "A"}],
                             "realtime": [], "forward": []}))
    with pytest.raises(DataError, match="unknown task 'NOPE'"):
        score_result_files(str(p))
