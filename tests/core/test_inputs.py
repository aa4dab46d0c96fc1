"""Processor-input construction for image and video through the real Qwen2.5-VL processor."""
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
