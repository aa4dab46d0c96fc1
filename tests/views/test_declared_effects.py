"""Every view of the shipped view sets does, on the synthetic video world, what it declares (issue 16).

The renderer knows the scene (``video_scene(...)["frame_objs"]``), so each sample is also rendered with its
target removed: a ``destroyed`` transform must give the same output on both (no trace of the evidence), and the
occlusion / support mask must give exactly the target-free clip (filled with the background, never a constant
that marks the spot). ``unchanged`` views must change the pixels (or be skipped where the view set says so) and
keep the answer; ``mapped`` views must give the answer that the transformed scene really has.
"""
import numpy as np
import pytest
import torch

from mmrl.data.schema import LETTERS, ANSWER_ABSTAIN, Evidence, Media, Sample, VideoRef
from mmrl.data.synth_video import Balancer, VIDEO_QTYPES, render, video_scene
from mmrl.views import ViewSet, view_seed
from mmrl.views.transforms import DESTROYED, MAPPED, UNCHANGED, in_spans, frame_times
from views_testdata import VIEWS_DIR

SIZE, N, FPS = 56, 8, 4.0
SETS = ("bpo_video", "bpo_eval")


def scenes(qtype, k=6, n=N, seed=0):
    rng = np.random.default_rng([seed, VIDEO_QTYPES.index(qtype)])
    bal = Balancer(rng)
    return [video_scene(qtype, rng, bal, SIZE, n, FPS) for _ in range(k)]


def as_media(pixels, sid="s"):
    frames = torch.from_numpy(np.ascontiguousarray(pixels)).permute(0, 3, 1, 2).contiguous()
    return Media(sid, frames=frames, timestamps=[i / FPS for i in range(frames.shape[0])], source_size=(SIZE, SIZE),
                 fps=FPS)


def as_sample(sc, qtype, sid="s"):
    ev = sc["evidence"]
    return Sample(id=sid, question="?", candidates=list(sc["candidates"]), answer=sc["answer"], qtype=qtype,
                  video=VideoRef("x.mp4"), meta=dict(sc["meta"]),
                  evidence=Evidence([tuple(s) for s in ev["segments"]], [(t, list(b)) for t, b in ev["boxes"]],
                                    tuple(ev["source_size"])))


def without_target(sc):
    """The same clip with every evidence object (all the world's squares) removed."""
    return np.stack([render([], SIZE) for _ in sc["frame_objs"]])


def answer_of(qtype, frame_objs):
    """The answer a perfect viewer reads from a sequence of per-frame objects."""
    shown = [objs for objs in frame_objs if objs]
    if qtype == "count":
        return str(len(shown[0]))
    if qtype == "order":
        return shown[0][0][1]
    if qtype == "direction":
        (a, _), (b, _) = shown[0][0], shown[-1][0]
        dx, dy = b[0] - a[0], b[1] - a[1]
        return ("right" if dx > 0 else "left") if abs(dx) > abs(dy) else ("down" if dy > 0 else "up")
    raise ValueError(qtype)


def recover_perm(out: torch.Tensor, frames: torch.Tensor):
    """For each output frame, the index of an input frame with the same pixels (None if there is none)."""
    eq = (out[:, None] == frames[None]).flatten(2).all(-1)
    return [int(r.nonzero()[0]) if bool(r.any()) else None for r in eq]


def expand(vs, sc, qtype, seed=0):
    media, sample = as_media(sc["pixels"]), as_sample(sc, qtype)
    skipped = []
    views = vs.expand(sample, media, seed=seed, skipped=skipped)
    return media, sample, views, skipped


@pytest.fixture(scope="module", params=SETS)
def viewset(request):
    return ViewSet.load(VIEWS_DIR / f"{request.param}.yaml")


@pytest.mark.parametrize("qtype", VIDEO_QTYPES)
def test_destroyed_transforms_leave_no_trace_of_the_evidence(viewset, qtype):
    for i, sc in enumerate(scenes(qtype)):
        media, sample, views, _ = expand(viewset, sc, qtype, seed=i)
        empty = as_media(without_target(sc))
        for spec in viewset.views_for(sample):
            if spec.role == "anchor" or spec.info.effect != DESTROYED:
                continue
            v = next(v for v in views if v.name == spec.name)
            rng = torch.Generator().manual_seed(view_seed(i, sample.id, spec.name))  # the view's own seed
            on_empty = spec.info.fn(empty, sample, rng, **spec.params)
            # no trace: the view of the clip equals the view of the clip without its target
            assert torch.equal(v.media.frames, on_empty.frames), (qtype, spec.name)
            if spec.transform in ("occlude_box", "mask_evidence"):  # filled with the background itself
                assert torch.equal(v.media.frames, empty.frames), (qtype, spec.name)
            assert v.pixels_differ, (qtype, spec.name)


@pytest.mark.parametrize("qtype", ["count", "direction", "order"])
def test_mask_support_masks_the_evidence_segment_only(qtype):
    vs = ViewSet.load(VIEWS_DIR / "bpo_video.yaml")
    for sc in scenes(qtype):
        media, sample, _, _ = expand(vs, sc, qtype)
        out = vs.qtypes["count"][2].info.fn(media, sample, torch.Generator())  # mask_evidence
        inside = in_spans(frame_times(media), sample.evidence.segments)
        assert 0 < int(inside.sum()) < media.frames.shape[0]
        changed = ~(out.frames == media.frames).flatten(1).all(1)
        assert torch.equal(changed, inside)  # every evidence frame, nothing else


@pytest.mark.parametrize("qtype", VIDEO_QTYPES)
def test_unchanged_views_change_pixels_and_keep_the_answer(viewset, qtype):
    n_checked = 0
    for i, sc in enumerate(scenes(qtype)):
        media, sample, views, skipped = expand(viewset, sc, qtype, seed=i)
        by_name = {v.name: v for v in views}
        for spec in viewset.views_for(sample):
            if spec.role == "anchor" or spec.effect != UNCHANGED:
                continue
            if spec.name not in by_name:  # skipped: only where the view set says so, and counted
                assert spec.if_unchanged == "skip" and spec.name in [n for n, _ in skipped]
                continue
            v = by_name[spec.name]
            assert v.pixels_differ, (qtype, spec.name)
            assert v.expected == sample.answer_letter
            if spec.transform == "shuffle":  # the same frames in another order: the count survives
                perm = recover_perm(v.media.frames, media.frames)
                assert None not in perm and perm != list(range(len(perm)))
                assert answer_of(qtype, [sc["frame_objs"][j] for j in perm]) == sample.answer
            if spec.transform == "mask_outside":  # the evidence frames are untouched
                inside = in_spans(frame_times(media), sample.evidence.segments)
                assert torch.equal(v.media.frames[inside], media.frames[inside])
            n_checked += 1
    assert n_checked > 0


@pytest.mark.parametrize("qtype", ["direction", "order"])
def test_mapped_views_give_the_answer_of_the_transformed_scene(viewset, qtype):
    for i, sc in enumerate(scenes(qtype)):
        media, sample, views, _ = expand(viewset, sc, qtype, seed=i)
        for v in views:
            spec = next(s for s in viewset.views_for(sample) if s.name == v.name)
            if spec.effect != MAPPED:
                continue
            perm = recover_perm(v.media.frames, media.frames)
            truth = answer_of(qtype, [sc["frame_objs"][j] for j in perm])
            assert truth != sample.answer and v.pixels_differ
            assert sample.candidates[LETTERS.index(v.expected)] == truth


def test_static_clips_have_no_vacuous_view():
    vs = ViewSet.load(VIEWS_DIR / "bpo_video.yaml")
    for q in ("color", "location"):
        for sc in scenes(q, k=3):
            _, _, views, skipped = expand(vs, sc, q)
            assert not skipped and all(v.pixels_differ for v in views[1:])
            assert [v.expected for v in views][-1] == ANSWER_ABSTAIN


def test_destroyed_views_of_decoded_mp4s_match_the_decoded_empty_clip(tmp_path):
    """Through the codec: the occluded / support-masked clip is the empty scene to within codec noise (<= 4 of
    255), while the original differs from it by the object's contrast."""
    from mmrl.data.annotations import load_samples
    from mmrl.data.synth_video import make_video_world, write_mp4
    from mmrl.demo import WORLD
    from mmrl.media.decode import MediaBudget, load_media

    info = make_video_world(str(tmp_path), 10, 0, seed=3, **WORLD)
    samples, _ = load_samples(info["train"], str(tmp_path))
    write_mp4(str(tmp_path / "empty.mp4"), np.stack([render([], WORLD["size"])] * WORLD["n_frames"]), WORLD["fps"])
    budget = MediaBudget(nframes=WORLD["n_frames"])
    empty = load_media(Sample(id="e", question="?", candidates=["a"], answer="a", video=VideoRef(str(tmp_path / "empty.mp4"))),
                       budget).frames.int()
    vs = ViewSet.load(VIEWS_DIR / "bpo_video.yaml")
    checked = set()
    for s in samples:
        media = load_media(s, budget)
        for v in vs.expand(s, media):
            if v.name in ("occlude_obj", "mask_support"):
                assert (v.media.frames.int() - empty).abs().max() <= 4, (s.id, v.name)
                assert (media.frames.int() - empty).abs().max() > 100
                checked.add(s.qtype)
    assert checked == {"color", "location", "count"}
