"""The streaming environment without a model: recall rules, compaction budget, invalid actions as counted
observations, question arrival (specs/algorithms.md section 5)."""
import dataclasses

import pytest

from mmrl.stream.env import StreamEnvironment, word_count
from mmrl.stream.record import AnswerEvent, render_memory

T = "<think>x</think>"


def act(body: str) -> str:
    return f"{T}<action>{body}</action>"


def test_recall_rules(blocks):
    cfg, bl = blocks
    env = StreamEnvironment(cfg, block=bl[2])  # chunks 8..11; the archive holds 0..11
    first = env.reset(None, None)
    assert first.media.frames.shape[0] == 2 * (cfg.carry_chunks + 1)  # window before the block + chunk 8: 10 frames
    assert env.chunk_start == 8.0 and env.now == 9.0
    obs = env.step(act("recall(2, 8)"))  # end at the current chunk's start: invalid, moves on to chunk 9
    assert env.record.subturns[-1].reason == "recall_future" and env.k == 9
    assert "invalid (recall_future)" in obs.prefix and obs.media.frames.shape[0] == 2
    obs = env.step(act("recall(0, 8.5)"))  # valid: the latest 4 chunks overlapping, each once; decide again
    rec = env.record.subturns[-1]
    assert rec.valid and rec.recall.chunks == [5, 6, 7, 8] and env.k == 9 and env.sub == 1
    assert obs.media.frames.shape[0] == 8 and "Decide again at 10 s" in obs.text
    env.step(act("recall(0, 8.5)"))  # the next 4 not recalled before
    assert env.record.subturns[-1].recall.chunks == [1, 2, 3, 4] and env.sub == 2
    env.step(act("recall(0, 1)"))  # a third recall at the same time: over max_recalls_per_chunk
    assert env.record.subturns[-1].reason == "recall_limit" and env.k == 10
    env.step(act("recall(5, 6)"))  # chunks 5 and 6 were recalled already
    assert env.record.subturns[-1].reason == "recall_nothing_new"
    env.step(act("recall(3, 2)"))
    assert env.record.subturns[-1].reason == "recall_order"
    assert env.record.invalid_counts() == {"recall_future": 1, "recall_limit": 1, "recall_nothing_new": 1,
                                           "recall_order": 1}
    assert [s.time for s in env.record.subturns] == [9.0, 10.0, 10.0, 10.0, 11.0, 12.0]
    assert env.k == 12  # past the block: the compaction comes next


def test_point_recall_returns_the_chunk_holding_it(blocks):
    cfg, bl = blocks
    env = StreamEnvironment(cfg, block=bl[1])
    env.reset(None, None)
    env.step(act("recall(2.5, 2.5)"))
    assert env.record.subturns[-1].recall.chunks == [2]


def test_compaction_keeps_the_budget(blocks):
    cfg, bl = blocks
    small = dataclasses.replace(cfg, memory_budget=12)
    env = StreamEnvironment(small, block=bl[0])
    env.reset(None, None)
    for _ in range(4):
        obs = env.step(act("silence"))
    assert "Controller boundary at 4 s" in obs.text and "[3-4] x" in obs.text  # the think updates are the memory
    lines = "\n".join(f"[{k}-{k + 1}] note number {k} here" for k in range(4))
    assert env.step(f"<memory>\n{lines}\nbroken line\n</memory>") is None
    c = env.record.compactions[-1]
    assert c.reason == "memory_over_budget" and c.bad_lines == 1 and c.dropped == 2
    assert word_count(render_memory(c.post)) <= 12 and c.tokens_post <= 12 < c.budget + 20
    assert [m.start for m in c.post] == [2.0, 3.0]  # the oldest lines go first
    assert len(c.pre) == 4 and all(m.note == "x" for m in c.pre)
    assert env.record.invalid_counts() == {"memory_over_budget": 1, "memory_bad_line": 1}


def test_no_memory_block_keeps_pre_within_budget(blocks):
    cfg, bl = blocks
    env = StreamEnvironment(dataclasses.replace(cfg, memory_budget=3), block=bl[0])
    env.reset(None, None)
    for _ in range(4):
        env.step(act("silence"))
    env.step("I forgot the format")
    c = env.record.compactions[-1]
    assert c.reason == "no_memory" and word_count(render_memory(c.post)) <= 3 and len(c.post) == 1


def test_invalid_actions_are_counted_never_raised(blocks):
    cfg, bl = blocks
    env = StreamEnvironment(cfg, block=bl[0])
    env.reset(None, None)
    back = next(q for q in bl[0].questions if q.mode == "backward")
    junk = ["\x00\xff<action>", act("response(q999, A)"), act(f"response({back.qid}, A)"),
            act(f"response(q{back.item_id}, A)")]
    for text in junk:
        assert env.step(text) is not None
    counts = env.record.invalid_counts()
    # the backward question is asked at a later time than now: not active yet; its OVO item id is no question id
    assert counts == {"no_action": 1, "unknown_question": 2, "question_not_active": 1}
    assert env.record.answers == []


def test_questions_arrive_at_their_time(blocks, stream_world):
    cfg, bl = blocks
    env = StreamEnvironment(cfg, block=bl[0])
    obs = env.reset(None, None)
    asked = {q.qid: q.asked for q in bl[0].questions}
    seen = [q for q in asked if f"Question {q}:" in obs.text]
    assert seen == [q for q, t in asked.items() if t <= 1.0]
    texts = [obs.text]
    while env.k <= bl[0].last_chunk:
        texts.append(env.step(act("silence")).text)
    for q, t in asked.items():
        hits = [i for i, x in enumerate(texts) if f"Question {q}:" in x]
        assert hits == ([int(t) - 1 if t >= 1 else 0] if t <= 4 else []), q


# (question asked at, silent decisions before the response, accepted): the block starts at chunk 4 (now = 5 s,
# 1-second chunks); a question can be answered from the decision at or after the time it is asked, never one
# chunk before it is shown
ANSWERS = [
    (4.2, 0, True), (5.0, 0, True), (0.5, 0, True),  # asked before or at the decision's time
    (5.5, 0, False), (6.0, 0, False), (6.9, 0, False),  # shown at the next decision (6 s) or later: not yet
    (5.5, 1, True), (6.0, 1, True), (6.5, 1, False), (7.0, 2, True), (7.5, 2, False),
]


@pytest.mark.parametrize("asked,wait,accepted", ANSWERS, ids=[f"{a}-{w}" for a, w, _ in ANSWERS])
def test_an_answer_counts_only_for_a_question_already_asked(blocks, asked, wait, accepted):
    from mmrl.stream.record import StreamQuestion

    cfg, bl = blocks
    q = StreamQuestion(qid="qx", task="EPM", mode="backward", text="Which colour?", asked=asked, alpha=0.0, gold=["B"])
    env = StreamEnvironment(cfg, block=dataclasses.replace(bl[1], questions=[q], answers_before=[]))
    env.reset(None, None)
    assert env.now == 5.0
    for _ in range(wait):
        env.step(act("silence"))
    now = env.now
    env.step(act("response(qx, B)"))
    turn = env.record.subturns[-1]
    assert (turn.reason is None) == accepted and ("qx" in turn.active) == accepted
    assert env.record.answers == ([AnswerEvent("qx", "B", now, 4 + wait)] if accepted else [])
    if not accepted:
        assert turn.reason == "question_not_active"


def test_observation_texts_name_times_memory_and_recalls(blocks):
    from mmrl.stream.record import MemoryLine

    cfg, bl = blocks
    env = StreamEnvironment(cfg, block=dataclasses.replace(bl[1], questions=[], memory_initial=[]))
    first = env.reset(None, None)
    lo = max(0, 4 - cfg.carry_chunks)
    assert first.prefix.endswith(f"Memory:\n(empty)\nTime 5 s. Chunks {lo}-5 s:") and first.text == "Decide."
    nxt = env.step(act("silence"))
    assert nxt.prefix == "Time 6 s:"
    rec = env.step(act("recall(0.5, 2.5)"))
    assert rec.prefix == "Recalled 0-1 s, 1-2 s, 2-3 s:" and rec.text == "Decide again at 6 s."
    kept = StreamEnvironment(cfg, block=dataclasses.replace(bl[1], questions=[], memory_initial=[MemoryLine("red", 0, 2)]))
    assert "Memory:\n[0-2] red\nTime 5 s." in kept.reset(None, None).prefix
    # the block's own think limit
    short = StreamEnvironment(dataclasses.replace(cfg, max_think_words=2), block=bl[1])
    short.reset(None, None)
    short.step("<think>a b c</think><action>silence</action>")
    assert short.record.subturns[-1].reason == "think_too_long"


def test_compaction_records_token_counts_and_an_exact_budget_fits(blocks):
    from mmrl.stream.env import fit_budget
    from mmrl.stream.record import MemoryLine

    lines = [MemoryLine("a b", 0, 1), MemoryLine("c d", 1, 2)]
    exact = word_count(render_memory(lines))
    assert fit_budget(lines, exact, word_count) == lines and fit_budget(lines, exact - 1, word_count) == lines[1:]
    cfg, bl = blocks
    env = StreamEnvironment(dataclasses.replace(cfg, memory_budget=50), block=bl[0])
    obs = env.reset(None, None)
    for _ in range(4):
        obs = env.step(act("silence"))
    assert "Memory before compaction:\n[0-1] x\n" in obs.text
    env.step("<memory>\n[0-2] red square\n</memory>")
    c = env.record.compactions[-1]
    assert c.tokens_pre == word_count(render_memory(c.pre)) and c.tokens_post == word_count("[0-2] red square")
    assert c.budget == 50 and c.reason is None
