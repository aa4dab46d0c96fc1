"""The action grammar and the recall time rule (specs/algorithms.md section 5, unit test 5)."""
import pytest

from mmrl.stream.actions import (REASONS, Action, check_recall, fmt_time, parse_action, parse_memory, recall, response,
                                 silence)
from mmrl.stream.record import EpisodeRecord, MemoryLine, StreamQuestion, SubTurn, causal


@pytest.mark.parametrize("text,kind,fields", [
    ("<think>red square</think>\n<action>silence</action>", "silence", {}),
    ("<think>q1 now</think><action>response(q1, B)</action>", "response", {"qid": "q1", "answer": "B"}),
    ("<think>x</think> <action> recall(3, 7.5) </action>", "recall", {"start": 3.0, "end": 7.5}),
    ("<think></think><action>response(q_2, Yes, it is)</action>", "response", {"qid": "q_2", "answer": "Yes, it is"}),
])
def test_valid_actions(text, kind, fields):
    a = parse_action(text)
    assert a.valid and a.kind == kind
    for k, v in fields.items():
        assert getattr(a, k) == v


@pytest.mark.parametrize("text,reason", [
    ("", "no_action"),
    ("B", "no_action"),
    ("<action>silence</action>", "no_think"),
    ("<think>a</think><action>silence</action><action>silence</action>", "multiple_actions"),
    ("<think>a</think><think>b</think><action>silence</action>", "multiple_thinks"),
    ("<think>" + "w " * 41 + "</think><action>silence</action>", "think_too_long"),
    ("<think>a</think><action>silence</action> and more", "extra_text"),
    ("<think>a</think><action>shout(q1)</action>", "unknown_action"),
    ("<think>a</think><action>silence now</action>", "malformed_action"),
    ("<think>a</think><action>recall(3)</action>", "malformed_action"),
    ("<think>a</think><action>recall(nan, 2)</action>", "non_finite"),
    ("<think>a</think><action>recall(1e999, 2)</action>", "non_finite"),
    ("<think>a</think><action>response(q1, )</action>", "empty_answer"),
    ("<think>a</think><action>response(B)</action>", "malformed_action"),
])
def test_invalid_grammar_is_a_reason_not_an_exception(text, reason):
    a = parse_action(text)
    assert not a.valid and a.reason == reason and reason in REASONS


def test_recall_time_rule():
    # valid iff 0 <= start <= end < chunk start (gamma_t)
    assert check_recall(0, 0, 1) is None and check_recall(2, 4.99, 5) is None
    assert check_recall(2, 5, 5) == "recall_future"      # end at the current chunk's start: invalid
    assert check_recall(2, 9, 5) == "recall_future"
    assert check_recall(-1, 2, 5) == "recall_negative"
    assert check_recall(3, 2, 5) == "recall_order"


def test_render_round_trips():
    for a in (silence("quiet"), response("q3", "12", "count"), recall(1, 2.5, "look back")):
        b = parse_action(a.render())
        assert b.valid and (b.kind, b.qid, b.answer, b.start, b.end, b.think) == \
            (a.kind, a.qid, a.answer, a.start, a.end, a.think)


def test_memory_lines():
    lines, bad = parse_memory("junk <memory>\n[0-4] red square left\n\n[4.5 - 8] blue flash\nno range\n[nan-1] x\n</memory>")
    assert lines == [(0.0, 4.0, "red square left"), (4.5, 8.0, "blue flash")] and bad == 2
    assert parse_memory("no block") == (None, 0)
    assert MemoryLine("n", 1, 2).render() == "[1-2] n"
    assert MemoryLine("n", 1, 2).range_valid(2) and not MemoryLine("n", 2, 1).range_valid(5)
    assert not MemoryLine("n", 1, 6).range_valid(5)


def test_causality_and_record_round_trip():
    assert causal(5.0, 5.0) and causal(6, 5) and not causal(4.0, 5.0)
    rec = EpisodeRecord("s", 1.0, 0, 3, questions=[StreamQuestion("q1", "EPM", "backward", "?", 2.0, 2.0, ["A"])],
                        subturns=[SubTurn(1.0, 0, 0.0, 0, "x", parse_action("x"), reason="no_action")])
    back = EpisodeRecord.from_dict(rec.to_dict())
    assert back == rec and back.invalid_counts() == {"no_action": 1}


def _think(words, word="w"):
    return f"<think>{' '.join([word] * words)}</think><action>silence</action>"


@pytest.mark.parametrize("text,limit,valid", [
    (_think(40), None, True),  # the default limit is 40 WORDS (79 characters here)
    (_think(41), None, False),
    (_think(5, "supercalifragilistic"), None, True),  # 104 characters, 5 words
    (_think(3), 3, True),  # another limit
    (_think(4), 3, False),
    (_think(2, "abcdefghij"), 2, True),  # 21 characters, 2 words
    ("<think>  a\n b\t c  </think><action>silence</action>", 3, True),  # words split on any white space
])
def test_the_think_limit_counts_words_not_characters(text, limit, valid):
    a = parse_action(text) if limit is None else parse_action(text, max_think_words=limit)
    assert a.valid == valid and (valid or a.reason == "think_too_long")


@pytest.mark.parametrize("text,lines", [
    ("<memory>\n[0-1] old note\n</memory>\nthen I rewrote it:\n<memory>\n[2-3] new note\n[3-4] another\n</memory>",
     [(2.0, 3.0, "new note"), (3.0, 4.0, "another")]),
    ("<memory>[0-1] a</memory><memory>[1-2] b</memory><memory>[5-6] c</memory>", [(5.0, 6.0, "c")]),
    ("<memory>\n[0-1] only\n</memory>", [(0.0, 1.0, "only")]),
])
def test_the_last_memory_block_is_the_memory(text, lines):
    assert parse_memory(text) == (lines, 0)


@pytest.mark.parametrize("text,reason,kind", [
    ("<think>a b</think> no action here", "no_action", None),
    ("<think>a b</think><action>silence</action><action>silence</action>", "multiple_actions", None),
    ("<think>a b</think><think>c</think><action>silence</action>", "multiple_thinks", None),
    ("<think>a b</think><action>silence</action> and more", "extra_text", None),
    ("<think>a b</think><action>dance</action>", "unknown_action", None),
    ("<think>a b</think><action>123</action>", "unknown_action", None),
    ("<think>a b</think><action>silence please</action>", "malformed_action", "silence"),
    ("<think>a b</think><action>recall(1)</action>", "malformed_action", "recall"),
])
def test_an_invalid_decision_keeps_its_think_and_kind(text, reason, kind):
    a = parse_action(text)
    assert (a.reason, a.kind, a.think) == (reason, kind, "a b")


def test_too_long_thinks_keep_the_text_and_helpers_carry_the_think():
    a = parse_action("<think>a b c</think><action>silence</action>", max_think_words=2)
    assert (a.reason, a.think) == ("think_too_long", "a b c")
    assert parse_action("").reason == "no_action" and parse_action(None).think == ""
    assert silence().think == "" and silence("s").think == "s" and response("q", "A").think == ""
    assert response("q", "A", "r").think == "r" and recall(1, 2).think == "" and recall(1, 2, "t").think == "t"
    assert silence("look").render() == "<think>look</think>\n<action>silence</action>"
    assert fmt_time(None) == "?" and fmt_time(7.50) == "7.5" and Action("silence").valid


def test_memory_lines_count_every_bad_line_and_go_on_after_one():
    lines, bad = parse_memory("<memory>\n[inf-1] x\n[0-1] a\nno range\n[1-2] b\n</memory>")
    assert lines == [(0.0, 1.0, "a"), (1.0, 2.0, "b")] and bad == 2
    assert parse_memory("") == (None, 0) and parse_memory(None) == (None, 0)


# the whole parsed action of each grammar failure: the verb when one was read, the think kept whenever there was one
# think, the question id when the response named one
WHOLE = [
    ("<think>a b</think><action>recall(nan, 2)</action>", Action("recall", think="a b", reason="non_finite")),
    ("<think>a b</think><action>recall(3)</action>", Action("recall", think="a b", reason="malformed_action")),
    ("<think>a b</think><action>response(B)</action>", Action("response", think="a b", reason="malformed_action")),
    ("<think>a b</think><action>response(q7, )</action>",
     Action("response", think="a b", qid="q7", reason="empty_answer")),
    ("<think>a b</think><action>silence now</action>", Action("silence", think="a b", reason="malformed_action")),
    ("<think>a b</think><action>(q1)</action>", Action(None, think="a b", reason="unknown_action")),
    ("<think>a b</think><think>c</think><action>silence</action>",
     Action(None, think="a b", reason="multiple_thinks")),
    ("<think>a b</think>", Action(None, think="a b", reason="no_action")),
    ("<action>silence</action>", Action(None, think="", reason="no_think")),
    (None, Action(None, think="", reason="no_action")),
]


@pytest.mark.parametrize("text,action", WHOLE, ids=[w[1].reason for w in WHOLE])
def test_a_grammar_failure_keeps_the_verb_the_think_and_the_question(text, action):
    assert parse_action(text, 3) == action
