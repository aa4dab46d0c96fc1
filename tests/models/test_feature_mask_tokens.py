"""DSPO's visual-token masks without a model (specs/algorithms.md §3, Eq. 8): which merged tokens a normalised box
touches on non-square grids, one mask per medium in the encoder's order, and the encoder hook on a stand-in
vision module (the tiny-model checks are tests/models/test_feature_mask.py)."""
import pytest
import torch

from mmrl.models.feature_mask import (box_token_mask, prompt_token_mask, score_with_masked_boxes, vision_encoder,
                                      zero_visual_tokens)


def _grid(mask, h, w):
    return mask.view(-1, h, w).int().tolist()


# (box (ymin, xmin, ymax, xmax), grid (t, h, w) before the 2x2 merge, expected merged [t][h/2][w/2] mask)
BOXES = [
    # a 4x6 merged map (8x12 patches): rows floor(0.25*4)=1..ceil(0.5*4)-1=1, cols floor(0.5*6)=3..ceil(1*6)-1=5
    ((0.25, 0.5, 0.5, 1.0), (1, 8, 12), [[[0] * 6, [0, 0, 0, 1, 1, 1], [0] * 6, [0] * 6]]),
    # rows 0..ceil(0.3*4)-1 = 1, cols floor(0.1*6)=0..ceil(0.2*6)-1 = 1 (ceil and floor, not round)
    ((0.0, 0.1, 0.3, 0.2), (1, 8, 12), [[[1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [0] * 6, [0] * 6]]),
    # coordinates outside [0, 1] are clipped; the whole map, repeated for each of 2 temporal patches
    ((-0.5, -1.0, 1.5, 2.0), (2, 4, 2), [[[1], [1]], [[1], [1]]]),
    # a tall grid: 3 merged rows, 1 column; the box's lower third
    ((0.7, 0.0, 1.0, 1.0), (1, 6, 2), [[[0], [0], [1]]]),
    # an empty box (ymax at ymin on a row boundary) touches nothing
    ((0.5, 0.0, 0.5, 1.0), (1, 4, 4), [[[0, 0], [0, 0]]]),
]


@pytest.mark.parametrize("box,grid,expected", BOXES, ids=[str(i) for i in range(len(BOXES))])
def test_box_token_mask_table(box, grid, expected):
    m = box_token_mask(box, grid)
    t, h, w = grid
    assert m.dtype == torch.bool and m.shape == (t * (h // 2) * (w // 2),)
    assert _grid(m, h // 2, w // 2) == expected


def test_box_token_mask_merge_size_and_its_check():
    # merge 4 on a 8x12 grid: a 2x3 map; the right half
    assert _grid(box_token_mask((0, 0.5, 1, 1), (1, 8, 12), merge=4), 2, 3) == [[[0, 1, 1], [0, 1, 1]]]
    with pytest.raises(ValueError, match=r"^grid \(1, 6, 8\) is not divisible by the merge size 4$"):
        box_token_mask((0, 0, 1, 1), (1, 6, 8), merge=4)


def test_prompt_token_mask_takes_images_then_videos():
    vision = {"video_grid_thw": torch.tensor([[2, 4, 4]]), "image_grid_thw": torch.tensor([[1, 2, 4]])}
    m = prompt_token_mask(vision, (0.0, 0.0, 1.0, 0.5))
    # image: a 1x2 map, left column; video: two 2x2 maps, left column each
    assert m.int().tolist() == [1, 0] + [1, 0, 1, 0] * 2
    assert _grid(prompt_token_mask(vision, (0, 0, 1, 1), merge=1)[:8], 2, 4) == [[[1] * 4] * 2]
    with pytest.raises(ValueError, match=r"^the prompt has no image or video to mask$"):
        prompt_token_mask({}, (0, 0, 1, 1))


class Qwen2_5_VisionTransformerPretrainedModel(torch.nn.Module):
    """A stand-in encoder: merged tokens are its input rows (+1, so that zeros show)."""

    spatial_merge_size = 1

    def forward(self, x):
        return x + 1.0


class Wrapper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.visual = Qwen2_5_VisionTransformerPretrainedModel()


def test_the_hook_zeroes_the_masked_rows_only_while_open():
    model = Wrapper()
    assert vision_encoder(model) is model.visual
    x = torch.zeros(3, 2)
    with zero_visual_tokens(model, torch.tensor([0, 1, 0])):  # an integer mask is read as booleans
        assert model.visual(x).tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]
    assert model.visual(x).tolist() == [[1.0, 1.0]] * 3
    with pytest.raises(ValueError, match=r"^visual token mask has 2 entries but the encoder produced 3 merged tokens$"):
        with zero_visual_tokens(model, torch.ones(2, dtype=torch.bool)):
            model.visual(x)
    with pytest.raises(ValueError, match=r"^Linear has no Qwen2-VL / Qwen2\.5-VL vision encoder to mask$"):
        vision_encoder(torch.nn.Linear(1, 1))


class Prompt:
    def __init__(self, h, w):
        self.vision = {"image_grid_thw": torch.tensor([[1, h, w]])}


def test_score_with_masked_boxes_scores_each_response_under_its_own_box_and_pads_calls():
    model = Wrapper()
    seen, calls, merge = [], [], [1]

    def score(items):
        calls.append(len(items))
        if not items:
            return []
        (pi, ids), = items
        h, w = pi.vision["image_grid_thw"][0, 1:].tolist()
        feats = model.visual(torch.zeros(h * w // merge[0] ** 2, 1))  # the encoder runs inside the caller's block
        seen.append(feats.flatten().tolist())
        return [ids.float() * 0 + float(feats.sum())]

    items = [(Prompt(2, 2), torch.tensor([1, 2])), (Prompt(2, 2), torch.tensor([3])), (Prompt(1, 3), torch.tensor([4]))]
    out = score_with_masked_boxes(model, score, items, [(0, 0, 1, 0.5), None, (0, 0, 1, 1)], calls=4)
    # merge 1 (the encoder's spatial_merge_size): the left column of 2x2, then all of 1x3
    assert seen == [[0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    assert out[0].tolist() == [2.0, 2.0] and out[1] is None and out[2].tolist() == [0.0]
    assert calls == [1, 1, 0, 0]  # 2 boxed responses, padded to 4 calls with score([])
    calls.clear()
    merge[0] = 2
    score_with_masked_boxes(model, score, items[:1], [(0, 0, 0.4, 0.4)], merge=2, calls=None)
    assert calls == [1] and seen[-1] == [0.0]  # merge 2: the 2x2 grid is one merged token, touched by the box


class Qwen2VisionTransformerPretrainedModel(torch.nn.Module):
    """A stand-in encoder without ``spatial_merge_size``: the merge is 2 (Qwen2-VL's)."""

    def forward(self, x):
        return x + 1.0


def test_the_merge_defaults_to_2_and_no_call_is_padded_without_a_count():
    model = torch.nn.Sequential(Qwen2VisionTransformerPretrainedModel())
    calls = []

    def score(items):
        calls.append(len(items))
        if not items:
            return []
        feats = model[0](torch.zeros(2, 1))  # a 2x4 grid is 1x2 merged tokens at merge 2
        return [feats.flatten()]

    out = score_with_masked_boxes(model, score, [(Prompt(2, 4), torch.tensor([1]))], [(0, 0, 1, 0.5)])
    assert out[0].tolist() == [0.0, 1.0] and calls == [1]
    calls.clear()
    assert score_with_masked_boxes(model, score, [(Prompt(2, 4), torch.tensor([1]))], [None]) == [None]
    assert calls == []
