from PIL import Image

from mmrl.views import ViewSet, make_contact_sheet
from mmrl.views.preview import HEADER_LINE, LABEL_W, PAD
from views_testdata import VIEWS_DIR, make_clip, make_image, make_sample


def test_contact_sheet_video(tmp_path):
    vs = ViewSet.load(VIEWS_DIR / "bpo_video.yaml")
    s = make_sample()
    views = vs.expand(s, make_clip(), seed=0)
    out = tmp_path / "sheet" / "s1.png"
    img = make_contact_sheet(views, s, out, cell=48, candidates=vs.candidates_for(s))
    assert out.exists()
    disk = Image.open(out)
    assert disk.size == img.size
    head_h, row_h = HEADER_LINE * 3 + PAD * 2, 48 + HEADER_LINE + PAD
    assert img.height == head_h + row_h * len(views)
    assert img.width >= LABEL_W + 8 * 48
    # the gray-canvas row (last) shows gray frames; the anchor row shows the original first frame
    y = head_h + row_h * 3 + 10
    assert disk.convert("RGB").getpixel((LABEL_W + 10, y)) == (128, 128, 128)
    first = views[0].media.frames[0, :, 0, 0].tolist()
    assert list(disk.convert("RGB").getpixel((LABEL_W, head_h))) == first


def test_contact_sheet_images_and_subsampling(tmp_path):
    vs = ViewSet.load(VIEWS_DIR / "image_interventions.yaml")
    s = make_sample(qtype="color", candidates=["red", "blue"], answer="red", image=True)
    views = vs.expand(s, make_image(), seed=0)
    img = make_contact_sheet(views, s, tmp_path / "img.png", cell=32)
    assert img.height > len(views) * 32
    long = make_clip(t=40)
    tv = ViewSet.load(VIEWS_DIR / "tgrpo.yaml")
    sheet = make_contact_sheet(tv.expand(make_sample(), long), make_sample(), tmp_path / "long.png", cell=20,
                               max_frames=10)
    assert sheet.width <= LABEL_W + 10 * (20 + PAD) + PAD + 1 or sheet.width == 420


def test_contact_sheet_of_an_open_answer_in_memory(tmp_path):
    """A text-answer sample (streaming, open questions) has no gold letter; ``out_png=None`` writes no file (the
    TensorBoard/W&B sheet of a step's views)."""
    from mmrl.data.schema import View

    s = make_sample(candidates=(), answer="a red ball")
    s.answer_type = "text"
    clip = make_clip(t=2)
    img = make_contact_sheet([View("original", "anchor", clip, None)], s, None, cell=16)
    assert img.width >= LABEL_W + 2 * 16 and not list(tmp_path.iterdir())
