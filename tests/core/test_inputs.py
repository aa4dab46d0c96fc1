"""Processor-input construction for image and video through the real Qwen2.5-VL processor."""
import pytest
import torch

from mmrl.data.schema import Media
from mmrl.media.inputs import build_prompt_inputs
from mmrl.media.prompts import build_messages
from mmrl.models.loading import load_processor


def test_video_inputs_token_count_matches_grid(tiny_model_path):
    proc = load_processor(tiny_model_path)
    media = Media("v", frames=torch.zeros(4, 3, 56, 112, dtype=torch.uint8), timestamps=[0, .5, 1, 1.5], fps=2.0)
    pi = build_prompt_inputs(proc, build_messages("Q?", ["a", "b"], media), media)
    t, h, w = pi.vision["video_grid_thw"][0].tolist()
    assert (t, h, w) == (2, 4, 8)  # 4 frames / temporal patch 2; 56/14, 112/14
    video_id = proc.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert int((pi.input_ids == video_id).sum()) == t * h * w // 4  # spatial merge 2x2
    assert pi.vision["pixel_values_videos"].shape == (t * h * w, 3 * 2 * 14 * 14)
    assert abs(float(pi.vision["second_per_grid_ts"][0]) - 1.0) < 1e-6  # temporal patch 2 / 2 fps
    assert "(A) a\n(B) b" in pi.text and pi.text.endswith("<|im_start|>assistant\n")


def test_image_inputs_token_count_matches_grid(tiny_model_path):
    proc = load_processor(tiny_model_path)
    media = Media("i", image=torch.zeros(3, 56, 84, dtype=torch.uint8))
    pi = build_prompt_inputs(proc, build_messages("Q?", ["a", "b"], media), media)
    t, h, w = pi.vision["image_grid_thw"][0].tolist()
    assert (t, h, w) == (1, 4, 6)
    image_id = proc.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert int((pi.input_ids == image_id).sum()) == h * w // 4
    assert "pixel_values_videos" not in pi.vision


def test_prompt_budget_error_names_sample(tiny_model_path):
    import pytest

    from mmrl.errors import DataError

    proc = load_processor(tiny_model_path)
    media = Media("v", frames=torch.zeros(4, 3, 56, 56, dtype=torch.uint8), timestamps=[0, 1, 2, 3], fps=1.0)
    with pytest.raises(DataError, match="sample 'clip-7'.*budget"):
        build_prompt_inputs(proc, build_messages("Q?", ["a", "b"], media), media, max_prompt_tokens=5, sample_id="clip-7")


def _mixed_media():
    g = torch.Generator().manual_seed(0)
    rnd = lambda *shape: torch.randint(0, 255, shape, generator=g, dtype=torch.uint8)  # noqa: E731
    return [Media("v1", frames=rnd(4, 3, 56, 56), timestamps=[0, .5, 1, 1.5], fps=2.0),
            Media("i1", image=rnd(3, 56, 84)),
            Media("v2", frames=rnd(6, 3, 56, 112), timestamps=[0, 1, 2, 3, 4, 5], fps=1.0),
            Media("i2", image=rnd(3, 112, 56))]


def test_batched_processor_call_equals_one_call_per_prompt(tiny_model_path):
    """One processor call for a step's prompts (mixed images and videos of different sizes, different text
    lengths, left padding) gives each prompt exactly what its own call gives."""
    from mmrl.media.inputs import build_prompt_inputs_batch

    proc = load_processor(tiny_model_path)
    media = _mixed_media()
    questions = ["Q?", "A much longer question about what is shown here?", "short", "what?"]
    prompts = [(build_messages(q, ["a", "b"], m), m, f"s{i}") for i, (q, m) in enumerate(zip(questions, media))]
    batched = build_prompt_inputs_batch(proc, prompts)
    lengths = set()
    for (msgs, m, _), got in zip(prompts, batched):
        want = build_prompt_inputs(proc, msgs, m)
        lengths.add(want.num_tokens)
        assert torch.equal(got.input_ids, want.input_ids)
        assert torch.equal(got.mm_token_type_ids, want.mm_token_type_ids)
        assert got.vision.keys() == want.vision.keys() and got.text == want.text and got.media is m
        for k in want.vision:
            assert torch.equal(got.vision[k], want.vision[k]), k
    assert len(lengths) > 1  # padding was exercised


def test_batched_budget_error_is_per_prompt(tiny_model_path):
    """Over-budget prompts come back as DataErrors naming their sample; the others are built."""
    from mmrl.errors import DataError
    from mmrl.media.inputs import build_prompt_inputs_batch

    proc = load_processor(tiny_model_path)
    small, big = _mixed_media()[0], _mixed_media()[2]
    prompts = [(build_messages("Q?", ["a", "b"], m), m, sid) for m, sid in ((small, "ok-1"), (big, "too-big"), (small, "ok-2"))]
    limit = build_prompt_inputs(proc, prompts[0][0], small).num_tokens
    res = build_prompt_inputs_batch(proc, prompts, max_prompt_tokens=limit)
    assert not isinstance(res[0], Exception) and not isinstance(res[2], Exception)
    assert isinstance(res[1], DataError) and "sample 'too-big'" in str(res[1]) and "budget" in str(res[1])


def test_rope_positions_are_computed_once_per_prompt(tiny_model_path, monkeypatch):
    """M-RoPE positions are cached on the PromptInputs: a second prefill of the same prompts does not number them
    again (``mmrl.models.mrope``, once per prompt with media) and gets the same positions; the installed
    transformers' ``get_rope_index`` is never called."""
    from mmrl.models import prefill
    from mmrl.models.loading import load_model
    from mmrl.models.scoring import backbone, prefill_prompts

    proc = load_processor(tiny_model_path)
    core, _ = backbone(load_model(tiny_model_path))
    prompts = [build_prompt_inputs(proc, build_messages("Q?", ["a", "b"], m), m) for m in _mixed_media()]
    with_media = sum(bool(p.vision) for p in prompts)
    calls = []
    real = prefill.vision_positions
    monkeypatch.setattr(prefill, "vision_positions", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(core, "get_rope_index", lambda *a, **k: pytest.fail("transformers' get_rope_index called"))
    with torch.no_grad():
        h1, _, _, start1 = prefill_prompts(core, prompts, 0, "cpu")
        h2, _, _, start2 = prefill_prompts(core, prompts[::-1], 0, "cpu")
    assert len(calls) == with_media
    assert torch.equal(start1, start2.flip(0)) and torch.allclose(h1, h2.flip(0), atol=1e-5)
    # a batch mixing cached and new prompts indexes only the new ones, with the same result
    fresh = [build_prompt_inputs(proc, build_messages("Q?", ["a", "b"], m), m) for m in _mixed_media()]
    mixed = [prompts[0], fresh[1], prompts[2], fresh[3]]
    with torch.no_grad():
        h3, _, _, start3 = prefill_prompts(core, mixed, 0, "cpu")
    assert len(calls) == with_media + sum(bool(p.vision) for p in fresh[1::2])
    assert all(p.rope is not None for p in fresh[1::2]) and fresh[0].rope is None
    assert torch.equal(start3, start1) and torch.allclose(h3, h1, atol=1e-5)
