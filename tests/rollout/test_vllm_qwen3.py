"""vLLM prompts for Qwen3-VL without vLLM: a stand-in that expands each video placeholder the way vLLM 0.32's Qwen3-VL
processor does (the bare ``<|video_pad|>`` when the processor class overrides ``replace_video_token``, transformers
>= 5.10, else ``<|vision_start|><|video_pad|><|vision_end|>``; the real engine is checked in tests/real_vllm/) (per temporal grid row: ``tokenizer.encode(f"<{t:.1f} seconds>")``, then
``vision_start``, the frame's pads, ``vision_end``; ``t`` from the item's metadata ``frames_indices`` / ``fps``,
padded to pairs and averaged per pair) and each ``<|image_pad|>`` to its count; the engine checks the expansion
against the HF processor's tokens, single- and multi-turn, and a block that is not laid out so is refused."""
from __future__ import annotations

import pytest
import torch
from transformers.processing_utils import ProcessorMixin

from mmrl.data.schema import Media
from mmrl.errors import MMRLError
from mmrl.models.loading import load_model, load_processor
from mmrl.rollout.agent_loop import Environment, Observation, build_agent_loop
from mmrl.rollout.base import SamplingParams
from mmrl.rollout.vllm_inputs import PLACEHOLDERS, VideoLayout, video_timestamps, vllm_prompt
from support import mixed_requests


class FakeQwen3VLLM:
    """vLLM's Qwen3-VL prompt replacement (patch 16, merge 2, temporal patch 2) with canned completions."""

    def __init__(self, proc):
        self.tok = proc.tokenizer
        ids = self.tok.convert_tokens_to_ids
        self.vs, self.vp, self.ve, self.ip = (ids(t) for t in ("<|vision_start|>", "<|video_pad|>", "<|vision_end|>",
                                                                 "<|image_pad|>"))
        self.eos, self.prompts = ids("<|im_end|>"), []
        # vLLM's Qwen3VLMultiModalProcessor._expands_only_video_token, asked of the processor's class
        own = getattr(type(proc), "replace_video_token", None)
        self.target = [self.vp] if own is not None and own is not getattr(ProcessorMixin, "replace_video_token", None) \
            else [self.vs, self.vp, self.ve]

    def _video(self, item):
        frames, meta = item
        idx = list(meta["frames_indices"])
        idx += [idx[-1]] * (len(idx) % 2)
        ts = [i / meta["fps"] for i in idx]
        out = []
        per = (frames.shape[1] // 32) * (frames.shape[2] // 32)
        for k in range(0, len(ts), 2):
            out += self.tok.encode(f"<{(ts[k] + ts[k + 1]) / 2:.1f} seconds>", add_special_tokens=False)
            out += [self.vs] + [self.vp] * per + [self.ve]
        return out

    def generate(self, prompts, sampling):
        self.prompts.append(prompts)
        outs = []
        for p, s in zip(prompts, sampling):
            mm = p.get("multi_modal_data", {})
            items = {k: list(v) if isinstance(v, list) else [v] for k, v in mm.items()}
            ids, expanded, i = p["prompt_token_ids"], [], 0
            while i < len(ids):
                if ids[i : i + len(self.target)] == self.target:
                    expanded += self._video(items["video"].pop(0))
                    i += len(self.target)
                    continue
                assert ids[i] != self.vp, "a video arrives as its collapsed placeholder"
                if ids[i] == self.ip:
                    h, w, _ = items["image"].pop(0).shape
                    expanded += [self.ip] * ((h // 32) * (w // 32))
                else:
                    expanded.append(ids[i])
                i += 1
            assert not any(items.values()), "every medium has its placeholder"
            comps = [{"token_ids": [5, 6, self.eos], "logprobs": [-0.5, -0.25, -0.125], "finish_reason": "stop"}
                     for _ in range(s["n"])]
            outs.append({"prompt_token_ids": expanded, "completions": comps})
        return outs

    def sleep(self, level):
        pass

    def wake(self, tags):
        pass


@pytest.fixture(scope="module")
def qwen3(mmrl_cache):
    return load_processor("tiny-qwen3-vl"), load_model("tiny-qwen3-vl")


def test_timestamps_are_pair_means_from_the_first_frame():
    assert video_timestamps(4, 2.0) == [0.25, 1.25]
    assert video_timestamps(5, 0.5) == [1.0, 5.0, 8.0]  # odd count: the last frame repeated
    assert video_timestamps(16, 16 / 60) == pytest.approx([1.875 + 7.5 * k for k in range(8)])


def test_single_turn_prompts_expand_to_the_processor_tokens(qwen3):
    from mmrl.rollout.vllm_engine import VLLMEngine

    proc, model = qwen3
    reqs = mixed_requests(proc, lambda i: 2, lambda i: "What colour is the square?")
    fake = FakeQwen3VLLM(proc)
    engine = VLLMEngine(model, proc, backend=fake)
    assert engine.layout.timestamped and engine.layout.factor == 32
    trajs = engine.generate(reqs, SamplingParams(max_new_tokens=3))  # raises if any expansion differs
    assert len(trajs) == 6
    vs, vp, ve = (proc.tokenizer.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|video_pad|>", "<|vision_end|>"))
    sent = fake.prompts[0][0]["prompt_token_ids"]
    i = sent.index(vp)
    assert engine.layout.bare_pad  # transformers >= 5.10 (the supported range): the bare pad stands for the layout
    assert sent.count(vp) == 1 and sent[i - 1] != vs and sent[i + 1] != ve  # no extra vision_start/end for vLLM to keep
    assert "seconds" not in proc.tokenizer.decode(sent)  # the timestamps are vLLM's to add
    assert len(reqs[0].inputs.input_ids) - len(sent) == 2 * 4 - 1 + 2 * len(proc.tokenizer.encode("<0.2 seconds>")) + 4


class Clips(Environment):
    """Answers the first model turn with a 6-frame video at 0.5 fps (3 pairs), the second with an image."""

    def reset(self, sample, media):
        self.k = 0

    def step(self, model_text):
        self.k += 1
        g = torch.Generator().manual_seed(self.k)
        if self.k == 1:
            return Observation("Clip.", media=Media("obs", frames=torch.randint(0, 255, (6, 3, 64, 96), dtype=torch.uint8,
                                                                               generator=g),
                                                    timestamps=[2.0 * i for i in range(6)], fps=0.5))
        if self.k == 2:
            return Observation("Look.", media=Media("obs", image=torch.randint(0, 255, (3, 64, 64), dtype=torch.uint8,
                                                                              generator=g)))
        return None


def test_multi_turn_contexts_expand_to_the_processor_tokens(qwen3):
    from mmrl.rollout.vllm_engine import VLLMEngine

    proc, model = qwen3
    fake = FakeQwen3VLLM(proc)
    engine = VLLMEngine(model, proc, backend=fake)
    reqs = mixed_requests(proc, lambda i: 1, lambda i: "What colour is the square?")
    loop = build_agent_loop("multi_turn", processor=proc, env_factory=Clips, max_turns=3)
    trajs = loop.run(engine, reqs, SamplingParams(max_new_tokens=3))  # every turn's expansion checked
    assert len(fake.prompts) == 3 and [s.kind for s in trajs[0].segments] == ["model", "env", "model", "env", "model"]
    third = fake.prompts[2][0]
    videos = third["multi_modal_data"]["video"]
    assert len(videos) == 2 and videos[1][1]["fps"] == 0.5  # the prompt's clip and the observation's, in order
    text = proc.tokenizer.decode(trajs[0].sequence.input_ids)
    assert "<1.0 seconds><|vision_start|>" in text and "<9.0 seconds><|vision_start|>" in text


def test_a_block_not_laid_out_as_qwen3_is_refused(qwen3):
    proc, _ = qwen3
    inputs = mixed_requests(proc, lambda i: 1, lambda i: "Q?")[0].inputs
    ph = {proc.tokenizer.convert_tokens_to_ids(t) for t in PLACEHOLDERS}
    layout = VideoLayout.of(proc)
    assert vllm_prompt(inputs, ph, layout)["prompt_token_ids"].count(proc.tokenizer.convert_tokens_to_ids("<|video_pad|>")) == 1
    ids = inputs.input_ids.clone()
    first_ts = proc.tokenizer.encode("<0.2 seconds>")
    at = next(i for i in range(len(ids)) if ids[i : i + len(first_ts)].tolist() == first_ts)
    ids[at + 1] = proc.tokenizer.encode("7")[0]  # another time than the frames' metadata says
    bad = type(inputs)(input_ids=ids, mm_token_type_ids=inputs.mm_token_type_ids, vision=inputs.vision, media=inputs.media)
    with pytest.raises(MMRLError, match="video 0 .*timestamped"):
        vllm_prompt(bad, ph, layout)
    with pytest.raises(MMRLError, match="2 image/video placeholders but 1 media"):  # one pad per run: per pair
        vllm_prompt(inputs, ph)
