"""Fixed-rollout re-scoring equals a plain model forward over prompt + response under the intervened media."""
import pytest
import torch

from mmrl.data.schema import Trajectory
from mmrl.errors import DataError
from mmrl.media.inputs import build_prompt_inputs
from mmrl.media.prompts import build_messages
from mmrl.models.loading import load_model, load_processor
from mmrl.train.rescoring import intervention_seed, rescore_batch
from mmrl.views.transforms import apply_transform
from support import mixed_requests


def _traj(key, sid, ids):
    r = torch.tensor(ids)
    return Trajectory(sample_id=sid, group_id=key, view="original", role="anchor", prompt_ids=torch.zeros(1),
                      response_ids=r, logprobs=torch.zeros(len(ids)), loss_mask=torch.ones(len(ids), dtype=torch.bool),
                      text="", inputs_key=key)


def _plain(model, pi, resp):
    ids = torch.cat([pi.input_ids, resp])[None]
    mm = torch.cat([pi.mm_token_type_ids, torch.zeros(len(resp), dtype=torch.long)])[None]
    with torch.no_grad():
        logits = model(input_ids=ids, mm_token_type_ids=mm, **pi.vision).logits[0].float()
    p = pi.num_tokens
    return torch.log_softmax(logits[p - 1 : p - 1 + len(resp)], -1).gather(-1, resp[:, None]).squeeze(-1)


@pytest.fixture(scope="module")
def setup(tiny_model_path):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    reqs = mixed_requests(proc, lambda i: 2, lambda i: "What colour is the square?")
    trajs = [_traj(0, "0", [5, 9, 7]), _traj(0, "0", [11, 4]), _traj(2, "2", [8, 8, 3, 2])]
    return proc, model, reqs, trajs


def test_rescore_equals_plain_forward_under_intervened_media(setup):
    proc, model, reqs, trajs = setup
    params = {"patch": 14, "p": 0.5, "value": 0}
    out = rescore_batch(model, proc, reqs, trajs, "patch_mask", params, seed=3, pad_id=proc.tokenizer.pad_token_id)
    for t, lp in zip(trajs, out):
        req = reqs[t.inputs_key]
        g = torch.Generator().manual_seed(intervention_seed(3, t.inputs_key))
        media = apply_transform("patch_mask", req.inputs.media, None, g, **params)
        assert not torch.equal(media.frames if media.is_video else media.image,
                               req.inputs.media.frames if media.is_video else req.inputs.media.image)
        pi = build_prompt_inputs(proc, build_messages("What colour is the square?", ["red", "green"], media), media)
        assert torch.allclose(lp, _plain(model, pi, t.response_ids), atol=1e-4)
        assert not torch.allclose(lp, _plain(model, req.inputs, t.response_ids), atol=1e-4)  # the media mattered


def test_rescore_is_seeded_and_shares_one_draw_per_request(setup):
    proc, model, reqs, trajs = setup
    same = [_traj(1, "1", [5, 9]), _traj(1, "1", [5, 9])]
    a = rescore_batch(model, proc, reqs, same, "patch_mask", seed=1)
    b = rescore_batch(model, proc, reqs, same, "patch_mask", seed=1)
    c = rescore_batch(model, proc, reqs, same, "patch_mask", seed=2)
    assert torch.equal(a[0], b[0]) and torch.equal(a[0], a[1])  # one draw shared by the request's responses
    assert not torch.equal(a[0], c[0])
    d = rescore_batch(model, proc, reqs, same, "patch_mask", seed=1, per_response=True)
    assert not torch.equal(d[0], d[1])  # VPPO's per-row masks


def test_full_mask_and_a_size_changing_intervention(setup):
    proc, model, reqs, trajs = setup
    out = rescore_batch(model, proc, reqs, trajs[2:], "full_mask")
    assert out[0].shape == (4,)
    with pytest.raises(DataError, match="sample '2'.*media size"):
        rescore_batch(model, proc, reqs, trajs[2:], "tests.train.test_rescoring:_crop")


def _crop(media, sample, rng):
    from dataclasses import replace

    return replace(media, image=media.image[:, :28, :28])
