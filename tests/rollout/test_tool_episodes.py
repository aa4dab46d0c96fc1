"""Tool episodes end to end on the tiny model: the tool list in the system turn, seek and zoom results as
<tool_response> turns carrying video and an image, every call in ``turns``, masks, and full-sequence scores equal
to the per-turn sampling log-probs. A stand-in engine writes the model's turns (a random tiny model never calls a
tool); everything else is the real loop, processor, tools and scorer. Then one RL step from a config."""
import torch

from mmrl.config import load_config
from mmrl.data.annotations import load_samples
from mmrl.data.schema import Trajectory
from mmrl.media.inputs import build_prompt_inputs
from mmrl.media.decode import load_media
from mmrl.media.prompts import build_messages
from mmrl.models.loading import load_model, load_processor
from mmrl.models.scoring import response_logprobs
from mmrl.rollout.agent_loop_tools import tool_loop
from mmrl.rollout.base import RolloutEngine, RolloutRequest, SamplingParams
from mmrl.tools import load_suite
from support import REPO, small_overrides, without_measurements

SUITE = str(REPO / "tools" / "video_seek.yaml")


class ScriptedEngine(RolloutEngine):
    """Writes turn k of every episode as ``script[k]`` + ``<|im_end|>``, with its log-probs under the model."""

    supports_sequences = True

    def __init__(self, model, tokenizer, script):
        self.model, self.tok, self.script, self.turn, self.prompts = model, tokenizer, script, 0, []

    def generate(self, requests, params):
        ids = torch.tensor(self.tok(self.script[self.turn])["input_ids"] + [self.tok.convert_tokens_to_ids("<|im_end|>")])
        self.turn += 1
        out = []
        for k, r in enumerate(requests):
            self.prompts.append(r.inputs)
            with torch.no_grad():
                lps = response_logprobs(self.model, [(r.inputs, ids)] * r.n, pad_id=0)
            for j in range(r.n):
                out.append(Trajectory(r.sample_id, r.group_id, r.view, r.role, r.inputs.input_ids, ids.clone(), lps[j],
                                      torch.ones(ids.numel(), dtype=torch.bool), self.tok.decode(ids, skip_special_tokens=True),
                                      inputs_key=k, pack_id=j))
        return out


def _request(proc, world, n: int) -> RolloutRequest:
    """The first training sample's prompt over its own video, as the step builds it (at the processor's factor)."""
    from mmrl.media.decode import MediaBudget
    from mmrl.media.inputs import resize_factor

    sample = load_samples(str(world / "train.json"))[0][0]
    media = load_media(sample, MediaBudget(factor=resize_factor(proc)))
    return RolloutRequest(inputs=build_prompt_inputs(proc, build_messages(sample.question, sample.candidates, media), media),
                          n=n, sample_id=sample.id, sample=sample)


def test_seek_then_zoom_then_answer(video_world, tiny_model_path, tmp_path):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    req = _request(proc, video_world, n=2)
    script = ['<tool_call>{"name": "video_seek", "arguments": {"start": 0.5, "end": 1.5, "nframes": 4}}</tool_call>',
              '<tool_call>{"name": "zoom", "arguments": {"time": 1.0, "box": [0.0, 0.0, 0.5, 0.5]}}</tool_call>',
              "(A)"]
    suite = load_suite(SUITE)
    suite.config.max_turns = 4  # the third turn answers: the environment ends the episode
    engine = ScriptedEngine(model, proc.tokenizer, script)
    trajs = tool_loop(proc, suite).run(engine, [req], SamplingParams(max_new_tokens=64))
    tok = proc.tokenizer
    assert len(trajs) == 2
    prompt_text = tok.decode(engine.prompts[0].input_ids)
    assert "# Tools" in prompt_text and '"name": "video_seek"' in prompt_text and '"name": "zoom"' in prompt_text
    assert engine.prompts[0].num_tokens > req.inputs.num_tokens  # the step's prompt plus the tool list
    video_pad, image_pad = tok.convert_tokens_to_ids("<|video_pad|>"), tok.convert_tokens_to_ids("<|image_pad|>")
    for t in trajs:
        kinds = [s.kind for s in t.segments]
        assert kinds == ["model", "env", "model", "env", "model"] and t.text == "(A)"
        seek, zoom = t.segments[1], t.segments[3]
        assert tok.decode(seek.ids).startswith("\n<|im_start|>user\n<tool_response>\n<|vision_start|><|video_pad|>")
        assert int((seek.ids == video_pad).sum()) == int(seek.vision["video_grid_thw"].prod()) // 4 > 0
        assert int((zoom.ids == image_pad).sum()) == int(zoom.vision["image_grid_thw"].prod()) // 4 > 0
        calls = [turn for turn in t.turns if "tool" in turn]
        assert [c["tool"] for c in calls] == ["video_seek", "zoom"] and all(c["valid"] for c in calls)
        assert calls[0]["arguments"] == {"start": 0.5, "end": 1.5, "nframes": 4} and calls[0]["frames"] == 4
        assert all(c["latency_s"] >= 0 and c["call_media_tokens"] == c["media_tokens"] > 0 for c in calls)
        assert t.turns[-1]["end"] == "done"
        assert torch.equal(t.loss_mask, torch.cat([torch.full((s.ids.numel(),), s.trained) for s in t.segments]))
        with torch.no_grad():
            (lp,) = response_logprobs(model, [t.scoring_item([req.inputs])], pad_id=0)
        assert torch.allclose(lp[t.loss_mask], t.logprobs[t.loss_mask], atol=1e-4)
    from mmrl.tools.preview import episode_sheet, first_turn_with_media

    sheet = episode_sheet(trajs[0], req.sample, req.inputs.media, tmp_path / "episode.png", cell=32)
    assert (tmp_path / "episode.png").exists() and first_turn_with_media(trajs[0]) == 0
    assert sheet.height > 3 * 32  # the prompt row, the seek's frames and the zoom's crop
    assert trajs[0].segments[1].media.frames.shape[0] == 4 and trajs[0].segments[3].media.image is not None


def test_seek_and_zoom_in_each_family(video_world, family_model_path):
    """Qwen2-VL, Qwen2.5-VL, Qwen3-VL: tool results resized to the processor's factor, their visual tokens counted
    against the budget as the processor inserts them, the tool list in a system turn (Qwen3-VL's template has no
    default one), and full-sequence scores equal to the per-turn sampling log-probs."""
    from mmrl.media.inputs import resize_factor

    proc, model = load_processor(family_model_path), load_model(family_model_path)
    f, req = resize_factor(proc), _request(proc, video_world, n=1)
    script = ['<tool_call>{"name": "video_seek", "arguments": {"start": 0.5, "end": 1.5, "nframes": 4}}</tool_call>',
              '<tool_call>{"name": "zoom", "arguments": {"time": 1.0, "box": [0.0, 0.0, 0.5, 0.5]}}</tool_call>', "(A)"]
    suite = load_suite(SUITE)
    suite.config.max_turns = 4
    engine = ScriptedEngine(model, proc.tokenizer, script)
    (t,) = tool_loop(proc, suite).run(engine, [req], SamplingParams(max_new_tokens=64))
    assert proc.tokenizer.decode(engine.prompts[0].input_ids).startswith("<|im_start|>system\n")
    assert [s.kind for s in t.segments] == ["model", "env", "model", "env", "model"]
    seek, zoom = t.segments[1].media, t.segments[3].media
    assert all(x % f == 0 for x in (*seek.frames.shape[-2:], *zoom.image.shape[-2:]))
    calls = [turn for turn in t.turns if "tool" in turn]
    assert all(c["valid"] for c in calls) and [c["media_tokens"] for c in calls] == [
        int((t.segments[1].ids == proc.tokenizer.convert_tokens_to_ids("<|video_pad|>")).sum()),
        int((t.segments[3].ids == proc.tokenizer.convert_tokens_to_ids("<|image_pad|>")).sum())]
    with torch.no_grad():
        (lp,) = response_logprobs(model, [t.scoring_item([req.inputs])], pad_id=0)
    assert torch.allclose(lp[t.loss_mask], t.logprobs[t.loss_mask], atol=1e-4)


def test_an_invalid_call_is_answered_with_its_error(video_world, tiny_model_path):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    req = _request(proc, video_world, n=1)
    engine = ScriptedEngine(model, proc.tokenizer, ['<tool_call>{"name": "video_seek", "arguments": {"path": "/etc/passwd"}}</tool_call>', "B"])
    (t,) = tool_loop(proc, load_suite(SUITE)).run(engine, [req], SamplingParams(max_new_tokens=64))
    call = t.turns[0]
    assert call["valid"] is False and call["reason"] == "invalid_arguments"
    assert "error (invalid_arguments)" in proc.tokenizer.decode(t.segments[1].ids) and "vision" not in t.segments[1].vision


def test_rl_step_with_tools_from_config(video_world, tiny_model_path, tmp_path):
    from mmrl.train.rl_trainer import RLTrainer
    from mmrl.train.update import policy_update

    cfg = load_config(None, small_overrides(video_world, tmp_path / "rl", tiny_model_path)
                      + ["rollout.agent_loop=multi_turn", f"rollout.tools={SUITE}"])
    tr = RLTrainer(cfg, quiet=True)
    m = tr.train_step()
    assert "tools/invalid_frac" in m and "tools/invalid/over_budget" in m and m["tools/turns_per_episode"] >= 1
    # tool and observation tokens (sampler log-prob 0) are masked out of the mismatch and the correction weights
    assert m["mismatch/tokens"] > 0 and m["mismatch/max_abs_diff"] < 1e-4 and m["rollout_corr/weight_min"] > 0.99
    # the trainer's own rollout gives tool episodes; an update on them with non-zero advantages moves the weights
    si, trajs = tr.rollout(tr.stream.next(3))
    assert trajs and all(t.sequence is not None and t.segments for t in trajs)
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    policy_update(tr.backend, trajs, [r.inputs for r in si.requests], torch.linspace(-1, 1, len(trajs)),
                  cfg.algorithm, cfg.train.micro_batch)
    assert any(not torch.equal(before[k], v) for k, v in tr.model.state_dict().items())


def test_config_requires_tools_with_multi_turn():
    import pytest

    from mmrl.errors import ConfigError
    from mmrl.rollout.agent_loop_tools import check_rollout_config

    with pytest.raises(ConfigError, match="rollout.tools"):
        load_config([], ["rollout.agent_loop=multi_turn"])
    with pytest.raises(ConfigError, match="needs rollout.agent_loop=multi_turn"):
        load_config([], [f"rollout.tools={SUITE}"])
    with pytest.raises(ConfigError, match="no_such.yaml"):
        check_rollout_config(load_config([], ["rollout.agent_loop=multi_turn", "rollout.tools=no_such.yaml"]).rollout)
    from mmrl.train.plan import describe_plan

    lines = describe_plan(load_config([], ["rollout.agent_loop=multi_turn", f"rollout.tools={SUITE}"]))
    assert f"rollout loop: multi_turn with {SUITE} (video_seek, zoom): <= 3 turns, <= 2 calls" in "\n".join(lines)
    for bad in ("train.backend=deepspeed", "rollout.seed_per_group=true"):
        with pytest.raises(ConfigError, match="train.backend=torch"):
            load_config([], ["rollout.agent_loop=multi_turn", f"rollout.tools={SUITE}", bad])
    load_config([], ["rollout.agent_loop=multi_turn", f"rollout.tools={SUITE}", "rollout.engine=vllm"])  # vLLM: allowed


def test_resume_in_a_multi_turn_run_matches_a_straight_run(video_world, tiny_model_path, tmp_path):
    """2 + 2 steps with a resume equal 4 straight steps (metrics and weights) under rollout.agent_loop=multi_turn."""
    import json

    from mmrl.config import RewardConfig
    from mmrl.rewards import REWARDS
    from mmrl.train.rl_trainer import RLTrainer

    if "test_even_tokens_mt" not in REWARDS:  # a random-init model never answers: a reward that varies in groups
        REWARDS.register("test_even_tokens_mt")(
            lambda ctx: [float((c.trajectory.response_ids[c.trajectory.loss_mask] % 2 == 0).float().mean()) for c in ctx])

    def cfg(out, steps):
        c = load_config(None, small_overrides(video_world, out, tiny_model_path)
                        + ["rollout.agent_loop=multi_turn", f"rollout.tools={SUITE}", f"train.steps={steps}"])
        c.rewards = [RewardConfig("test_even_tokens_mt", 1.0)]
        return c

    straight = RLTrainer(cfg(tmp_path / "a", 4), quiet=True).run()
    RLTrainer(cfg(tmp_path / "b", 2), quiet=True).run()
    with open(tmp_path / "b" / "trajectories.jsonl", "a") as f:  # an episode of a step past the checkpoint
        f.write(json.dumps({"step": 3, "id": "lost"}) + "\n")
    RLTrainer(cfg(tmp_path / "b", 4), quiet=True).run(resume=True)
    # the saved episodes (mmrl rectify's input) match too: the resume dropped the stale line first
    saved = (tmp_path / "b" / "trajectories.jsonl").read_text()
    assert saved == (tmp_path / "a" / "trajectories.jsonl").read_text() and '"lost"' not in saved
    assert sorted({json.loads(x)["step"] for x in saved.splitlines()}) == [1, 2, 3, 4]
    rows = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    strip = without_measurements
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and strip(rows) == strip(straight)
    assert any(r.get("adv/std", 0) > 0 for r in straight) and all("tools/invalid_frac" in r for r in straight)
    a = torch.load(tmp_path / "a" / "checkpoints" / "step_000004" / "model.pt")
    b = torch.load(tmp_path / "b" / "checkpoints" / "step_000004" / "model.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_re_scoring_algorithms_are_refused_with_multi_turn():
    import pytest

    from mmrl.algos.grpo import GRPO
    from mmrl.algos.spec import ALGORITHMS, Intervention, Needs, register_algorithm
    from mmrl.errors import ConfigError

    if "test_mt_rescore" not in ALGORITHMS:
        @register_algorithm("test_mt_rescore")
        class _Rescore(GRPO):
            def needs(self):
                return Needs(rescore={"gray": Intervention("gray", {"value": 128})})

    with pytest.raises(ConfigError, match="algorithm.name.*re-scores"):
        load_config([], ["rollout.agent_loop=multi_turn", f"rollout.tools={SUITE}",
                         "algorithm.name=test_mt_rescore"])
    load_config([], ["algorithm.name=test_mt_rescore"])  # single-turn: fine
