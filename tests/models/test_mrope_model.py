"""The tiny model on a 16-frame 60-s clip (448x224 frames: the configs' shape, 90 positions past transformers 5.x):
the scorer's positions are ``mmrl.models.mrope``'s, sampler and scorer agree, a plain forward at those positions is
the reference, and a multi-turn episode whose tool returns such a video is numbered whole and tail by tail alike."""
import pytest
import torch

from mmrl.data.schema import Media
from mmrl.media.inputs import build_prompt_inputs
from mmrl.media.prompts import build_messages
from mmrl.models.loading import load_model, load_processor
from mmrl.models.mrope import RopeRule, vision_positions
from mmrl.models.scoring import backbone, prompt_positions, response_logprobs
from mmrl.rollout.agent_loop import Environment, Observation, build_agent_loop
from mmrl.rollout.base import RolloutRequest, SamplingParams, build_engine
from support import trained_position_ids, policy_log_softmax

def clip(seed: int, frames: int = 16, seconds: float = 60.0, h: int = 448, w: int = 224) -> Media:
    g = torch.Generator().manual_seed(seed)
    fps = frames / seconds
    return Media(f"clip{seed}", frames=torch.randint(0, 255, (frames, 3, h, w), dtype=torch.uint8, generator=g),
                 timestamps=[i / fps for i in range(frames)], fps=fps)

@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    m = clip(0)
    pi = build_prompt_inputs(proc, build_messages("What colour is the square?", ["red", "green"], m), m)
    return proc, model, pi

def _after_video(proc, pi) -> int:
    return int((pi.input_ids == proc.tokenizer.convert_tokens_to_ids("<|vision_end|>")).nonzero()[0])

def test_scorer_positions_are_the_modules_and_90_past_transformers(tiny):
    proc, model, pi = tiny
    core, _ = backbone(model)
    assert pi.vision["video_grid_thw"].tolist() == [[8, 32, 16]]
    assert abs(float(pi.vision["second_per_grid_ts"][0]) - 7.5) < 1e-6
    ours, nxt = prompt_positions(core, [pi], pi.input_ids[None])
    ref, ref_next = vision_positions(RopeRule.from_config(model.config), pi.input_ids, pi.vision)
    assert torch.equal(ours[:, 0], ref) and int(nxt) == ref_next == int(ref.max()) + 1
    theirs, _ = core.get_rope_index(pi.input_ids[None], mm_token_type_ids=pi.mm_token_type_ids[None],
                                    image_grid_thw=None, video_grid_thw=pi.vision["video_grid_thw"],
                                    second_per_grid_ts=pi.vision["second_per_grid_ts"])
    ve = _after_video(proc, pi)
    import transformers

    offset = int(ours[0, 0, ve]) - int(theirs[0, 0, ve])
    print(f"text after the 16-frame 60-s clip: ours {int(ours[0, 0, ve])}, transformers {transformers.__version__} "
          f"{int(theirs[0, 0, ve])}, offset {offset}")
    if transformers.__version__.startswith("5."):
        assert offset == 90
    video = pi.mm_token_type_ids == 2
    from packaging.version import Version

    if Version(transformers.__version__) >= Version("5.18"):
        assert torch.equal(ours[:, 0, video], theirs[:, 0, video])  # the video block itself is numbered alike
    else:  # 5.16-5.17 truncate the 7.5 s per grid to 7 s: frame steps 14 apart, not 15 (docs/positions.md)
        assert torch.equal(ours[1:, 0, video], theirs[1:, 0, video])
        assert int(theirs[0, 0, video].max()) - int(ours[0, 0, video].min()) == 7 * 14
        assert int(ours[0, 0, video].max()) - int(ours[0, 0, video].min()) == 7 * 15

def test_sampler_and_scorer_agree_and_equal_a_plain_forward_at_the_trained_positions(tiny):
    proc, model, pi = tiny
    pad = proc.tokenizer.pad_token_id
    engine = build_engine("hf", model=model, processor=proc)
    torch.manual_seed(0)
    trajs = engine.generate([RolloutRequest(inputs=pi, n=2, sample_id="clip")], SamplingParams(max_new_tokens=5))
    items = [(pi, t.response_ids) for t in trajs]
    with torch.no_grad():
        for strategy in ("packed", "expand", "full"):
            ours = response_logprobs(model, items, pad_id=pad, strategy=strategy)
            for t, lp in zip(trajs, ours):
                assert torch.allclose(lp, t.logprobs, atol=1e-5), (strategy, (lp - t.logprobs).abs().max())
        resp = trajs[0].response_ids
        ids = torch.cat([pi.input_ids, resp])[None]
        mm = torch.cat([pi.mm_token_type_ids, torch.zeros_like(resp)])[None]
        P = pi.num_tokens

        def plain(**kw):
            logits = model(input_ids=ids, mm_token_type_ids=mm, **pi.vision, **kw).logits[0, P - 1 : P - 1 + resp.numel()]
            return policy_log_softmax(logits.float(), model).gather(-1, resp[:, None]).squeeze(-1)

        ref = plain(position_ids=trained_position_ids(model, pi, resp))
        assert torch.allclose(trajs[0].logprobs, ref, atol=1e-5)
        # the installed transformers' own numbering (90 positions lower after the video) is another model input
        import transformers

        if transformers.__version__.startswith("5."):
            assert not torch.allclose(plain(), ref, atol=1e-3)

def test_generate_reference_path_numbers_like_the_shared_prefill(tiny):
    """``shared_prefill=False`` (``model.generate``) swaps in this numbering: the same greedy tokens and log-probs."""
    proc, model, pi = tiny
    params = SamplingParams(max_new_tokens=4, greedy=True)
    req = [RolloutRequest(inputs=pi, n=1, sample_id="clip")]
    a = build_engine("hf", model=model, processor=proc).generate(req, params)[0]
    b = build_engine("hf", model=model, processor=proc, shared_prefill=False).generate(req, params)[0]
    assert torch.equal(a.response_ids, b.response_ids) and torch.allclose(a.logprobs, b.logprobs, atol=1e-4)
    assert "get_rope_index" not in vars(backbone(model)[0])  # the swap is undone

class ToolVideo(Environment):
    """The first observation returns a sparse clip (as a tool would), the second only text."""

    def reset(self, sample, media):
        self.k = 0

    def step(self, model_text):
        self.k += 1
        if self.k == 1:
            return Observation("Here is the clip.", media=clip(1, frames=8, seconds=32.0, h=56, w=112))
        return Observation("Answer now.") if self.k == 2 else None

def test_multi_turn_tool_video_numbered_whole_and_tail_by_tail(tiny):
    """A trajectory with a video returned mid-episode (4 grid steps 8 s apart: tau 0, 16, 32, 48, far past its 2x4
    merged patches): the engine's kept-cache turns (tails numbered from the running next position) give the tokens
    and log-probs of episodes re-prefilled whole, the sequence's positions are the module's over the whole sequence,
    and the scorer's log-probs of the model turns equal the sampler's."""
    proc, model, _ = tiny
    m = Media("img", image=torch.randint(0, 255, (3, 56, 84), dtype=torch.uint8, generator=torch.Generator().manual_seed(2)))
    pi = build_prompt_inputs(proc, build_messages("What colour is the square?", ["red", "green"], m), m)
    reqs = [RolloutRequest(inputs=pi, n=2, sample_id="s")]
    runs = []
    for reuse in (True, False):
        engine = build_engine("hf", model=model, processor=proc)
        loop = build_agent_loop("multi_turn", processor=proc, env_factory=ToolVideo, max_turns=3, reuse_cache=reuse)
        torch.manual_seed(0)
        runs.append(loop.run(engine, reqs, SamplingParams(max_new_tokens=3)))
    kept, whole = runs
    for a, b in zip(kept, whole):
        assert torch.equal(a.response_ids, b.response_ids) and torch.allclose(a.logprobs, b.logprobs, atol=1e-5)
    t = kept[0]
    seq = t.sequence
    assert seq.vision["video_grid_thw"].tolist() == [[4, 4, 8]]
    core, _ = backbone(model)
    pos, _ = prompt_positions(core, [seq], seq.input_ids[None])
    assert torch.equal(pos, trained_position_ids(model, seq))
    video = (seq.mm_token_type_ids == 2).nonzero().view(-1)
    start = int(pos[1, 0, video[0]])
    assert sorted(set((pos[0, 0, video] - start).tolist())) == [0, 16, 32, 48]  # 4 s per grid x 2 tokens/s x k
    assert int(pos[0, 0, video[-1] + 1]) == start + 49  # the text after the video: its max + 1
    with torch.no_grad():
        lp = response_logprobs(model, [(s.sequence, s.response_ids) for s in kept], pad_id=proc.tokenizer.pad_token_id)
    for s, x in zip(kept, lp):
        assert torch.allclose(x[s.loss_mask], s.logprobs[s.loss_mask], atol=1e-5)
