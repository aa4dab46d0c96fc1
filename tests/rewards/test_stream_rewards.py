"""Stream-GDPO rewards on hand-built episode records (specs/algorithms.md §5, unit tests 4 and 5 and causality)."""
import pytest

from mmrl.rewards import stream as sr
from mmrl.stream import record as rec_mod
from mmrl.stream.actions import check_recall, parse_action, recall, response, silence
from mmrl.stream.record import AnswerEvent, Compaction, EpisodeRecord, MemoryLine, Probe, StreamQuestion, SubTurn


def _sub(t, action, active=("q1",), reason="__grammar__", rec=None):
    a = parse_action(action.render()) if not isinstance(action, str) else parse_action(action)
    if reason == "__grammar__":
        reason = a.reason
    return SubTurn(time=t, chunk=int(t) - 1, chunk_start=t - 1, sub=0, text="", action=a, reason=reason,
                   recall=rec, active=list(active))


def _record(subturns, answers, teacher=(), alpha=3.0, gold=("B",), compactions=(), facts=()):
    q = StreamQuestion(qid="q1", task="EPM", mode="backward", text="?", asked=1.0, alpha=alpha, gold=list(gold))
    return EpisodeRecord(sample_id="s", chunk_s=1.0, first_chunk=0, n_chunks=8, questions=[q], subturns=list(subturns),
                         answers=list(answers), teacher_actions=list(teacher), compactions=list(compactions),
                         facts=list(facts))


TEACHER = [_sub(4.0, recall(0, 2)), _sub(4.0, response("q1", "B"))]


def test_correct_causal_answer_with_matching_recall():
    subs = [_sub(4.0, recall(0, 2)), _sub(4.0, response("q1", "B"))]
    c = sr.stream_components(_record(subs, [AnswerEvent("q1", "B", 4.0, 3)], TEACHER))
    assert c == {"out": 1.0, "fmt": 1.0, "tool": 1.0, "mem": 0.0}


def test_tool_is_zero_when_the_answer_is_wrong_even_if_the_recall_matches_the_teacher():  # spec unit test 4
    subs = [_sub(4.0, recall(0, 2)), _sub(4.0, response("q1", "C"))]
    c = sr.stream_components(_record(subs, [AnswerEvent("q1", "C", 4.0, 3)], TEACHER))
    assert c["out"] == 0.0 and c["tool"] == 0.0 and c["fmt"] == 1.0


def test_recall_ending_at_or_after_the_chunk_start_is_invalid_and_earns_no_tool_reward():  # spec unit test 5
    assert check_recall(0.0, 3.0, 3.0) == "recall_future" and check_recall(0.0, 2.9, 3.0) is None
    bad = _sub(4.0, recall(0, 3), reason=check_recall(0.0, 3.0, 3.0))
    subs = [bad, _sub(4.0, response("q1", "B"))]
    c = sr.stream_components(_record(subs, [AnswerEvent("q1", "B", 4.0, 3)], TEACHER))
    assert c["out"] == 1.0 and c["tool"] == 0.0
    assert c["fmt"] == 1.0  # the grammar held; the time rule is the tool reward's concern


def test_no_teacher_recall_means_no_tool_reward():
    subs = [_sub(4.0, recall(0, 2)), _sub(4.0, response("q1", "B"))]
    c = sr.stream_components(_record(subs, [AnswerEvent("q1", "B", 4.0, 3)], [_sub(4.0, response("q1", "B"))]))
    assert c["tool"] == 0.0


def test_causality_an_answer_before_alpha_scores_zero():
    subs = [_sub(2.0, response("q1", "B")), _sub(4.0, response("q1", "B"))]
    early = _record(subs, [AnswerEvent("q1", "B", 2.0, 1), AnswerEvent("q1", "B", 4.0, 3)], alpha=3.0)
    assert sr.stream_components(early)["out"] == 0.0  # the first answer is the one scored, and it came too early
    on_time = _record(subs[1:], [AnswerEvent("q1", "B", 3.0, 2)], alpha=3.0)
    assert sr.stream_components(on_time)["out"] == 1.0  # at alpha counts
    for t, a in [(2.0, 3.0), (3.0, 3.0), (4.0, 3.0)]:
        assert sr.causal(t, a) == rec_mod.causal(t, a)


def test_format_is_one_only_when_every_decision_in_the_interval_parses():
    subs = [_sub(2.0, "<think>x</think> oops"), _sub(4.0, response("q1", "B"))]
    c = sr.stream_components(_record(subs, [AnswerEvent("q1", "B", 4.0, 3)]))
    assert c["fmt"] == 0.0
    # a broken decision outside q1's interval does not count against q1
    subs = [_sub(2.0, "garbage", active=()), _sub(4.0, response("q1", "B"))]
    assert sr.stream_components(_record(subs, [AnswerEvent("q1", "B", 4.0, 3)]))["fmt"] == 1.0


def test_forward_question_scores_its_probes_with_the_latest_causal_answer():
    q = StreamQuestion(qid="f", task="CRR", mode="forward", text="?", asked=0.0, alpha=0.0, kind="forward",
                       probes=[Probe(2.0, "No", 0.0), Probe(5.0, "Yes", 4.0), Probe(20.0, "Yes", 4.0)])
    subs = [_sub(t, silence(), active=("f",)) for t in (1.0, 2.0, 5.0)]
    rec = EpisodeRecord(sample_id="s", chunk_s=1.0, first_chunk=0, n_chunks=8, questions=[q], subturns=subs,
                        answers=[AnswerEvent("f", "No", 1.0, 0), AnswerEvent("f", "yes", 5.0, 4)])
    assert sr.stream_components(rec)["out"] == 1.0  # the probe at 20 s lies outside this 8-chunk episode
    rec.answers = [AnswerEvent("f", "No", 1.0, 0), AnswerEvent("f", "Yes", 3.0, 2)]  # 'Yes' before the event (4 s)
    assert sr.stream_components(rec)["out"] == 0.5
    for t in (0.5, 1.0, 3.0, 9.0):
        assert sr.answer_at(rec, "f", t) == rec_mod.answer_at(rec, "f", t)


def test_memory_reward_averages_compactions_and_uses_facts_seen_so_far():
    facts = [MemoryLine("red square left", 1.0, 2.0), MemoryLine("blue flash", 6.0, 7.0)]
    good = Compaction(time=4.0, chunk=3, pre=[], post=[MemoryLine("red square left", 1.0, 2.0)])
    keep = Compaction(time=8.0, chunk=7, pre=[MemoryLine("red square left", 1.0, 2.0)],
                      post=[MemoryLine("red square left", 1.0, 2.0)])
    rec = _record([_sub(4.0, silence())], [], compactions=[good, keep], facts=facts)
    # at 4 s only the first fact is seen: S_time 0 -> 1, S_keep 0 -> 1, R = 1; at 8 s nothing changes: R = 0
    assert sr.memory_reward(rec) == pytest.approx(0.5)
    assert sr.stream_components(rec)["mem"] == pytest.approx(0.5)


def test_match():
    assert sr.match(" (b). ", ["B"]) and sr.match("3.0", ["3"]) and sr.match("yes", ["Yes"])
    assert not sr.match("C", ["B"]) and not sr.match(None, ["B"]) and not sr.match("", ["B"])


def test_registered_reward_returns_components_and_weighted_sum(monkeypatch):
    from mmrl.rewards.base import REWARDS

    subs = [_sub(4.0, recall(0, 2)), _sub(4.0, response("q1", "B"))]
    rec = _record(subs, [AnswerEvent("q1", "B", 4.0, 3)], TEACHER)
    monkeypatch.setattr(sr, "record_of", lambda ctx: rec)
    out = REWARDS.get("stream")([object(), object()])
    assert out["stream_out"] == [1.0, 1.0] and out["stream_tool"] == [1.0, 1.0]
    assert out["stream"] == [1.0 + 1.0 + 0.5 * 1.0 + 0.5 * 0.0] * 2
    assert REWARDS.get("stream")([object()], weights={"tool": 2.0})["stream"] == [4.0]
    with pytest.raises(ValueError, match="weights.speed"):
        REWARDS.get("stream")([object()], weights={"speed": 1.0})


def test_reward_reads_the_record_where_the_stream_loop_keeps_it():
    from types import SimpleNamespace

    from mmrl.stream.loop import RECORD_KEY

    assert sr.RECORD_KEY == RECORD_KEY
    rec = _record([_sub(4.0, silence())], [])
    traj = SimpleNamespace(turns=[{"turn": 0}, {"turn": 1, RECORD_KEY: rec}])
    assert sr.record_of(SimpleNamespace(trajectory=traj, sample=None)) is rec
    with pytest.raises(ValueError, match="agent_loop: stream"):
        sr.record_of(SimpleNamespace(trajectory=SimpleNamespace(turns=[{}]), sample=SimpleNamespace(id="x")))


# salient facts (note, start, end) of the stream, and compactions at time t: R_mem scores a compaction only against
# the facts observed before it: their intervals cut at t (S_time), the notes of those that ended by t (S_keep)
FACTS = [("red square left", 1.0, 2.0), ("yellow dot", 3.0, 4.0), ("blue flash", 3.5, 6.0), ("green star", 6.0, 7.0)]
RED, YELLOW, BLUE, GREEN = [MemoryLine(*f) for f in FACTS]
MEMORIES = [
    # t = 4: seen [1,2] [3,4] [3.5,4]; kept facts red, yellow (blue is still going on, green is the future)
    (4.0, [RED], [RED, YELLOW], 0.5 * ((1.0 - 0.5) + (1.0 - 0.5))),
    (4.0, [], [RED, MemoryLine("yellow dot", 3.0, 4.0), MemoryLine("blue flash", 3.5, 4.0)], 0.5 * (1.0 + 1.0)),
    (4.0, [RED, YELLOW], [RED], 0.5 * ((0.5 - 1.0) + (0.5 - 1.0))),
    # t = 6.5: blue ended (kept), green seen as [6, 6.5] but not kept; seen union [1,2] + [3,6.5] = 4.5 s
    (6.5, [RED, YELLOW], [RED, YELLOW, BLUE], 0.5 * ((4 / 4.5 - 2 / 4.5) + (1.0 - 2 / 3))),
    # t = 7: every fact seen and kept
    (7.0, [], [RED, YELLOW, BLUE, GREEN], 0.5 * (1.0 + 1.0)),
]


@pytest.mark.parametrize("t,pre,post,want", MEMORIES, ids=[f"{m[0]}-{i}" for i, m in enumerate(MEMORIES)])
def test_memory_reward_scores_each_compaction_against_the_facts_observed_before_it(t, pre, post, want):
    comp = Compaction(time=t, chunk=int(t), pre=list(pre), post=list(post))
    rec = _record([_sub(1.0, silence())], [], compactions=[comp], facts=[MemoryLine(*f) for f in FACTS])
    assert sr.memory_reward(rec) == pytest.approx(want)
    # two compactions average: the same one twice, and one that changes nothing
    rec.compactions = [comp, Compaction(time=t, chunk=int(t), pre=list(post), post=list(post))]
    assert sr.memory_reward(rec) == pytest.approx(want / 2)


@pytest.mark.parametrize("pred,gold,ok", [
    ("3", ["three", "3.0"], True),  # a gold that is no number is skipped, the next one still compared
    ("3", ["4"], False), ("3", ["inf"], False), ("inf", ["3"], False),
    ("1.0000015", ["1"], False),  # 1.5e-6 off: beyond the tolerance 1e-6 * max(1, |gold|)
    ("1.0000005", ["1"], True), ("0.000001", ["0"], True),  # at most 1e-6 (the bound included)
    ("1000.0005", ["1000"], True), ("1000.002", ["1000"], False),  # relative above 1
    ("1.5", ["1"], False),
])
def test_match_numbers_within_a_relative_tolerance(pred, gold, ok):
    assert sr.match(pred, gold) is ok


@pytest.mark.parametrize("t,inside", [(3.0, False), (4.0, False), (4.001, True), (10.0, True), (10.5, False),
                                      (10.000000001 - 5e-10, True)])
def test_a_probe_counts_inside_the_episode_only(t, inside):
    from types import SimpleNamespace

    rec = SimpleNamespace(first_chunk=2, chunk_s=2.0, n_chunks=3)  # chunks 2..4 cover (4 s, 10 s]
    assert sr._in_episode(rec, t) is inside


def _q(qid, mode="backward", **kw):
    return StreamQuestion(qid=qid, task="EPM", mode=mode, text="?", asked=1.0, alpha=kw.pop("alpha", 1.0), **kw)


def test_components_average_over_several_questions():
    qs = [_q("a", gold=["B"]), _q("b", gold=["C"]), _q("c", gold=["D"])]
    subs = [_sub(2.0, response("a", "B"), active=("a", "b", "c")), _sub(3.0, "garbage", active=("b",)),
            _sub(3.0, recall(0, 1), active=("a", "c"))]
    teacher = [_sub(3.0, recall(0, 1), active=("a", "b", "c"))]
    rec = EpisodeRecord(sample_id="s", chunk_s=1.0, first_chunk=0, n_chunks=8, questions=qs, subturns=subs,
                        answers=[AnswerEvent("a", "B", 2.0, 1), AnswerEvent("b", "X", 2.0, 1)], teacher_actions=teacher)
    # out: a right, b wrong, c unanswered; fmt: b's interval holds the garbage; tool: a and c recalled, only a right
    assert sr.stream_components(rec) == {"out": pytest.approx(1 / 3), "fmt": pytest.approx(2 / 3),
                                         "tool": pytest.approx(1 / 3), "mem": 0.0}


def test_forward_question_without_probes_in_the_episode_scores_zero():
    q = _q("f", mode="forward", kind="forward", probes=[Probe(20.0, "Yes", 0.0), Probe(30.0, "Yes", 0.0)])
    rec = EpisodeRecord(sample_id="s", chunk_s=1.0, first_chunk=0, n_chunks=8, questions=[q],
                        subturns=[_sub(2.0, silence(), active=("f",))], answers=[AnswerEvent("f", "Yes", 2.0, 1)])
    assert sr.stream_components(rec)["out"] == 0.0


@pytest.mark.parametrize("subs,fmt", [
    ([], 0.0),
    ([_sub(1.0, silence(), active=()), _sub(2.0, "garbage", active=()), _sub(3.0, silence(), active=())], 2 / 3),
    ([_sub(1.0, "x", active=())], 0.0),
])
def test_an_episode_without_questions_scores_the_format_of_its_decisions(subs, fmt):
    facts = [MemoryLine("red", 1.0, 2.0)]
    comp = Compaction(time=4.0, chunk=3, pre=[], post=[MemoryLine("red", 1.0, 2.0)])
    rec = EpisodeRecord(sample_id="s", chunk_s=1.0, first_chunk=0, n_chunks=8, questions=[], subturns=list(subs),
                        compactions=[comp], facts=facts)
    assert sr.stream_components(rec) == {"out": 0.0, "fmt": pytest.approx(fmt), "tool": 0.0, "mem": pytest.approx(1.0)}


def test_a_fact_starting_at_the_compaction_time_is_not_yet_observed():
    # frames at t belong to the next chunk: a point fact at exactly t is neither evidence nor a fact to keep yet
    facts = [MemoryLine("red square left", 1.0, 2.0), MemoryLine("flash", 4.0, 4.0)]
    comp = Compaction(time=4.0, chunk=3, pre=[], post=[MemoryLine("red square left", 1.0, 2.0)])
    rec = _record([_sub(1.0, silence())], [], compactions=[comp], facts=facts)
    assert sr.memory_reward(rec) == pytest.approx(1.0)


# ---- the coin-flip control for the stream reward set (mmrl.rewards.coin_flip.stream_coin_flip)
def _episodes(monkeypatch, recs):
    """Contexts whose episode record is ``recs[i]`` (``record_of`` patched where the control reads it)."""
    from types import SimpleNamespace

    from mmrl.rewards import coin_flip as cf

    by_id = {i: r for i, r in enumerate(recs)}
    monkeypatch.setattr(cf, "record_of", lambda c: by_id[c.i])
    return [SimpleNamespace(i=i) for i in range(len(recs))]


def test_stream_coin_flip_replaces_the_outcome_by_coins_and_keeps_format_and_memory(monkeypatch):
    import torch

    from mmrl.rewards.base import REWARDS, RewardSpec, compute_rewards

    right = _record([_sub(4.0, recall(0, 2)), _sub(4.0, response("q1", "B"))], [AnswerEvent("q1", "B", 4.0, 3)], TEACHER)
    wrong = _record([_sub(4.0, recall(0, 2)), _sub(4.0, response("q1", "C"))], [AnswerEvent("q1", "C", 4.0, 3)], TEACHER)
    bad_fmt = _record([_sub(4.0, "<speak>"), _sub(4.0, response("q1", "C"))], [AnswerEvent("q1", "C", 4.0, 3)], TEACHER)
    recs = [right, wrong, bad_fmt, right] * 50  # true mean R_out 0.5
    ctx = _episodes(monkeypatch, recs)
    torch.manual_seed(3)
    comps, total = compute_rewards([RewardSpec("stream_coin_flip")], ctx)
    true = [sr.stream_components(r) for r in recs]
    assert comps["coin_flip/true_stream_out"] == [t["out"] for t in true]
    assert comps["coin_flip/true_stream_tool"] == [t["tool"] for t in true]
    assert comps["stream_fmt"] == [t["fmt"] for t in true] and comps["stream_mem"] == [t["mem"] for t in true]
    assert 0.0 in comps["stream_fmt"] and 1.0 in comps["stream_fmt"]  # the format component varies and is kept
    coins = comps["stream_out"]
    assert set(coins) == {0.0, 1.0} and abs(sum(coins) / len(coins) - 0.5) < 0.15  # the batch's mean, as coins
    hits = [c for c, t in zip(coins, true) if t["out"] == 1.0]
    misses = [c for c, t in zip(coins, true) if t["out"] == 0.0]
    assert 0 < sum(misses) and sum(hits) < len(hits)  # wrong answers win coins, right ones lose some: no signal
    assert comps["stream_tool"] == [sr.mean_recall_credit(r) * c for r, c in zip(recs, coins)]  # recall credited by the coin
    assert total == comps["stream_coin_flip"] == [
        c["stream_out"] + c["stream_fmt"] + 0.5 * c["stream_tool"] + 0.5 * c["stream_mem"]
        for c in ({k: v[i] for k, v in comps.items()} for i in range(len(recs)))]
    assert "stream" not in comps  # the true total is not computed under another name
    fn = REWARDS.get("stream_coin_flip")
    assert fn(ctx[:4], p=1.0)["stream_out"] == [1.0] * 4 and fn(ctx[:4], p=0.0)["stream_tool"] == [0.0] * 4
    assert fn(ctx[:1], p=1.0, weights={"tool": 2.0})["stream_coin_flip"] == [1.0 + 1.0 + 2.0 * 1.0 + 0.5 * 0.0]
    with pytest.raises(ValueError, match="weights.speed"):
        fn(ctx[:1], weights={"speed": 1.0})
