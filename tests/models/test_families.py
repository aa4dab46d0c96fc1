"""Each model family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL; ``family_model_path``) through the model-facing paths:
loading by ``model_type``, the resize factor read from the processor, the video token layout, the scorer against a
plain forward in every layout (log-probs and gradients), and one multi-turn trajectory with a video observation
scored whole against a plain forward (given the trained M-RoPE numbering, ``support.trained_position_ids``),
and one RL step. Sampler vs scorer runs per family in
``tests/rollout/test_parity.py`` and ``tests/core/test_engine_scorer.py``."""
from pathlib import Path

import pytest
import torch

from mmrl.data.schema import ImageRef, Media
from mmrl.errors import ConfigError, DataError
from mmrl.media.decode import MediaBudget, decode_image
from mmrl.media.inputs import build_prompt_inputs, resize_factor
from mmrl.media.prompts import build_messages
from mmrl.models.loading import load_model, load_processor, model_class_for, model_type
from mmrl.models.scoring import response_logprobs
from support import mixed_requests, trained_position_ids, policy_log_softmax

EXPECTED = {"qwen2_vl": ("Qwen2VLForConditionalGeneration", 28), "qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration", 28),
            "qwen3_vl": ("Qwen3VLForConditionalGeneration", 32)}


def _video(f: int, seed: int, frames: int = 4, fps: float = 2.0) -> Media:
    g = torch.Generator().manual_seed(seed)
    return Media("v", frames=torch.randint(0, 255, (frames, 3, 2 * f, 2 * f), dtype=torch.uint8, generator=g),
                 timestamps=[i / fps for i in range(frames)], fps=fps)


def test_loading_factor_and_video_layout(family_model_path, tmp_path):
    family = model_type(family_model_path)
    proc, model = load_processor(family_model_path), load_model(family_model_path)
    name, f = EXPECTED[family]
    assert type(model).__name__ == name and resize_factor(proc) == f
    # decoding resizes to multiples of the factor (a 100 x 70 image within 64**2 pixels)
    from PIL import Image

    Image.new("RGB", (100, 70), (200, 10, 10)).save(tmp_path / "im.png")
    img = decode_image(ImageRef(str(tmp_path / "im.png")), "s", MediaBudget(max_pixels=64 * 64, factor=f)).image
    assert img.shape[-2] % f == 0 and img.shape[-1] % f == 0
    # frames of the other family's factor are refused with the sizes and the factor named, before the processor
    wrong = 28 if f == 32 else 32
    m = _video(wrong, 0)
    with pytest.raises(DataError, match=f"multiples of {f}"):
        build_prompt_inputs(proc, build_messages("Q?", ["a", "b"], m), m, sample_id="s")
    # 8 frames at 0.5 fps, 2f x 2f: 4 frame pairs of one merged 2 x 2 grid each
    m = _video(f, 1, frames=8, fps=0.5)
    p = build_prompt_inputs(proc, build_messages("Q?", ["a", "b"], m), m)
    text = proc.tokenizer.decode(p.input_ids)
    assert p.vision["video_grid_thw"].tolist() == [[4, 4, 4]] and int((p.mm_token_type_ids == 2).sum()) == 16
    pads = "<|video_pad|>" * 4
    if family == "qwen3_vl":  # per pair: its mean time, then its own vision_start/end; no outer pair (vLLM's layout)
        block = "".join(f"<{t:.1f} seconds><|vision_start|>{pads}<|vision_end|>" for t in (1.0, 5.0, 9.0, 13.0))
        assert "user\n" + block + "Q?" in text and "<|im_start|>system" not in text
    else:
        assert "<|vision_start|>" + pads * 4 + "<|vision_end|>Q?" in text and "<|im_start|>system" in text


def test_unknown_model_type_is_a_config_error(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llava"}')
    with pytest.raises(ConfigError, match="llava.*qwen3_vl"):
        load_model(str(tmp_path))
    assert model_class_for("qwen3_vl_moe").__name__ == "Qwen3VLMoeForConditionalGeneration"


def _plain_logprobs(model, inputs, resp):
    ids = torch.cat([inputs.input_ids, resp])[None]
    mm = torch.cat([inputs.mm_token_type_ids, torch.zeros_like(resp)])[None]
    logits = model(input_ids=ids, mm_token_type_ids=mm, position_ids=trained_position_ids(model, inputs, resp),
                   **inputs.vision).logits[0]
    P = inputs.num_tokens
    return policy_log_softmax(logits[P - 1 : P - 1 + resp.numel()].float(), model).gather(-1, resp[:, None]).squeeze(-1)


def test_scorer_equals_a_plain_forward_in_every_layout(family_model_path):
    proc, model = load_processor(family_model_path), load_model(family_model_path)
    model.train()
    g = torch.Generator().manual_seed(0)
    reqs = mixed_requests(proc, lambda i: 3, lambda i: "What colour is the square?" + " x" * i)
    items = [(r.inputs, torch.randint(0, 500, (L,), generator=g)) for r in reqs for L in (1, 9, 4)]
    ref = [_plain_logprobs(model, p, r) for p, r in items]
    torch.cat(ref).sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert any("visual" in n for n in ref_grads)
    for strategy in ("packed", "expand", "full"):
        model.zero_grad(set_to_none=True)
        ours = response_logprobs(model, items, micro_batch=5, pad_id=proc.tokenizer.pad_token_id, strategy=strategy)
        for a, b in zip(ours, ref):
            assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5), (strategy, (a - b).abs().max())
        torch.cat(ours).sum().backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        assert grads.keys() == ref_grads.keys(), strategy
        for n, gr in grads.items():
            assert torch.allclose(gr, ref_grads[n], atol=2e-5, rtol=1e-4), (strategy, n, (gr - ref_grads[n]).abs().max())


def test_multi_turn_with_a_video_observation_scores_like_a_plain_forward(family_model_path):
    from mmrl.rollout.agent_loop import Environment, Observation, build_agent_loop
    from mmrl.rollout.base import SamplingParams, build_engine

    proc, model = load_processor(family_model_path), load_model(family_model_path)
    f = resize_factor(proc)

    class Env(Environment):
        def __init__(self):
            self.left = [Observation("Clip.", media=_video(f, 5, fps=0.5))]

        def reset(self, sample, media):
            return None

        def step(self, text):
            return self.left.pop(0) if self.left else None

    loop = build_agent_loop("multi_turn", processor=proc, env_factory=Env, max_turns=2)
    reqs = mixed_requests(proc, lambda i: 1, lambda i: "What colour is the square?")[:2]
    torch.manual_seed(0)
    trajs = loop.run(build_engine("hf", model=model, processor=proc), reqs, SamplingParams(max_new_tokens=3))
    items = [t.scoring_item([r.inputs for r in reqs]) for t in trajs]
    with torch.no_grad():
        lps = response_logprobs(model, items, pad_id=proc.tokenizer.pad_token_id)
    for t, lp in zip(trajs, lps):
        seq = t.sequence
        assert int((seq.mm_token_type_ids == 2).sum()) == 2 * 8  # the prompt's video and the observation's: 2 pairs x 2 x 2
        with torch.no_grad():
            logits = model(input_ids=seq.input_ids[None], mm_token_type_ids=seq.mm_token_type_ids[None],
                           position_ids=trained_position_ids(model, seq), **seq.vision).logits[0].float()
        P = seq.prompt_len
        ref = policy_log_softmax(logits[P - 1 : -1], model).gather(-1, seq.input_ids[P:, None]).squeeze(-1)
        m = t.loss_mask  # only model tokens go through the LM head; observations get 0, as the sampler records them
        assert torch.allclose(lp[m], ref[m], atol=1e-4), (lp[m] - ref[m]).abs().max()
        assert (~m).any() and torch.equal(lp[~m], torch.zeros(int((~m).sum())))
        assert torch.allclose(lp, t.logprobs, atol=1e-4)  # sampler = scorer


def test_tiny_names_build_each_family_once(mmrl_cache):
    from mmrl.models.loading import resolve_model_path
    from mmrl.models.tiny import TINY_NAMES

    assert TINY_NAMES["tiny"] == "qwen2_5_vl"
    path = resolve_model_path("tiny-qwen3-vl")
    assert Path(path).name == "tiny-qwen3_vl-v1" and model_type(path) == "qwen3_vl"
    assert resolve_model_path("tiny-qwen3-vl") == path


def test_one_rl_step(video_world, family_model_path, tmp_path):
    """One GRPO step from the data files: decode at the processor's factor, rollout, scoring, update."""
    from mmrl.train.rl_trainer import RLTrainer
    from support import small_overrides, varying_reward_cfg

    cfg = varying_reward_cfg(small_overrides(video_world, tmp_path / "f", family_model_path) + ["train.steps=1"])
    tr = RLTrainer(cfg, quiet=True)
    before = {k: v.detach().clone() for k, v in tr.model.state_dict().items()}
    tr.step = 0
    assert tr.train_step()["time/rollout"] > 0
    after = tr.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before if "language_model" in k)


def test_qwen3_vl_moe_scores_and_samples_like_a_plain_forward(mmrl_cache):
    """Qwen3-VL-MoE (``tiny-qwen3-vl-moe``: 4 experts, 2 per token): the scorer's layouts and the HF sampler."""
    from mmrl.rollout.base import SamplingParams, build_engine
    from mmrl.rollout.parity import logprob_parity

    proc, model = load_processor("tiny-qwen3-vl-moe"), load_model("tiny-qwen3-vl-moe")
    assert type(model).__name__ == "Qwen3VLMoeForConditionalGeneration" and resize_factor(proc) == 32
    g = torch.Generator().manual_seed(0)
    reqs = mixed_requests(proc, lambda i: 2, lambda i: "What colour is the square?")
    items = [(r.inputs, torch.randint(0, 500, (L,), generator=g)) for r in reqs for L in (1, 6)]
    with torch.no_grad():
        ref = [_plain_logprobs(model, p, r) for p, r in items]
        for strategy in ("packed", "expand", "full"):
            ours = response_logprobs(model, items, pad_id=proc.tokenizer.pad_token_id, strategy=strategy)
            assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(ours, ref)), strategy
    torch.manual_seed(0)
    rep = logprob_parity(build_engine("hf", model=model, processor=proc), model, reqs, SamplingParams(max_new_tokens=4),
                         proc.tokenizer.pad_token_id)
    assert rep.ok(1e-5), rep


def test_the_resize_factor_is_not_a_tool_suite_key(tmp_path):
    from support import REPO

    from mmrl.tools import load_suite

    text = (REPO / "tools" / "video_seek.yaml").read_text()
    assert "\nbudget:\n" in text
    bad = tmp_path / "suite.yaml"
    bad.write_text(text.replace("\nbudget:\n", "\nbudget:\n  factor: 32\n", 1))
    with pytest.raises(ConfigError, match="budget.factor"):
        load_suite(str(bad))
