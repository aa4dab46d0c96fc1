"""A multi-turn episode through vLLM's CPU build whose environment returns a video mid-trajectory (what the seek tool
does) and then an image: every turn's context expands to the HF processor's tokens, and the sampled log-probs of
the model's tokens over the whole trajectory equal the trainer's full-sequence scores (observations masked)."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from mmrl.data.schema import Media  # noqa: E402
from mmrl.models.loading import load_model, load_processor  # noqa: E402
from mmrl.models.scoring import response_logprobs  # noqa: E402
from mmrl.rollout.agent_loop import Environment, Observation, build_agent_loop  # noqa: E402
from mmrl.rollout.base import SamplingParams  # noqa: E402

from colocate_support import FP32_TOL, requests, vllm_engine  # noqa: E402

pytestmark = pytest.mark.slow


class SeekThenLook(Environment):
    """Answers the first model turn with an 8-frame clip at 2 fps, the second with an image."""

    def reset(self, sample, media):
        self.k, self.f = 0, media.frames.shape[-1] if media.is_video else media.image.shape[-1]

    def step(self, model_text):
        self.k += 1
        g = torch.Generator().manual_seed(self.k)
        f = self.f
        if self.k == 1:
            return Observation("Clip.", media=Media("seek", frames=torch.randint(0, 255, (8, 3, f, f), dtype=torch.uint8,
                                                                                generator=g),
                                                    timestamps=[0.5 * i for i in range(8)], fps=2.0))
        if self.k == 2:
            return Observation("Look.", media=Media("look", image=torch.randint(0, 255, (3, f, f), dtype=torch.uint8,
                                                                               generator=g)))
        return None


@pytest.mark.parametrize("family", ("tiny", "tiny-qwen3-vl"))
def test_a_video_returned_mid_trajectory_keeps_parity_over_the_whole_episode(family, mmrl_cache):
    proc, model = load_processor(family), load_model(family, "float32")
    engine = vllm_engine(model, proc, "float32", max_media_per_prompt=3)  # vLLM refuses more media than declared
    reqs = requests(proc, ("video4",), n=2)
    loop = build_agent_loop("multi_turn", processor=proc, env_factory=SeekThenLook, max_turns=3)
    trajs = loop.run(engine, reqs, SamplingParams(temperature=1.0, max_new_tokens=4))
    assert [s.kind for s in trajs[0].segments] == ["model", "env", "model", "env", "model"]
    items = [t.scoring_item([r.inputs for r in reqs]) for t in trajs]
    with torch.no_grad():
        scored = response_logprobs(model, items, pad_id=proc.tokenizer.pad_token_id)
    worst = max(float((t.logprobs - s)[t.loss_mask].abs().max()) for t, s in zip(trajs, scored))
    print(f"PARITY | {family} | multi-turn (video then image returned) | fp32 | start | max {worst:.3g}")
    assert worst <= FP32_TOL
