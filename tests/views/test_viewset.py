import textwrap

import pytest
import torch

from mmrl.errors import ConfigError, DataError
from mmrl.views import ViewSet, map_answer, view_transform
from views_testdata import VIEWS_DIR, make_clip, make_image, make_sample


@pytest.fixture(scope="module")
def bpo():
    return ViewSet.load(VIEWS_DIR / "bpo_video.yaml")


def load_text(tmp_path, text, name="myset"):
    p = tmp_path / f"{name}.yaml"
    p.write_text(textwrap.dedent(text))
    return ViewSet.load(p)


def test_shipped_view_sets_load():
    for f in ("bpo_video", "tgrpo", "image_interventions"):
        vs = ViewSet.load(VIEWS_DIR / f"{f}.yaml")
        assert vs.name == f
        for specs in vs.qtypes.values():
            assert specs[0].role == "anchor" and specs[0].transform == "identity"


def test_bpo_covers_the_synthetic_question_types(bpo):
    assert {"color", "location", "count", "direction", "order", "default"} <= set(bpo.qtypes)
    roles = {q: [s.role for s in bpo.qtypes[q]] for q in bpo.qtypes}
    for q in ("color", "location", "count", "direction", "order"):
        assert roles[q] == ["anchor", "stable", "sensitive", "abstain"]
    assert [s.transform for s in bpo.qtypes["direction"]] == ["identity", "mask_outside", "reverse", "gray"]
    assert [s.transform for s in bpo.qtypes["count"]] == ["identity", "shuffle", "mask_evidence", "gray"]
    assert [s.transform for s in bpo.qtypes["color"]] == ["identity", "noise", "occlude_box", "gray"]
    assert bpo.has_abstain and bpo.abstain_text == "cannot be determined"


def test_expand_direction_expected_answers(bpo, clip, sample):
    views = bpo.expand(sample, clip, seed=0)
    assert [v.name for v in views] == ["original", "mask_irrelevant", "reverse", "blank"]
    assert views[0].media is clip  # anchor: the original media, not a copy
    assert bpo.candidates_for(sample) == ["left", "right", "up", "down", "cannot be determined"]
    assert {v.name: v.expected for v in views} == {"original": "A", "mask_irrelevant": "A", "reverse": "B",
                                                   "blank": "abstain"}
    assert torch.equal(views[2].media.frames, clip.frames.flip(0))
    assert (views[3].media.frames == 128).all()
    assert [v.transform for v in views] == ["identity", "mask_outside", "reverse", "gray"]


def test_expected_sensitive_unknown_and_stable_unchanged(bpo, clip):
    s = make_sample(qtype="color", candidates=["red", "green", "blue"], answer="blue")
    views = {v.name: v for v in bpo.expand(s, clip)}
    assert views["noise_mild"].expected == "C" and views["occlude_obj"].expected is None
    assert views["blank"].expected == "abstain"


def test_expand_is_deterministic_per_seed_sample_and_view(bpo, clip):
    s = make_sample(qtype="color", candidates=["red", "blue"], answer="red")
    a, b = bpo.expand(s, clip, seed=1), bpo.expand(s, clip, seed=1)
    assert all(torch.equal(x.media.frames, y.media.frames) for x, y in zip(a, b))
    others = [bpo.expand(s, clip, seed=k)[1].media.frames for k in range(2, 6)]
    assert any(not torch.equal(a[1].media.frames, o) for o in others)
    s2 = make_sample(qtype="color", sample_id="s2", candidates=["red", "blue"], answer="red")
    assert not torch.equal(bpo.expand(s2, clip, seed=1)[1].media.frames, a[1].media.frames) or \
        not torch.equal(bpo.expand(s2, clip, seed=9)[1].media.frames, a[1].media.frames)


def test_order_answer_map_and_unknown_when_undecided(bpo, clip):
    s = make_sample(qtype="order", candidates=["The red ball moves first", "The red ball moves last"],
                    answer="The red ball moves first")
    assert {v.name: v.expected for v in bpo.expand(s, clip)}["reverse"] == "B"
    s2 = make_sample(qtype="order", candidates=["red ball", "blue ball"], answer="red ball")
    assert {v.name: v.expected for v in bpo.expand(s2, clip)}["reverse"] is None
    s2.meta["reversed_answer"] = "Blue ball"  # the synthetic world's counterfactual label wins
    assert {v.name: v.expected for v in bpo.expand(s2, clip)}["reverse"] == "B"
    s2.meta["reversed_answer"] = "green ball"  # not a candidate: unknown
    assert {v.name: v.expected for v in bpo.expand(s2, clip)}["reverse"] is None


def test_map_answer():
    amap = {"left": "right", "right": "left"}
    assert map_answer("Left", amap, ["left", "right"]) == "B"
    assert map_answer("moves right", amap, ["moves left", "moves right"]) == "A"
    assert map_answer("still", amap, ["still", "left"]) is None
    assert map_answer("still", {**amap, "still": "still"}, ["left", "still"]) == "B"
    assert map_answer("left", amap, ["left", "up"]) is None


def test_default_qtype_and_missing_default(bpo, clip, tmp_path):
    s = make_sample(qtype="mystery")
    assert [v.name for v in bpo.expand(s, clip)] == ["original", "blank"]
    vs = load_text(tmp_path, """
        qtypes:
          color: [{name: blank, role: abstain, transform: gray}]
    """)
    with pytest.raises(DataError, match="sample 's1'.*view set 'myset'.*no views for qtype 'mystery'"):
        vs.views_for(s)


def test_tgrpo(clip, sample):
    vs = ViewSet.load(VIEWS_DIR / "tgrpo.yaml")
    views = vs.expand(sample, clip, seed=0)
    assert [(v.name, v.role, v.expected) for v in views] == [("original", "anchor", "A"), ("shuffled", "shuffled", "A")]
    assert not vs.has_abstain and vs.candidates_for(sample) == sample.candidates
    assert not torch.equal(views[1].media.frames, clip.frames)


def test_image_interventions():
    vs = ViewSet.load(VIEWS_DIR / "image_interventions.yaml")
    s = make_sample(qtype="color", candidates=["red", "blue"], answer="red", image=True)
    img = make_image()
    views = vs.expand(s, img, seed=0)
    assert [v.name for v in views] == ["original", "blur_mild", "patch_mask", "occlude_obj", "blank"]
    assert all(v.media.image is not None and v.media.image.shape == img.image.shape for v in views)
    assert [v.expected for v in views] == ["A", "A", None, None, "abstain"]
    assert vs.candidates_for(s)[-1] == "cannot be determined"


def test_abstain_text_configurable_and_not_duplicated(tmp_path):
    vs = load_text(tmp_path, """
        abstain_text: not enough information
        qtypes:
          default: [{name: blank, role: abstain, transform: gray}]
    """)
    assert vs.candidates_for(make_sample(candidates=["a", "b"], answer="a")) == ["a", "b", "not enough information"]
    s = make_sample(candidates=["a", "Not enough information"], answer="a")
    assert vs.candidates_for(s) == ["a", "Not enough information"]
    over = ViewSet.load(tmp_path / "myset.yaml", abstain_text="unanswerable")  # e.g. from the run config
    assert over.abstain_text == "unanswerable"
    assert over.candidates_for(make_sample(candidates=["a"], answer="a")) == ["a", "unanswerable"]


@pytest.mark.parametrize("view, match", [
    ("{name: v1, role: stable, transform: warp_drive}", r"view set 'myset'.*view 'v1'.*unknown view transform 'warp_drive'.*known: .*reverse"),
    ("{name: v1, role: bystander, transform: gray}", r"view set 'myset'.*view 'v1'.*unknown role 'bystander'"),
    ("{name: v1, role: stable, transform: gray, params: {colour: 3}}", r"view 'v1'.*bad params"),
    ("{name: v1, role: sensitive, transform: reverse}", r"view 'v1'.*answer_map"),
    ("{name: v1, role: abstain, transform: shuffle}", r"view 'v1'.*role 'abstain' needs effect 'destroyed'"),
    ("{name: v1, role: anchor, transform: reverse, effect: unknown}", r"view 'v1'.*must be 'identity'"),
    ("{name: v1, role: stable, transform: gray, effect: sideways}", r"view 'v1'.*unknown effect"),
    ("{name: v1, role: stable, transform: gray, colour: red}", r"view 'v1'.*unknown keys \['colour'\]"),
    ("{role: stable, transform: gray}", r"view #0.*needs a string 'name'"),
])
def test_load_validation_errors(tmp_path, view, match):
    with pytest.raises(ConfigError, match=match):
        load_text(tmp_path, f"qtypes:\n  color:\n    - {view}\n")


def test_load_validation_structure(tmp_path):
    with pytest.raises(ConfigError, match="'qtypes' must be"):
        load_text(tmp_path, "name: x\n")
    with pytest.raises(ConfigError, match=r"unknown keys \['qtype'\]"):
        load_text(tmp_path, "qtype: {}\n")
    with pytest.raises(ConfigError, match="duplicate view names"):
        load_text(tmp_path, "qtypes:\n  c: [{name: a, role: stable, transform: gray}, {name: a, role: stable, transform: gray}]\n")


@pytest.mark.parametrize("qtype, lacks, kw", [
    ("count", "segments", {"segments": []}),
    ("color", "boxes", {"boxes": []}),
    ("direction", "segments", {"segments": []}),
])
def test_missing_evidence_names_set_view_and_sample(bpo, clip, qtype, lacks, kw):
    s = make_sample(qtype=qtype, sample_id="clip-42", **kw)
    with pytest.raises(DataError, match=rf"sample 'clip-42'.*view set 'bpo_video', view '\w+'.*needs evidence {lacks}"):
        bpo.views_for(s)
    with pytest.raises(DataError, match="clip-42"):
        bpo.expand(s, clip)
    with pytest.raises(DataError, match="clip-42"):
        bpo.check([make_sample(qtype=qtype), s])


def test_video_view_on_image_sample_is_an_error(bpo):
    s = make_sample(qtype="direction", image=True)
    with pytest.raises(DataError, match="view 'mask_irrelevant'.*does not apply to image"):
        bpo.views_for(s)


def test_module_function_custom_transform(tmp_path, monkeypatch, clip, sample):
    (tmp_path / "my_views_mod.py").write_text(textwrap.dedent("""
        from dataclasses import replace
        def invert(media, sample, rng, amount=255):
            return replace(media, frames=amount - media.frames)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    vs = load_text(tmp_path, """
        roles: [negative]
        qtypes:
          direction:
            - {name: inv, role: negative, transform: "my_views_mod:invert", params: {amount: 200}}
            - {name: inv_stable, role: stable, transform: "my_views_mod:invert", effect: unchanged}
    """)
    views = vs.expand(sample, clip, seed=0)
    assert [v.name for v in views] == ["original", "inv", "inv_stable"]  # anchor added automatically
    assert torch.equal(views[1].media.frames, 200 - clip.frames)
    assert views[1].expected is None and views[2].expected == "A" and views[1].role == "negative"
    with pytest.raises(ConfigError, match="could not be imported"):
        load_text(tmp_path, "qtypes:\n  c: [{name: x, role: stable, transform: 'no_such_mod_xyz:f'}]\n")


def test_decorated_custom_transform_needs_are_checked(tmp_path, clip):
    from mmrl.views import VIEW_TRANSFORMS

    VIEW_TRANSFORMS._items.pop("test_box_blur", None)  # the test may run twice in one process (mutmut)

    @view_transform("test_box_blur", effect="unknown", needs=("boxes",))
    def box_blur(media, sample, rng):
        return media

    vs = load_text(tmp_path, "qtypes:\n  default: [{name: bb, role: sensitive, transform: test_box_blur}]\n")
    with pytest.raises(DataError, match="view 'bb'.*needs evidence boxes"):
        vs.views_for(make_sample(boxes=[]))
    assert vs.views_for(make_sample())[1].needs == ("boxes",)


def test_qtype_level_answer_map_and_weights(tmp_path, clip):
    vs = load_text(tmp_path, """
        qtypes:
          direction:
            answer_map: {up: down, down: up}
            views:
              - {name: rev, role: sensitive, transform: reverse, weight: 0.5}
    """)
    s = make_sample(candidates=["up", "down"], answer="up")
    spec = vs.views_for(s)[1]
    assert spec.weight == 0.5 and vs.expected_for(spec, s) == "B"


def test_abstain_letter_is_never_the_expected_letter(bpo, clip, sample):
    letters = {v.expected for v in bpo.expand(sample, clip)}
    assert "E" not in letters and "abstain" in letters
