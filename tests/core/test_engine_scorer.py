"""HF rollout engine and the scorer: batched generation over prompts x n, and teacher-forced log-probs that
match the sampling log-probs of the same tokens (mixed image + video batch)."""
import torch

from mmrl.data.schema import Media
from mmrl.media.inputs import build_prompt_inputs
from mmrl.media.prompts import build_messages
from mmrl.models.loading import load_model, load_processor
from mmrl.rollout.base import RolloutRequest, SamplingParams, build_engine
from mmrl.train.scoring import response_logprobs


def _requests(proc):
    reqs = []
    g = torch.Generator().manual_seed(0)
    for i in range(3):
        if i < 2:
            m = Media(str(i), frames=torch.randint(0, 255, (4, 3, 56, 56), dtype=torch.uint8, generator=g),
                      timestamps=[0, .5, 1, 1.5], fps=2.0)
        else:
            m = Media(str(i), image=torch.randint(0, 255, (3, 56, 84), dtype=torch.uint8, generator=g))
        pi = build_prompt_inputs(proc, build_messages("What colour is the square?" + " x" * i, ["red", "green"], m), m)
        reqs.append(RolloutRequest(inputs=pi, n=3, sample_id=str(i), group_id=i))
    return reqs


def test_generate_and_rescore(tiny_model_path):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    reqs = _requests(proc)
    engine = build_engine("hf", model=model, processor=proc)
    torch.manual_seed(0)
    trajs = engine.generate(reqs, SamplingParams(max_new_tokens=5))
    assert len(trajs) == 9 and [t.group_id for t in trajs] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [t.pack_id for t in trajs[:3]] == [0, 1, 2]
    suppressed = set(engine.suppress)
    for t in trajs:
        assert 1 <= t.response_ids.numel() <= 5 and t.logprobs.shape == t.response_ids.shape
        assert not (set(t.response_ids.tolist()) & suppressed)  # never a vision placeholder in a response
    lps = response_logprobs(model, [(reqs[t.inputs_key].inputs, t.response_ids) for t in trajs], pad_id=proc.tokenizer.pad_token_id)
    for lp, t in zip(lps, trajs):
        assert torch.allclose(lp, t.logprobs, atol=1e-4)


def test_generation_is_reproducible_by_seed(tiny_model_path):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    engine = build_engine("hf", model=model, processor=proc)
    outs = []
    for _ in range(2):
        torch.manual_seed(123)
        outs.append([t.response_ids.tolist() for t in engine.generate(_requests(proc), SamplingParams(max_new_tokens=4))])
    assert outs[0] == outs[1]
