import pytest
import torch

from mmrl.views import VIEW_TRANSFORMS, apply_transform, transform_info, view_transform
from mmrl.views.transforms import DESTROYED, MAPPED, UNCHANGED, UNKNOWN
from views_testdata import make_clip, make_image, make_sample

PARAMS = {"mask_segment": {"span": [1.0, 2.0]}}


def run(name, media, sample, seed=0, **params):
    return apply_transform(name, media, sample, torch.Generator().manual_seed(seed), **{**PARAMS.get(name, {}), **params})


def video_transforms():
    return [n for n in VIEW_TRANSFORMS.names() if "video" in transform_info(n).kinds]


def test_builtins_registered_with_declarations():
    expect = {"identity": UNCHANGED, "shuffle": UNKNOWN, "reverse": MAPPED, "mask_segment": UNKNOWN,
              "mask_evidence": DESTROYED, "mask_outside": UNCHANGED, "drop_frames": UNKNOWN, "gray": DESTROYED,
              "patch_mask": UNKNOWN, "occlude_box": DESTROYED, "blur": UNKNOWN, "noise": UNKNOWN}
    for name, effect in expect.items():
        assert transform_info(name).effect == effect, name
    assert transform_info("mask_evidence").needs_for({}) == ("segments",)
    assert transform_info("occlude_box").needs_for({}) == ("boxes",)
    assert transform_info("mask_outside").needs_for({}) == ("segments",)
    assert transform_info("mask_outside").needs_for({"span": [0, 1]}) == ()
    assert transform_info("reverse").kinds == ("video",)
    with pytest.raises(KeyError, match="known: .*reverse"):
        transform_info("no_such_transform")


@pytest.mark.parametrize("name", ["shuffle", "reverse", "mask_segment", "mask_evidence", "mask_outside",
                                  "drop_frames", "gray", "patch_mask", "occlude_box", "blur", "noise"])
def test_deterministic_for_a_seed_and_input_untouched(name, clip, sample):
    before = clip.frames.clone()
    a, b = run(name, clip, sample, seed=7), run(name, clip, sample, seed=7)
    assert torch.equal(a.frames, b.frames) and a.timestamps == b.timestamps
    assert a.frames.dtype == torch.uint8 and a.frames.shape[1:] == clip.frames.shape[1:]
    assert torch.equal(clip.frames, before)  # never mutates the decoded media
    assert a.sample_id == clip.sample_id and a.fps == clip.fps


def test_random_transforms_depend_on_seed(clip, sample):
    for name in ("shuffle", "patch_mask", "noise", "drop_frames"):
        outs = {tuple(run(name, clip, sample, seed=s).frames.flatten()[:: 97].tolist()) for s in range(4)}
        assert len(outs) > 1, name


def test_reverse_twice_is_original(clip, sample):
    once = run("reverse", clip, sample)
    assert torch.equal(once.frames[0], clip.frames[-1])
    assert torch.equal(run("reverse", once, sample).frames, clip.frames)


def test_shuffle_is_a_permutation(clip, sample):
    for seed in range(5):
        out = run("shuffle", clip, sample, seed=seed)
        match = (out.frames[:, None] == clip.frames[None]).flatten(2).all(-1)  # [out, in]
        perm = match.float().argmax(1)
        assert match.any(1).all() and sorted(perm.tolist()) == list(range(8))
        assert perm.tolist() != list(range(8))  # deranged: never the original order
        assert out.timestamps == clip.timestamps


def test_identity_returns_same_object(clip, sample):
    assert run("identity", clip, sample) is clip


def _masked(out, orig):
    """Indices of frames that differ from the original."""
    return [i for i in range(orig.frames.shape[0]) if not torch.equal(out.frames[i], orig.frames[i])]


@pytest.mark.parametrize("fill", ["black", "gray", "mean", "blur", 17])
def test_mask_segment_touches_exactly_the_frames_in_span(clip, sample, fill):
    out = run("mask_segment", clip, sample, span=[1.0, 2.0], fill=fill)  # [1.0, 2.0): timestamps 1.0, 1.5
    assert _masked(out, clip) == [2, 3]
    if fill == "black":
        assert (out.frames[2:4] == 0).all()
    if fill == "gray":
        assert (out.frames[2:4] == 128).all()
    if fill == "mean":
        assert torch.equal(out.frames[2], clip.frames.float().mean(0).round().to(torch.uint8))


def test_mask_segment_by_fraction(clip, sample):
    out = run("mask_segment", clip, sample, span=None, frac=[0.0, 0.25])  # clip spans 0..3.5 s -> 0..0.875
    assert _masked(out, clip) == [0, 1]


def test_mask_evidence_and_its_complement(clip):
    s = make_sample(segments=[(0.4, 1.0), (3.0, 3.2)])  # half-open: frames at 0.5 and 3.0, not 1.0
    ev = run("mask_evidence", clip, s)  # default fill: the nearest frame outside the evidence (ties: earlier)
    assert _masked(ev, clip) == [1, 6]
    assert torch.equal(ev.frames[1], clip.frames[0]) and torch.equal(ev.frames[6], clip.frames[5])
    black = run("mask_evidence", clip, s, fill="black")
    assert _masked(black, clip) == [1, 6] and (black.frames[[1, 6]] == 0).all()
    out = run("mask_outside", clip, s)
    assert _masked(out, clip) == [0, 2, 3, 4, 5, 7]
    span = run("mask_outside", clip, s, span=[0.5, 3.0])
    assert _masked(span, clip) == [0, 6, 7]


def test_evidence_segment_in_frame_units_with_rounded_times():
    # synthetic-world convention: frames f0..f1 at fps 3 have the segment [round(f0/3, 6), round((f1+1)/3, 6)]
    clip = make_clip(t=9)
    clip.timestamps = [i / 3 for i in range(9)]
    s = make_sample(segments=[(round(2 / 3, 6), round(5 / 3, 6))])  # frames 2, 3, 4
    assert _masked(run("mask_evidence", clip, s), clip) == [2, 3, 4]
    whole = make_sample(segments=[(0.0, 3.0)])  # the whole clip: nothing outside it to hold
    with pytest.raises(ValueError, match="whole clip"):
        run("mask_evidence", clip, whole)
    assert _masked(run("mask_evidence", clip, whole, fill="black"), clip) == list(range(9))
    assert _masked(run("mask_outside", clip, whole), clip) == []


def test_mask_evidence_segment_between_frames_masks_nearest(clip):
    out = run("mask_evidence", clip, make_sample(segments=[(1.1, 1.2)]), fill="black")
    assert _masked(out, clip) == [2]


def test_occlude_box_zeroes_exactly_the_mapped_box(clip, sample):
    # source 112x112 -> frames 56x56 (scale 0.5). Box at t=0.2: [20,40,60,80] -> cols 10:30, rows 20:40 on frames
    # 0..3 (t <= 1.5 are nearer 0.2); box at t=3.1: [40,40,80,80] -> cols 20:40, rows 20:40 on frames 4..7.
    out = run("occlude_box", clip, sample, fill=0)
    expect = torch.zeros(8, 56, 56, dtype=torch.bool)
    expect[:4, 20:40, 10:30] = True
    expect[4:, 20:40, 20:40] = True
    zero = (out.frames == 0).all(1)
    assert torch.equal(zero, expect)
    assert torch.equal(out.frames[:, :, ~expect.any(0)], clip.frames[:, :, ~expect.any(0)])
    assert torch.equal(out.frames.masked_fill(expect[:, None], 0), out.frames)
    assert torch.equal(clip.frames.masked_fill(expect[:, None], 0), out.frames)


def test_occlude_box_covers_fractional_edges_and_images():
    s = make_sample(boxes=[(0.0, [21, 41, 61, 81])], image=True)  # -> [10.5, 20.5, 30.5, 40.5]
    img = make_image()
    out = run("occlude_box", img, s, fill=0)
    zero = (out.image == 0).all(0)
    expect = torch.zeros(56, 56, dtype=torch.bool)
    expect[20:41, 10:31] = True
    assert out.frames is None and torch.equal(zero, expect)


def test_patch_mask_blackens_about_p_of_14px_patches_deterministically():
    img = make_image(h=140, w=140)
    s = make_sample(image=True)
    out = run("patch_mask", img, s, seed=3)
    assert torch.equal(out.image, run("patch_mask", img, s, seed=3).image)
    cells = out.image.reshape(3, 10, 14, 10, 14).permute(1, 3, 0, 2, 4).reshape(100, -1)
    orig = img.image.reshape(3, 10, 14, 10, 14).permute(1, 3, 0, 2, 4).reshape(100, -1)
    black = (cells == 0).all(1)
    assert torch.equal(cells[~black], orig[~black])  # a patch is all black or untouched
    assert 0.3 < black.float().mean() < 0.7
    assert (run("patch_mask", img, s, p=0.0).image == img.image).all()
    assert (run("patch_mask", img, s, p=1.0).image == 0).all()


def test_patch_mask_crops_edge_patches(clip, sample):
    out = run("patch_mask", clip, sample, p=1.0)  # 56 = 4 patches: every pixel covered
    assert (out.frames == 0).all()
    odd = run("patch_mask", make_image(h=30, w=20), make_sample(image=True), p=1.0)
    assert odd.image.shape == (3, 30, 20) and (odd.image == 0).all()


def test_gray_blur_noise_on_video_and_image(clip, sample):
    assert (run("gray", clip, sample).frames == 128).all()
    img, s = make_image(), make_sample(image=True)
    assert (run("gray", img, s, value=0).image == 0).all()
    flat = make_image()
    flat.image = torch.full((3, 56, 56), 90, dtype=torch.uint8)
    assert (run("blur", flat, s, sigma=3.0).image == 90).all()  # blur keeps a constant image
    blurred = run("blur", img, s, sigma=2.0).image
    assert blurred.float().std() < img.image.float().std()
    noisy = run("noise", img, s, std=20.0).image
    assert noisy.shape == img.image.shape and not torch.equal(noisy, img.image)


def test_drop_frames(clip, sample):
    out = run("drop_frames", clip, sample, p=0.5)
    assert out.frames.shape[0] == 4 and len(out.timestamps) == 4
    assert out.timestamps == sorted(out.timestamps)
    for f, t in zip(out.frames, out.timestamps):
        assert torch.equal(f, clip.frames[int(t / 0.5)])
    odd = run("drop_frames", clip, sample, p=0.4)  # 8 * 0.6 = 4.8 -> 5 -> 6 (even frame count)
    assert odd.frames.shape[0] == 6
    held = run("drop_frames", clip, sample, p=0.5, mode="hold")
    assert held.frames.shape == clip.frames.shape and held.timestamps == clip.timestamps
    src = (held.frames[:, None] == clip.frames[None]).flatten(2).all(-1).float().argmax(1)
    assert len(set(src.tolist())) == 4 and src.tolist() == sorted(src.tolist())


def test_video_only_transform_rejects_image(sample):
    with pytest.raises(ValueError, match="does not apply to image"):
        run("reverse", make_image(), make_sample(image=True))


def test_decorator_registers_custom_transform(clip, sample):
    VIEW_TRANSFORMS._items.pop("test_invert_frames", None)  # the test may run twice in one process (mutmut)

    @view_transform("test_invert_frames", effect=UNCHANGED, needs=("boxes",))
    def invert(media, sample, rng, amount: int = 255):
        return type(media)(media.sample_id, frames=amount - media.frames, timestamps=media.timestamps)

    info = transform_info("test_invert_frames")
    assert info.effect == UNCHANGED and info.needs_for({}) == ("boxes",)
    assert torch.equal(run("test_invert_frames", clip, sample).frames, 255 - clip.frames)
    with pytest.raises(ValueError):
        view_transform("bad", effect="sideways")


def test_all_views_of_a_clip_are_cheap(clip, sample):
    # Not a timing assertion: every built-in runs on an 8-frame 56x56 clip as vectorised tensor ops.
    for name in video_transforms():
        run(name, clip, sample)
