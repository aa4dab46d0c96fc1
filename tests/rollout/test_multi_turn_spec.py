"""The ``multi_turn`` agent loop as a specification, without a model: a processor that renders the real Qwen-VL chat
template and tokenizes one character per token, and an engine that answers with scripted texts (``fake_turns``).

What is pinned: the observation turn's exact text, the segments and loss mask of each trajectory, the turn records,
how an episode ends (``done``, ``max_turns``, ``max_total_tokens`` at its boundary), the closing ``<|im_end|>`` of a
truncated turn, the requests each turn sends (one shared prompt with ``n`` samples first, then one per episode),
the KV-reuse path's tails, a first observation that replaces the prompt, the system suffix, and every message.
"""
import pytest
import torch

from mmrl.advice import advice
from mmrl.data.schema import Media, Segment
from mmrl.media.inputs import PromptInputs, SequenceInputs, build_prompt_inputs
from mmrl.media.prompts import build_messages
from mmrl.rollout.agent_loop import Environment, Observation
from mmrl.rollout.agent_loop_multi import (ContextInputs, MultiTurnLoop, _has_media, _message, observation_text,
                                           sequence_inputs)
from mmrl.rollout.base import RolloutRequest, SamplingParams
from fake_turns import IM_END, FakeProcessor, ScriptedEngine, detokenize, tokenize

GEN = "<|im_start|>assistant\n"
IMAGE = 904


def image(tag: int, h: int = 56, w: int = 84) -> Media:
    return Media("obs", image=torch.full((3, h, w), tag, dtype=torch.uint8))


def video(tag: int) -> Media:
    return Media("obs", frames=torch.full((4, 3, 56, 56), tag, dtype=torch.uint8), timestamps=[0, .5, 1, 1.5], fps=2.0)


class Env(Environment):
    """Answers the k-th step with ``script[k]``; ``None`` (or the end of the script) ends the episode."""

    def __init__(self, script, first=None):
        self.script, self.first, self.seen, self.reset_with = list(script), first, [], None

    def reset(self, sample, media):
        self.reset_with = (sample, media)
        return self.first

    def step(self, model_text):
        self.seen.append(model_text)
        return self.script.pop(0) if self.script else None


def requests(proc, n0=2, n1=1):
    """Two prompts: a video question (``n0`` samples) and an image question (``n1``)."""
    out = []
    for i, (media, n) in enumerate(((video(11), n0), (image(22), n1))):
        inputs = build_prompt_inputs(proc, build_messages(f"Q{i}?", ["a", "b"], media), media)
        out.append(RolloutRequest(inputs=inputs, n=n, sample_id=f"s{i}", group_id=10 + i, view=f"v{i}", role=f"r{i}",
                                  expected="AB"[i], meta={"k": i}, sample=f"sample{i}"))
    return out


def run(script_of, max_turns=3, engine=None, reqs=None, proc=None, max_new_tokens=4, **kw):
    proc = proc or FakeProcessor()
    envs = []

    def factory():
        envs.append(Env(*script_of(len(envs))))
        return envs[-1]

    loop = MultiTurnLoop(proc, factory, max_turns=max_turns, **kw)
    engine = engine or ScriptedEngine()
    reqs = reqs if reqs is not None else requests(proc)
    trajs = loop.run(engine, reqs, SamplingParams(max_new_tokens=max_new_tokens))
    return trajs, envs, engine, reqs


def obs_ids(text, role="user", prefix="", media_pads=()):
    return tokenize(f"\n<|im_start|>{role}\n{prefix}{''.join(media_pads)}{text}<|im_end|>\n{GEN}")


# ---- the observation turn -------------------------------------------------------------------------------------

@pytest.mark.parametrize("obs, text", [
    (Observation("Look."), "\n<|im_start|>user\nLook.<|im_end|>\n" + GEN),
    (Observation("after", media=image(1), prefix="<tool_response>\n", role="tool"),
     "\n<|im_start|>tool\n<tool_response>\n<|vision_start|><|image_pad|><|vision_end|>after<|im_end|>\n" + GEN),
    (Observation("clip", media=video(1)), "\n<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>clip<|im_end|>\n" + GEN),
    (Observation("none", media=Media("x")), "\n<|im_start|>user\nnone<|im_end|>\n" + GEN),  # a Media without pixels
])
def test_an_observation_renders_as_the_turn_after_the_models_im_end(obs, text):
    assert observation_text(FakeProcessor(), obs) == text


@pytest.mark.parametrize("obs, content", [
    (Observation("a"), [{"type": "text", "text": "a"}]),
    (Observation("a", prefix="p:"), [{"type": "text", "text": "p:"}, {"type": "text", "text": "a"}]),
    (Observation("a", media=image(1)), [{"type": "image"}, {"type": "text", "text": "a"}]),
    (Observation("a", media=video(1), prefix="p"), [{"type": "text", "text": "p"}, {"type": "video"},
                                                    {"type": "text", "text": "a"}]),
    (Observation("a", media=Media("x"), role="tool"), [{"type": "text", "text": "a"}]),
])
def test_the_observation_message(obs, content):
    assert _message(obs) == {"role": obs.role, "content": content}


def test_a_template_without_a_closed_system_turn_is_refused():
    proc = FakeProcessor()
    proc.apply_chat_template = lambda m, tokenize=False, add_generation_prompt=False: "<|im_start|>system\n-"
    with pytest.raises(ValueError) as e:
        observation_text(proc, Observation("x"))
    assert str(e.value) == ("chat template: no '<|im_end|>\\n' after the system turn; cannot render an observation "
                            "turn")


@pytest.mark.parametrize("media, has", [(None, False), (Media("x"), False), (image(1), True), (video(1), True)])
def test_has_media(media, has):
    assert _has_media(media) is has


def test_sequence_inputs_for_the_scorer_and_for_the_engine():
    prompt = PromptInputs(input_ids=torch.tensor([1, 2], dtype=torch.int32), mm_token_type_ids=torch.tensor([0, 1]),
                          vision={"pixel_values": torch.ones(4, 4), "image_grid_thw": torch.tensor([[1, 2, 2]])},
                          text="P", media=image(5))
    segs = [Segment("model", torch.tensor([3, 4])),
            Segment("env", torch.tensor([5, 6, 7]), mm_token_type_ids=torch.tensor([0, 2, 0]),
                    vision={"pixel_values_videos": torch.zeros(8, 4), "video_grid_thw": torch.tensor([[2, 2, 2]])},
                    media=video(6)),
            Segment("env", torch.tensor([8]), media=image(7)),  # media without vision tensors: not an input medium
            Segment("model", torch.tensor([9]))]
    seq = sequence_inputs(prompt, segs)
    assert isinstance(seq, SequenceInputs) and seq.prompt is prompt and seq.prompt_len == 2 and seq.text == "P"
    assert seq.input_ids.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9] and seq.input_ids.dtype == torch.int32
    assert seq.mm_token_type_ids.tolist() == [0, 1, 0, 0, 0, 2, 0, 0, 0]
    assert seq.trained.tolist() == [True, True, False, False, False, False, True] and seq.media is None
    assert sorted(seq.vision) == ["image_grid_thw", "pixel_values", "pixel_values_videos", "video_grid_thw"]
    ctx = sequence_inputs(prompt, segs, for_scoring=False)
    assert type(ctx) is ContextInputs and not isinstance(ctx, SequenceInputs)
    assert [m.frames is not None for m in ctx.medias] == [False, True] and ctx.medias[0] is prompt.media
    assert ctx.input_ids.tolist() == seq.input_ids.tolist()
    bare = sequence_inputs(PromptInputs(input_ids=torch.tensor([1])), [], for_scoring=False)
    assert bare.medias == [] and bare.mm_token_type_ids.tolist() == [0]
    assert sequence_inputs(PromptInputs(input_ids=torch.tensor([1])), []).trained.tolist() == []


# ---- a whole run ----------------------------------------------------------------------------------------------

def test_segments_turns_and_trajectory_fields_of_a_three_turn_run():
    script = lambda k: ([Observation("O1", media=image(30 + k), info={"tool": "zoom"}), Observation("O2")],)
    trajs, envs, engine, reqs = run(script)
    assert len(trajs) == 3 and len(envs) == 3
    assert [e.reset_with for e in envs] == [("sample0", reqs[0].inputs.media)] * 2 + [("sample1", reqs[1].inputs.media)]
    assert [e.seen for e in envs] == [["c0o0", "c1o0"], ["c0o1", "c1o1"], ["c0o2", "c1o2"]]  # no step after the last
    for j, t in enumerate(trajs):
        r = 0 if j < 2 else 1
        assert (t.sample_id, t.group_id, t.view, t.role, t.expected, t.inputs_key, t.pack_id) == \
            (f"s{r}", 10 + r, f"v{r}", f"r{r}", "AB"[r], r, j if r == 0 else 0)
        assert t.prompt_ids is reqs[r].inputs.input_ids and not t.truncated
        kinds = [(s.kind, s.trained) for s in t.segments]
        assert kinds == [("model", True), ("env", False), ("model", True), ("env", False), ("model", True)]
        m0, o1, m1, o2, m2 = t.segments
        assert m0.ids.tolist() == tokenize(f"c0o{j}") + [IM_END] and m0.text == f"c0o{j}"
        assert m0.mm_token_type_ids.tolist() == [0] * m0.ids.numel()
        assert torch.equal(m0.logprobs, -1 - torch.arange(m0.ids.numel()) / 10)
        assert o1.ids.tolist() == obs_ids("O1", media_pads=("<|vision_start|>", "<|image_pad|>" * 6,
                                                             "<|vision_end|>"))
        assert o1.mm_token_type_ids.tolist() == [1 if i == IMAGE else 0 for i in o1.ids.tolist()]
        assert o1.vision["image_grid_thw"].tolist() == [[1, 4, 6]] and float(o1.vision["pixel_values"][0, 0]) == 30 + j
        assert o1.text == "O1" and int(o1.media.image.flatten()[0]) == 30 + j
        assert o2.ids.tolist() == obs_ids("O2") and o2.vision == {} and o2.text == "O2"
        assert m2.text == t.text == f"c2o{j}"
        assert torch.equal(t.response_ids, torch.cat([s.ids for s in t.segments]))
        assert t.loss_mask.tolist() == sum(([s.trained] * s.ids.numel() for s in t.segments), [])
        assert t.logprobs[~t.loss_mask].abs().sum() == 0
        assert torch.equal(t.logprobs[t.loss_mask], torch.cat([m0.logprobs, m1.logprobs, m2.logprobs]))
        seq = t.sequence
        assert isinstance(seq, SequenceInputs) and seq.prompt is reqs[r].inputs
        assert seq.input_ids.tolist() == reqs[r].inputs.input_ids.tolist() + t.response_ids.tolist()
        assert seq.trained.tolist() == t.loss_mask.tolist()
        assert t.turns == [
            {"turn": 0, "model_text": f"c0o{j}", "model_tokens": m0.ids.numel(), "env_s": t.turns[0]["env_s"],
             "observation": "O1", "role": "user", "obs_tokens": o1.ids.numel(), "media_tokens": 6, "tool": "zoom"},
            {"turn": 1, "model_text": f"c1o{j}", "model_tokens": m1.ids.numel(), "env_s": t.turns[1]["env_s"],
             "observation": "O2", "role": "user", "obs_tokens": o2.ids.numel(), "media_tokens": 0},
            {"turn": 2, "model_text": f"c2o{j}", "model_tokens": m2.ids.numel(), "end": "max_turns"}]
        assert all(isinstance(x["env_s"], float) and 0 <= x["env_s"] < 5 for x in t.turns[:2])
    assert engine.awake_log == ["enter", "exit"]


def test_each_turn_sends_one_shared_request_first_then_one_per_episode():
    trajs, envs, engine, reqs = run(lambda k: ([Observation("O1"), Observation("O2")],))
    assert [c[0] for c in engine.calls] == ["generate"] * 3
    first = engine.calls[0][1]
    assert [(q.inputs, q.n) for q in first] == [(reqs[0].inputs, 2), (reqs[1].inputs, 1)]
    assert first[0].inputs is reqs[0].inputs
    for q, src in zip(first, reqs):
        assert (q.sample_id, q.group_id, q.view, q.role, q.expected, q.sample, q.meta) == \
            (src.sample_id, src.group_id, src.view, src.role, src.expected, src.sample, src.meta)
        assert q.meta is not src.meta
    later = engine.calls[1][1]
    assert [(q.sample_id, q.n) for q in later] == [("s0", 1), ("s0", 1), ("s1", 1)]
    assert all(type(q.inputs) is ContextInputs for q in later)
    assert [len(q.inputs.medias) for q in later] == [1, 1, 1]  # the prompt's own medium; the observations are text
    assert later[0].inputs.input_ids.tolist() == (reqs[0].inputs.input_ids.tolist() + tokenize("c0o0")
                                                   + [IM_END] + obs_ids("O1"))
    assert engine.calls[2][1][2].inputs.num_tokens == trajs[2].sequence.num_tokens - trajs[2].segments[-1].ids.numel()
    assert engine.calls[0][2].max_new_tokens == 4


def test_an_episode_ends_when_its_environment_says_done_and_the_others_go_on():
    scripts = {0: [None], 1: [Observation("O1")] * 3, 2: [Observation("O1"), None]}
    trajs, envs, engine, _ = run(lambda k: (scripts[k],), max_turns=4)
    assert [t.turns[-1]["end"] for t in trajs] == ["done", "max_turns", "done"]
    assert [len(t.turns) for t in trajs] == [1, 4, 2]
    assert [[s.kind for s in t.segments] for t in trajs] == [["model"], ["model", "env"] * 3 + ["model"],
                                                             ["model", "env", "model"]]
    assert [[q.sample_id for q in c[1]] for c in engine.calls] == [["s0", "s1"], ["s0", "s1"], ["s0"], ["s0"]]
    assert trajs[2].text == "c1o1" and trajs[1].text == "c3o0"
    assert trajs[0].turns[0]["end"] == "done" and "observation" not in trajs[0].turns[0]


def test_a_truncated_turn_is_closed_by_an_im_end_at_the_head_of_the_next_observation():
    engine = ScriptedEngine({(0, 1): ("cut off", True), (1, 1): ("again", True)})
    trajs, envs, engine, _ = run(lambda k: ([Observation("O1"), Observation("O2")],), engine=engine)
    clean, cut = trajs[0], trajs[1]
    assert not clean.truncated and all("truncated" not in x for x in clean.turns)
    assert cut.truncated and [x.get("truncated") for x in cut.turns] == [True, True, None]
    m0, o1 = cut.segments[:2]
    assert m0.ids.tolist() == tokenize("cut off")  # the model wrote no <|im_end|>
    assert o1.ids.tolist() == [IM_END] + obs_ids("O1") and o1.mm_token_type_ids.tolist()[0] == 0
    assert o1.ids.dtype == torch.long and o1.mm_token_type_ids.shape == o1.ids.shape
    assert not cut.loss_mask[m0.ids.numel()]  # the closing token is not trained on
    assert cut.turns[0]["obs_tokens"] == len(obs_ids("O1")) + 1
    assert clean.segments[1].ids.tolist() == obs_ids("O1")


def test_a_truncated_last_turn_leaves_the_trajectory_truncated():
    engine = ScriptedEngine({(1, 0): ("end", True)})
    trajs, _, _, _ = run(lambda k: ([Observation("O1")],), max_turns=2, engine=engine)
    assert trajs[0].truncated and trajs[0].turns[-1] == {"turn": 1, "model_text": "end", "model_tokens": 3,
                                                         "truncated": True, "end": "max_turns"}
    assert not trajs[1].truncated


@pytest.mark.parametrize("slack, ends, model_turns", [(0, "max_turns", 3), (-1, "max_total_tokens", 2)])
def test_max_total_tokens_stops_an_episode_before_a_turn_that_could_pass_it(slack, ends, model_turns):
    """Budget = the sequence after turn 1's observation + max_new_tokens: exactly at the budget the turn runs."""
    proc = FakeProcessor()
    reqs = requests(proc)[1:]  # the image prompt, one episode
    p = reqs[0].inputs.num_tokens
    after_two = p + len(tokenize("c0o0")) + 1 + len(obs_ids("O1")) + len(tokenize("c1o0")) + 1 + len(obs_ids("O2"))
    trajs, envs, engine, _ = run(lambda k: ([Observation("O1"), Observation("O2")],), reqs=reqs, proc=proc,
                                 max_total_tokens=after_two + 4 + slack, max_new_tokens=4)
    t = trajs[0]
    assert [s.kind for s in t.segments].count("model") == model_turns and t.turns[-1]["end"] == ends
    assert t.text == [s for s in t.segments if s.kind == "model"][-1].text == f"c{model_turns - 1}o0"
    assert len(engine.calls) == model_turns
    if ends == "max_total_tokens":
        assert t.segments[-1].kind == "env" and t.turns[-1]["turn"] == 1 and t.turns[-1]["observation"] == "O2"


def test_the_first_turn_runs_whatever_the_token_budget():
    trajs, _, engine, _ = run(lambda k: ([Observation("O1")],), max_total_tokens=1)
    assert [t.turns[-1]["end"] for t in trajs] == ["max_total_tokens"] * 3
    assert [len(t.turns) for t in trajs] == [1, 1, 1] and len(engine.calls) == 1


def test_max_turns_one_is_a_single_turn_and_zero_is_refused():
    trajs, envs, engine, _ = run(lambda k: ([Observation("O1")],), max_turns=1)
    assert [t.turns for t in trajs][0] == [{"turn": 0, "model_text": "c0o0", "model_tokens": 5, "end": "max_turns"}]
    assert envs[0].seen == []
    with pytest.raises(ValueError) as e:
        MultiTurnLoop(FakeProcessor(), lambda: None, max_turns=0)
    assert str(e.value) == "multi_turn: max_turns must be >= 1, got 0"
    assert MultiTurnLoop(FakeProcessor(), lambda: None).max_turns == 4


def test_an_engine_that_cannot_continue_sequences_is_refused():
    class Plain(ScriptedEngine):
        supports_sequences = False

    with pytest.raises(ValueError) as e:
        run(lambda k: ([],), engine=Plain())
    assert str(e.value) == ("rollout.agent_loop=multi_turn: the Plain cannot continue a sequence with media inserted "
                            f"mid-trajectory; use {advice('multi_turn_engine')}")


def test_an_engine_without_awake_runs_too():
    class NoAwake:
        supports_sequences = True

        def __init__(self):
            self.inner = ScriptedEngine()

        def generate(self, reqs, params):
            return self.inner.generate(reqs, params)

    trajs, _, _, _ = run(lambda k: ([Observation("O1")],), engine=NoAwake(), max_turns=2)
    assert [t.turns[-1]["end"] for t in trajs] == ["max_turns"] * 3


# ---- the KV-reuse path ----------------------------------------------------------------------------------------

def test_with_kept_caches_each_later_turn_sends_only_the_tail():
    engine = ScriptedEngine(kv=True)
    script = {0: [Observation("O1", media=image(40)), Observation("O2")], 1: [None], 2: [Observation("O1")] * 2}
    trajs, envs, engine, reqs = run(lambda k: (script[k],), engine=engine)
    assert [c[0] for c in engine.calls] == ["start", "continue", "continue"]
    assert [(q.sample_id, q.n) for q in engine.calls[0][1]] == [("s0", 2), ("s1", 1)]
    assert [q.sample_id for q in engine.calls[1][1]] == ["s0", "s1"] and engine.calls[1][1][0] is reqs[0]
    t1 = engine.tails[0]  # turn 1 of episodes 0 and 2: the model turn's last token (sampled, not fed) + observation
    assert t1[0].input_ids.tolist() == [IM_END] + trajs[0].segments[1].ids.tolist()
    assert t1[0].mm_token_type_ids.tolist() == [0] + trajs[0].segments[1].mm_token_type_ids.tolist()
    assert t1[0].vision["image_grid_thw"].tolist() == [[1, 4, 6]] and float(t1[0].vision["pixel_values"][0, 0]) == 40
    assert t1[1].input_ids.tolist() == [IM_END] + obs_ids("O1") and t1[1].vision == {}
    t2 = engine.tails[1]
    assert [t.input_ids.tolist() for t in t2] == [[IM_END] + obs_ids("O2"), [IM_END] + obs_ids("O1")]
    assert [t.turns[-1]["end"] for t in trajs] == ["max_turns", "done", "max_turns"]
    assert all(e is None for e in [None]) and [t.segments[-1].text for t in trajs] == ["c2o0", "c0o1", "c2o1"]


def test_reuse_cache_off_sends_whole_sequences_every_turn():
    engine = ScriptedEngine(kv=True)
    trajs, _, engine, reqs = run(lambda k: ([Observation("O1")],), engine=engine, max_turns=2, reuse_cache=False)
    assert [c[0] for c in engine.calls] == ["generate", "generate"] and engine.tails == []
    assert [type(q.inputs) for q in engine.calls[1][1]] == [ContextInputs] * 3


def test_a_finished_episode_drops_its_cache():
    engine = ScriptedEngine(kv=True)
    loop_envs = []
    proc = FakeProcessor()
    loop = MultiTurnLoop(proc, lambda: loop_envs.append(Env([None])) or loop_envs[-1], max_turns=3)
    seen = []
    orig = loop._trajectory
    loop._trajectory = lambda e, req: seen.append((e.done, e.end, e.kv)) or orig(e, req)
    loop.run(engine, requests(proc), SamplingParams(max_new_tokens=4))
    assert seen == [(True, "done", None)] * 3


# ---- the first observation and the system suffix --------------------------------------------------------------

def test_a_first_observation_replaces_the_prompt():
    first = Observation("Overview", media=image(50), prefix="Look: ", info={"coarse": 1})
    trajs, envs, engine, reqs = run(lambda k: ([Observation("O1")], first if k != 1 else None), max_turns=2)
    own = trajs[0]
    text = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nLook: "
            "<|vision_start|><|image_pad|><|vision_end|>Overview<|im_end|>\n" + GEN)
    assert own.prompt_ids.tolist() == tokenize(text.replace("<|image_pad|>", "<|image_pad|>" * 6))
    assert own.sequence.prompt.text == text and float(own.sequence.prompt.vision["pixel_values"][0, 0]) == 50
    assert own.turns[0] == {"turn": -1, "observation": "Overview", "coarse": 1} and own.turns[1]["turn"] == 0
    assert trajs[1].prompt_ids is reqs[0].inputs.input_ids and trajs[1].turns[0]["turn"] == 0
    assert [(q.sample_id, q.n) for q in engine.calls[0][1]] == [("s0", 1), ("s0", 1), ("s1", 1)]


SUFFIX = "\nTools: zoom"


def test_the_system_suffix_reaches_every_prompt_once_and_keeps_shared_prompts_shared():
    proc = FakeProcessor()
    reqs = requests(proc, 2, 2)
    proc.calls.clear()
    first = Observation("Overview")
    trajs, envs, engine, reqs = run(lambda k: ([Observation("O1")], first if k == 3 else None), max_turns=2,
                                    system_suffix=SUFFIX, proc=proc, reqs=reqs)
    assert [(q.sample_id, q.n) for q in engine.calls[0][1]] == [("s0", 2), ("s1", 1), ("s1", 1)]
    for r, (a, b) in enumerate(((0, 1), (2, 2))):
        shared = trajs[a].sequence.prompt
        assert shared is trajs[b].sequence.prompt is engine.calls[0][1][r].inputs and shared is not reqs[r].inputs
        assert shared.text == reqs[r].inputs.text.replace("assistant.<|im_end|>", "assistant." + SUFFIX + "<|im_end|>")
        assert shared.text.count("Tools: zoom") == 1 and shared.input_ids.tolist() == tokenize(
            shared.text.replace("<|video_pad|>", "<|video_pad|>" * 8).replace("<|image_pad|>", "<|image_pad|>" * 6))
    assert trajs[0].sequence.prompt.vision["video_grid_thw"].tolist() == [[2, 4, 4]]
    assert trajs[2].sequence.prompt.vision["image_grid_thw"].tolist() == [[1, 4, 6]]
    own = trajs[3].sequence.prompt
    assert own.text == ("<|im_start|>system\nYou are a helpful assistant." + SUFFIX + "<|im_end|>\n"
                        "<|im_start|>user\nOverview<|im_end|>\n" + GEN)
    # one processor call for the first observations, one for the shared prompts (each once), then the turn's
    assert [(len(c["text"]), c["videos"], c["images"]) for c in proc.calls[:2]] == [(1, 0, 0), (2, 1, 1)]


def test_without_a_suffix_the_requests_prompts_are_used_as_they_are():
    proc = FakeProcessor()
    reqs = requests(proc)
    proc.calls.clear()
    trajs, _, engine, _ = run(lambda k: ([Observation("O1")],), max_turns=1, proc=proc, reqs=reqs)
    assert proc.calls == [] and engine.calls[0][1][0].inputs is reqs[0].inputs


@pytest.mark.parametrize("suffix, text, out", [
    ("", "anything", "anything"),
    (SUFFIX, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n",
     "<|im_start|>system\nS\nTools: zoom<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"),
    (SUFFIX, "<|im_start|>user\nQ<|im_end|>\n",  # Qwen3-VL: no default system turn
     "<|im_start|>system\nTools: zoom<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"),
    ("Tools", "<|im_start|>user\nQ<|im_end|>\n", "<|im_start|>system\nTools<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"),
])
def test_the_system_suffix_goes_at_the_end_of_the_system_turn(suffix, text, out):
    assert MultiTurnLoop(FakeProcessor(), lambda: None, system_suffix=suffix)._system(text) == out


@pytest.mark.parametrize("text", ["Q?", "<|im_start|>system\nS and never closed"])
def test_a_prompt_without_a_system_turn_is_refused(text):
    with pytest.raises(ValueError) as e:
        MultiTurnLoop(FakeProcessor(), lambda: None, system_suffix=SUFFIX)._system(text)
    assert str(e.value) == "multi_turn: the prompt does not start with a system turn; cannot add the tool list"


def test_an_observation_the_processor_rejects_names_the_episodes_and_turn():
    proc = FakeProcessor(fail_on="BAD")
    with pytest.raises(ValueError) as e:
        run(lambda k: ([Observation("BAD" if k != 1 else "fine")],), proc=proc)
    cause = "RuntimeError: " + str(e.value.__cause__)[:300]
    assert str(e.value) == f"multi_turn: the processor rejected the observations of s0 (turn 0), s1 (turn 0): {cause}"
    assert len(str(e.value.__cause__)) > 300 and isinstance(e.value.__cause__, RuntimeError)
    assert detokenize(tokenize("<|im_end|>a")) == "<|im_end|>a"


# ---- written after the mutation run for its survivors ------------------------------------------------------------

def test_the_trained_mask_of_a_scored_sequence_is_bool():
    segs = [Segment("model", torch.tensor([3, 4])), Segment("env", torch.tensor([5]))]
    assert sequence_inputs(PromptInputs(input_ids=torch.tensor([1])), segs).trained.dtype == torch.bool


def test_an_engine_that_does_not_say_it_continues_sequences_is_refused():
    class Bare:
        def generate(self, reqs, params):
            raise AssertionError("never called")

    with pytest.raises(ValueError, match=r"^rollout.agent_loop=multi_turn: the Bare cannot continue a sequence"):
        run(lambda k: ([],), engine=Bare())


def test_kept_caches_with_one_episode_and_the_sampling_params_on_every_call():
    proc = FakeProcessor()
    reqs = requests(proc, 1, 1)[:1]
    trajs, _, engine, _ = run(lambda k: ([Observation("O1"), Observation("O2")],), engine=ScriptedEngine(kv=True),
                              reqs=reqs, proc=proc, max_new_tokens=5)
    assert [c[0] for c in engine.calls] == ["start", "continue", "continue"] and len(trajs) == 1
    assert all(c[2] is not None and c[2].max_new_tokens == 5 for c in engine.calls)


def test_a_text_only_prompt_gets_the_system_suffix_too():
    proc = FakeProcessor()
    text = build_prompt_inputs(proc, [{"role": "user", "content": [{"type": "text", "text": "Q?"}]}], Media("t"))
    text.media = None
    req = RolloutRequest(inputs=text, n=2, sample_id="t0")
    trajs, _, engine, _ = run(lambda k: ([],), reqs=[req], proc=proc, max_turns=1, system_suffix=SUFFIX)
    assert trajs[0].sequence.prompt.text == ("<|im_start|>system\nYou are a helpful assistant." + SUFFIX + "<|im_end|>\n"
                                             "<|im_start|>user\nQ?<|im_end|>\n" + GEN)


@pytest.mark.parametrize("suffix, out", [(" Tools", " Tools"), ("\nXML tools", "XML tools"), ("\n\n\tT", "\tT")])
def test_only_leading_newlines_of_the_suffix_are_dropped_in_a_new_system_turn(suffix, out):
    loop = MultiTurnLoop(FakeProcessor(), lambda: None, system_suffix=suffix)
    assert loop._system("<|im_start|>user\nQ<|im_end|>\n") == f"<|im_start|>system\n{out}<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
