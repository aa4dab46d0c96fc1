"""View cases that a plausible bug would get wrong silently: fractional spans reaching the clip's end, a
derangement of 2 frames, box scaling on non-square frames, noise mean, whole-word answer maps, view seeds."""
import pytest
import torch

from mmrl.data.schema import Media
from mmrl.views import apply_transform
from mmrl.views.transforms import clip_extent, fill_frames, frame_times, in_spans
from mmrl.views.viewset import ViewSet, map_answer, view_seed
from views_testdata import make_clip, make_image, make_sample


def run(name, media, sample, seed=0, **params):
    return apply_transform(name, media, sample, torch.Generator().manual_seed(seed), **params)


def masked(out, orig):
    return [i for i in range(orig.frames.shape[0]) if not torch.equal(out.frames[i], orig.frames[i])]


# ---- temporal -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("frac,frames", [([0.5, 1.0], [4, 5, 6, 7]),  # the last frame is inside [0.5, 1.0]
                                         ([0.0, 1.0], list(range(8))),
                                         ([0.0, 0.5], [0, 1, 2, 3]),
                                         ([0.25, 0.5], [2, 3]),
                                         ([0.8, 1.0], [7]),  # [3.2, 4.0) holds the frame at 3.5
                                         ([0.9, 1.0], [])])  # [3.6, 4.0) holds no frame time
def test_mask_segment_by_fraction_of_the_whole_clip(frac, frames):
    clip, s = make_clip(), make_sample()  # 8 frames at 0, 0.5, ..., 3.5 s: the clip covers [0, 4.0)
    assert masked(run("mask_segment", clip, s, frac=frac), clip) == frames


def test_mask_segment_frac_on_a_clip_that_starts_late():
    clip = make_clip(t=4)
    clip.timestamps = [10.0, 11.0, 12.0, 13.0]  # covers [10, 14): frac [0.5, 1] -> [12, 14)
    assert masked(run("mask_segment", clip, make_sample(), frac=[0.5, 1.0]), clip) == [2, 3]
    assert masked(run("mask_segment", clip, make_sample(), span=[11.0, 12.0]), clip) == [1]


def test_mask_segment_needs_exactly_one_of_span_and_frac():
    clip, s = make_clip(), make_sample()
    for kw in ({}, {"span": [0, 1], "frac": [0, 1]}):
        with pytest.raises(ValueError, match="exactly one of span"):
            run("mask_segment", clip, s, **kw)


def test_clip_extent_and_frame_times():
    clip = make_clip(t=3)
    clip.timestamps = [1.0, 1.5, 2.0]
    assert clip_extent(clip) == (1.0, 2.5)
    clip.timestamps = None  # fall back to i / fps
    assert frame_times(clip).tolist() == [0.0, 0.5, 1.0] and clip_extent(clip) == (0.0, 1.5)
    one = make_clip(t=1)
    one.timestamps = [3.0]
    assert clip_extent(one) == (3.0, 3.5)  # one frame lasts 1 / fps
    one.fps = None
    assert clip_extent(one) == (3.0, 3.0)
    with pytest.raises(ValueError, match="no timestamps and no fps"):
        frame_times(Media("x", frames=one.frames))
    with pytest.raises(ValueError, match="2 timestamps for 1 frames"):
        frame_times(Media("x", frames=one.frames, timestamps=[0.0, 1.0]))


@pytest.mark.parametrize("spans,inside", [([(1.0, 2.0)], [False, False, True, True, False]),
                                          ([(0.0, 0.5), (1.5, 1.5 + 2e-5)], [True, False, False, True, False]),
                                          ([], [False] * 5),
                                          ([(2.0, 9.0)], [False, False, False, False, True])])
def test_in_spans_half_open(spans, inside):
    assert in_spans(torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0], dtype=torch.float64), spans).tolist() == inside


@pytest.mark.parametrize("seed", range(12))
def test_shuffle_deranges_a_two_frame_clip(seed):
    clip = make_clip(t=2)
    out = run("shuffle", clip, make_sample(), seed=seed)
    assert torch.equal(out.frames[0], clip.frames[1]) and torch.equal(out.frames[1], clip.frames[0])
    assert out.timestamps == clip.timestamps


def test_shuffle_without_derange_may_keep_the_order_and_one_frame_stays():
    clip = make_clip(t=2)
    outs = [run("shuffle", clip, make_sample(), seed=s, derange=False).frames for s in range(12)]
    assert any(torch.equal(o, clip.frames) for o in outs)  # the identity is allowed then
    one = make_clip(t=1)
    assert torch.equal(run("shuffle", one, make_sample()).frames, one.frames)


@pytest.mark.parametrize("fill,value", [("black", 0), ("gray", 128), (7, 7), (255, 255)])
def test_fill_frames_constant_fills(fill, value):
    clip = make_clip(t=3)
    mask = torch.tensor([False, True, False])
    out = fill_frames(clip.frames, mask, fill)
    assert (out[1] == value).all() and torch.equal(out[[0, 2]], clip.frames[[0, 2]])
    with pytest.raises(ValueError, match="unknown fill"):
        fill_frames(clip.frames, mask, "pink")


def test_drop_frames_remove_keeps_timestamps_and_hold_repeats_the_last_kept():
    clip = make_clip()
    for seed in range(4):
        out = run("drop_frames", clip, make_sample(), seed=seed, p=0.75, min_keep=2)  # 8 * 0.25 = 2 frames
        idx = [int(t / 0.5) for t in out.timestamps]
        assert len(idx) == 2 and idx == sorted(idx)
        assert all(torch.equal(f, clip.frames[i]) for f, i in zip(out.frames, idx))
        held = run("drop_frames", clip, make_sample(), seed=seed, p=0.75, min_keep=2, mode="hold")
        src = [int((held.frames[:, None] == clip.frames[None]).flatten(2).all(-1)[i].float().argmax())
               for i in range(8)]
        # before the first kept frame: that frame; after: the latest kept frame at or before the position
        expect = [idx[0] if i < idx[0] else max(k for k in idx if k <= i) for i in range(8)]
        assert src == expect
    assert run("drop_frames", clip, make_sample(), p=0.9, min_keep=3, even=False).frames.shape[0] == 3
    assert run("drop_frames", clip, make_sample(), p=0.9, min_keep=3).frames.shape[0] == 4
    assert run("drop_frames", clip, make_sample(), p=0.0).frames.shape[0] == 8
    with pytest.raises(ValueError, match="mode must be"):
        run("drop_frames", clip, make_sample(), mode="zip")


# ---- spatial ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("h,w,source,box,rows,cols", [
    (56, 56, (224, 112), [40, 20, 80, 60], (10, 30), (10, 20)),  # x scale 1/4, y scale 1/2
    (28, 84, (168, 112), [20, 40, 60, 80], (10, 20), (10, 30)),  # x scale 1/2, y scale 1/4
    (28, 84, (84, 28), [0, 0, 84, 14], (0, 14), (0, 84)),  # same size: the box as given
])
def test_occlude_box_scales_width_and_height_separately(h, w, source, box, rows, cols):
    img = make_image(h=h, w=w)
    s = make_sample(boxes=[(0.0, box)], image=True)
    s.evidence.source_size = source
    zero = (run("occlude_box", img, s, fill=0).image == 0).all(0)
    expect = torch.zeros(h, w, dtype=torch.bool)
    expect[rows[0]:rows[1], cols[0]:cols[1]] = True
    assert torch.equal(zero, expect)


def test_occlude_box_falls_back_to_media_source_size_then_frame_size():
    img = make_image(h=28, w=56)
    s = make_sample(boxes=[(0.0, [8, 4, 16, 12])], image=True)
    s.evidence.source_size = None
    img.source_size = (112, 56)  # scale 1/2 in both
    expect = torch.zeros(28, 56, dtype=torch.bool)
    expect[2:6, 4:8] = True
    assert torch.equal((run("occlude_box", img, s, fill=0).image == 0).all(0), expect)
    img.source_size = None  # boxes already in frame pixels
    expect = torch.zeros(28, 56, dtype=torch.bool)
    expect[4:12, 8:16] = True
    assert torch.equal((run("occlude_box", img, s, fill=0).image == 0).all(0), expect)


def test_occlude_box_margin_and_value():
    img = make_image(h=56, w=56)
    s = make_sample(boxes=[(0.0, [40, 40, 60, 60])], image=True)  # -> [20, 20, 30, 30] on 56 px
    out = run("occlude_box", img, s, margin=2.0, fill=9).image
    expect = torch.zeros(56, 56, dtype=torch.bool)
    expect[18:32, 18:32] = True
    assert torch.equal((out == 9).all(0), expect)


def test_occlude_box_on_video_takes_the_nearest_box_per_frame():
    clip = make_clip(t=4)  # frames at 0, 0.5, 1.0, 1.5
    s = make_sample(boxes=[(0.0, [0, 0, 20, 20]), (1.2, [80, 80, 100, 100])])  # scale 1/2
    zero = (run("occlude_box", clip, s, fill=0).frames == 0).all(1)
    first = torch.zeros(56, 56, dtype=torch.bool)
    first[0:10, 0:10] = True
    second = torch.zeros(56, 56, dtype=torch.bool)
    second[40:50, 40:50] = True
    assert [torch.equal(zero[i], first) for i in range(4)] == [True, True, False, False]
    assert [torch.equal(zero[i], second) for i in range(4)] == [False, False, True, True]


@pytest.mark.parametrize("mean,std", [(10.0, 0.0), (-20.0, 0.0), (0.0, 0.0)])
def test_noise_mean_shifts_every_pixel(mean, std):
    img = make_image()
    out = run("noise", img, make_sample(image=True), mean=mean, std=std).image
    assert torch.equal(out, (img.image.float() + mean).round().clamp(0, 255).to(torch.uint8))


def test_noise_std_scales_seeded_gaussian():
    img = make_image(h=112, w=112)
    img.image = torch.full((3, 112, 112), 128, dtype=torch.uint8)
    out = run("noise", img, make_sample(image=True), seed=5, std=10.0, mean=5.0).image.float()
    assert abs(float(out.mean()) - 133.0) < 0.5 and abs(float(out.std()) - 10.0) < 0.5
    g = torch.Generator().manual_seed(5)
    assert torch.equal(out, (128 + torch.randn((1, 3, 112, 112), generator=g)[0] * 10 + 5).round().clamp(0, 255))


def test_occlude_region_fractions_of_a_non_square_frame():
    img = make_image(h=40, w=80)
    out = run("occlude_region", img, make_sample(image=True), box=(0.25, 0.5, 0.75, 1.0), value=3).image
    expect = torch.zeros(40, 80, dtype=torch.bool)
    expect[20:40, 20:60] = True
    assert torch.equal((out == 3).all(0), expect)


def test_gray_value_and_patch_mask_value():
    img = make_image(h=28, w=28)
    assert (run("gray", img, make_sample(image=True), value=40).image == 40).all()
    assert (run("patch_mask", img, make_sample(image=True), p=1.0, value=77).image == 77).all()
    assert torch.equal(run("patch_mask", img, make_sample(image=True), p=0.0, value=77).image, img.image)


# ---- answer maps and seeds ----------------------------------------------------------------------------------

MAP = {"left": "right", "right": "left", "left turn": "u turn"}
MAP_CASES = [
    ("left", ["left", "right"], "B"),
    ("moves left", ["moves left", "moves right"], "B"),
    ("leftover", ["leftover", "rightover"], None),  # a key inside a longer word is not swapped
    ("a left turn", ["a left turn", "a right turn", "a u turn"], "C"),  # the longest key wins
    ("left then right", ["left then right", "right then left"], "B"),  # every key swapped at once
    ("  LEFT ", ["Left", "Right"], "B"),  # case and spacing ignored
    ("up", ["up", "down"], None),
    ("left", ["left", "up"], None),  # maps to no candidate
]


@pytest.mark.parametrize("answer,cands,letter", MAP_CASES)
def test_map_answer_whole_words_longest_first(answer, cands, letter):
    assert map_answer(answer, MAP, cands) == letter


def test_map_answer_whole_answer_lookup_wins_and_empty_map():
    assert map_answer("left turn", {"left turn": "stop", "left": "right"}, ["left turn", "right turn", "stop"]) == "C"
    assert map_answer("left", {}, ["left", "right"]) is None


def test_view_seed_depends_on_seed_sample_and_view_name():
    base = view_seed(0, "s1", "shuffle")
    assert base == 6086730494684257263 and view_seed(3, "clip-7", "reverse") == 1164264151695952469
    assert len({base, view_seed(1, "s1", "shuffle"), view_seed(0, "s2", "shuffle"),
                view_seed(0, "s1", "shuffle2")}) == 4
    assert 0 <= base < 2**63


def test_two_views_with_one_transform_draw_different_randomness():
    vs = ViewSet.from_dict({"qtypes": {"default": [{"name": "shuf_a", "role": "stable", "transform": "shuffle"},
                                                   {"name": "shuf_b", "role": "stable", "transform": "shuffle"}]}})
    clip, s = make_clip(t=8), make_sample()
    views = {v.name: v for v in vs.expand(s, clip, seed=0)}
    assert not torch.equal(views["shuf_a"].media.frames, views["shuf_b"].media.frames)
    assert torch.equal(views["shuf_b"].media.frames, run("shuffle", clip, s, seed=view_seed(0, s.id, "shuf_b")).frames)


# ---- mutation-testing finds (docs/testing.md) -------------------------------------------------------------------


def test_hour_long_videos_keep_sub_millisecond_time_precision():
    """Times are float64: at 3600 s float32 is 0.24 ms coarse, far above TIME_EPS (10 us)."""
    clip = make_clip(t=1)
    clip.timestamps = [3600.3]
    assert in_spans(frame_times(clip), [(3600.30002, 3601.0)]).tolist() == [False]  # starts just after the frame
    times = torch.tensor([3600.3], dtype=torch.float64)
    assert in_spans(times, [(3600.300015, 3601.0)]).tolist() == [False]
    assert in_spans(times, [(3600.0, 3600.300015)]).tolist() == [True]  # ends just after the frame
    assert frame_times(clip).dtype == torch.float64 and frame_times(Media("x", frames=clip.frames, fps=2.0)).dtype == torch.float64


def test_in_spans_boundaries_and_dtype():
    t0 = torch.tensor([0.0], dtype=torch.float64)
    assert in_spans(t0, [(1e-5, 1.0)]).tolist() == [True]  # start - TIME_EPS == the frame time: inside
    assert in_spans(t0, [(1e-5, 1e-5)]).tolist() == [False]  # end - TIME_EPS == the frame time: outside
    assert in_spans(t0, []).dtype == torch.bool and in_spans(t0, [(0.0, 1.0)]).dtype == torch.bool


def test_clip_extent_uses_the_frame_spacing_over_the_fps():
    clip = make_clip(t=2)
    clip.timestamps, clip.fps = [0.0, 0.5], 1.0  # spacing 0.5 s even though fps says 1
    assert clip_extent(clip) == (0.0, 1.0)


def test_mask_segment_frac_is_relative_to_a_late_start():
    clip = make_clip(t=4)
    clip.timestamps = [10.0, 11.0, 12.0, 13.0]  # covers [10, 14): frac [0, 0.5] -> [10, 12)
    assert masked(run("mask_segment", clip, make_sample(), frac=[0.0, 0.5]), clip) == [0, 1]
    with pytest.raises(ValueError, match=r"^give exactly one of span=\[start, end\] \(seconds\) or frac=\[a, b\] \(of the clip\)$"):
        run("mask_segment", clip, make_sample())


def test_fill_frames_defaults_black_and_blur_sigma_six():
    from mmrl.views.transforms import gaussian_blur

    clip = make_clip(t=3)
    mask = torch.tensor([True, False, True])
    assert (fill_frames(clip.frames, mask)[mask] == 0).all()
    assert torch.equal(fill_frames(clip.frames, mask, "blur")[mask], gaussian_blur(clip.frames[mask], 6.0))
    assert not torch.equal(gaussian_blur(clip.frames[mask], 6.0), gaussian_blur(clip.frames[mask], 7.0))


def test_short_segment_between_frames_masks_the_frame_nearest_its_middle():
    clip = make_clip()  # frames every 0.5 s
    assert masked(run("mask_evidence", clip, make_sample(segments=[(2.1, 2.2)])), clip) == [4]  # middle 2.15 -> 2.0
    assert masked(run("mask_evidence", clip, make_sample(segments=[(2.3, 2.4)])), clip) == [5]  # middle 2.35 -> 2.5
    with pytest.raises(ValueError, match=r"^sample 's1' has no evidence segments$"):
        run("mask_evidence", clip, make_sample(segments=[]))


def test_view_transform_declarations_are_checked():
    from mmrl.views import VIEW_TRANSFORMS, transform_info, view_transform

    with pytest.raises(ValueError, match=r"^view transform effect must be one of .*got 'sideways'$"):
        view_transform("t_bad_effect", effect="sideways")
    with pytest.raises(ValueError, match=r"^view transform needs must be among \('segments', 'boxes'\), got \('frames',\)$"):
        view_transform("t_bad_needs", needs=("frames",))
    VIEW_TRANSFORMS._items.pop("t_callable_needs", None)
    fn = lambda m, s, r: m  # noqa: E731
    assert view_transform("t_callable_needs", needs=lambda p: ("boxes",) if p.get("b") else ())(fn) is fn
    assert transform_info("t_callable_needs").needs_for({"b": 1}) == ("boxes",)


def test_expand_checks_the_decoded_media_kind():
    """A video sample whose media decoded as an image cannot take a video-only view."""
    vs = ViewSet.from_dict({"qtypes": {"default": [{"name": "rev", "role": "sensitive", "transform": "reverse",
                                                    "effect": "unknown"}]}})
    from mmrl.errors import DataError

    with pytest.raises(DataError, match=r"view 'rev' \(transform 'reverse'\) does not apply to image media"):
        vs.expand(make_sample(), make_image())


def test_span_edges_keep_float64_precision_at_an_hour():
    """float32 rounds 3600.3 up to 3600.30005: a frame exactly at a span's start would fall out, and one 20 us
    before a span's end would too."""
    assert in_spans(torch.tensor([3600.3], dtype=torch.float64), [(3600.3, 3601.0)]).tolist() == [True]
    assert in_spans(torch.tensor([3600.30004], dtype=torch.float64), [(3600.0, 3600.30006)]).tolist() == [True]


def test_box_mask_default_margin_message_and_untimed_video():
    from mmrl.views.image_transforms import box_mask

    img = make_image(h=56, w=56)
    s = make_sample(boxes=[(0.0, [40, 40, 60, 60])], image=True)  # -> [20, 20, 30, 30]
    expect = torch.zeros(56, 56, dtype=torch.bool)
    expect[20:30, 20:30] = True
    assert torch.equal(box_mask(img, s)[0], expect)  # no margin by default
    with pytest.raises(ValueError, match=r"^sample 's1' has no evidence boxes$"):
        box_mask(img, make_sample(boxes=[], image=True))
    clip = make_clip(t=2)
    clip.timestamps = None  # frames without times: every box on every frame
    two = make_sample(boxes=[(0.0, [0, 0, 20, 20]), (9.0, [80, 80, 100, 100])])
    m = box_mask(clip, two)
    assert bool(m[:, 0:10, 0:10].all()) and bool(m[:, 40:50, 40:50].all()) and int(m.sum()) == 2 * 2 * 100
