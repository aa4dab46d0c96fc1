"""The vLLM engine without vLLM: the clear error, and everything around ``vllm.LLM`` (prompt building, the
expanded-prompt check, trajectories, weight names, sleep / wake / cache resets, the server transport, multi-turn
contexts with the media of every turn) against a stand-in backend that expands placeholders the way vLLM's Qwen2-VL
processor does."""
from __future__ import annotations

import copy
import importlib.util
import math
import threading

import pytest
import torch

from mmrl.data.schema import Media
from mmrl.errors import ConfigError, MMRLError
from mmrl.models.loading import load_model, load_processor
from mmrl.rollout.agent_loop import Environment, Observation, build_agent_loop
from mmrl.rollout.base import SamplingParams, build_engine
from mmrl.rollout.vllm_platform import installed_build
from support import mixed_requests

HAS_VLLM_GPU = importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()
HAS_VLLM_ENGINE = HAS_VLLM_GPU or installed_build() == "cpu"  # vLLM's CPU build starts without a GPU


def requests_for(proc):
    return mixed_requests(proc, lambda i: 2 + i % 2, lambda i: "What colour is the square?", lambda i: {"seed": 10 + i})


class FakeVLLM:
    """Qwen2-VL placeholder expansion (patch 14, merge 2, temporal patch 2) and canned completions."""

    def __init__(self, proc, extra_tokens: int = 0):
        tok = proc.tokenizer
        self.video, self.image = tok.convert_tokens_to_ids("<|video_pad|>"), tok.convert_tokens_to_ids("<|image_pad|>")
        self.eos = tok.convert_tokens_to_ids("<|im_end|>")
        self.extra, self.calls, self.weights, self.prompts = extra_tokens, [], {}, []

    def _count(self, kind, item):
        if kind == "video":
            frames, meta = item
            t, h, w, _ = frames.shape
            assert meta["fps"] == 2.0 and meta["total_num_frames"] == t
            return math.ceil(t / 2) * (h // 14) * (w // 14) // 4
        h, w, _ = item.shape
        return (h // 14) * (w // 14) // 4

    def generate(self, prompts, sampling):
        self.calls.append(("generate", [s["seed"] for s in sampling]))
        self.prompts.append(prompts)
        outs = []
        for p, s in zip(prompts, sampling):
            mm = p.get("multi_modal_data", {})
            items = {k: list(v) if isinstance(v, list) else [v] for k, v in mm.items()}
            expanded = []
            for t in p["prompt_token_ids"]:  # collapsed: each placeholder stands for the next item of its kind
                kind = {self.video: "video", self.image: "image"}.get(t)
                if kind is None:
                    expanded.append(t)
                elif expanded and expanded[-1] == t:
                    raise AssertionError("placeholder runs must arrive collapsed")
                else:
                    expanded += [t] * (self._count(kind, items[kind].pop(0)) + self.extra)
            assert not any(items.values()), "every medium has its placeholder"
            comps = [{"token_ids": [5, 6, self.eos] if j % 2 == 0 else [7, 8, 9], "logprobs": [-0.5, -0.25, -0.125],
                      "finish_reason": "stop" if j % 2 == 0 else "length"} for j in range(s["n"])]
            outs.append({"prompt_token_ids": expanded, "completions": comps})
        return outs

    def load_weights(self, weights):
        self.calls.append(("load_weights", len(weights)))
        self.weights = {n: t.detach().clone() for n, t in weights}

    def reset_caches(self):
        self.calls.append(("reset_caches",))

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def wake(self, tags):
        self.calls.append(("wake", tags))


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    return load_processor(tiny_model_path), load_model(tiny_model_path)


@pytest.mark.skipif(HAS_VLLM_ENGINE, reason="vLLM can start here (a GPU, or vLLM's CPU build): tests/real_vllm/ runs it")
def test_build_engine_vllm_without_vllm_or_gpu_is_a_config_error(tiny):
    proc, model = tiny
    with pytest.raises(ConfigError, match="rollout.engine"):
        build_engine("vllm", model=model, processor=proc)


def test_prompts_trajectories_and_colocate_cycle(tiny):
    from mmrl.rollout.vllm_engine import VLLMEngine

    proc, model = tiny
    fake = FakeVLLM(proc)
    engine = VLLMEngine(model, proc, backend=fake)
    reqs = requests_for(proc)
    trajs = engine.generate(reqs, SamplingParams(temperature=0.7, max_new_tokens=3))
    assert len(trajs) == 2 + 3 + 2
    assert [(t.sample_id, t.inputs_key, t.pack_id) for t in trajs][:3] == [("0", 0, 0), ("0", 0, 1), ("1", 1, 0)]
    assert [t.truncated for t in trajs[:2]] == [False, True]
    assert torch.equal(trajs[0].logprobs, torch.tensor([-0.5, -0.25, -0.125]))
    assert all(torch.equal(t.prompt_ids, reqs[t.inputs_key].inputs.input_ids) for t in trajs)
    assert fake.calls == [("generate", [10, 11, 12]), ("sleep", 1)]  # per-request seeds; asleep while training
    params = engine.sampling(reqs[0], SamplingParams(temperature=0.7, max_new_tokens=3))
    assert params["logprobs"] == 0 and params["stop_token_ids"] == [engine.eos_id] and params["top_k"] == -1
    assert set(params["logit_bias"]) == set(engine.suppress)
    engine.sync_weights(model)
    engine.generate(reqs[:1], SamplingParams(max_new_tokens=3))
    assert [c[0] for c in fake.calls[2:]] == ["wake", "load_weights", "reset_caches", "wake", "generate", "sleep"]
    assert fake.calls[2] == ("wake", ["weights"])


def test_expanded_prompt_mismatch_names_the_sample(tiny):
    from mmrl.rollout.vllm_engine import VLLMEngine

    proc, model = tiny
    engine = VLLMEngine(model, proc, backend=FakeVLLM(proc, extra_tokens=1))
    with pytest.raises(MMRLError, match="sample '0'.*token counts"):
        engine.generate(requests_for(proc), SamplingParams(max_new_tokens=3))


def test_weights_sent_full_and_lora(tiny_model_path, tiny):
    from mmrl.config import LoraConfig
    from mmrl.rollout.vllm_engine import VLLMEngine

    proc, model = tiny
    fake = FakeVLLM(proc)
    VLLMEngine(model, proc, backend=fake).sync_weights(model)
    # full fine-tuning: every weight under its HF name (a tied lm_head travels as embed_tokens, as vLLM ties it too)
    assert set(fake.weights) == {n for n, _ in model.named_parameters()}
    frozen = load_model(tiny_model_path, freeze_vision=True)
    VLLMEngine(frozen, proc, backend=fake).sync_weights(frozen)
    assert fake.weights and not any("visual" in n for n in fake.weights)
    lora = load_model(tiny_model_path, lora=LoraConfig(enabled=True, r=4, alpha=8))
    with torch.no_grad():
        for n, p in lora.named_parameters():
            if "lora_B" in n:
                p.normal_()
    VLLMEngine(lora, proc, backend=fake).sync_weights(lora)
    merged = copy.deepcopy(lora).merge_and_unload().state_dict()
    assert fake.weights and all(k.endswith((".q_proj.weight", ".k_proj.weight", ".v_proj.weight", ".o_proj.weight",
                                            ".q_proj.bias", ".k_proj.bias", ".v_proj.bias")) for k in fake.weights)
    assert all("language_model" in k for k in fake.weights)
    for k, v in fake.weights.items():
        assert torch.allclose(v, merged[k], atol=1e-6), k
    base = dict(lora.named_parameters())
    assert all(not torch.allclose(fake.weights[k], base[k.replace("model.", "base_model.model.model.", 1)
                                                        .replace(".weight", ".base_layer.weight")])
               for k in fake.weights if k.endswith("q_proj.weight"))  # the merged copy, not the base


class Looks(Environment):
    """Answers the first model turn with an image, the second with a 4-frame video (2 fps), then ends."""

    def reset(self, sample, media):
        self.k = 0

    def step(self, model_text):
        self.k += 1
        g = torch.Generator().manual_seed(self.k)
        if self.k == 1:
            return Observation("Look.", media=Media("obs", image=torch.randint(0, 255, (3, 56, 84), dtype=torch.uint8,
                                                                              generator=g)))
        if self.k == 2:
            return Observation("Clip.", media=Media("obs", frames=torch.randint(0, 255, (4, 3, 56, 56), dtype=torch.uint8,
                                                                               generator=g),
                                                    timestamps=[0, .5, 1, 1.5], fps=2.0))
        return None


def test_multi_turn_episodes_send_every_medium_of_the_context(tiny):
    """The multi_turn loop on the vLLM engine: turn k sends each episode's whole context (collapsed placeholders)
    with the prompt's medium and every observation's image/video in order; the stand-in expands them as vLLM does
    and the engine checks the expansion against the HF processor's token for token; one wake/sleep per step."""
    from mmrl.models.scoring import response_logprobs
    from mmrl.rollout.vllm_engine import VLLMEngine

    proc, model = tiny
    fake = FakeVLLM(proc)
    engine = VLLMEngine(model, proc, backend=fake)
    reqs = requests_for(proc)
    loop = build_agent_loop("multi_turn", processor=proc, env_factory=Looks, max_turns=3)
    trajs = loop.run(engine, reqs, SamplingParams(max_new_tokens=3))
    assert len(trajs) == 7 and [c[0] for c in fake.calls] == ["generate"] * 3 + ["sleep"]
    first, second, third = fake.prompts
    assert len(first) == 3 and len(second) == len(third) == 7  # shared prompts once, then one context per episode
    for t, p2, p3 in zip(trajs, second, third):
        assert [s.kind for s in t.segments] == ["model", "env", "model", "env", "model"]
        assert torch.equal(t.response_ids, torch.cat([s.ids for s in t.segments]))
        assert torch.equal(t.logprobs[t.loss_mask], torch.tensor([-0.5, -0.25, -0.125] * 3))
        prompt_media = reqs[t.inputs_key].inputs.media
        img, vid = t.segments[1].media, t.segments[3].media
        mm3 = p3["multi_modal_data"]
        images = mm3["image"] if isinstance(mm3["image"], list) else [mm3["image"]]
        videos = mm3["video"] if isinstance(mm3["video"], list) else [mm3["video"]]
        want_images = ([prompt_media.image] if not prompt_media.is_video else []) + [img.image]
        want_videos = ([prompt_media.frames] if prompt_media.is_video else []) + [vid.frames]
        assert [torch.equal(torch.from_numpy(a).permute(2, 0, 1), b) for a, b in zip(images, want_images)] == [True] * len(want_images)
        assert [torch.equal(torch.from_numpy(a[0]).permute(0, 3, 1, 2), b) for a, b in zip(videos, want_videos)] == [True] * len(want_videos)
        assert len(images) == len(want_images) and len(videos) == len(want_videos)
        # the third turn's context is the second's plus the second model turn and the video observation
        assert p3["prompt_token_ids"][: len(p2["prompt_token_ids"])] == p2["prompt_token_ids"]
    with torch.no_grad():  # the trainer scores them through their whole sequences
        lps = response_logprobs(model, [t.scoring_item([r.inputs for r in reqs]) for t in trajs], pad_id=0)
    assert all(lp.shape == t.response_ids.shape and torch.isfinite(lp).all() for lp, t in zip(lps, trajs))


def test_multi_turn_expansion_mismatch_names_the_sample(tiny):
    from mmrl.rollout.vllm_engine import VLLMEngine

    proc, model = tiny

    class LateMismatch(FakeVLLM):  # expands the observation's image with one token too many
        def _count(self, kind, item):
            return super()._count(kind, item) + (kind == "image" and item.shape[:2] == (56, 84) and len(self.prompts) > 1)

    engine = VLLMEngine(model, proc, backend=LateMismatch(proc))
    loop = build_agent_loop("multi_turn", processor=proc, env_factory=Looks, max_turns=3)
    with pytest.raises(MMRLError, match="sample '0'.*token counts"):
        loop.run(engine, requests_for(proc), SamplingParams(max_new_tokens=3))


def test_vllm_prompt_refuses_media_without_placeholders(tiny):
    from mmrl.rollout.agent_loop_multi import ContextInputs
    from mmrl.rollout.vllm_inputs import PLACEHOLDERS, vllm_prompt

    proc, _ = tiny
    inputs = requests_for(proc)[2].inputs  # one image
    ph = {proc.tokenizer.convert_tokens_to_ids(t) for t in PLACEHOLDERS}
    ctx = ContextInputs(input_ids=inputs.input_ids, vision=inputs.vision, medias=[inputs.media, inputs.media])
    with pytest.raises(MMRLError, match="1 image/video placeholders but 2 media"):
        vllm_prompt(ctx, ph)


def test_engine_options_size_vllm_for_the_tool_suite():
    from mmrl.config import load_config
    from mmrl.rollout.vllm_engine import engine_options
    from mmrl.tools.suite import load_suite

    suite = "tools/video_seek.yaml"
    cfg = load_config([], ["rollout.agent_loop=multi_turn", f"rollout.tools={suite}", "rollout.engine=vllm"])
    c = load_suite(suite).config
    opts = engine_options(cfg)
    assert opts["max_model_len"] == c.max_total_tokens and opts["max_media_per_prompt"] == c.budget.max_calls + 1
    assert "max_media_per_prompt" not in engine_options(load_config([], ["rollout.engine=vllm"]))


def test_multi_turn_contexts_survive_the_wire_format(tiny):
    """Lists of images and (frames, metadata) videos survive the client's JSON encoding (what the rollout server
    decodes): the same prompts and trajectories as in-process."""
    import json

    from mmrl.rollout.vllm_client import _int_keys, decode, encode
    from mmrl.rollout.vllm_engine import VLLMEngine

    proc, model = tiny
    local = FakeVLLM(proc)
    loop = build_agent_loop("multi_turn", processor=proc, env_factory=Looks, max_turns=3)
    direct = loop.run(VLLMEngine(model, proc, backend=local), requests_for(proc), SamplingParams(max_new_tokens=3))

    class Wire(FakeVLLM):
        def generate(self, prompts, sampling):
            body = decode(json.loads(json.dumps(encode({"prompts": prompts, "sampling": sampling}))))
            return super().generate(body["prompts"], [_int_keys(s) for s in body["sampling"]])

    remote = Wire(proc)
    served = loop.run(VLLMEngine(model, proc, backend=remote), requests_for(proc), SamplingParams(max_new_tokens=3))
    assert [p["prompt_token_ids"] for p in remote.prompts[2]] == [p["prompt_token_ids"] for p in local.prompts[2]]
    for a, b in zip(direct, served):
        assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.sequence.input_ids, b.sequence.input_ids)


def test_a_folder_named_vllm_on_the_path_is_not_vllm(tmp_path, monkeypatch):
    """A test folder called ``vllm`` (an implicit namespace package once ``tests/`` is on sys.path) once made the
    pre-flight believe vLLM's CUDA build was installed."""
    import importlib.util

    (tmp_path / "vllm").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    real = importlib.util.find_spec("vllm")
    if real is not None and real.origin is not None:
        pytest.skip("vLLM is installed here")
    assert importlib.util.find_spec("vllm") is not None and installed_build() is None
