"""The multi_turn agent loop on the tiny model with a scripted environment: segments and loss mask, M-RoPE
positions over the whole interleaved sequence, full-sequence log-probs against a plain model forward, and the
second turn (after an image inserted mid-trajectory) against ``transformers.generate`` on the same context."""
import pytest
import torch

from mmrl.data.schema import Media
from mmrl.media.inputs import SequenceInputs
from mmrl.models.loading import load_model, load_processor
from mmrl.models.mrope import RopeRule, batch_rope_index, trained_numbering
from mmrl.models.scoring import backbone, prompt_positions, response_logprobs
from mmrl.rollout.agent_loop import Environment, Observation, build_agent_loop
from mmrl.rollout.base import SamplingParams, build_engine
from support import mixed_requests, trained_position_ids, policy_log_softmax


def _image(seed: int, h: int = 56, w: int = 84) -> Media:
    g = torch.Generator().manual_seed(seed)
    return Media("obs", image=torch.randint(0, 255, (3, h, w), dtype=torch.uint8, generator=g))


def _video(seed: int) -> Media:
    g = torch.Generator().manual_seed(seed)
    return Media("obs", frames=torch.randint(0, 255, (4, 3, 56, 56), dtype=torch.uint8, generator=g),
                 timestamps=[0, .5, 1, 1.5], fps=2.0)


class ScriptedEnv(Environment):
    """Answers turn k with ``script[k]`` whatever the model said; done when the script runs out."""

    def __init__(self, script, first=None):
        self.script, self.first, self.seen, self.reset_with = list(script), first, [], None

    def reset(self, sample, media):
        self.reset_with = media
        return self.first

    def step(self, model_text):
        self.seen.append(model_text)
        return self.script.pop(0) if self.script else None


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    return load_processor(tiny_model_path), load_model(tiny_model_path)


def _requests(proc, n=2):
    return mixed_requests(proc, lambda i: n, lambda i: "What colour is the square?")


def _run(proc, model, script_of, max_turns=3, greedy=False, n=2, max_new_tokens=3, requests=None, first=None):
    engine = build_engine("hf", model=model, processor=proc)
    envs = []

    def factory():
        envs.append(ScriptedEnv(script_of(), first))
        return envs[-1]

    loop = build_agent_loop("multi_turn", processor=proc, env_factory=factory, max_turns=max_turns)
    reqs = requests if requests is not None else _requests(proc, n)
    torch.manual_seed(0)
    trajs = loop.run(engine, reqs, SamplingParams(max_new_tokens=max_new_tokens, greedy=greedy))
    return reqs, trajs, envs, engine


def test_segments_and_loss_mask(tiny):
    proc, model = tiny
    script = lambda: [Observation("Look again.", media=_image(1)), Observation("Now answer.")]
    reqs, trajs, envs, engine = _run(proc, model, script)
    assert len(trajs) == 6 and [t.group_id for t in trajs] == [0, 0, 1, 1, 2, 2]
    assert [t.pack_id for t in trajs] == [0, 1] * 3 and [t.inputs_key for t in trajs] == [0, 0, 1, 1, 2, 2]
    image_pad = proc.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    for t, env in zip(trajs, envs):
        assert [s.kind for s in t.segments] == ["model", "env", "model", "env", "model"]
        assert torch.equal(t.response_ids, torch.cat([s.ids for s in t.segments]))
        assert isinstance(t.sequence, SequenceInputs)
        assert torch.equal(t.sequence.input_ids, torch.cat([reqs[t.inputs_key].inputs.input_ids, t.response_ids]))
        assert t.sequence.prompt_len == t.prompt_ids.numel()
        # loss mask: exactly the model's own tokens (a closing <|im_end|> added after a truncated turn is masked)
        expect = torch.cat([torch.full((s.ids.numel(),), s.kind == "model") for s in t.segments])
        assert torch.equal(t.loss_mask, expect) and t.loss_mask.dtype == torch.bool
        assert torch.equal(t.logprobs[~t.loss_mask], torch.zeros(int((~t.loss_mask).sum())))
        assert not (set(t.response_ids[t.loss_mask].tolist()) & set(engine.suppress))
        # the inserted image: its pad tokens, pixels and grid travel with the env segment and the whole sequence
        img_seg = t.segments[1]
        grid = img_seg.vision["image_grid_thw"]
        assert int((img_seg.ids == image_pad).sum()) == int(grid.prod()) // 4 == int((img_seg.mm_token_type_ids == 1).sum())
        assert img_seg.vision["pixel_values"].shape[0] == int(grid.prod())
        n_prompt_imgs = reqs[t.inputs_key].inputs.vision.get("image_grid_thw", torch.zeros(0, 3)).shape[0]
        assert t.sequence.vision["image_grid_thw"].shape[0] == n_prompt_imgs + 1
        assert int((t.sequence.input_ids == image_pad).sum()) == int(t.sequence.vision["image_grid_thw"].prod(-1).sum()) // 4
        # turns: one per model turn; the environment saw each model turn's text but the last
        assert len(t.turns) == 3 and t.turns[-1]["end"] == "max_turns" and t.turns[1]["observation"] == "Now answer."
        assert t.turns[0]["media_tokens"] == int(grid.prod()) // 4
        assert env.seen == [s.text for s in t.segments if s.kind == "model"][:2] and t.text == t.segments[-1].text
    assert envs[4].reset_with is reqs[2].inputs.media  # reset gets the episode's own view media


def test_episode_ends_when_environment_says_done(tiny):
    proc, model = tiny
    _, trajs, _, _ = _run(proc, model, lambda: [Observation("Once more.")], max_turns=4)
    for t in trajs:
        assert [s.kind for s in t.segments] == ["model", "env", "model"] and t.turns[-1]["end"] == "done"


def test_positions_are_the_trained_numbering_of_the_whole_sequence(tiny):
    proc, model = tiny
    _, trajs, _, _ = _run(proc, model, lambda: [Observation("Look.", media=_image(2)), Observation("And this.", media=_video(3))])
    core, _ = backbone(model)
    t = trajs[4]  # image prompt, then an image and a video inserted mid-trajectory
    seq = t.sequence
    ids = seq.input_ids[None]
    pos, _ = prompt_positions(core, [seq], ids)
    ref = trained_position_ids(model, seq)  # the numbering over the whole sequence, computed afresh
    assert torch.equal(pos, ref)
    # not 1-D text positions: the inserted image's tokens spread over distinct height/width ids, and the text after
    # each inserted medium continues from its largest position
    start = seq.prompt_len + t.segments[0].ids.numel()
    seg_types = t.segments[1].mm_token_type_ids
    img = torch.arange(start, start + seg_types.numel())[seg_types == 1]
    assert not torch.equal(pos[1, 0, img], pos[2, 0, img]) and pos[1, 0, img].unique().numel() > 1
    after = int(img[-1]) + 1  # <|vision_end|>
    assert int(pos[0, 0, after]) == int(pos[:, 0, img].max()) + 1
    assert int(pos[0, 0, -1]) < seq.num_tokens - 1  # merged patches share positions


def test_full_sequence_logprobs_equal_a_plain_forward(tiny):
    proc, model = tiny
    reqs, trajs, _, _ = _run(proc, model, lambda: [Observation("Look.", media=_image(4)), Observation("Clip.", media=_video(5))])
    inputs = [r.inputs for r in reqs]
    single = [(reqs[0].inputs, torch.tensor([5, 9, 7]))]
    items = [t.scoring_item(inputs) for t in trajs]
    with torch.no_grad():
        lps = response_logprobs(model, single + items, micro_batch=4, pad_id=proc.tokenizer.pad_token_id)
        ref_single = response_logprobs(model, single, pad_id=proc.tokenizer.pad_token_id)[0]
    assert torch.allclose(lps[0], ref_single)  # order kept in a mixed batch
    for t, lp in zip(trajs, lps[1:]):
        seq = t.sequence
        with torch.no_grad():
            logits = model(input_ids=seq.input_ids[None], mm_token_type_ids=seq.mm_token_type_ids[None],
                           position_ids=trained_position_ids(model, seq), **seq.vision).logits[0].float()
        P = seq.prompt_len
        ref = policy_log_softmax(logits[P - 1:-1], model).gather(-1, seq.input_ids[P:, None]).squeeze(-1)
        m = t.loss_mask  # only the model's tokens go through the LM head; observations get 0 (as sampled)
        assert lp.shape == t.response_ids.shape and torch.allclose(lp[m], ref[m], atol=1e-4)
        assert (~m).any() and torch.equal(lp[~m], torch.zeros(int((~m).sum())))
        # the sampling log-probs of the model's tokens, drawn turn by turn, equal the full-sequence scores
        assert torch.allclose(lp, t.logprobs, atol=1e-4)


def test_second_turn_after_an_inserted_image_matches_generate(tiny):
    proc, model = tiny
    new = 4
    reqs, trajs, _, engine = _run(proc, model, lambda: [Observation("Look at this.", media=_image(6, 84, 56))],
                                  max_turns=2, greedy=True, n=1, max_new_tokens=new)
    core, _ = backbone(model)

    def generate(ctx, mm, vision, flat_from=None):
        """``model.generate`` numbering positions as the models were trained (``trained_numbering``), or with the
        tokens from ``flat_from`` on numbered as 1-D text."""
        def flat(input_ids, *a, **k):
            pos, _ = batch_rope_index(RopeRule.from_config(core.config), input_ids, **k)
            L = input_ids.shape[1]
            pos[:, :, flat_from:] = pos[:, :, flat_from : flat_from + 1] + torch.arange(L - flat_from)
            return pos, pos.amax(dim=(0, 2)).view(-1, 1) + 1 - L

        with torch.no_grad(), trained_numbering(core):
            if flat_from is not None:
                core.get_rope_index = flat
            out = model.generate(input_ids=ctx[None], attention_mask=torch.ones_like(ctx)[None],
                                 mm_token_type_ids=mm[None], **vision, max_new_tokens=new, do_sample=False,
                                 temperature=None, top_p=None, top_k=None, eos_token_id=engine.eos_id,
                                 pad_token_id=engine.pad_id, suppress_tokens=engine.suppress,
                                 return_dict_in_generate=True, output_logits=True)
        ids = out.sequences[0, ctx.numel():]
        lps = policy_log_softmax(torch.stack(out.logits, 1)[0].float(), model).gather(-1, ids[:, None]).squeeze(-1)
        stop = (ids == engine.eos_id).nonzero()
        k = int(stop[0]) + 1 if stop.numel() else ids.numel()
        return ids[:k], lps[:k]

    for t in trajs:
        first, obs, second = t.segments
        ctx = t.sequence.input_ids[: t.sequence.prompt_len + first.ids.numel() + obs.ids.numel()]
        mm = t.sequence.mm_token_type_ids[: ctx.numel()]
        ids, lps = generate(ctx, mm, t.sequence.vision)
        assert torch.equal(second.ids, ids) and torch.allclose(second.logprobs, lps, atol=1e-4)
        # sensitivity: the same context with 1-D text positions for the inserted image gives other log-probs
        _, lps_1d = generate(ctx, mm, t.sequence.vision, flat_from=t.sequence.prompt_len)
        assert not torch.allclose(lps_1d, lps, atol=1e-4)


def test_first_observation_replaces_the_prompt(tiny):
    proc, model = tiny
    first = Observation("Watch the overview. What colour is the square?", media=_video(7))
    reqs, trajs, envs, _ = _run(proc, model, lambda: [Observation("More.")], max_turns=2, first=first)
    video_pad = proc.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    for t in trajs:
        assert t.turns[0]["turn"] == -1 and t.turns[0]["observation"] == first.text
        assert int((t.prompt_ids == video_pad).sum()) == int(t.sequence.vision["video_grid_thw"][0].prod()) // 4
        assert not torch.equal(t.prompt_ids, reqs[t.inputs_key].inputs.input_ids)
        assert torch.equal(t.sequence.input_ids[: t.sequence.prompt_len], t.prompt_ids)


def test_gradients_flow_through_the_sequence_path(tiny):
    proc, model = tiny
    reqs, trajs, _, _ = _run(proc, model, lambda: [Observation("Look.", media=_image(8))], max_turns=2, n=1)
    model.zero_grad()
    lps = response_logprobs(model, [t.scoring_item([r.inputs for r in reqs]) for t in trajs], pad_id=0)
    loss = -sum((lp * t.loss_mask).sum() for lp, t in zip(lps, trajs))
    loss.backward()
    vis = next(p for n, p in model.named_parameters() if "visual" in n and p.requires_grad)
    assert vis.grad is not None and float(vis.grad.abs().sum()) > 0
    model.zero_grad()


def test_engines_without_sequence_support_are_refused(tiny):
    proc, model = tiny
    engine = build_engine("hf", model=model, processor=proc)
    engine.supports_sequences = False
    loop = build_agent_loop("multi_turn", processor=proc, env_factory=lambda: ScriptedEnv([]))
    with pytest.raises(ValueError, match="multi_turn"):
        loop.run(engine, _requests(proc, 1), SamplingParams(max_new_tokens=2))


def test_unknown_agent_loop_names_the_known_ones():
    with pytest.raises(KeyError, match="multi_turn.*single_turn|single_turn.*multi_turn"):
        build_agent_loop("tool_agent")


def test_config_agent_loop_is_checked():
    from mmrl.config import load_config
    from mmrl.errors import ConfigError
    from mmrl.rollout.agent_loop_tools import check_rollout_config

    cfg = load_config([], [])
    assert cfg.rollout.agent_loop == "single_turn"
    check_rollout_config(cfg.rollout)
    with pytest.raises(ConfigError, match=r"rollout\.agent_loop.*multi_turn, single_turn"):
        check_rollout_config(load_config([], ["rollout.agent_loop=tool_agent"]).rollout)


def test_policy_update_trains_on_multi_turn_trajectories(tiny_model_path):
    """The training step's update scores multi-turn trajectories through their whole sequence and steps."""
    import contextlib

    from mmrl.config import load_config
    from mmrl.train.backend import Backend
    from mmrl.train.update import policy_update

    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    reqs, trajs, _, _ = _run(proc, model, lambda: [Observation("Look.", media=_image(9))], max_turns=2, n=2)
    cfg = load_config([], ["train.micro_batch=4", "train.lr=1e-3"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    be = Backend(model, opt, None, None, contextlib.nullcontext, cfg, proc.tokenizer.pad_token_id)
    before = [p.detach().clone() for p in model.parameters()]
    adv = torch.tensor([1.0, -1.0] * 3)
    stats = policy_update(be, trajs, [r.inputs for r in reqs], adv, cfg.algorithm, cfg.train.micro_batch)
    assert stats["grad_norm"] > 0 and any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_an_observation_the_processor_rejects_names_the_sample(tiny):
    proc, model = tiny
    bad = Media("obs", frames=torch.zeros(3, 3, 50, 50, dtype=torch.uint8), timestamps=[0, 1, 2], fps=1.0)
    with pytest.raises(ValueError, match=r"rejected the observations of .*turn 0"):
        _run(proc, model, lambda: [Observation("Broken.", media=bad)], max_turns=2, n=1)


@pytest.mark.parametrize("max_turns,limit_extra,ends,model_turns", [
    (3, 0, "max_total_tokens", 1),  # stopped before turn 2: the last segment is an observation
    (3, 10 ** 6, "max_turns", 3),  # no stop: the last segment is the last model turn
])
def test_the_trajectory_text_is_the_last_model_turn_however_the_episode_ends(tiny, max_turns, limit_extra, ends,
                                                                              model_turns):
    """An episode stopped by ``max_total_tokens`` after an observation is rewarded on its last MODEL turn's text,
    never on the observation's."""
    proc, model = tiny
    reqs = _requests(proc, n=2)[2:]  # the image prompt only
    engine = build_engine("hf", model=model, processor=proc)
    loop = build_agent_loop("multi_turn", processor=proc, max_turns=max_turns,
                            env_factory=lambda: ScriptedEnv([Observation("OBSERVATION ONE"), Observation("OBSERVATION TWO")]),
                            max_total_tokens=reqs[0].inputs.num_tokens + 4 + limit_extra)
    torch.manual_seed(0)
    trajs = loop.run(engine, reqs, SamplingParams(max_new_tokens=3))
    for t in trajs:
        model_segs = [s for s in t.segments if s.kind == "model"]
        assert len(model_segs) == model_turns and t.turns[-1]["end"] == ends
        assert t.text == model_segs[-1].text and "OBSERVATION" not in t.text
        if ends == "max_total_tokens":
            assert t.segments[-1].kind == "env"
