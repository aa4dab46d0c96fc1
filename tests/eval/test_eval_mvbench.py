"""MVBench protocol: get_index (hand-computed), exact prompts, both annotation layouts, queries and aggregates."""
import json
import os

import numpy as np
import pytest

from mmrl.errors import DataError
from mmrl.eval.benchmark_def import load_benchmark
from mmrl.eval.mvbench_data import load_mvbench, task_key, task_counts
from mmrl.eval.mvbench_protocol import (build_prompt, build_queries, frame_files, get_index, gold_for, gold_string,
                                        query_frame_indices, random_chance, score_records, score_responses)

SYSTEM = ("Carefully watch the video and pay attention to the cause and sequence of events, the detail and movement "
          "of objects, and the action and pose of persons. Based on your observations, select the best option that "
          "accurately addresses the question.\n")
Q = "What happened after the person took the food?"
C = ["Ate the medicine.", "Tidied up the blanket.", "Put down the cup/glass/bottle.", "Took the box."]


# --- get_index ---------------------------------------------------------------------------------------------------
def test_get_index_video_no_bound():
    # max_frame 99, seg 12.375: int(6.1875 + round(12.375 i)); round(49.5) = 50 (half to even)
    assert get_index(100, 30.0, None, 0, 8) == [6, 18, 31, 43, 56, 68, 80, 93]


def test_get_index_video_bound():
    assert get_index(300, 30.0, (2.0, 6.0), 0, 4) == [75, 105, 135, 165]     # [60, 180], seg 30
    assert get_index(300, 30.0, (8.0, 20.0), 0, 4) == [247, 262, 277, 291]   # end capped at 299, seg 14.75
    assert get_index(300, 30.0, (0.0, 1.0), 0, 2) == [7, 22]                # [0, 30], seg 15


def test_get_index_frame_folder():
    # 30 JPEGs 00001..00030: first_idx 1, max_frame = 30, seg 29/4 = 7.25
    assert get_index(30, 3.0, None, 1, 4) == [4, 11, 18, 26]
    # bound at fps 3: round(1.5) = 2, round(7.5) = 8 (half to even); seg 1.5
    assert get_index(10, 3.0, (0.5, 2.5), 1, 4) == [2, 4, 5, 6]
    # a bound starting at 0 still starts at frame 1: [1, 9], seg 4
    assert get_index(10, 3.0, (0.0, 3.0), 1, 2) == [3, 7]


def _reference(bound, fps, max_frame, first_idx, n):
    """The notebook's MVBench_dataset.get_index, transcribed with numpy."""
    start, end = bound if bound else (-100000, 100000)
    start_idx = max(first_idx, round(start * fps))
    end_idx = min(round(end * fps), max_frame)
    seg = float(end_idx - start_idx) / n
    return np.array([int(start_idx + (seg / 2) + np.round(seg * i)) for i in range(n)]).tolist()


def test_get_index_matches_reference():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n_frames, fps, n = int(rng.integers(20, 2000)), float(rng.choice([3, 24, 25, 29.97, 30])), int(
            rng.choice([4, 8, 16, 32]))
        first = int(rng.integers(0, 2))
        bound = None
        if rng.random() < 0.5:
            s = float(rng.uniform(0, n_frames / fps))
            bound = (s, s + float(rng.uniform(1, 30)))
        assert get_index(n_frames, fps, bound, first, n) == _reference(bound, fps, n_frames - 1 + first, first, n)


def test_frame_files():
    assert frame_files("/d", [1, 12]) == ["/d/00001.jpg", "/d/00012.jpg"]


# --- prompts -----------------------------------------------------------------------------------------------------
def test_prompt_original_exact():
    p = build_prompt(Q, C, load_benchmark("mvbench").prompt)
    assert p["system"] == SYSTEM
    assert p["user"] == ("Question: What happened after the person took the food?\nOptions:\n(A) Ate the medicine.\n"
                         "(B) Tidied up the blanket.\n(C) Put down the cup/glass/bottle.\n(D) Took the box.\n"
                         "Only give the best option.")
    assert p["prefill"] == "Best option:("


def test_prompt_rstrip():
    p = build_prompt("Why?  ", ["x", "y  "], load_benchmark("mvbench").prompt)
    assert p["user"] == "Question: Why?  \nOptions:\n(A) x\n(B) y\nOnly give the best option."


def test_prompt_lmms_exact():
    p = build_prompt(Q, C, load_benchmark("mvbench_lmms").prompt)
    assert p == {"system": "", "prefill": "", "user": (
        "Question:What happened after the person took the food?\nOption:\n(A) Ate the medicine.\n"
        "(B) Tidied up the blanket.\n(C) Put down the cup/glass/bottle.\n(D) Took the box.\n"
        "Only give the best option.\n")}


# --- data ---------------------------------------------------------------------------------------------------------
def _official(tmp_path, seq_items=None, er_items=None, n_jpg=30):
    (tmp_path / "json").mkdir()
    seq = seq_items if seq_items is not None else [
        {"video": "AAA.mp4", "question": Q, "candidates": C, "answer": "Took the box.", "start": 2.0, "end": 6},
        {"video": "BBB.mp4", "question": "q2", "candidates": ["x", "y"], "answer": "x", "start": 0, "end": 1.5}]
    er = er_items if er_items is not None else [
        {"video": "clip1", "question": "Who?", "candidates": ["a", "b", "c"], "answer": "b", "start": 0.5,
         "end": 2.5}]
    (tmp_path / "json" / "action_sequence.json").write_text(json.dumps(seq))
    (tmp_path / "json" / "episodic_reasoning.json").write_text(json.dumps(er))
    folder = tmp_path / "video" / "tvqa" / "frames_fps3_hq" / "clip1"
    folder.mkdir(parents=True)
    for i in range(1, n_jpg + 1):
        (folder / f"{i:05d}.jpg").write_bytes(b"")
    return tmp_path


def test_load_official_and_queries(tmp_path):
    b = load_benchmark("mvbench")
    root = _official(tmp_path)
    items = load_mvbench(str(root), b, tasks=["action_sequence", "episodic_reasoning"])
    assert task_counts(items) == {"action_sequence": 2, "episodic_reasoning": 1}
    first, er = items[0], items[2]
    assert first.sample.id == "action_sequence/0" and first.reader == "video"
    assert first.sample.video.path == os.path.join(str(root), "video", "star/Charades_v1_480", "AAA.mp4")
    assert (first.sample.video.start, first.sample.video.end) == (2.0, 6.0)
    assert gold_string(first.sample) == "(D) Took the box." and gold_for(first.sample, "lmms_mcq_acc") == "D"
    assert er.reader == "frame" and er.sample.video.frame_fps == 3.0

    qs = build_queries(items, b)
    assert qs[0].gold == "(D) Took the box." and qs[0].parser == "mvbench_check_ans"
    assert qs[0].prefill == "Best option:(" and qs[0].system == SYSTEM
    assert qs[0].meta["bound"] == (2.0, 6.0) and qs[0].video.nframes == 16
    msgs = qs[0].messages()
    assert msgs[0]["role"] == "system" and msgs[1]["content"][0]["type"] == "video"
    assert msgs[1]["content"][1]["text"] == qs[0].user
    assert query_frame_indices(qs[0], 300, fps=30.0)[:2] == [63, 71]   # [60, 180], seg 7.5, round(7.5) = 8
    # frame folder: fps 3 from the definition, files numbered from 1
    n = len(os.listdir(er.sample.video.path))
    idx = query_frame_indices(qs[2], n)
    assert idx == get_index(30, 3.0, (0.5, 2.5), 1, 16) and min(idx) >= 1 and max(idx) <= 30
    assert all(os.path.exists(p) for p in frame_files(er.sample.video.path, idx))


def test_load_official_all_tasks_missing_file(tmp_path):
    root = _official(tmp_path)
    with pytest.raises(DataError, match="action_prediction.json"):
        load_mvbench(str(root), load_benchmark("mvbench"))


@pytest.mark.parametrize("bad,msg", [
    ({"video": "x.mp4", "question": "q", "candidates": ["a", "b"], "answer": "c", "start": 0, "end": 1}, "answer"),
    ({"video": "x.mp4", "question": "q", "candidates": ["a", "b"], "answer": "a"}, "start"),
    ({"video": "x.mp4", "question": "q", "candidates": "ab", "answer": "a", "start": 0, "end": 1}, "candidates"),
    ({"question": "q", "candidates": ["a", "b"], "answer": "a", "start": 0, "end": 1}, "video"),
    ("not an object", "object"),
])
def test_malformed_item_names_file_and_index(tmp_path, bad, msg):
    good = {"video": "x.mp4", "question": "q", "candidates": ["a", "b"], "answer": "a", "start": 0, "end": 1}
    root = _official(tmp_path, seq_items=[good, bad])
    with pytest.raises(DataError) as err:
        load_mvbench(str(root), load_benchmark("mvbench"), tasks=["action_sequence"])
    text = str(err.value)
    assert "action_sequence.json" in text and "item 1" in text and msg in text


def test_malformed_file(tmp_path):
    root = _official(tmp_path)
    (root / "json" / "action_sequence.json").write_text("{not json")
    with pytest.raises(DataError, match="action_sequence.json.*not valid JSON"):
        load_mvbench(str(root), load_benchmark("mvbench"), tasks=["action_sequence"])
    (root / "json" / "action_sequence.json").write_text('{"a": 1}')
    with pytest.raises(DataError, match="list of items"):
        load_mvbench(str(root), load_benchmark("mvbench"), tasks=["action_sequence"])


def test_load_hf_video(tmp_path):
    item = {"video": "v1.mp4", "question": Q, "candidates": C, "answer": C[0], "start": 1, "end": 3}
    (tmp_path / "test.json").write_text(json.dumps({
        "meta": {"Action Sequence": [item], "episodic_reasoning": [dict(item, video="e1.mp4")]},
        "root": {"Action Sequence": "star/Charades_segment"}}))
    b = load_benchmark("mvbench_lmms")
    items = load_mvbench(str(tmp_path), b)
    assert [i.task for i in items] == ["action_sequence", "episodic_reasoning"]
    assert items[0].sample.video.path == os.path.join(str(tmp_path), "video", "star/Charades_segment", "v1.mp4")
    assert items[1].sample.video.path.endswith(os.path.join("tvqa/video_fps3_hq_segment", "e1.mp4"))
    assert all(i.reader == "video" and i.sample.video.start is None for i in items)  # whole video
    q = build_queries(items, b)[0]
    assert q.gold == "A" and q.system == "" and q.prefill == "" and q.meta["bound"] is None
    assert task_key("Fine-grained Action") == "fine_grained_action"


def test_hf_video_unknown_task(tmp_path):
    (tmp_path / "test.json").write_text(json.dumps({"meta": {"Made Up": []}, "root": {}}))
    with pytest.raises(DataError, match="test.json.*unknown task 'Made Up'"):
        load_mvbench(str(tmp_path), load_benchmark("mvbench_lmms"))


# --- scoring -------------------------------------------------------------------------------------------------------
def test_score_micro_and_lmms(tmp_path):
    b = load_benchmark("mvbench")
    items = load_mvbench(str(_official(tmp_path)), b, tasks=["action_sequence", "episodic_reasoning"])
    qs = build_queries(items, b)
    recs = score_responses(qs, {"action_sequence/0": "D) Took the box.", "action_sequence/1": "B) y"})
    assert [r["score"] for r in recs] == [1, 0, 0]          # the missing response scores 0
    s = score_records(recs)
    assert s["tasks"]["action_sequence"]["acc"] == 50.0 and s["tasks"]["episodic_reasoning"]["acc"] == 0.0
    assert s["avg"] == pytest.approx(100 / 3)
    lm = [{"task": "t", "response": "A", "score": 1}, {"task": "t", "response": "", "score": 0},
          {"task": "t", "response": "B", "score": 0}, {"task": "t", "response": None, "score": 0}]
    assert score_records(lm, "lmms_answered")["tasks"]["t"]["acc"] == 50.0   # 1 correct / 2 non-empty
    assert score_records(lm, "micro")["tasks"]["t"]["acc"] == 25.0
    assert random_chance([i.sample for i in items]) == pytest.approx(100 * (0.25 + 0.5 + 1 / 3) / 3)
