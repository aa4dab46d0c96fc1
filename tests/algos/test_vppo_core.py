"""VPPO pure functions on hand-computed inputs (specs/algorithms.md §7 vectors)."""
import math

import pytest
import torch

from mmrl.algos.vppo_core import (
    padded,
    tas_scales,
    tgf_mask,
    trajectory_scores,
    visual_dependency,
    vppo_token_advantages,
)


def test_tas_spec_vector():
    scale = tas_scales(torch.tensor([0.0, 0.1, 0.3]), torch.ones(3, dtype=torch.bool), alpha_min=0.9)
    assert scale.tolist() == pytest.approx([0.9, 0.975, 1.125], abs=1e-6)
    assert scale.mean().item() == pytest.approx(1.0, abs=1e-6)


def test_tas_degenerate_cases_keep_scale_one():
    ones = torch.ones(3, dtype=torch.bool)
    assert tas_scales(torch.tensor([0.2, 0.2, 0.2]), ones).tolist() == [1.0, 1.0, 1.0]
    assert tas_scales(torch.tensor([0.5]), torch.ones(1, dtype=torch.bool)).tolist() == [1.0]
    # an empty response is left out of the statistics and keeps scale 1
    s = tas_scales(torch.tensor([0.0, 0.1, 0.3, 0.0]), torch.tensor([True, True, True, False]), alpha_min=0.9)
    assert s.tolist() == pytest.approx([0.9, 0.975, 1.125, 1.0], abs=1e-6)
    with pytest.raises(ValueError, match="alpha_min"):
        tas_scales(torch.zeros(2), ones[:2], alpha_min=1.5)


def test_tgf_spec_vector_keeps_top_ceil_k():
    s = torch.tensor([[0.1, 0.5, 0.0, 0.3, 0.2, 9.0]])
    mask = torch.tensor([[True] * 5 + [False]])  # |o| = 5; the padded 9.0 must never be chosen
    keep = tgf_mask(s, mask, k=0.4)
    assert keep.tolist() == [[False, True, False, True, False, False]]
    assert int(tgf_mask(s, mask, k=0.2).sum()) == 1  # ceil(0.2 * 5) = 1
    with pytest.raises(ValueError, match="ratio"):
        tgf_mask(s, mask, k=0.0)


def test_visual_dependency_is_clamped_low_var_kl():
    aug = torch.tensor([[math.log(0.5), 0.0, 30.0]])
    old = torch.zeros(1, 3)
    s = visual_dependency(aug, old, torch.tensor([[True, True, False]]))
    assert s[0, 0].item() == pytest.approx(0.5 + math.log(2) - 1)
    assert s[0, 1].item() == 0.0 and s[0, 2].item() == 0.0  # masked out (it would be the clamp 10)
    assert visual_dependency(torch.tensor([[30.0]]), torch.zeros(1, 1), torch.ones(1, 1)).item() == 10.0


def test_trajectory_scores_divide_by_length():
    s, mask = padded([torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0])])
    assert trajectory_scores(s, mask).tolist() == [2.0, 4.0]


def test_vppo_token_advantages_end_to_end():
    old = [torch.zeros(5), torch.zeros(5), torch.zeros(2)]
    # response 0 is blind (no dependency); response 1 depends on tokens 0 and 3; response 2 on both tokens
    d = math.log(0.5)
    aug = [torch.zeros(5), torch.tensor([d, 0.0, 0.0, 2 * d, 0.0]), torch.tensor([d, d])]
    adv = torch.tensor([1.0, -1.0, 2.0])
    a, s, scale, keep = vppo_token_advantages(adv, aug, old, alpha_min=0.9, k=0.4)
    e1, e2 = 0.5 + math.log(2) - 1, 0.25 + 2 * math.log(2) - 1
    assert s[1, :5].tolist() == pytest.approx([e1, 0, 0, e2, 0], abs=1e-6)
    n = torch.tensor([0.0, ((e1 + e2) / 5) / e1, 1.0])  # min-max normalised S-bar: min 0, max e1 (row 2)
    amax = 0.9 + 0.1 / n.mean()
    assert scale.tolist() == pytest.approx((0.9 + n * (amax - 0.9)).tolist(), abs=1e-5)
    assert keep.sum(1).tolist() == [2, 2, 1]  # ceil(.4*5)=2, ceil(.4*2)=1
    assert keep[1].tolist() == [True, False, False, True, False]
    assert a[1].tolist() == pytest.approx([-scale[1].item(), 0, 0, -scale[1].item(), 0], abs=1e-6)
    assert a[2, 1].item() == 0.0 and a[2, 0].item() == pytest.approx(2 * scale[2].item())


def test_vppo_switches_and_shape_errors():
    old = [torch.zeros(3), torch.zeros(3)]
    aug = [torch.tensor([-1.0, 0.0, 0.0]), torch.zeros(3)]
    a, _, scale, keep = vppo_token_advantages(torch.tensor([1.0, 1.0]), aug, old, shaping=False, filtering=False)
    assert scale.tolist() == [1.0, 1.0] and keep.all() and (a == 1).all()
    with pytest.raises(ValueError, match="response 0"):
        vppo_token_advantages(torch.tensor([1.0]), [torch.zeros(2)], [torch.zeros(3)])
    with pytest.raises(ValueError, match="one re-scored"):
        vppo_token_advantages(torch.tensor([1.0, 2.0]), [torch.zeros(2)], [torch.zeros(2)])
