"""Frame choice and timestamps of ``mmrl/media/decode.py`` against hand-computed indices.

Frame ``i`` of every test video is a uniform frame of value ``8 * i`` (lossless PNG, or an MP4 read back), so
the decoded pixels name the source frames that were chosen.
"""
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from mmrl.data.schema import ImageRef, Sample, VideoRef
from mmrl.errors import DataError
from mmrl.media.decode import MediaBudget, decode_image, decode_video, load_media


def frame_folder(root, n=30, h=28, w=28):
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.fromarray(np.full((h, w, 3), 8 * i, dtype=np.uint8)).save(root / f"{i:05d}.png")
    (root / "notes.txt").write_text("not a frame")
    return str(root)


def chosen(media):
    return [int(v) // 8 for v in media.frames[:, 0, 0, 0]]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return frame_folder(tmp_path_factory.mktemp("frames") / "clip")


# ref fields, budget, frame indices, timestamps: 30 frames at 3 fps (the MVBench frame-folder default)
CASES = [
    (dict(), MediaBudget(), [0, 10, 19, 29], None),  # budget nframes=4: linspace(0, 29, 4) rounded
    (dict(nframes=6), MediaBudget(), [0, 6, 12, 17, 23, 29], None),
    (dict(start=2.0, end=6.0), MediaBudget(), [6, 10, 14, 18], [2.0, 10 / 3, 14 / 3, 6.0]),  # absolute times
    (dict(start=1.1, end=4.9), MediaBudget(), [4, 7, 11, 14], None),  # ceil(3.3) = 4, floor(14.7) = 14
    (dict(start=1.0, end=5.0), MediaBudget(), [3, 7, 11, 15], None),  # exact frame times stay inside
    (dict(start=-1.0, end=100.0), MediaBudget(), [0, 10, 19, 29], None),  # clamped to the video
    (dict(end=1.0, nframes=4), MediaBudget(), [0, 1, 2, 3], None),  # exactly the 4 frames available
    (dict(fps=1.0), MediaBudget(), [0, 3, 6, 10, 13, 16, 19, 23, 26, 29], None),  # 30 / 3 * 1 = 10 frames
    (dict(), MediaBudget(nframes=None), list(np.linspace(0, 29, 20).round().astype(int)), None),  # fps 2 default
    (dict(), MediaBudget(nframes=None, fps=0.5), [0, 10, 19, 29], None),  # 5 frames -> floor to 4
    (dict(), MediaBudget(nframes=None, fps=3.0, max_frames=6), [0, 6, 12, 17, 23, 29], None),
    (dict(fps=1.0, nframes=2), MediaBudget(), [0, 29], None),  # nframes wins over fps
    (dict(frame_fps=6.0, start=1.0, end=3.0), MediaBudget(), [6, 10, 14, 18], [1.0, 10 / 6, 14 / 6, 3.0]),
]


@pytest.mark.parametrize("ref_kw,budget,idx,times", CASES, ids=[str(i) for i in range(len(CASES))])
def test_frame_folder_indices_and_timestamps(folder, ref_kw, budget, idx, times):
    media = decode_video(VideoRef(folder, **ref_kw), "s", budget)
    fps = ref_kw.get("frame_fps", 3.0)
    assert chosen(media) == idx
    assert media.timestamps == pytest.approx([i / fps for i in idx])
    if times is not None:
        assert media.timestamps == pytest.approx(times)
    assert media.fps == pytest.approx((len(idx) - 1) / ((idx[-1] - idx[0]) / fps))
    assert media.frames.dtype == torch.uint8 and media.frames.shape[1] == 3


@pytest.mark.parametrize("ref_kw,match", [
    (dict(start=5.1, end=5.2), "selects no frame"),  # ceil(15.3) = 16 > floor(15.6) = 15
    (dict(start=11.0), "selects no frame"),  # past the last frame (29 / 3 = 9.67 s)
    (dict(start=5.0, end=5.2), "selects no frame"),  # one frame (15): qwen-vl-utils needs start < end frame
    (dict(start=5.0, end=5.5), "2 frames in range but 4 were requested"),
    (dict(nframes=32), "30 frames in range but 32 were requested"),
])
def test_frame_folder_bad_ranges(folder, ref_kw, match):
    with pytest.raises(DataError, match=match):
        decode_video(VideoRef(folder, **ref_kw), "s-bad")


def test_sample_budget_defaults():
    b = MediaBudget()
    assert (b.nframes, b.fps, b.min_pixels, b.max_pixels, b.max_frames) == (4, None, 28 * 28, 112 * 112, 768)


def test_source_size_and_resize(tmp_path):
    wide = frame_folder(tmp_path / "wide", n=4, h=28, w=56)
    m = decode_video(VideoRef(wide), "w")
    assert m.source_size == (56, 28) and tuple(m.frames.shape) == (4, 3, 28, 56)
    big = frame_folder(tmp_path / "big", n=4, h=224, w=224)
    m = decode_video(VideoRef(big), "b")
    assert m.source_size == (224, 224) and tuple(m.frames.shape[-2:]) == (112, 112)  # the 112*112 budget
    m = decode_video(VideoRef(big, max_pixels=56 * 56), "b")
    assert tuple(m.frames.shape[-2:]) == (56, 56)  # the sample's own budget wins
    m = decode_video(VideoRef(big), "b", MediaBudget(max_pixels=84 * 84))
    assert tuple(m.frames.shape[-2:]) == (84, 84)


def test_mp4_indices_and_timestamps(tmp_path):
    import av

    path = tmp_path / "clip.mp4"
    with av.open(str(path), "w") as out:
        st = out.add_stream("libx264", rate=4, options={"qp": "0", "preset": "ultrafast"})
        st.width, st.height, st.pix_fmt = 32, 32, "yuv444p"
        for i in range(16):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 8 * i, dtype=np.uint8), format="rgb24")
            for p in st.encode(frame):
                out.mux(p)
        for p in st.encode():
            out.mux(p)
    m = decode_video(VideoRef(str(path), start=1.0, end=3.0), "mp4")  # 4 fps: frames 4..12
    assert [round(int(v) / 8) for v in m.frames[:, 0, 0, 0]] == [4, 7, 9, 12]
    assert m.timestamps == pytest.approx([1.0, 1.75, 2.25, 3.0])
    assert m.fps == pytest.approx(3 / 2.0) and m.source_size == (32, 32)
    m = decode_video(VideoRef(str(path), fps=2.0), "mp4", MediaBudget(nframes=None))  # 16 / 4 * 2 = 8 frames
    assert m.timestamps == pytest.approx([i / 4 for i in np.linspace(0, 15, 8).round().astype(int)])


def test_decode_image_and_load_media(tmp_path):
    p = tmp_path / "pic.png"
    Image.fromarray(np.full((224, 112, 3), 40, dtype=np.uint8)).save(p)
    m = decode_image(ImageRef(str(p)), "i")
    assert m.source_size == (112, 224) and m.frames is None
    h, w = m.image.shape[-2:]
    assert h * w <= 112 * 112 and h % 28 == 0 and w % 28 == 0 and math.isclose(h / w, 2.0, rel_tol=0.2)
    s = Sample(id="x", question="?", candidates=["a", "b"], answer="a", image=ImageRef(str(p)))
    assert load_media(s).image.shape == m.image.shape
    with pytest.raises(DataError, match="neither a video nor an image"):
        load_media(Sample(id="y", question="?", candidates=["a", "b"], answer="a"))
    with pytest.raises(DataError, match="image file not found"):
        decode_image(ImageRef(str(tmp_path / "none.png")), "z")


# ---- every failure names the sample and the file ----------------------------------------------------------------


def _write_mp4(path, n, size=32, rate=4):
    import av

    with av.open(str(path), "w") as out:
        st = out.add_stream("libx264", rate=rate, options={"qp": "0", "preset": "ultrafast"})
        st.width, st.height, st.pix_fmt = size, size, "yuv444p"
        for i in range(n):
            frame = av.VideoFrame.from_ndarray(np.full((size, size, 3), 8 * i, dtype=np.uint8), format="rgb24")
            for p in st.encode(frame):
                out.mux(p)
        for p in st.encode():
            out.mux(p)
    return str(path)


def _error(fn, *args):
    with pytest.raises(DataError) as e:
        fn(*args)
    return str(e.value)


def test_video_failures_name_sample_and_file(folder, tmp_path):
    def says(ref, msg, budget=None):
        assert _error(decode_video, ref, "clip-9", budget) == f"sample 'clip-9', file '{ref.path}': {msg}"

    says(VideoRef(str(tmp_path / "absent.mp4")), "video file not found")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("no frames here")
    says(VideoRef(str(tmp_path / "empty")), "frame folder holds no frames")
    says(VideoRef(folder, start=5.1, end=5.2), "time range [5.1, 5.2] s selects no frame (30 frames at 3.000 fps)")
    says(VideoRef(folder, nframes=40), "clip has 30 frames in range but 40 were requested")
    says(VideoRef(folder, nframes=1), "1 frame(s) requested; Qwen2-VL samples frames in pairs, so at least 2 are needed")
    one = _write_mp4(tmp_path / "one.mp4", 1)
    says(VideoRef(one, nframes=2), "clip has 1 frames in range but 2 were requested")  # one frame is not zero
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"garbage")
    msg = _error(decode_video, VideoRef(str(bad)), "clip-9")
    assert msg.startswith(f"sample 'clip-9', file '{bad}': unreadable video (RuntimeError: Error reading {bad}")
    assert "\n" not in msg and msg.endswith(")")
    long = tmp_path / ("x" * 200 + ".mp4")  # decord's first error line is cut at 200 characters
    long.write_bytes(b"garbage")
    import decord

    with pytest.raises(Exception) as raw:
        decord.VideoReader(str(long), num_threads=1)
    line = str(raw.value).splitlines()[0]
    assert len(line) > 200
    assert _error(decode_video, VideoRef(str(long)), "c") == \
        f"sample 'c', file '{long}': unreadable video (RuntimeError: {line[:200]})"


def test_image_failures_name_sample_and_file(tmp_path):
    absent = tmp_path / "absent.png"
    assert _error(decode_image, ImageRef(str(absent)), "img-3") == f"sample 'img-3', file '{absent}': image file not found"
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    msg = _error(decode_image, ImageRef(str(bad)), "img-3")
    assert msg.startswith(f"sample 'img-3', file '{bad}': unreadable image (cannot identify image file")
    s = Sample(id="none-4", question="?", candidates=["a", "b"], answer="a")
    assert _error(load_media, s) == "sample 'none-4': sample has neither a video nor an image"


def test_frame_folder_takes_jpg_jpeg_png_in_any_case_and_converts_to_rgb(tmp_path):
    root = tmp_path / "mixed"
    root.mkdir()
    for i, (name, mode) in enumerate([("0.JPG", "RGB"), ("1.jpeg", "RGB"), ("2.png", "L"), ("3.PNG", "RGBA"),
                                      ("4.Jpg", "L")]):
        Image.fromarray(np.full((28, 28, 3), 8 * i, dtype=np.uint8)).convert(mode).save(root / name)
    (root / "5.gif").write_bytes(b"GIF89a")  # not a frame
    m = decode_video(VideoRef(str(root), nframes=4), "mix", MediaBudget())
    assert [round(int(v) / 8) for v in m.frames[:, 0, 0, 0]] == [0, 1, 3, 4]  # linspace(0, 4, 4) rounded
    assert m.frames.shape[1] == 3


def test_images_decode_to_rgb_and_upscale_to_the_minimum(tmp_path):
    p = tmp_path / "small_gray.png"
    Image.fromarray(np.full((20, 20), 77, dtype=np.uint8), mode="L").save(p)
    m = decode_image(ImageRef(str(p)), "g")
    assert m.sample_id == "g" and m.source_size == (20, 20)
    assert tuple(m.image.shape) == (3, 28, 28) and int(m.image[0, 14, 14]) == 77  # min_pixels 28*28
    big = tmp_path / "big.png"
    Image.fromarray(np.full((224, 112, 3), 40, dtype=np.uint8)).save(big)
    assert tuple(decode_image(ImageRef(str(big)), "b").image.shape)[0] == 3


def test_load_media_passes_the_sample_id_and_budget(folder, tmp_path):
    v = Sample(id="vid-1", question="?", candidates=["a", "b"], answer="a", video=VideoRef(folder))
    m = load_media(v, MediaBudget(nframes=2))
    assert m.sample_id == "vid-1" and chosen(m) == [0, 29]
    assert chosen(load_media(v)) == [0, 10, 19, 29]  # the default budget
    p = tmp_path / "pic.png"
    Image.fromarray(np.full((224, 224, 3), 40, dtype=np.uint8)).save(p)
    i = Sample(id="img-1", question="?", candidates=["a", "b"], answer="a", image=ImageRef(str(p)))
    m = load_media(i, MediaBudget(max_pixels=56 * 56))
    assert m.sample_id == "img-1" and tuple(m.image.shape) == (3, 56, 56)
    assert tuple(load_media(i).image.shape) == (3, 112, 112)


class _FakeReader:
    """Stands in for ``decord.VideoReader`` where a real file cannot produce the case (fps 0, a failing read)."""

    opened = []

    def __init__(self, path, num_threads=0, fps=0.0, fail=False):
        _FakeReader.opened.append(num_threads)
        self.fps, self.fail = fps, fail

    def __len__(self):
        return 10

    def get_avg_fps(self):
        return self.fps

    def get_batch(self, idx):
        if self.fail:
            raise RuntimeError("boom")
        return SimpleNamespace(asnumpy=lambda: np.stack([np.full((28, 28, 3), 8 * i, np.uint8) for i in idx]))


def test_mp4_reader_edge_cases(monkeypatch, tmp_path):
    import decord

    path = tmp_path / "fake.mp4"
    path.write_bytes(b"\0")
    monkeypatch.setattr(decord, "VideoReader", lambda p, num_threads=0: _FakeReader(p, num_threads))
    m = decode_video(VideoRef(str(path)), "f")  # a container reporting 0 fps counts as 1 fps
    assert chosen(m) == [0, 3, 6, 9] and m.timestamps == [0.0, 3.0, 6.0, 9.0]
    assert _FakeReader.opened[-1] == 1  # one decoding thread per reader on shared CPUs
    monkeypatch.setattr(decord, "VideoReader", lambda p, num_threads=0: _FakeReader(p, num_threads, 5.0, True))
    assert _error(decode_video, VideoRef(str(path), nframes=6), "f") == \
        f"sample 'f', file '{path}': failed to decode frames [0, 2, 4, 5]... (RuntimeError)"  # the first four


def test_resize_is_qwens_bicubic_with_antialiasing(tmp_path):
    from torchvision.transforms.functional import InterpolationMode, resize

    g = np.random.default_rng(0)
    pix = g.integers(0, 256, (224, 224, 3), dtype=np.uint8)
    p = tmp_path / "noise.png"
    Image.fromarray(pix).save(p)
    m = decode_image(ImageRef(str(p)), "n")
    want = resize(torch.from_numpy(pix).permute(2, 0, 1)[None], [112, 112], interpolation=InterpolationMode.BICUBIC,
                  antialias=True)[0]
    assert torch.equal(m.image, want)
    assert not torch.equal(want, resize(torch.from_numpy(pix).permute(2, 0, 1)[None], [112, 112],
                                        interpolation=InterpolationMode.BILINEAR, antialias=True)[0])


def test_mp4_reader_failures_without_text_and_empty_videos(monkeypatch, tmp_path):
    import decord

    path = tmp_path / "fake.mp4"
    path.write_bytes(b"\0")

    def silent(p, num_threads=0):
        raise RuntimeError("")

    monkeypatch.setattr(decord, "VideoReader", silent)
    assert _error(decode_video, VideoRef(str(path)), "q") == f"sample 'q', file '{path}': unreadable video (RuntimeError: )"

    class Empty(_FakeReader):
        def __len__(self):
            return 0

    monkeypatch.setattr(decord, "VideoReader", lambda p, num_threads=0: Empty(p, num_threads, 5.0))
    assert _error(decode_video, VideoRef(str(path)), "q") == f"sample 'q', file '{path}': video has zero frames"
    monkeypatch.setattr(decord, "VideoReader", lambda p, num_threads=0: _FakeReader(p, num_threads, 1.0))
    assert _error(decode_video, VideoRef(str(path), start=20.0), "q").startswith(f"sample 'q', file '{path}': time range")
