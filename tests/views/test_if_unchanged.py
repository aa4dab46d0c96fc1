"""Views that would leave the pixels unchanged (``if_unchanged``), view weights, the held-out null canvases, the
background-filled occlusion and the pixel-level frame derangement."""
import textwrap

import pytest
import torch

from mmrl.errors import ConfigError, DataError
from mmrl.views import ViewSet
from mmrl.views.transforms import apply_transform
from views_testdata import VIEWS_DIR, make_clip, make_sample


def load_text(tmp_path, text):
    p = tmp_path / "set.yaml"
    p.write_text(textwrap.dedent(text))
    return ViewSet.load(p)


def static_clip(t=4):
    c = make_clip(t=t)
    c.frames = c.frames[:1].expand(t, -1, -1, -1).contiguous()  # every frame the same
    return c


def test_reordering_a_static_clip_is_an_error_where_the_view_needs_a_change(tmp_path):
    vs = load_text(tmp_path, """
        qtypes:
          default:
            - {name: reverse, role: sensitive, transform: reverse, answer_map: {left: right, right: left}}
    """)
    with pytest.raises(DataError, match="leaves this sample's pixels unchanged.*role 'sensitive'.*if_unchanged: skip"):
        vs.expand(make_sample(), static_clip())
    views = vs.expand(make_sample(), make_clip())  # frames differ: fine
    assert views[1].expected == "B" and views[1].pixels_differ


def test_mapped_effect_on_unchanged_pixels_is_an_error_even_for_a_stable_role(tmp_path):
    vs = load_text(tmp_path, """
        qtypes:
          default:
            - {name: rev, role: stable, transform: reverse, answer_map: {left: right, right: left}, if_unchanged: keep}
    """)
    with pytest.raises(DataError, match="mapped answer"):
        vs.expand(make_sample(), static_clip())


def test_if_unchanged_skip_counts_and_keep_marks(tmp_path):
    vs = load_text(tmp_path, """
        qtypes:
          default:
            - {name: shuf_skip, role: stable, transform: shuffle, effect: unchanged, if_unchanged: skip}
            - {name: shuf_keep, role: stable, transform: shuffle, effect: unchanged}
            - {name: blank, role: abstain, transform: gray}
    """)
    skipped = []
    views = vs.expand(make_sample(), static_clip(), skipped=skipped)
    assert [v.name for v in views] == ["original", "shuf_keep", "blank"]
    assert [n for n, _ in skipped] == ["shuf_skip"]
    assert views[1].pixels_differ is False and views[2].pixels_differ is True
    skipped = []
    assert len(vs.expand(make_sample(), make_clip(), skipped=skipped)) == 4 and not skipped


def test_if_unchanged_error_on_a_stable_view_and_bad_values(tmp_path):
    vs = load_text(tmp_path, """
        qtypes:
          default:
            - {name: shuf, role: stable, transform: shuffle, effect: unchanged, if_unchanged: error}
    """)
    with pytest.raises(DataError, match="if_unchanged: error"):
        vs.expand(make_sample(), static_clip())
    with pytest.raises(ConfigError, match="if_unchanged"):
        load_text(tmp_path, """
            qtypes:
              default: [{name: s, role: stable, transform: shuffle, if_unchanged: sometimes}]
        """)


def test_weight_is_checked_and_carried_by_the_view(tmp_path):
    vs = load_text(tmp_path, """
        qtypes:
          default:
            - {name: blank, role: abstain, transform: gray, weight: 0.5}
    """)
    views = vs.expand(make_sample(), make_clip())
    assert [v.weight for v in views] == [1.0, 0.5]
    for bad, msg in (("-1", ">= 0"), ("heavy", "number")):
        with pytest.raises(ConfigError, match=msg):
            load_text(tmp_path, f"""
                qtypes:
                  default: [{{name: blank, role: abstain, transform: gray, weight: {bad}}}]
            """)
    with pytest.raises(ConfigError, match="anchor's weight"):
        load_text(tmp_path, """
            qtypes:
              default: [{name: original, role: anchor, transform: identity, weight: 2}]
        """)


def test_shuffle_deranges_pixels_not_just_indices():
    c = make_clip(t=4)
    c.frames = torch.stack([c.frames[0], c.frames[1], c.frames[1], c.frames[0]])  # palindromic: [a, b, b, a]
    s = make_sample()
    for seed in range(20):
        out = apply_transform("shuffle", c, s, torch.Generator().manual_seed(seed))
        assert not torch.equal(out.frames, c.frames)
    plain = [apply_transform("shuffle", c, s, torch.Generator().manual_seed(k), derange=False) for k in range(40)]
    assert any(torch.equal(p.frames, c.frames) for p in plain)  # Video-R1's plain permutation may keep the order


def test_occlusion_fills_with_the_local_background():
    c = make_clip(t=2)
    c.frames[:] = 16
    c.frames[0, :, 5:15, 30:50] = 200  # a distractor far from the box
    c.frames[:, :, 20:40, 10:30] = torch.tensor([220, 40, 40], dtype=torch.uint8)[:, None, None]  # the target
    s = make_sample(boxes=[(0.0, [20, 40, 60, 80])])  # -> cols 10:30, rows 20:40 at scale 0.5
    out = apply_transform("occlude_box", c, s, torch.Generator())
    assert (out.frames[:, :, 20:40, 10:30] == 16).all()  # no dark square where the object was
    assert torch.equal(out.frames[0, :, 5:15, 30:50], c.frames[0, :, 5:15, 30:50])
    with pytest.raises(ValueError, match="fill"):
        apply_transform("occlude_box", c, s, torch.Generator(), fill="zeros")


@pytest.mark.parametrize("kind", ["uniform", "noise", "gradient", "texture"])
def test_canvases_are_content_free_seeded_and_differ_from_training_nulls(kind):
    c = make_clip(t=4)
    s = make_sample()
    a = apply_transform("canvas", c, s, torch.Generator().manual_seed(3), kind=kind, value=60)
    b = apply_transform("canvas", make_clip(t=4, seed=9), s, torch.Generator().manual_seed(3), kind=kind, value=60)
    assert torch.equal(a.frames, b.frames) and a.frames.shape == c.frames.shape  # independent of the input
    for train_null in (128, 16):  # training's gray blank and the bench's SFT empty background
        assert not bool((a.frames == train_null).all())
    with pytest.raises(ValueError, match="canvas kind"):
        apply_transform("canvas", c, s, torch.Generator(), kind="plaid")


def test_eval_view_set_holds_out_every_training_null_view():
    train = ViewSet.load(VIEWS_DIR / "bpo_video.yaml")
    held = ViewSet.load(VIEWS_DIR / "bpo_eval.yaml")
    c, s = make_clip(t=4), make_sample()
    train_nulls = [v.media.frames for v in train.expand(s, c) if v.role == "abstain"]
    train_nulls.append(torch.full_like(c.frames, 16))  # the bench's SFT "nothing to see" clip
    eval_nulls = [v for v in held.expand(s, c) if v.role == "abstain"]
    assert len(eval_nulls) == 5
    for v in eval_nulls:
        assert all(not torch.equal(v.media.frames, t) for t in train_nulls), v.name
