"""The streaming environment's whole episode record, field by field, against a hand-written specification.

A small block of the test world's first stream is replayed with a scripted policy at non-default settings
(2-second chunks at 1 fps, a 4-chunk window with 2-chunk blocks, one recall per chunk, an 8-token memory budget),
so every time is a product of the chunk length and every field the rewards read (sub-turns, answers, recalls,
the compaction, the visual tokens, the forward passes) is compared with the value the rules of
``mmrl/stream/env.py`` give by hand.
"""
import copy
import dataclasses

import pytest

from mmrl.stream.actions import RECALL, RESPONSE, SILENCE, Action
from mmrl.stream.block import StreamBlock, block_sample
from mmrl.stream.env import StreamEnvironment, intro, word_count
from mmrl.stream.record import (FORWARD, AnswerEvent, Compaction, EpisodeRecord, MemoryLine, Probe, Recall,
                                StreamQuestion, SubTurn)


def _cfg(base):
    # chunk k covers [2k, 2k + 2) s with frames at 2k and 2k + 1; 2 chunks before the block join its first decision
    return dataclasses.replace(base, chunk_seconds=2.0, fps=1.0, window_chunks=4, block_chunks=2,
                               max_recalls_per_chunk=1, max_think_words=3, memory_budget=8).check()


def _questions():
    return [
        # answered by an earlier block; a choice question closes with its first answer
        StreamQuestion(qid="qb", task="EPM", mode="backward", text="What moved first?", asked=1.0, alpha=1.0,
                       gold=["A"]),
        # forward: stays open after an answer, until its last probe (8 s) lies before the chunk's start
        StreamQuestion(qid="qf", task="CRR", mode="forward", text="How many balls so far?", asked=2.0, alpha=0.0,
                       kind=FORWARD, probes=[Probe(4.0, "1", 3.0), Probe(8.0, "2", 7.0)]),
        StreamQuestion(qid="qa", task="ASI", mode="realtime", text="Which colour?", asked=7.0, alpha=7.0, gold=["B"]),
        # both arrive with the decision at 10 s
        StreamQuestion(qid="qc", task="OCR", mode="realtime", text="Which digit?", asked=9.0, alpha=9.0, gold=["C"]),
        StreamQuestion(qid="qd", task="ACR", mode="realtime", text="Which action?", asked=9.5, alpha=9.5, gold=["D"]),
    ]


def _block(video, **kw):
    base = dict(video=video, first_chunk=3, n_chunks=3, questions=_questions(),
                memory_initial=[MemoryLine("red ball left", 0.0, 4.0)], facts=[MemoryLine("red ball", 0.0, 4.0)],
                chunk_notes={3: "red ball"}, recalled=[2],
                answers_before=[AnswerEvent("qb", "A", 2.0, 0), AnswerEvent("qf", "1", 4.0, 1)], stream_id="s9")
    base.update(kw)
    return StreamBlock(**base)


SCRIPT = [
    "<think>red ball</think><action>response(qa, B)</action>",  # chunk 3, decision at 8 s
    "<think>blue cube</think><action>recall(1, 5)</action>",  # chunk 4 at 10 s: chunks 0 and 1 (2 was recalled)
    "<think>a</think><think>b</think><action>silence</action>",  # chunk 4 again: two thinks, invalid, moves on
    "<think></think><action>silence</action>",  # chunk 5 at 12 s: an empty think adds no memory line
    "<memory>\n[0-4] red ball left\n[8-10] blue cube\n[12-11] bad\nnonsense\n</memory>",  # the boundary at 12 s
]


def _expected_record():
    pre = [MemoryLine("red ball left", 0.0, 4.0), MemoryLine("red ball", 6.0, 8.0), MemoryLine("blue cube", 8.0, 10.0)]
    return EpisodeRecord(
        sample_id="clip-7", chunk_s=2.0, first_chunk=3, n_chunks=3, questions=_questions(),
        memory_initial=[MemoryLine("red ball left", 0.0, 4.0)],
        subturns=[
            SubTurn(time=8.0, chunk=3, chunk_start=6.0, sub=0, text=SCRIPT[0],
                    action=Action(RESPONSE, think="red ball", qid="qa", answer="B"), reason=None,
                    active=["qf", "qa"]),
            SubTurn(time=10.0, chunk=4, chunk_start=8.0, sub=0, text=SCRIPT[1],
                    action=Action(RECALL, think="blue cube", start=1.0, end=5.0), reason=None,
                    recall=Recall(1.0, 5.0, [0, 1], [(0.0, 2.0), (2.0, 4.0)]), active=["qf", "qc", "qd"]),
            SubTurn(time=10.0, chunk=4, chunk_start=8.0, sub=1, text=SCRIPT[2],
                    action=Action(None, think="a", reason="multiple_thinks"), reason="multiple_thinks",
                    active=["qf", "qc", "qd"]),
            SubTurn(time=12.0, chunk=5, chunk_start=10.0, sub=0, text=SCRIPT[3], action=Action(SILENCE, think=""),
                    reason=None, active=["qc", "qd"]),
        ],
        # the parsed lines sorted by (start, end); the oldest dropped until 8 words remain: "[8-10] blue cube" and
        # "[12-11] bad" (5 words; the range is the reward's business, not the parser's)
        compactions=[Compaction(time=12.0, chunk=6, pre=pre,
                                post=[MemoryLine("blue cube", 8.0, 10.0), MemoryLine("bad", 12.0, 11.0)],
                                text=SCRIPT[4], reason="memory_over_budget", bad_lines=1, dropped=1,
                                tokens_pre=10, tokens_post=5, budget=8)],
        answers=[AnswerEvent("qa", "B", 8.0, 3)],
        answers_before=[AnswerEvent("qb", "A", 2.0, 0), AnswerEvent("qf", "1", 4.0, 1)],
        teacher=False, teacher_actions=[], facts=[MemoryLine("red ball", 0.0, 4.0)], end="",
        # 56x56 frames at factor 28: 2 x 2 tokens per temporal patch of 2 frames (one chunk): the first
        # observation's 3 chunks (12), chunk 4 (4), the 2 recalled chunks (8), chunk 5 (4)
        visual_tokens=28, forward_passes=5)


# each observation: (prefix, text, media timestamps or None, media frame count); the decision at 8 s shows the
# window's chunks 1..3 (from 2 s); questions arrive with the first decision at or after the time they are asked
def _expected_observations(cfg):
    return [
        (intro(cfg) + "Memory:\n[0-4] red ball left\nTime 8 s. Chunks 2-8 s:",
         "\nQuestion qf: How many balls so far?\n\nQuestion qa: Which colour?\nDecide.", [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]),
        ("Time 10 s:", "\nQuestion qc: Which digit?\n\nQuestion qd: Which action?\nDecide.", [8.0, 9.0]),
        ("Recalled 0-2 s, 2-4 s:", "Decide again at 10 s.", [0.0, 1.0, 2.0, 3.0]),
        ("Your last action was invalid (multiple_thinks). Time 12 s:", "Decide.", [10.0, 11.0]),
        ("", "Controller boundary at 12 s. Memory before compaction:\n[0-4] red ball left\n[6-8] red ball\n"
             "[8-10] blue cube\nRewrite it as <memory></memory> with one line per fact, [start-end] note, at most "
             "8 tokens.", None),
        None,  # the compaction ends the episode
    ]


def _seen(obs):
    if obs is None:
        return None
    return (obs.prefix, obs.text, None if obs.media is None else list(obs.media.timestamps))


def test_a_scripted_block_writes_the_whole_record_the_rules_give(blocks):
    base, bl = blocks
    cfg = _cfg(base)
    block = _block(bl[0].video)
    env = StreamEnvironment(cfg)
    assert env.record is None  # no episode yet
    observations = [env.reset(block_sample(block, "clip-7"), None)]
    observations += [env.step(text) for text in SCRIPT]
    assert [_seen(o) for o in observations] == _expected_observations(cfg)
    # every shown video is named by the sample (the window, the chunks and the recalled frames)
    assert {o.media.sample_id for o in observations if o is not None and o.media is not None} == {"clip-7"}
    assert [tuple(o.media.frames.shape) for o in observations if o is not None and o.media is not None] == \
        [(6, 3, 56, 56), (2, 3, 56, 56), (4, 3, 56, 56), (2, 3, 56, 56)]
    assert env.record == _expected_record()
    # the record owns its questions: editing them leaves the block (re-used by the next episode) as it was
    env.record.questions[0].text = "edited"
    assert block.questions[0].text == "What moved first?"
    assert word_count("[8-10] blue cube\n[12-11] bad") == 5


@pytest.mark.parametrize("stream_id,sid", [("s9", "s9"), ("", "stream")])
def test_an_episode_without_a_sample_is_named_by_its_stream(blocks, stream_id, sid):
    base, bl = blocks
    env = StreamEnvironment(_cfg(base), block=_block(bl[0].video, stream_id=stream_id))
    first = env.reset(None, None)
    assert env.record.sample_id == sid and first.media.sample_id == sid
    env.step("<think>b</think><action>recall(0, 1)</action>")
    assert env.record.subturns[-1].recall.chunks == [0]


def test_an_empty_memory_before_compaction_is_shown_as_empty(blocks):
    base, bl = blocks
    env = StreamEnvironment(_cfg(base), block=_block(bl[0].video, memory_initial=[], n_chunks=1))
    env.reset(None, None)
    obs = env.step("<action>silence</action>")  # no think: no line, and the memory stays empty
    assert obs.text == ("Your last action was invalid (no_think). Controller boundary at 8 s. Memory before "
                        "compaction:\n(empty)\nRewrite it as <memory></memory> with one line per fact, [start-end] "
                        "note, at most 8 tokens.")
    assert env.step("<memory>\n</memory>") is None
    c = env.record.compactions[-1]
    assert (c.pre, c.post, c.reason, c.tokens_pre, c.tokens_post, env.record.forward_passes) == ([], [], None, 0, 0, 2)


def test_the_record_owns_its_questions_when_the_block_is_fixed(blocks):
    base, bl = blocks
    block = _block(bl[0].video)
    env = StreamEnvironment(_cfg(base), block=block)  # the block is re-used by every episode of this environment
    env.reset(None, None)
    env.record.questions[0].text = "edited"
    env.record.questions[1].probes.append(Probe(9.0, "3", 8.0))
    assert block.questions[0].text == "What moved first?" and len(block.questions[1].probes) == 2
    assert env.reset(None, None) is not None and env.record.questions == _questions()


def test_frames_are_decoded_at_the_models_resize_factor(blocks):
    base, bl = blocks
    cfg = dataclasses.replace(_cfg(base), frame_max_pixels=64 * 64, frame_min_pixels=32 * 32)
    env = StreamEnvironment(cfg, block=_block(bl[0].video), factor=32)  # Qwen3-VL: 32-pixel patches after the merge
    first = env.reset(None, None)
    h, w = first.media.frames.shape[-2:]
    assert h % 32 == 0 and w % 32 == 0
    assert env.record.visual_tokens == 3 * (h // 32) * (w // 32)  # 3 chunks of one temporal patch each
