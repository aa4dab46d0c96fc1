"""Zero-masking of post-encoder visual tokens equals a forward whose image features have those rows zeroed."""
import pytest
import torch

from mmrl.algos.dspo_math import box_token_mask
from mmrl.data.schema import Media
from mmrl.media.inputs import build_prompt_inputs
from mmrl.media.prompts import build_messages
from mmrl.models.feature_mask import prompt_token_mask, score_with_masked_boxes, zero_visual_tokens
from mmrl.models.loading import load_model, load_processor
from mmrl.models.scoring import response_logprobs


@pytest.fixture(scope="module")
def setup(tiny_model_path):
    model, proc = load_model(tiny_model_path).eval(), load_processor(tiny_model_path)
    g = torch.Generator().manual_seed(0)
    media = Media("m", image=torch.randint(0, 255, (3, 56, 84), dtype=torch.uint8, generator=g))
    pi = build_prompt_inputs(proc, build_messages("Which emotion?", ["joy", "fear"], media), media)
    resp = torch.randint(0, 100, (6,), generator=g)
    return model, proc, pi, resp


def _score(model, proc, pi, resp):
    with torch.no_grad():
        return response_logprobs(model, [(pi, resp)], 1.0, 1, proc.tokenizer.pad_token_id)[0]


def test_masking_equals_zeroed_features(setup, monkeypatch):
    model, proc, pi, resp = setup
    grid = pi.vision["image_grid_thw"][0].tolist()
    mask = box_token_mask([0.0, 0.0, 0.5, 0.5], grid)
    assert 0 < int(mask.sum()) < mask.numel()
    plain = _score(model, proc, pi, resp)
    with zero_visual_tokens(model, torch.zeros_like(mask)):
        assert torch.equal(_score(model, proc, pi, resp), plain)  # an empty mask changes nothing
    with zero_visual_tokens(model, mask):
        hooked = _score(model, proc, pi, resp)
    assert not torch.allclose(hooked, plain, atol=1e-5)
    # independent path: zero the same rows of get_image_features' output
    core = model.model
    orig = type(core).get_image_features

    def zeroed(self, *a, **k):
        out = orig(self, *a, **k)
        out.pooler_output = tuple(f.masked_fill(mask[:, None], 0.0) for f in out.pooler_output)
        return out

    monkeypatch.setattr(type(core), "get_image_features", zeroed)
    assert torch.allclose(_score(model, proc, pi, resp), hooked, atol=1e-6)


def test_mask_size_mismatch_is_clear(setup):
    model, proc, pi, resp = setup
    with pytest.raises(ValueError, match="visual token mask has 3 entries"):
        with zero_visual_tokens(model, torch.ones(3, dtype=torch.bool)):
            _score(model, proc, pi, resp)


def test_per_response_boxes(setup):
    model, proc, pi, resp = setup
    score = lambda items: response_logprobs(model, items, 1.0, 1, proc.tokenizer.pad_token_id)  # noqa: E731
    box = [0.0, 0.0, 0.5, 0.5]
    with torch.no_grad():
        got = score_with_masked_boxes(model, score, [(pi, resp), (pi, resp), (pi, resp)], [box, None, [0, 0, 1, 1]])
        with zero_visual_tokens(model, prompt_token_mask(pi.vision, box)):
            want = score([(pi, resp)])[0]
        with zero_visual_tokens(model, prompt_token_mask(pi.vision, [0, 0, 1, 1])):
            full = score([(pi, resp)])[0]
    assert torch.equal(got[0], want) and got[1] is None and torch.equal(got[2], full)
    assert prompt_token_mask(pi.vision, [0, 0, 1, 1]).all()
