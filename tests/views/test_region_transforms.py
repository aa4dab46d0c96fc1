"""Region transforms (mmrl/views/region_transforms.py) against the synthetic world's renderer: the renderer knows
which pixels are the target (the clip minus the same clip rendered without it), so the declared effects are
checked on the pixels that carry the answer."""
import pytest
import torch

from mmrl.views import ViewSet, apply_transform, transform_info
from mmrl.views.transforms import UNCHANGED, UNKNOWN
from test_declared_effects import as_media, as_sample, scenes, without_target

BACKGROUND = ("background_blur", "background_mask", "background_noise")
REGION = ("region_blur", "region_mask", "region_noise")
STATIC = ("color", "location")  # the question types whose samples carry evidence boxes


def target_pixels(sc):
    """Bool [T, H, W]: where the clip differs from the same clip without its target (the answer's pixels)."""
    full, empty = as_media(sc["pixels"]).frames, as_media(without_target(sc)).frames
    return (full != empty).any(dim=1)


def run(name, media, sample, seed=0, **params):
    return apply_transform(name, media, sample, torch.Generator().manual_seed(seed), **params).frames


def test_declarations():
    for name in BACKGROUND:
        info = transform_info(name)
        assert info.effect == UNCHANGED and info.needs_for({}) == ("boxes",)
    for name in REGION:
        info = transform_info(name)
        assert info.effect == UNKNOWN and info.needs_for({}) == ("boxes",)
        assert info.needs_for({"box": [0.0, 0.0, 0.5, 0.5]}) == ()


@pytest.mark.parametrize("qtype", STATIC)
@pytest.mark.parametrize("name", BACKGROUND)
def test_background_views_keep_every_target_pixel_and_change_the_rest(name, qtype):
    for sc in scenes(qtype):
        media, sample = as_media(sc["pixels"]), as_sample(sc, qtype)
        target = target_pixels(sc)
        assert bool(target.any())
        out = run(name, media, sample, **({"value": 255} if name == "background_mask" else {}))
        keep = target[:, None].expand_as(out)
        assert torch.equal(out[keep], media.frames[keep])  # the object, its colour and place, untouched
        assert not torch.equal(out, media.frames)  # and the view is not the anchor


@pytest.mark.parametrize("qtype", STATIC)
def test_region_views_change_only_the_evidence_box(qtype):
    for i, sc in enumerate(scenes(qtype)):
        media, sample = as_media(sc["pixels"]), as_sample(sc, qtype)
        for name in REGION:
            out = run(name, media, sample, seed=i)
            changed = (out != media.frames).any(dim=1)
            assert bool(changed.any()), name
            assert not bool((changed & ~_box(media, sample)).any()), name  # nothing outside the box changes
        # masking the box: the clip looks the same whether the target was there or not (no colour left) ...
        empty = as_media(without_target(sc))
        masked = run("region_mask", media, sample, value=0)
        assert torch.equal(masked, run("region_mask", empty, sample, value=0))
        # ... but the filled square still marks where it was: hence 'unknown', not 'destroyed'
        assert not torch.equal(masked, empty.frames)


def _box(media, sample):
    from mmrl.views.image_transforms import box_mask

    return box_mask(media, sample)


def test_a_fractional_box_changes_the_pixels_whose_centre_is_inside():
    sc = scenes("color", k=1)[0]
    media, sample = as_media(sc["pixels"]), as_sample(sc, "color")
    out = run("region_mask", media, sample, box=[0.25, 0.5, 0.75, 1.0], value=7)
    h, w = out.shape[-2:]
    inside = torch.zeros(h, w, dtype=torch.bool)
    inside[h // 2:, w // 4: 3 * w // 4] = True
    assert bool((out[:, :, inside] == 7).all())
    assert torch.equal(out[:, :, ~inside], media.frames[:, :, ~inside])


def test_noise_is_seeded_and_bad_boxes_are_refused():
    sc = scenes("location", k=1)[0]
    media, sample = as_media(sc["pixels"]), as_sample(sc, "location")
    assert torch.equal(run("region_noise", media, sample, seed=3), run("region_noise", media, sample, seed=3))
    assert not torch.equal(run("region_noise", media, sample, seed=3), run("region_noise", media, sample, seed=4))
    with pytest.raises(ValueError, match="'evidence' or"):
        run("region_blur", media, sample, box="object")
    with pytest.raises(ValueError, match="x0 < x1"):
        run("region_blur", media, sample, box=[0.5, 0.0, 0.25, 1.0])
    with pytest.raises(ValueError, match="0..255"):
        run("background_mask", media, sample, value=300)


def test_a_view_set_uses_them(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text("name: v\nqtypes:\n  color:\n"
                    "    - {name: original, role: anchor, transform: identity}\n"
                    "    - {name: bg, role: stable, transform: background_noise, params: {std: 32}}\n"
                    "    - {name: hide, role: sensitive, transform: region_mask, params: {margin: 1}}\n"
                    "    - {name: blank, role: abstain, transform: gray}\n")
    vs = ViewSet.load(path)
    sc = scenes("color", k=1)[0]
    sample = as_sample(sc, "color")
    views = vs.expand(sample, as_media(sc["pixels"]), seed=0)
    assert [v.name for v in views] == ["original", "bg", "hide", "blank"]
    assert views[1].expected == sample.answer_letter and all(v.pixels_differ for v in views[1:])
