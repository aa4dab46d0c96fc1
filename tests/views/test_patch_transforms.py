"""Re-scoring interventions: full_mask and VPPO's patch blackening (patch_mask with VPPO_PATCH's parameters)."""
import pytest
import torch

from mmrl.data.schema import Media, Sample
from mmrl.views.patch_transforms import FULL_MASK, VPPO_PATCH
from mmrl.views.transforms import apply_transform, transform_info

SAMPLE = Sample(id="s", question="", candidates=[], answer="")


def test_full_mask_blanks_every_frame_and_keeps_size():
    m = Media("s", frames=torch.randint(1, 255, (3, 3, 28, 42), dtype=torch.uint8), timestamps=[0, 1, 2], fps=1.0)
    out = apply_transform(FULL_MASK[0], m, SAMPLE, torch.Generator(), **FULL_MASK[1])
    assert out.frames.shape == m.frames.shape and int(out.frames.max()) == 0 and out.timestamps == [0, 1, 2]
    gray = apply_transform("full_mask", m, SAMPLE, torch.Generator(), value=128)
    assert bool((gray.frames == 128).all()) and int(m.frames.min()) >= 1  # the input is not mutated
    assert transform_info("full_mask").effect == "destroyed"
    with pytest.raises(ValueError, match="sample 's'"):
        apply_transform("full_mask", m, SAMPLE, torch.Generator(), value=300)


def test_vppo_patch_blackens_14px_cells_with_p_half():
    img = torch.full((3, 140, 140), 200, dtype=torch.uint8)
    out = apply_transform(VPPO_PATCH[0], Media("s", image=img), SAMPLE, torch.Generator().manual_seed(0), **VPPO_PATCH[1])
    cells = out.image[0].reshape(10, 14, 10, 14).permute(0, 2, 1, 3).reshape(100, 196)
    black = (cells == 0).all(1)
    assert bool(((cells == 0).all(1) | (cells == 200).all(1)).all())  # whole cells, aligned at the top-left corner
    assert 35 <= int(black.sum()) <= 65  # p = 0.5 over 100 cells
