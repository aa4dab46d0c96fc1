"""MVBench protocol: exact prompts (each system placement), both annotation layouts, lmms-eval's segment
clips or bounds under the official layout, queries and aggregates."""
import json
import os

import pytest

from mmrl.errors import ConfigError, DataError
from mmrl.eval.benchmark_def import load_benchmark
from mmrl.eval.benchmarks.mvbench.hooks import load
from mmrl.eval.hooks import EvalInputs
from mmrl.eval.benchmarks.mvbench.data import task_counts, task_key
from mmrl.eval.benchmarks.mvbench.protocol import (build_prompt, build_queries, gold_for, gold_string, random_chance,
                                        score_records, score_responses)

SYSTEM = ("Carefully watch the video and pay attention to the cause and sequence of events, the detail and movement "
          "of objects, and the action and pose of persons. Based on your observations, select the best option that "
          "accurately addresses the question.\n")
Q = "What happened after the person took the food?"
C = ["Ate the medicine.", "Tidied up the blanket.", "Put down the cup/glass/bottle.", "Took the box."]
USER = ("Question: What happened after the person took the food?\nOptions:\n(A) Ate the medicine.\n"
        "(B) Tidied up the blanket.\n(C) Put down the cup/glass/bottle.\n(D) Took the box.\n"
        "Only give the best option.")


def load_mvbench(root, bdef, tasks=(), video_root=None):
    """Items through the benchmark's own load hook (layout from data.layout)."""
    return load(bdef, EvalInputs(data_root=str(root), video_root=video_root), list(tasks), 0)[0]


def _with(name, **over):
    return load_benchmark(name, overrides=over)


# --- prompts -----------------------------------------------------------------------------------------------------
def test_prompt_original_exact():
    # the notebook's system_llm=True: the system text is the system turn and prefixes the question
    p = build_prompt(Q, C, load_benchmark("mvbench").prompt)
    assert p == {"system": SYSTEM, "user": SYSTEM + USER, "prefill": "Best option:("}


@pytest.mark.parametrize("placement,system,user", [
    ("system_and_user", SYSTEM, SYSTEM + USER),   # Ask-Anything notebook (default)
    ("system", SYSTEM, USER),                     # VLMEvalKit
    ("user", "", SYSTEM + USER),
])
def test_system_placement(placement, system, user):
    p = build_prompt(Q, C, _with("mvbench", **{"prompt.system_placement": placement}).prompt)
    assert (p["system"], p["user"]) == (system, user)


def test_prompt_rstrip():
    p = build_prompt("Why?  ", ["x", "y  "], _with("mvbench", **{"prompt.system_placement": "system"}).prompt)
    assert p["user"] == "Question: Why?  \nOptions:\n(A) x\n(B) y\nOnly give the best option."


def test_prompt_lmms_exact():
    p = build_prompt(Q, C, load_benchmark("mvbench_lmms").prompt)
    assert p == {"system": "You are a helpful assistant.", "prefill": "", "user": (
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
    assert qs[0].prefill == "Best option:(" and qs[0].system == SYSTEM and qs[0].user.startswith(SYSTEM)
    assert qs[0].meta["bound"] == (2.0, 6.0) and qs[0].response.prefix == "("
    msgs = qs[0].messages()
    assert msgs[0]["role"] == "system" and msgs[1]["content"][0]["type"] == "video"
    assert msgs[1]["content"][1]["text"] == qs[0].user
    assert qs[2].meta["frame_fps"] == 3.0 and qs[2].meta["bound"] == (0.5, 2.5)
    # use_bound: false drops every bound
    assert build_queries(items, _with("mvbench", **{"sampling.use_bound": False}))[0].meta["bound"] is None


def test_load_official_runs_present_tasks(tmp_path):
    root = _official(tmp_path)
    items, notes = load(load_benchmark("mvbench"), EvalInputs(data_root=str(root)), [], 0)
    assert task_counts(items) == {"action_sequence": 2, "episodic_reasoning": 1}
    assert len(notes["missing_tasks"]) == 18 and notes["layout"] == "official"
    with pytest.raises(ConfigError, match="unknown MVBench task"):
        load_mvbench(root, load_benchmark("mvbench"), tasks=["no_such_task"])
    # data.layout is honoured: hf_video on a folder without test.json fails on that file
    with pytest.raises(DataError, match="test.json"):
        load_mvbench(root, _with("mvbench", **{"data.layout": "hf_video"}))


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
    assert load_mvbench(str(tmp_path), b, tasks=["episodic_reasoning"])[0].task == "episodic_reasoning"
    assert items[0].sample.video.path == os.path.join(str(tmp_path), "video", "star/Charades_segment", "v1.mp4")
    assert items[1].sample.video.path.endswith(os.path.join("tvqa/video_fps3_hq_segment", "e1.mp4"))
    assert all(i.reader == "video" and i.sample.video.start is None for i in items)  # whole video
    q = build_queries(items, b)[0]
    assert q.gold == "A" and q.system == "You are a helpful assistant." and q.prefill == ""
    assert q.meta["bound"] is None  # pre-cut clips: never bounded
    assert task_key("Fine-grained Action") == "fine_grained_action"


def test_hf_video_unknown_task(tmp_path):
    (tmp_path / "test.json").write_text(json.dumps({"meta": {"Made Up": []}, "root": {}}))
    with pytest.raises(DataError, match="test.json.*unknown task 'Made Up'"):
        load_mvbench(str(tmp_path), load_benchmark("mvbench_lmms"))


# --- lmms-eval under the official layout --------------------------------------------------------------------------
def test_lmms_official_layout_applies_bounds_without_segments(tmp_path):
    root = _official(tmp_path)
    b = load_benchmark("mvbench_lmms")
    items, notes = load(b, EvalInputs(data_root=str(root)), ["action_sequence", "episodic_reasoning"], 0)
    assert notes["bound_tasks"] == {"action_sequence": "star/Charades_v1_480 + item start/end",
                                    "episodic_reasoning": "tvqa/frames_fps3_hq + item start/end"}
    qs = build_queries(items, b, notes["_task_defs"])
    assert qs[0].video.path.endswith(os.path.join("star/Charades_v1_480", "AAA.mp4"))
    assert qs[0].meta["bound"] == (2.0, 6.0) and qs[2].meta["bound"] == (0.5, 2.5)
    assert qs[2].meta["frame_fps"] == 3.0 and items[2].reader == "frame"


def test_lmms_official_layout_prefers_segment_clips(tmp_path):
    root = _official(tmp_path)
    (root / "video" / "star" / "Charades_segment").mkdir(parents=True)
    (root / "video" / "tvqa" / "video_fps3_hq_segment").mkdir(parents=True)
    b = load_benchmark("mvbench_lmms")
    items, notes = load(b, EvalInputs(data_root=str(root)), ["action_sequence", "episodic_reasoning"], 0)
    qs = build_queries(items, b, notes["_task_defs"])
    assert qs[0].video.path.endswith(os.path.join("star/Charades_segment", "AAA.mp4")) and qs[0].meta["bound"] is None
    assert qs[2].video.path.endswith(os.path.join("tvqa/video_fps3_hq_segment", "clip1.mp4"))
    assert qs[2].meta["bound"] is None and items[2].reader == "video"


def test_lmms_official_layout_refused_when_neither(tmp_path):
    root = _official(tmp_path)
    with pytest.raises(ConfigError, match="action_sequence.*cannot give lmms-eval's frames"):
        load(_with("mvbench_lmms", **{"sampling.use_bound": False}), EvalInputs(data_root=str(root)),
             ["action_sequence"], 0)
    unbounded = [{"video": "AAA.mp4", "question": Q, "candidates": C, "answer": C[0]}]  # no start/end
    (tmp_path / "b").mkdir()
    root2 = _official(tmp_path / "b", seq_items=unbounded)
    with pytest.raises(DataError, match="item 0.*start"):
        load(load_benchmark("mvbench_lmms"), EvalInputs(data_root=str(root2)), ["action_sequence"], 0)


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
