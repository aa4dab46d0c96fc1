"""The streaming world in OVO-Bench's own format, scored by the official scorer; the streaming protocol end to end
(the oracle replayed through the real loop scores 100; the tiny model through ``mmrl eval ovobench --streaming``);
the OVO->stream conversion on the official annotation file."""
import filecmp
import json
import os
from pathlib import Path

import pytest

from mmrl.eval.benchmark_def import load_benchmark
from mmrl.eval.benchmarks.ovobench.protocol import assemble_results, load_annotations
from mmrl.eval.benchmarks.ovobench.score import score_results
from mmrl.eval.benchmarks.ovobench.stream import read_jsonl, streaming_eval
from mmrl.media.decode import probe
from mmrl.stream.config import load_stream_config
from mmrl.stream.loop import ReplayEngine
from mmrl.stream.ovo import (group_by_video, questions_of, stream_blocks, stream_questions, stream_responses,
                             teacher_stream)
from mmrl.stream.record import AnswerEvent, causal
from mmrl.stream.teacher import teacher_texts

REPO = Path(__file__).resolve().parents[2]
OVO = next((p / "shared" / "fixtures" / "ovo_bench" / "ovo_bench_new.json" for p in REPO.parents
            if (p / "shared" / "fixtures" / "ovo_bench" / "ovo_bench_new.json").is_file()), None)


def oracle_turns(world, cfg):
    """The teacher's model turns per block sample id, over whole streams (what the eval's blocks are named), and
    its answers per video."""
    turns, answers = {}, {}
    for video, its in group_by_video(world["items_test"]).items():
        path = os.path.join(world["video_root"], video)
        oracle = world["oracle"][video]  # its evidence makes the teacher recall; the eval's blocks have no oracle
        blocks, recs = teacher_stream(stream_blocks(path, its, cfg, probe(path, video).duration, oracle), cfg)
        for b, r in zip(blocks, recs):
            turns[f"{video}@{b.first_chunk}"] = teacher_texts(r)
            answers.setdefault(video, []).extend(r.answers)
    return turns, answers


def test_world_is_reproducible_and_official_format(stream_world, tmp_path):
    from mmrl.data.synth_stream import make_stream_world

    again = make_stream_world(str(tmp_path), 2, 2, seed=0)
    for key in ("ovo_train", "ovo_test", "oracle_test"):
        assert filecmp.cmp(stream_world[key], again[key], shallow=False), key
    assert filecmp.cmp(os.path.join(stream_world["video_root"], "test_00001.mp4"),
                       os.path.join(again["video_root"], "test_00001.mp4"), shallow=False)
    other = make_stream_world(str(tmp_path / "s1"), 2, 2, seed=1)
    assert not filecmp.cmp(stream_world["ovo_test"], other["ovo_test"], shallow=False)
    bdef = load_benchmark("ovobench")
    items = load_annotations(stream_world["ovo_test"], bdef)  # the official validator accepts every item
    assert [it["task"] for it in items] == ["EPM", "ATR", "CRR", "REC"] * 2
    for it in items:
        if it["task"] == "EPM":  # backward: the chunk asked about left the 8-chunk window by then
            assert int(it["question"].split()[-1].rstrip("?")) + 1 <= it["realtime"] - 8


def test_oracle_answers_score_100_with_the_official_scorer(stream_world):
    cfg = load_stream_config()
    _, answers = oracle_turns(stream_world, cfg)
    items = stream_world["items_test"]
    bdef = load_benchmark("ovobench")
    responses, silence = {}, {}
    for video, its in group_by_video(items).items():
        responses.update(stream_responses(its, answers[video]))
        silence.update(stream_responses(its, []))
        # every oracle answer is causal (at or after its question's answerable time)
        qs = {q.qid: q for q in stream_questions(its)}
        for a in answers[video]:
            q = qs[a.qid]
            alpha = q.alpha if not q.probes else min(p.alpha for p in q.probes if str(p.gold) == a.answer)
            assert causal(a.time, alpha)
    scores = score_results(assemble_results(items, responses, bdef), bdef)
    assert {t: v["acc"] for t, v in scores["tasks"].items()} == {"EPM": 100.0, "ATR": 100.0, "CRR": 100.0,
                                                                "REC": 100.0}
    assert scores["total"] == 100.0 and scores["none_responses"] == 0
    # silence gets nothing: no answer is a None response, scored 0
    silent = score_results(assemble_results(items, silence, bdef), bdef)
    assert silent["total"] == 0.0 and silent["none_responses"] == sum(v["n"] for v in silent["tasks"].values())


def observed_text(cfg, blocks):
    """Every observation text the environment shows over ``blocks`` (teacher decisions)."""
    from mmrl.stream.env import StreamEnvironment
    from mmrl.stream.teacher import oracle_text

    out = []
    for b in blocks:
        env = StreamEnvironment(cfg, block=b)
        obs = env.reset(None, None)
        while obs is not None:
            out += [obs.prefix or "", obs.text or ""]
            obs = env.step(oracle_text(env))
    return "\n".join(out)


def test_question_ids_are_local_to_each_stream(stream_world):
    """q0, q1, ... in arrival order in every stream (train and test alike), the same in every block; the OVO item
    id is never shown; the teacher answers with the local ids."""
    cfg = load_stream_config()
    per_stream = []
    for video, its in group_by_video(stream_world["items_test"]).items():
        path = os.path.join(stream_world["video_root"], video)
        blocks, recs = teacher_stream(stream_blocks(path, its, cfg, 16.0, stream_world["oracle"][video]), cfg)
        qs = blocks[0].questions
        assert [q.qid for q in qs] == [f"q{n}" for n in range(len(qs))]
        assert [q.asked for q in qs] == sorted(q.asked for q in qs)
        assert all([q.qid for q in b.questions] == [q.qid for q in qs] for b in blocks)
        assert sorted(q.source for q in qs) == sorted(str(it["id"]) for it in its)
        assert all(int(q.source) == q.item_id for q in qs)
        shown = observed_text(cfg, blocks)
        assert all(f"Question {q.qid}:" in shown for q in qs) and not any(str(it["id"]) in shown for it in its)
        assert {a.qid for r in recs for a in r.answers} <= {q.qid for q in qs}
        per_stream.append([q.qid for q in qs])
    assert per_stream[0] == per_stream[1]  # both test streams use the same handles (the world's ids differ)
    with pytest.raises(ValueError, match="one stream"):
        stream_questions(stream_world["items_test"])


def test_a_local_answer_maps_back_to_its_ovo_item(stream_world):
    video, its = next(iter(group_by_video(stream_world["items_test"]).items()))
    qs = stream_questions(its)
    back = next(q for q in qs if q.mode == "backward")
    forward = next(q for q in qs if q.task == "CRR")
    crr = next(it for it in its if it["task"] == "CRR")
    last = max(float(p["realtime"]) for p in crr["test_info"])
    got = stream_responses(its, [AnswerEvent(back.qid, "C", back.asked, int(back.asked)),
                                 AnswerEvent(forward.qid, "Yes", last, int(last)),
                                 AnswerEvent("q99", "A", 15.0, 14)])  # an unknown local id answers nothing
    assert got[str(back.item_id)] == "C"
    assert [got[f"{crr['id']}_{j}"] for j in range(len(crr["test_info"]))] == \
        [None] * (len(crr["test_info"]) - 1) + ["Yes"]
    others = {k: v for k, v in got.items() if k != str(back.item_id) and not k.startswith(f"{crr['id']}_")}
    assert others and all(v is None for v in others.values())


def test_streaming_protocol_replays_the_oracle_through_the_loop(stream_world, tmp_path, tiny_model_path):
    from mmrl.models.loading import load_processor

    proc = load_processor(tiny_model_path)
    cfg = load_stream_config()
    turns, _ = oracle_turns(stream_world, cfg)
    bdef = load_benchmark("ovobench")
    engine = ReplayEngine(proc, turns)
    s = streaming_eval(stream_world["items_test"], stream_world["video_root"], bdef, cfg, proc, engine, tmp_path)
    assert s["scores"]["total"] == 100.0 and s["invalid"] == {} and s["invalid_frac"] == 0 and s["unanswered"] == 0
    assert all(not v for v in engine.turns.values())  # every teacher turn was played, in order
    assert s["recalls"] == 2 and s["videos"] == 2 and s["queries"] == 2 * 2 + sum(
        len(it["test_info"]) for it in stream_world["items_test"] if "test_info" in it)
    # cost: 16 one-second chunks of 4 visual tokens per video, the window re-shown at each block, 2 recalls
    per_video = [r["visual_tokens_shown"] for r in read_jsonl(tmp_path / "stream_records.jsonl")]
    assert per_video == [4 * (16 + 4 * 3 + 1), 4 * (16 + 4 * 3 + 1)]
    # saved as the official Qwen2-VL wrapper saves a response (parser_mode: list), as the offline run does
    assert json.loads((tmp_path / "results.json").read_text())["forward"][0]["test_info"][0]["response"] == ["No"]
    again = streaming_eval(stream_world["items_test"], stream_world["video_root"], bdef, cfg, proc,
                           ReplayEngine(proc, {}), tmp_path)  # resumed: every video is done, nothing generated
    assert again["scores"] == s["scores"]


@pytest.mark.slow
def test_cli_streaming_side_by_side_on_the_tiny_model(stream_world, tmp_path, tiny_model_path):
    from mmrl.cli import main  # "--model tiny" resolves to tiny_model_path (the fixture sets MMRL_CACHE)

    cfg = tmp_path / "stream.yaml"
    cfg.write_text("max_new_tokens: 6\nblock_chunks: 8\n")
    out = tmp_path / "run"
    args = ["eval", "ovobench", "--streaming", "--stream-config", str(cfg), "--model", "tiny", "--device", "cpu",
            "--anno", stream_world["ovo_test"], "--video-root", stream_world["video_root"], "--tasks", "EPM,ATR,CRR",
            "--limit", "1", "--nframes", "4", "--min-pixels", "784", "--max-pixels", "3136",
            "--max-new-tokens", "4", "--no-progress", "--out", str(out)]
    assert main(args) == 0
    table = (out / "side_by_side.md").read_text()
    assert "| **BT** |" in table and "| model turns / query |" in table and "visual tokens prefilled" in table
    s = json.loads((out / "streaming" / "summary.json").read_text())
    off = json.loads((out / "offline" / "summary.json").read_text())
    assert set(s["scores"]["tasks"]) == set(off["scores"]["tasks"]) == {"EPM", "ATR", "CRR"}
    assert s["queries"] == off["scores"]["tasks"]["CRR"]["n"] + 2 and s["videos"] == 1
    assert s["invalid_frac"] == rec_frac(out / "streaming") and 0 <= s["invalid_frac"] <= 1
    rec = read_jsonl(out / "streaming" / "stream_records.jsonl")[0]
    assert s["decisions"] >= 9 and rec["blocks"] == 2  # more than one 8-chunk block: a compaction in between
    assert s["cost"]["model_turns"] * s["queries"] == pytest.approx(s["decisions"] + rec["blocks"])
    assert (out / "offline" / "results.json").is_file() and (out / "streaming" / "results.json").is_file()


def rec_frac(folder):
    recs = read_jsonl(folder / "stream_records.jsonl")
    return sum(r["invalid_decisions"] for r in recs) / sum(r["decisions"] for r in recs)


@pytest.mark.skipif(OVO is None, reason="shared/fixtures/ovo_bench is missing (licensed data)")
def test_conversion_of_the_official_annotations():
    items = json.loads(OVO.read_text())
    qs = [q for it in items for q in questions_of(it)]
    assert len({q.qid for q in qs}) == len(qs)
    by_task = {}
    for q in qs:
        by_task.setdefault(q.task, []).append(q)
        assert q.asked >= 0 and all(p.time >= 0 and p.alpha >= 0 for p in q.probes)
        if q.kind == "choice":
            assert q.alpha == q.asked and len(q.gold) == 1
    assert len(by_task["EPM"]) == 297 and sum(len(q.probes) for q in by_task["SSR"]) == 629
    assert sum(len(q.probes) for q in by_task["REC"]) == 698 and sum(len(q.probes) for q in by_task["CRR"]) == 240
    # every probe's gold is answerable by its own time (alpha <= realtime): the official times are consistent
    assert [p for q in qs for p in q.probes if p.alpha > p.time] == []
