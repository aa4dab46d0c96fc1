"""The arithmetic under the pixel transforms, against values computed by hand: the Gaussian blur's truncated kernel
(radius ceil(3 sigma), replicate borders, rounding), the local background's ring and median, the span ends at an
hour, a segment's nearest frame, the declarations a decorated transform keeps, and the messages."""
import math

import pytest
import torch

from mmrl.data.schema import Media
from mmrl.views import view_transform
from mmrl.views.image_transforms import local_background
from mmrl.views.transforms import VIEW_TRANSFORMS, gaussian_blur, in_spans, nearest_unmasked, transform_info
from mmrl.views.video_transforms import _evidence_mask
from views_testdata import make_sample


def impulse(size=31, value=255):
    x = torch.zeros(1, 1, size, size, dtype=torch.uint8)
    x[0, 0, size // 2, size // 2] = value
    return x


def kernel(sigma):
    """The 1-D kernel exp(-i^2 / (2 sigma^2)), i = -r..r with r = ceil(3 sigma), normalised: by hand, in float64."""
    r = max(1, math.ceil(3 * sigma))
    k = [math.exp(-(i * i) / (2 * sigma * sigma)) for i in range(-r, r + 1)]
    return [v / sum(k) for v in k]


@pytest.mark.parametrize("sigma", [1.0, 2.0, 0.6])
def test_the_blur_of_an_impulse_is_the_outer_product_of_the_truncated_kernel(sigma):
    k, c = kernel(sigma), 15
    r = len(k) // 2
    out = gaussian_blur(impulse(), sigma)[0, 0].double()
    want = torch.zeros(31, 31, dtype=torch.float64)
    for i in range(-r, r + 1):
        for j in range(-r, r + 1):
            want[c + i, c + j] = 255 * k[i + r] * k[j + r]
    assert (out - want).abs().max() <= 0.5 + 1e-4  # rounded to the nearest integer
    outside = torch.ones(31, 31, dtype=torch.bool)
    outside[c - r: c + r + 1, c - r: c + r + 1] = False
    assert (out[outside] == 0).all()  # exactly 0 beyond the radius


def test_the_blur_centre_values_written_out():
    assert int(gaussian_blur(impulse(), 1.0)[0, 0, 15, 15]) == round(255 * 0.3990503 ** 2)  # 41
    assert int(gaussian_blur(impulse(), 2.0)[0, 0, 15, 15]) == 10  # 255 / 5.0133^2 = 10.15 (radius 6)


def test_replicate_borders_keep_an_edge_at_its_value():
    x = torch.zeros(1, 2, 9, 9, dtype=torch.uint8)
    x[:, :, :, 0] = 200  # a bright first column: replicated outwards, so the border pixel stays bright
    out = gaussian_blur(x, 1.0)
    assert out.shape == x.shape and out.dtype == torch.uint8
    assert int(out[0, 0, 4, 0]) == round(200 * (kernel(1.0)[3] + sum(kernel(1.0)[:3])))


@pytest.mark.parametrize("sigma", [0, 0.0, -1.0])
def test_no_blur_at_sigma_zero_or_below_is_a_copy(sigma):
    x = torch.randint(0, 256, (2, 3, 5, 7), generator=torch.Generator().manual_seed(0), dtype=torch.int64).to(torch.uint8)
    out = gaussian_blur(x, sigma)
    assert torch.equal(out, x) and out is not x and out.data_ptr() != x.data_ptr()


def test_an_empty_batch_blurs_to_an_empty_batch():
    out = gaussian_blur(torch.zeros(0, 3, 4, 4, dtype=torch.uint8), 1.0)
    assert out.shape == (0, 3, 4, 4) and out.dtype == torch.uint8


# ---- the local background ----------------------------------------------------------------------------------------

def rings(h=24, w=24, box=(10, 14)):
    """One-channel frame: a 4x4 mask at rows/cols 10..13; pixels at Chebyshev distance 1-2 from it are 100, at
    distance 3 are 10, at distance 4 are 10, beyond are 250; the masked pixels are 0."""
    a, b = box
    r = torch.arange(h).view(-1, 1)
    c = torch.arange(w).view(1, -1)
    d = torch.maximum(torch.maximum(a - r, r - (b - 1)), torch.maximum(a - c, c - (b - 1))).clamp(min=0)
    x = torch.full((h, w), 250, dtype=torch.uint8)
    x[(d >= 1) & (d <= 2)] = 100
    x[(d == 3) | (d == 4)] = 10
    x[d == 0] = 0
    return x.view(1, 1, h, w), (d == 0).view(1, h, w)


def test_the_background_is_the_lower_median_of_a_three_pixel_ring():
    x, mask = rings()
    # ring 3: 48 pixels at 100 (distance 1-2) and 36 at 10 (distance 3): the lower median of 84 is the 42nd: 100
    assert local_background(x, mask).tolist() == [[100]]
    # ring 4 adds 44 pixels at 10: 80 at 10, 48 at 100
    assert local_background(x, mask, ring=4).tolist() == [[10]]
    assert local_background(x, mask, ring=2).tolist() == [[100]]


def test_ring_zero_falls_back_to_every_background_pixel():
    x, mask = rings()
    # no band: all 560 unmasked pixels, 400 of them 250
    assert local_background(x, mask, ring=0).tolist() == [[250]]


def test_frames_without_a_mask_get_zero_and_later_frames_are_still_filled():
    x, mask = rings()
    x2, m2 = torch.cat([x, x]), torch.cat([torch.zeros_like(mask), mask])
    assert local_background(torch.cat([x2, x2], 1), m2).tolist() == [[0, 0], [100, 100]]


def test_a_mask_over_the_whole_frame_has_no_background():
    with pytest.raises(ValueError) as e:
        local_background(torch.zeros(1, 3, 4, 4, dtype=torch.uint8), torch.ones(1, 4, 4, dtype=torch.bool))
    assert str(e.value) == "occlusion covers the whole frame: no background left to fill it with"


# ---- time ---------------------------------------------------------------------------------------------------------

def test_span_ends_keep_float64_precision_at_an_hour():
    """float32 rounds 3600.3001 down to 3600.30005: a frame 20 us before the end (inside) would fall out."""
    t = torch.tensor([3600.30008, 3600.30009], dtype=torch.float64)
    assert in_spans(t, [(3600.0, 3600.3001)]).tolist() == [True, False]


def test_a_segment_holding_a_frame_masks_only_its_frames():
    """Frames 5 us inside the start and 5 us before the end of [1, 2): the first is in the segment, the second is
    not (ends are half-open, less TIME_EPS), although it is the frame nearest the segment's middle."""
    media = Media("v", frames=torch.zeros(4, 3, 2, 2, dtype=torch.uint8), timestamps=[0.0, 0.999995, 1.999995, 3.0])
    assert _evidence_mask(media, make_sample(segments=[(1.0, 2.0)])).tolist() == [False, True, False, False]
    # a segment between frames masks the one nearest its middle
    assert _evidence_mask(media, make_sample(segments=[(2.2, 2.4)])).tolist() == [False, False, True, False]


def test_nearest_unmasked_message():
    with pytest.raises(ValueError) as e:
        nearest_unmasked(torch.ones(3, dtype=torch.bool))
    assert str(e.value) == ("fill 'nearest' needs at least one frame outside the masked span (the mask covers the "
                            "whole clip, so the view would be a blank clip, not a masked segment)")
    assert nearest_unmasked(torch.tensor([True, False, True, True, False])).tolist() == [1, 1, 1, 4, 4]


# ---- declarations ----------------------------------------------------------------------------------------------

def test_a_decorated_transform_keeps_its_kinds_and_the_info_its_name():
    VIEW_TRANSFORMS._items.pop("test_image_only", None)

    @view_transform("test_image_only", effect="unchanged", kinds=("image",))
    def image_only(media, sample, rng):
        return media

    try:
        info = transform_info("test_image_only")
        assert (info.name, info.kinds, info.effect, info.fn) == ("test_image_only", ("image",), "unchanged", image_only)
    finally:
        VIEW_TRANSFORMS._items.pop("test_image_only", None)
    assert transform_info("gray").name == "gray"


def test_a_module_attribute_that_is_not_callable_is_refused():
    with pytest.raises(KeyError) as e:
        transform_info("math:pi")
    assert e.value.args[0] == "view transform 'math:pi' is not callable"
