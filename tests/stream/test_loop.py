"""The ``stream`` agent loop on the tiny model: real generation through the environment (masks, records,
invalid text counted), the oracle's episode rendered as a multi-turn SFT trajectory, and the scorer on it."""
import pytest
import torch

from mmrl.models.loading import load_model, load_processor
from mmrl.models.scoring import response_logprobs
from mmrl.rollout.agent_loop import build_agent_loop
from mmrl.rollout.base import build_engine, SamplingParams
from mmrl.stream.block import block_sample
from mmrl.stream.loop import record_of, teacher_trajectory
from mmrl.stream.teacher import teacher_episode, teacher_texts


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    torch.manual_seed(0)
    return load_processor(tiny_model_path), load_model(tiny_model_path)


@pytest.mark.slow
def test_stream_rollouts_on_the_tiny_model(tiny, blocks):
    proc, model = tiny
    cfg, bl = blocks
    samples = [block_sample(bl[2], "s@8")]
    loop = build_agent_loop("stream", processor=proc, config=cfg)
    engine = build_engine("hf", model=model, processor=proc)
    torch.manual_seed(0)
    trajs = loop.run_samples(engine, samples, SamplingParams(max_new_tokens=6), n=2)
    assert len(trajs) == 2
    for t in trajs:
        rec = record_of(t)
        model_segs = [s for s in t.segments if s.kind == "model"]
        assert rec.forward_passes == len(model_segs) == cfg.block_chunks + 1  # random text: no valid recall
        assert len(rec.subturns) == 4 and len(rec.compactions) == 1 and rec.end == "done"
        assert sum(rec.invalid_counts().values()) >= 4  # a random tiny model writes no grammar: counted, no crash
        assert rec.visual_tokens == 4 * (cfg.carry_chunks + 1) + 4 * 3  # 4 tokens per 56x56 chunk of 2 frames
        mask = torch.cat([torch.full((s.ids.numel(),), s.kind == "model") for s in t.segments])
        assert torch.equal(mask, t.loss_mask)
        # the oracle on the same block: at 12 s it recalls the backward question's chunk, then answers
        assert [(s.time, s.action.kind) for s in rec.teacher_actions][-2:] == [(12.0, "recall"), (12.0, "response")]


def test_teacher_trajectory_for_masked_sft(tiny, blocks):
    proc, model = tiny
    cfg, bl = blocks
    sample = block_sample(bl[3], "s@12")
    rec = teacher_episode(sample, cfg)
    texts = teacher_texts(rec)
    assert rec.invalid_counts() == {} and any(s.recall for s in rec.subturns)
    (traj,) = teacher_trajectory(proc, [sample], cfg)
    model = [s for s in traj.segments if s.kind == "model"]
    assert [s.text for s in model] == texts
    tok = proc.tokenizer
    for s, text in zip(model, texts):
        assert tok.decode(s.ids[:-1]) == text and int(s.ids[-1]) == tok.convert_tokens_to_ids("<|im_end|>")
    env_segs = [s for s in traj.segments if s.kind == "env"]
    assert all(not s.trained for s in env_segs) and any(s.media is not None for s in env_segs)
    assert int(traj.loss_mask.sum()) == sum(int(s.ids.numel()) for s in model)
    again = record_of(traj)
    assert again.teacher and teacher_texts(again) == texts  # the replay went through the same environment
    with torch.no_grad():
        lps = response_logprobs(tiny[1], [traj.scoring_item([])], pad_id=0)[0]
    assert lps.shape == traj.response_ids.shape and torch.isfinite(lps[traj.loss_mask]).all()



@pytest.mark.slow
def test_rl_step_with_the_stream_loop_from_config(tiny_model_path, tmp_path):
    """One RL step with rollout.agent_loop=stream on stream samples: the trainer's rollout gives stream episodes
    (records, stream metrics) and the existing scorer and update train on them."""
    from mmrl.config import RewardConfig, load_config
    from mmrl.rewards import REWARDS
    from mmrl.stream.dataset import make_stream_dataset
    from mmrl.train.rl_trainer import RLTrainer
    from mmrl.train.update import policy_update
    from support import small_overrides

    world = tmp_path / "world"
    make_stream_dataset(str(world), 1, 1, seed=0, duration=12)
    if "test_stream_valid" not in REWARDS:  # a random-init model never writes the grammar: vary within groups
        REWARDS.register("test_stream_valid")(lambda ctx: [
            float((c.trajectory.response_ids[c.trajectory.loss_mask] % 2 == 0).float().mean())
            - sum(record_of(c.trajectory).invalid_counts().values()) for c in ctx])
    cfg = load_config(None, small_overrides(world, tmp_path / "rl", tiny_model_path)
                      + ["rollout.agent_loop=stream", "rollout.n=2", "train.prompts_per_step=2",
                         "rollout.max_new_tokens=4"])
    cfg.rewards = [RewardConfig("test_stream_valid", 1.0)]
    tr = RLTrainer(cfg, quiet=True)
    m = tr.train_step()
    assert m["stream/decisions_per_episode"] == 4 and m["stream/invalid_frac"] == 1.0 and m["adv/std"] > 0
    si, trajs = tr.rollout(tr.stream.next(2))
    assert all(record_of(t).subturns and t.sequence is not None for t in trajs)
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    policy_update(tr.backend, trajs, [r.inputs for r in si.requests], torch.linspace(-1, 1, len(trajs)),
                  cfg.algorithm, cfg.train.micro_batch)
    assert any(not torch.equal(before[k], v) for k, v in tr.model.state_dict().items())


def test_a_block_at_the_turn_cap_still_compacts(tiny_model_path, blocks):
    """Two valid recalls at every chunk (the most turns a block can take): the compaction still reaches the
    environment, and the trajectory's model turns are exactly the block's 13."""
    from mmrl.stream.loop import ReplayEngine, StreamLoop

    proc = load_processor(tiny_model_path)
    cfg, bl = blocks
    script = []
    for k in range(4):
        script += [f"<think>a</think><action>recall({2 * k}, {2 * k})</action>",
                   f"<think>b</think><action>recall({2 * k + 1}, {2 * k + 1})</action>", "<think>c</think><action>silence</action>"]
    script.append("<memory>\n[0-1] kept\n</memory>")
    loop = StreamLoop(proc, cfg, with_teacher=False)
    (t,) = loop.run_samples(ReplayEngine(proc, {"s@8": script}), [block_sample(bl[2], "s@8")], SamplingParams())
    rec = record_of(t)
    assert cfg.max_turns == 13 and rec.forward_passes == 13 and rec.end == "done"
    assert [c for s in rec.subturns if s.recall for c in s.recall.chunks] == list(range(8))
    assert rec.compactions[0].post[0].note == "kept" and rec.invalid_counts() == {}


def test_teacher_trajectory_in_each_family(family_model_path, blocks):
    """Qwen2-VL, Qwen2.5-VL, Qwen3-VL: the stream's frames decoded at the processor's factor, the replayed oracle
    episode encoded by each processor and scored."""
    from mmrl.media.inputs import resize_factor

    proc, model = load_processor(family_model_path), load_model(family_model_path)
    cfg, bl = blocks
    (traj,) = teacher_trajectory(proc, [block_sample(bl[3], "s@12")], cfg)
    f = resize_factor(proc)
    media = [s.media for s in traj.segments if s.kind == "env" and s.media is not None]
    assert media and all(m.frames.shape[-1] % f == 0 and m.frames.shape[-2] % f == 0 for m in media)
    with torch.no_grad():
        lps = response_logprobs(model, [traj.scoring_item([])], pad_id=0)[0]
    assert torch.isfinite(lps[traj.loss_mask]).all()
