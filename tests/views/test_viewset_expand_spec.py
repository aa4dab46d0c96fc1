"""``ViewSet`` per sample as a specification: the views ``expand`` returns (order, fields, seeds), what happens to a
view that leaves the pixels unchanged, and every per-sample message written out whole with the sample, set and view
it names."""
from dataclasses import replace

import pytest
import torch

from mmrl.data.schema import Media
from mmrl.errors import ConfigError, DataError
from mmrl.views import ViewSet, view_transform
from mmrl.views.transforms import VIEW_TRANSFORMS
from mmrl.views.viewset import view_seed
from views_testdata import make_clip, make_image, make_sample


def vset(*views, q="default", **top):
    return ViewSet.from_dict({"qtypes": {q: list(views)}, **top}, name="vs", source="vs.yaml")


def static_clip(t=4):
    c = make_clip(t=t)
    c.frames = c.frames[:1].expand(t, -1, -1, -1).contiguous()
    return c


def err(fn, *a, **kw):
    with pytest.raises(DataError) as e:
        fn(*a, **kw)
    return str(e.value)


@pytest.fixture(scope="module")
def test_transforms():
    """Transforms that fail, return a wrong type, or record the generator's first draw."""
    names = ("spec_fails", "spec_not_media", "spec_draw", "spec_index")
    for n in names:
        VIEW_TRANSFORMS._items.pop(n, None)

    @view_transform("spec_fails")
    def fails(media, sample, rng):
        raise ValueError("no frames left")

    @view_transform("spec_not_media")
    def not_media(media, sample, rng):
        return 42

    @view_transform("spec_draw", effect="unchanged")
    def draw(media, sample, rng, scale=1):
        v = int(torch.randint(1, 255, (1,), generator=rng)) * scale
        return replace(media, frames=torch.full_like(media.frames, v % 256))

    @view_transform("spec_index")
    def index(media, sample, rng):
        return [][1]

    yield names
    for n in names:
        VIEW_TRANSFORMS._items.pop(n, None)


# ---- what expand returns ------------------------------------------------------------------------------------

def test_expand_returns_the_anchor_then_each_view_with_its_fields(test_transforms):
    vs = vset({"name": "d1", "role": "stable", "transform": "spec_draw", "weight": 0.25},
              {"name": "blank", "role": "abstain", "transform": "gray", "params": {"value": 7}, "weight": 2},
              {"name": "rev", "role": "sensitive", "transform": "reverse", "answer_map": {"left": "right"}})
    clip, s = make_clip(), make_sample(sample_id="clip-9", candidates=["left", "right"], answer="left")
    views = vs.expand(s, clip, seed=3)
    assert [(v.name, v.role, v.transform, v.weight, v.expected, v.pixels_differ) for v in views] == [
        ("original", "anchor", "identity", 1.0, "A", False),
        ("d1", "stable", "spec_draw", 0.25, "A", True),
        ("blank", "abstain", "gray", 2.0, "abstain", True),
        ("rev", "sensitive", "reverse", 1.0, "B", True)]
    assert views[0].media is clip and (views[2].media.frames == 7).all()
    # each view's generator is seeded by (seed, sample id, view name)
    g = torch.Generator().manual_seed(view_seed(3, "clip-9", "d1"))
    assert int(views[1].media.frames.flatten()[0]) == int(torch.randint(1, 255, (1,), generator=g)) % 256
    assert view_seed(3, "clip-9", "d1") == int.from_bytes(
        __import__("hashlib").blake2b(b"3|clip-9|d1", digest_size=8).digest(), "little") & ((1 << 63) - 1)


def test_the_anchor_declared_later_still_comes_first_and_sets_the_anchor_answer():
    vs = vset({"name": "keep", "role": "stable", "transform": "shuffle", "effect": "mapped",
               "answer_map": {"left": "left"}, "if_unchanged": "keep"},
              {"name": "mine", "role": "anchor"})
    views = vs.expand(make_sample(), static_clip())
    assert [(v.name, v.expected, v.pixels_differ) for v in views] == [("mine", "A", False), ("keep", "A", False)]


@pytest.mark.parametrize("transform, why", [
    ("spec_fails", "transform 'spec_fails' failed: no frames left"),
    ("spec_index", "transform 'spec_index' failed: list index out of range"),
    ("spec_not_media", "transform 'spec_not_media' returned int, not Media"),
])
def test_a_failing_transform_names_sample_set_view_and_transform(test_transforms, transform, why):
    vs = vset({"name": "bad", "role": "stable", "transform": transform})
    assert err(vs.expand, make_sample(sample_id="s-7"), make_clip()) == f"sample 's-7': view set 'vs', view 'bad': {why}"


# ---- a view that leaves the pixels unchanged -----------------------------------------------------------------

WHY = ("sample 's1': view set 'vs', view 'v': transform '{t}' leaves this sample's pixels unchanged (e.g. a static "
       "clip), but the view declares {what}; set 'if_unchanged: skip' to leave it out on such samples, or choose a "
       "transform that changes them")


@pytest.mark.parametrize("view, what", [
    ({"role": "sensitive", "transform": "reverse", "answer_map": {"left": "right", "right": "left"}},
     "role 'sensitive', a mapped answer (B instead of A)"),
    ({"role": "abstain", "transform": "shuffle", "effect": "destroyed"}, "effect 'destroyed', role 'abstain'"),
    ({"role": "stable", "transform": "shuffle", "effect": "destroyed"}, "effect 'destroyed'"),
    ({"role": "stable", "transform": "reverse", "answer_map": {"left": "right"}, "if_unchanged": "keep"},
     "a mapped answer (B instead of A)"),
    ({"role": "stable", "transform": "reverse", "answer_map": {"up": "down"}},
     "a mapped answer (None instead of A)"),
    ({"role": "stable", "transform": "shuffle", "effect": "unchanged", "if_unchanged": "error"},
     "if_unchanged: error"),
    ({"role": "sensitive", "transform": "shuffle", "effect": "unknown", "if_unchanged": "error"},
     "role 'sensitive'"),
])
def test_unchanged_pixels_where_the_view_needs_a_change_is_an_error_naming_why(view, what):
    vs = vset({"name": "v", **view})
    s = make_sample(candidates=["left", "right"], answer="left")
    assert err(vs.expand, s, static_clip()) == WHY.format(t=view["transform"], what=what)


@pytest.mark.parametrize("view", [
    {"role": "stable", "transform": "shuffle", "effect": "unchanged"},                    # keep by default
    {"role": "stable", "transform": "shuffle", "effect": "unknown"},
    {"role": "stable", "transform": "reverse", "answer_map": {"left": "left"}},           # mapped to the same answer
    {"role": "stable", "transform": "shuffle", "effect": "unchanged", "if_unchanged": "keep"},
])
def test_unchanged_pixels_are_kept_where_nothing_needs_a_change(view):
    views = vset({"name": "v", **view}).expand(make_sample(candidates=["left", "right"]), static_clip())
    assert [(v.name, v.pixels_differ) for v in views] == [("original", False), ("v", False)]


@pytest.mark.parametrize("view", [
    {"role": "sensitive", "transform": "reverse", "answer_map": {"left": "right"}, "if_unchanged": "skip"},
    {"role": "abstain", "transform": "shuffle", "effect": "destroyed", "if_unchanged": "skip"},
    {"role": "stable", "transform": "shuffle", "effect": "unchanged", "if_unchanged": "skip"},
])
def test_skip_leaves_the_view_out_and_records_why(view):
    vs = vset({"name": "v", **view}, {"name": "blank", "role": "abstain", "transform": "gray"})
    skipped = []
    views = vs.expand(make_sample(candidates=["left", "right"]), static_clip(), skipped=skipped)
    assert [v.name for v in views] == ["original", "blank"]
    assert skipped == [("v", f"view set 'vs', view 'v': transform '{view['transform']}' leaves this sample's pixels "
                             "unchanged (e.g. a static clip)")]
    assert [v.name for v in vs.expand(make_sample(candidates=["left", "right"]), static_clip())] == ["original",
                                                                                                     "blank"]


# ---- per-sample checks --------------------------------------------------------------------------------------

def test_views_for_picks_the_qtype_then_default_and_names_what_is_missing():
    vs = ViewSet.from_dict({"qtypes": {"color": [{"name": "g", "role": "stable", "transform": "gray"}],
                                       "count": [{"name": "b", "role": "stable", "transform": "blur"}]}}, name="vs")
    assert [s.name for s in vs.views_for(make_sample(qtype="count"))] == ["original", "b"]
    assert err(vs.views_for, make_sample(qtype="order", sample_id="q1")) == (
        "sample 'q1': view set 'vs': no views for qtype 'order' and no 'default' entry (qtypes: ['color', 'count'])")
    both = vset({"name": "d", "role": "stable", "transform": "blur"})
    both.qtypes["color"] = vset({"name": "c", "role": "stable", "transform": "gray"}).qtypes["default"]
    assert [s.name for s in both.views_for(make_sample(qtype="color"))] == ["original", "c"]
    assert [s.name for s in both.views_for(make_sample(qtype="other"))] == ["original", "d"]


@pytest.mark.parametrize("view, kw, msg", [
    ({"name": "me", "role": "abstain", "transform": "mask_evidence"}, {"segments": []},
     "view set 'vs', view 'me' (transform 'mask_evidence') needs evidence segments, which the sample lacks"),
    ({"name": "ob", "role": "stable", "transform": "occlude_box", "effect": "unknown"}, {"boxes": []},
     "view set 'vs', view 'ob' (transform 'occlude_box') needs evidence boxes, which the sample lacks"),
    ({"name": "rv", "role": "stable", "transform": "reverse", "effect": "unchanged"}, {"image": True},
     "view set 'vs', view 'rv' (transform 'reverse') does not apply to image media"),
])
def test_per_sample_checks_name_sample_set_view_and_transform(view, kw, msg):
    vs = vset(view)
    assert err(vs.views_for, make_sample(sample_id="x3", **kw)) == f"sample 'x3': {msg}"
    assert err(vs.check, [make_sample(sample_id="ok")] * (not kw.get("image")) + [make_sample(sample_id="x3", **kw)]) \
        == f"sample 'x3': {msg}"


def test_the_decoded_media_kind_is_checked_too():
    vs = vset({"name": "rv", "role": "stable", "transform": "reverse", "effect": "unchanged"})
    s = make_sample(sample_id="v1")  # declares a video, but the decoder handed back an image
    assert err(vs.expand, s, make_image()) == (
        "sample 'v1': view set 'vs', view 'rv' (transform 'reverse') does not apply to image media")
    ok = vset({"name": "g", "role": "stable", "transform": "gray"})
    assert [v.name for v in ok.expand(make_sample(image=True), make_image())] == ["original", "g"]
    assert [v.name for v in ok.views_for(replace(make_sample(), video=None))] == ["original", "g"]  # no media kind


def test_expected_for_refuses_an_answer_outside_the_candidates():
    vs = vset({"name": "blank", "role": "abstain", "transform": "gray"})
    s = make_sample(sample_id="s9", candidates=["a", "b"], answer="c")
    assert err(vs.expected_for, vs.qtypes["default"][0], s) == (
        "sample 's9': answer 'c' is not among the candidates ['a', 'b', 'cannot be determined']")


@pytest.mark.parametrize("meta, expected", [
    ({"rev": "Right "}, "B"), ({"rev": "sideways"}, None), ({"rev": None}, "B"), ({}, "B"), ({"other": "left"}, "B")])
def test_a_mapped_answer_reads_the_meta_key_first_then_the_map(meta, expected):
    vs = vset({"name": "r", "role": "sensitive", "transform": "reverse", "answer_meta": "rev",
               "answer_map": {"left": "right"}})
    s = make_sample(candidates=["left", "right"], answer="left")
    s.meta.update(meta)
    assert vs.expected_for(vs.qtypes["default"][1], s) == expected
    meta_only = vset({"name": "r", "role": "sensitive", "transform": "reverse", "answer_meta": "rev"})
    assert meta_only.expected_for(meta_only.qtypes["default"][1], s) == (expected if meta.get("rev") else None)


def test_weights_under_an_algorithm_that_ignores_them():
    vs = vset({"name": "g", "role": "stable", "transform": "gray", "weight": 0.5})
    with pytest.raises(ConfigError) as e:
        vs.check_weights_used("grpo", False)
    assert str(e.value) == ("view set 'vs' (vs.yaml): qtype 'default', view 'g' has weight 0.5, but algorithm 'grpo' "
                            "does not use view weights (only bpo scales a view's advantage by it); remove the weight")
    vs.check_weights_used("bpo", True)
    vset({"name": "g", "role": "stable", "transform": "gray"}).check_weights_used("grpo", False)
    mem = ViewSet.from_dict({"qtypes": {"c": [{"name": "g", "role": "stable", "transform": "gray", "weight": 2}]}},
                            name="m")
    with pytest.raises(ConfigError, match=r"^view set 'm' \(in memory\): qtype 'c', view 'g' has weight 2, "):
        mem.check_weights_used("dapo", False)


def test_roles_abstain_and_repr():
    vs = vset({"name": "g", "role": "stable", "transform": "gray"}, q="color")
    assert vs.roles == {"anchor", "stable"} and not vs.has_abstain
    assert vs.candidates_for(make_sample(candidates=["a", "b"], answer="a")) == ["a", "b"]
    assert repr(vs) == "ViewSet('vs', qtypes=['color'], abstain=False)"
    ab = vset({"name": "b", "role": "abstain", "transform": "gray"}, abstain_text="Unknown")
    assert repr(ab) == "ViewSet('vs', qtypes=['default'], abstain=True)"
    assert ab.candidates_for(make_sample(candidates=["a", " unknown"], answer="a")) == ["a", " unknown"]
    assert isinstance(ab.expand(make_sample(candidates=["a"], answer="a"), make_clip())[1].media, Media)


def test_the_media_kind_a_sample_declares_is_checked_and_none_checks_nothing(test_transforms):
    VIEW_TRANSFORMS._items.pop("spec_image_only", None)
    view_transform("spec_image_only", effect="unchanged", kinds=("image",))(lambda media, sample, rng: media)
    try:
        vs = vset({"name": "io", "role": "stable", "transform": "spec_image_only"})
        assert err(vs.views_for, make_sample(sample_id="v2")) == (
            "sample 'v2': view set 'vs', view 'io' (transform 'spec_image_only') does not apply to video media")
        assert [s.name for s in vs.views_for(make_sample(image=True))] == ["original", "io"]
    finally:
        VIEW_TRANSFORMS._items.pop("spec_image_only", None)
    rv = vset({"name": "rv", "role": "stable", "transform": "reverse", "effect": "unchanged"})
    assert [s.name for s in rv.views_for(replace(make_sample(), video=None))] == ["original", "rv"]  # no media: no kind


def test_the_anchor_expects_the_answer_whatever_effect_it_declares():
    vs = vset({"name": "o", "role": "anchor", "effect": "unknown"}, {"name": "g", "role": "stable", "transform": "gray",
                                                                      "effect": "unknown"})
    s = make_sample(candidates=["left", "right"], answer="right")
    assert [vs.expected_for(x, s) for x in vs.qtypes["default"]] == ["B", None]


def test_expand_draws_with_seed_zero_by_default(test_transforms):
    vs = vset({"name": "d1", "role": "stable", "transform": "spec_draw"})
    a, b = vs.expand(make_sample(), make_clip()), vs.expand(make_sample(), make_clip(), seed=0)
    assert torch.equal(a[1].media.frames, b[1].media.frames)
    assert not torch.equal(a[1].media.frames, vs.expand(make_sample(), make_clip(), seed=1)[1].media.frames)


def test_pixels_and_with_pixels_of_untimed_and_empty_media():
    from mmrl.views.transforms import pixels, with_pixels

    untimed = Media("u", frames=torch.zeros(2, 3, 4, 4, dtype=torch.uint8), fps=2.0)
    out = with_pixels(untimed, torch.ones(2, 3, 4, 4, dtype=torch.uint8))
    assert out.timestamps is None and int(out.frames.sum()) == 96
    with pytest.raises(ValueError) as e:
        pixels(Media("m9"))
    assert str(e.value) == "media of sample 'm9' has neither frames nor an image"
