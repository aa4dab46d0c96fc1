"""Rectification (mmrl.tools.rectify) on hand-written episode records of the seek world: wrong answers and
evidence-blind episodes are rewritten (the evidence seek, the gold answer), the model's valid earlier calls are
kept, invalid turns are dropped, right episodes that saw the evidence are left out, and every case is counted."""
import json

import pytest

from mmrl.data.annotations import load_samples
from mmrl.data.synth_seek import make_seek_world
from mmrl.tools.rectify import rectify, rewrite, seek_call


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    out = tmp_path_factory.mktemp("seek_rectify")
    make_seek_world(str(out), 3, 0, seed=0, duration=8.0, fps=4.0, flash_frames=2, overview=4)
    return {s.id: s for s in load_samples(str(out / "train.json"))[0]}


def _call(start, end, valid=True, tool="video_seek", **extra):
    text = seek_call(start, end, nframes=2)
    turn = {"model_text": text, "tool": tool, "arguments": {"start": start, "end": end, "nframes": 2}, "valid": valid}
    if valid and tool == "video_seek":
        turn["interval"] = [start, end]
    if not valid:
        turn["reason"] = "out_of_range"
    return {**turn, **extra}


def _record(sample, turns, answer, iou):
    turns = [{"turn": i, **t} for i, t in enumerate(turns + [{"model_text": answer}])]
    return {"id": sample.id, "step": 1, "turns": turns, "correct": answer == sample.answer_letter, "seek_iou": iou}


def _wrong(sample):
    return next(x for x in "ABCD" if x != sample.answer_letter)


def test_wrong_answer_and_blind_episodes_are_rewritten(samples):
    s = samples["train-00000"]
    (t0, t1), = s.evidence.segments
    recs = [_record(s, [], _wrong(s), 0.0),  # no look, wrong
            _record(s, [], s.answer_letter, 0.0),  # right by luck, never saw the evidence
            _record(s, [_call(t0, t1)], _wrong(s), 1.0),  # saw it, answered wrong
            _record(s, [_call(t0, t1)], s.answer_letter, 1.0)]  # right and seen: left out
    scripts, counts = rectify(recs, samples, max_calls=2, max_turns=3, nframes=4)
    assert counts.episodes == 4 and counts.right_and_seen == 1
    assert (counts.both, counts.no_evidence, counts.wrong_answer) == (1, 1, 1)
    evidence_seek = seek_call(t0, t1, nframes=4)
    # the first two rewrite to the same script (seek the evidence, answer): written once
    assert counts.duplicates == 1 and counts.rewritten == 2 and len(scripts) == 2
    assert scripts[0]["turns"] == [evidence_seek, s.answer_letter] and scripts[0]["why"] == ["wrong_answer", "no_evidence"]
    # the episode that saw the evidence keeps its own seek (it covers the evidence): no new seek, the gold answer
    assert scripts[1]["turns"] == [seek_call(t0, t1, nframes=2), s.answer_letter] and scripts[1]["kept"] == 1
    assert json.loads(scripts[0]["turns"][0][len("<tool_call>"):-len("</tool_call>")])["arguments"] == \
        {"start": t0, "end": t1, "nframes": 4}


def test_valid_earlier_turns_kept_invalid_dropped(samples):
    s = samples["train-00001"]
    (t0, t1), = s.evidence.segments
    elsewhere = (0.0, 0.5) if t0 >= 1.0 else (6.0, 7.0)
    turns = [_call(20.0, 21.0, valid=False),  # refused (out of range): dropped
             _call(*elsewhere),  # a valid look elsewhere: kept
             _call(*elsewhere, truncated=True)]  # a truncated turn: dropped
    turns[2]["model_text"] += " and more"
    rec = _record(s, turns, _wrong(s), 0.0)
    script, kept, dropped, added = rewrite(rec, s, max_calls=3, max_turns=4, nframes=4)
    assert script == [turns[1]["model_text"], seek_call(t0, t1, nframes=4), s.answer_letter]
    assert (kept, dropped, added) == (1, 3, 1)  # the refused call, the truncated turn and the wrong answer


def test_budgets_bound_the_kept_turns(samples):
    s = samples["train-00002"]
    (t0, t1), = s.evidence.segments
    elsewhere = (0.0, 0.5) if t0 >= 1.0 else (6.0, 7.0)
    rec = _record(s, [_call(*elsewhere), _call(*elsewhere)], _wrong(s), 0.0)
    # 2 calls allowed: one kept call + the evidence seek; the second valid look is dropped
    script, kept, dropped, _ = rewrite(rec, s, max_calls=2, max_turns=3, nframes=2)
    assert script == [rec["turns"][0]["model_text"], seek_call(t0, t1, nframes=2), s.answer_letter] and (kept, dropped) == (1, 2)
    script, kept, _, _ = rewrite(rec, s, max_calls=1, max_turns=3, nframes=2)
    assert script == [seek_call(t0, t1, nframes=2), s.answer_letter] and kept == 0
    with pytest.raises(ValueError, match="do not fit"):
        rewrite(rec, s, max_calls=0, max_turns=3)


def test_unknown_samples_are_skipped_and_counted(samples):
    rec = _record(samples["train-00000"], [], "A", 0.0)
    scripts, counts = rectify([{**rec, "id": "nope"}], samples, 2, 3)
    assert scripts == [] and counts.unknown_sample == 1 and counts.episodes == 1


def test_whole_second_rewrites_seek_a_window_of_whole_seconds(samples):
    """``seek="whole"`` (the seek world's teacher style): the added seek is ``[floor(t0), floor(t0) + 2]``, and a
    kept whole-second seek that covers the evidence needs no new one."""
    import math

    s = samples["train-00000"]
    (t0, t1), = s.evidence.segments
    script, _, _, added = rewrite(_record(s, [], _wrong(s), 0.0), s, max_calls=2, max_turns=3, seek="whole")
    start = math.floor(t0)
    assert added == 1 and json.loads(script[0][len("<tool_call>"):-len("</tool_call>")])["arguments"] == \
        {"start": start, "end": start + 2}
    covering = _call(float(start), float(start + 2))
    script, kept, _, added = rewrite(_record(s, [covering], _wrong(s), 0.25), s, max_calls=2, max_turns=3, seek="whole")
    assert (kept, added) == (1, 0) and script == [covering["model_text"], s.answer_letter]
