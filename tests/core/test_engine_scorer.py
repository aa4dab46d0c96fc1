"""HF rollout engine and the scorer: batched generation over prompts x n, and teacher-forced log-probs that
match the sampling log-probs of the same tokens (mixed image + video batch)."""
import torch

from mmrl.models.loading import load_model, load_processor
from mmrl.rollout.base import SamplingParams, build_engine
from mmrl.models.scoring import response_logprobs
from support import mixed_requests, trained_position_ids, policy_log_softmax


def _requests(proc):
    return mixed_requests(proc, lambda i: 3, lambda i: "What colour is the square?" + " x" * i)


def test_generate_and_rescore(family_model_path):  # Qwen2-VL, Qwen2.5-VL, Qwen3-VL
    proc, model = load_processor(family_model_path), load_model(family_model_path)
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


def test_scorer_uses_mrope_positions_like_the_model(family_model_path):
    """Shared-prefix scoring equals one plain forward of the model over prompt + response (each family), given the
    3-D M-RoPE positions the models were trained with (``support.trained_position_ids``)."""
    from mmrl.models.scoring import backbone, prompt_positions

    proc, model = load_processor(family_model_path), load_model(family_model_path)
    reqs = _requests(proc)
    core, _ = backbone(model)
    p = reqs[0].inputs
    pos, start = prompt_positions(core, [p], p.input_ids[None])
    video = p.mm_token_type_ids == 2
    assert video.any() and not torch.equal(pos[1, 0, video], pos[2, 0, video])  # height and width axes differ
    assert int(start) < p.num_tokens  # 2x2 merged patches share positions: the next position is below P
    resp = torch.tensor([5, 9, 7])
    for r in reqs:
        ids = torch.cat([r.inputs.input_ids, resp])[None]
        mm = torch.cat([r.inputs.mm_token_type_ids, torch.zeros(3, dtype=torch.long)])[None]
        with torch.no_grad():
            logits = model(input_ids=ids, mm_token_type_ids=mm, position_ids=trained_position_ids(model, r.inputs, resp),
                           **r.inputs.vision).logits[0]
            ours = response_logprobs(model, [(r.inputs, resp)], pad_id=proc.tokenizer.pad_token_id)[0]
        P = r.inputs.num_tokens
        ref = policy_log_softmax(logits[P - 1 : P + 2].float(), model).gather(-1, resp[:, None]).squeeze(-1)
        assert torch.allclose(ours, ref, atol=1e-4), (ours, ref)


def test_shared_prefill_greedy_matches_transformers_generate(tiny_model_path):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    reqs = _requests(proc)
    for r in reqs:
        r.n = 1  # transformers' greedy search returns one sequence per prompt
    params = SamplingParams(max_new_tokens=4, greedy=True)
    ours = build_engine("hf", model=model, processor=proc).generate(reqs, params)
    ref = build_engine("hf", model=model, processor=proc, shared_prefill=False).generate(reqs, params)
    assert [t.response_ids.tolist() for t in ours] == [t.response_ids.tolist() for t in ref]
    for a, b in zip(ours, ref):
        assert torch.allclose(a.logprobs, b.logprobs, atol=1e-4)
