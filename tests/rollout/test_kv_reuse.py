"""KV cache reuse across the turns of multi-turn episodes (``mmrl.rollout.hf_turns``) against re-prefilling each
episode's whole sequence every turn: the same trajectories (greedy, and sampled under one seed with turns ending at
different lengths), and each episode's kept keys equal to those of a fresh forward over its sequence so far."""
import copy

import pytest
import torch

from mmrl.data.schema import Media
from mmrl.media.inputs import SequenceInputs, collate_vision
from mmrl.models.compat import output_cache
from mmrl.models.kv_cache import EpisodeKV, episode_rows, gather_episodes
from mmrl.models.loading import load_model, load_processor
from mmrl.models.scoring import backbone, prefill_prompts, prompt_positions, right_padded
from mmrl.rollout.agent_loop import Environment, Observation, build_agent_loop
from mmrl.rollout.base import SamplingParams, build_engine
from support import mixed_requests


def _media(seed: int) -> Media:
    """An image (56x84) for odd seeds; for even ones a 4-frame 56x56 video at 2 fps, or (every fourth seed) a sparse
    one: 8 frames over 32 s, whose temporal M-RoPE positions run past the text after it."""
    g = torch.Generator().manual_seed(seed)
    if seed % 2:
        return Media("obs", image=torch.randint(0, 255, (3, 56, 84), dtype=torch.uint8, generator=g))
    n, fps = (8, 0.25) if seed % 4 == 0 else (4, 2.0)
    return Media("obs", frames=torch.randint(0, 255, (n, 3, 56, 56), dtype=torch.uint8, generator=g),
                 timestamps=[i / fps for i in range(n)], fps=fps)


class Varied(Environment):
    """Episode ``i`` (in creation order) gets ``i % 3`` observations (none, an image or a video, then the other
    kind; one text-only turn for every fourth episode), so episodes end at different turns."""

    def __init__(self, i: int):
        self.i, self.t = i, 0

    def reset(self, sample, media):
        return None

    def step(self, model_text):
        self.t += 1
        if self.t > self.i % 3:
            return None
        if self.i % 4 == 3 and self.t == 1:
            return Observation("No picture this time.")
        return Observation(f"Look ({self.t}).", media=_media(10 * self.i + self.t))


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    return load_processor(tiny_model_path), load_model(tiny_model_path)


def _run(proc, model, reuse: bool, params: SamplingParams, n: int = 3, engine=None):
    engine = engine or build_engine("hf", model=model, processor=proc)
    made = []

    def factory():
        made.append(Varied(len(made)))
        return made[-1]

    loop = build_agent_loop("multi_turn", processor=proc, env_factory=factory, max_turns=4, reuse_cache=reuse)
    reqs = mixed_requests(proc, lambda i: n, lambda i: "What colour is the square?")
    torch.manual_seed(0)
    return reqs, loop.run(engine, reqs, params)


def _same(a, b):
    assert [s.kind for s in a.segments] == [s.kind for s in b.segments]
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.loss_mask, b.loss_mask)
    assert torch.allclose(a.logprobs, b.logprobs, atol=1e-4)
    assert a.truncated == b.truncated and [t.get("end") for t in a.turns] == [t.get("end") for t in b.turns]


def test_greedy_trajectories_equal_full_reprefill(tiny):
    """Mixed image/video observations, episodes ending after 1-3 turns, every turn cut at the budget (its closing
    token is then fed with the next observation)."""
    proc, model = tiny
    params = SamplingParams(max_new_tokens=5, greedy=True)
    _, kept = _run(proc, model, True, params)
    _, full = _run(proc, model, False, params)
    assert sorted({len(t.segments) for t in kept}) == [1, 3, 5]
    kinds = {k for t in kept for s in t.segments for k in s.vision}
    assert {"pixel_values", "pixel_values_videos"} <= kinds
    for a, b in zip(kept, full):
        _same(a, b)


def test_sampled_trajectories_with_early_ends_equal_full_reprefill(tiny):
    """A model whose <|im_end|> is likely (sampled turns end at different lengths, rows leave the decode batch at
    different steps and their caches are kept as they leave): same tokens under the same seed."""
    proc, model = tiny
    model = copy.deepcopy(model)
    eos = proc.tokenizer.convert_tokens_to_ids("<|im_end|>")
    core, head = backbone(model)
    reqs = mixed_requests(proc, lambda i: 1, lambda i: "What colour is the square?")
    with torch.no_grad():
        last, *_ = prefill_prompts(core, [r.inputs for r in reqs], 0, "cpu")
        head.weight[eos] = 0.5 * last.mean(0) / last.mean(0).norm()  # tied with the embedding: both paths see it
    params = SamplingParams(max_new_tokens=6, temperature=1.0)
    _, kept = _run(proc, model, True, params, n=4)
    _, full = _run(proc, model, False, params, n=4)
    lengths = [s.ids.numel() for t in kept for s in t.segments if s.kind == "model"]
    assert min(lengths) < 6 and max(lengths) == 6  # some turns end early, others at the budget
    for a, b in zip(kept, full):
        _same(a, b)


def test_kept_keys_equal_a_fresh_forward_over_the_sequence(tiny):
    """After each turn, an episode's cache holds exactly the keys a forward over its sequence so far computes (with
    ``mmrl.models.mrope`` positions over the whole sequence), and its next position is that sequence's next one."""
    proc, model = tiny
    engine = build_engine("hf", model=model, processor=proc)
    snaps = []
    start, cont = engine.start_episodes, engine.continue_episodes

    def spy_start(reqs, params):
        trajs, states = start(reqs, params)
        snaps.extend((id(s), s.seen, s.next_pos, s.keys[0].clone()) for s in states)
        return trajs, states

    def spy_continue(states, tails, params, requests):
        out = cont(states, tails, params, requests)
        snaps.extend((id(s), s.seen, s.next_pos, s.keys[0].clone()) for s in states)
        return out

    engine.start_episodes, engine.continue_episodes = spy_start, spy_continue
    reqs, trajs = _run(proc, model, True, SamplingParams(max_new_tokens=4, greedy=True), n=1, engine=engine)
    owner = {}
    for sid, *_ in snaps:
        owner.setdefault(sid, len(owner))
    core, _ = backbone(model)
    checked = 0
    for sid, seen, next_pos, keys in snaps:
        t = trajs[owner[sid]]
        seq = t.sequence
        at, segs = seq.prompt_len, []
        for s in t.segments:  # the media of the segments wholly inside the first `seen` tokens
            if at + s.ids.numel() <= seen:
                segs.append(s)
            at += s.ids.numel()
        prefix = SequenceInputs(input_ids=seq.input_ids[:seen], mm_token_type_ids=seq.mm_token_type_ids[:seen],
                                vision=collate_vision([reqs[t.inputs_key].inputs] + segs),
                                prompt_len=seq.prompt_len)
        ids, _, mask = right_padded([prefix], 0, "cpu")
        pos, nxt = prompt_positions(core, [prefix], ids)
        with torch.no_grad():
            out = core(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **prefix.vision)
        assert int(nxt[0]) == next_pos
        assert torch.allclose(output_cache(out).layers[0].keys[0], keys, atol=1e-5)
        checked += 1
    assert checked == len(snaps) == 3 + 2 + 1  # 3 first turns, 2 second turns, 1 third turn


def test_gather_pads_with_zeros_and_rows_round_trip():
    g = torch.Generator().manual_seed(0)
    a = EpisodeKV([torch.randn(2, 3, 4, generator=g)], [torch.randn(2, 3, 4, generator=g)], next_pos=9, seen=3)
    b = EpisodeKV([torch.randn(2, 5, 4, generator=g)], [torch.randn(2, 5, 4, generator=g)], next_pos=7, seen=5)
    ka, kb = a.keys[0].clone(), b.keys[0].clone()
    cache, mask = gather_episodes([a, b], capacity=8)
    assert mask.tolist() == [[True] * 3 + [False] * 2, [True] * 5]
    layer = cache.layers[0]
    assert layer.keys.shape == (2, 2, 5, 4) and layer._k.shape[2] == 8 and a.keys is None
    assert torch.equal(layer.keys[0, :, 3:], torch.zeros(2, 2, 4))  # padding: zeros, never garbage
    rows = episode_rows(cache, torch.tensor([1, 0]), torch.stack([mask[1], mask[0]]))
    assert torch.equal(rows[0][0][0], kb) and torch.equal(rows[1][0][0], ka)


def test_shared_prompt_scoring_equals_whole_sequence_forwards(tiny):
    """The scorer prefills each request's prompt once for its episodes (``score_shared``): the log-probs and the
    gradients equal one forward over each whole sequence (``score_sequences``)."""
    from mmrl.models.sequence_scoring import score_sequences, score_shared

    proc, model = tiny
    reqs, trajs = _run(proc, model, True, SamplingParams(max_new_tokens=4, greedy=True))
    items = [t.scoring_item([r.inputs for r in reqs]) for t in trajs]
    assert len({id(s.prompt) for s, _ in items}) == 3 and {len(t.segments) for t in trajs} == {1, 3, 5}
    core, head = backbone(model)
    out = {}
    for name, scorer in (("shared", score_shared), ("whole", score_sequences)):
        model.zero_grad()
        lps = scorer(core, head, items, 1.0, 0, "cpu")
        sum(lp.sum() for lp in lps).backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        out[name] = (lps, grads)
    model.zero_grad()
    for a, b in zip(out["shared"][0], out["whole"][0]):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-4)
    assert len(out["shared"][1]) == len(out["whole"][1])
    for a, b in zip(out["shared"][1], out["whole"][1]):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-3)


def test_sampling_logprobs_equal_the_scorers_after_sparse_videos(tiny):
    """Decoding continues at the position a forward over the whole sequence gives the next token (the last
    position + 1, not ``max position + 1``, which a sparse video's temporal positions push further), so the sampling
    log-probs are the scorer's, with and without reuse."""
    from mmrl.models.scoring import response_logprobs

    proc, model = tiny
    for reuse in (True, False):
        reqs, trajs = _run(proc, model, reuse, SamplingParams(max_new_tokens=4))
        sparse = [t for t in trajs if any(s.media is not None and s.media.is_video and s.media.fps < 1
                                          for s in t.segments)]
        assert sparse
        with torch.no_grad():
            lps = response_logprobs(model, [t.scoring_item([r.inputs for r in reqs]) for t in trajs], pad_id=0)
        for t, lp in zip(trajs, lps):
            assert torch.allclose(lp[t.loss_mask], t.logprobs[t.loss_mask], atol=1e-4)
