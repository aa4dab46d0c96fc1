"""Frame indices: hand-computed values, and the official sampling code run on synthetic clips.

``mmrl.media.sampling`` is the one home of index rules; these tests pin it to hand arithmetic and to the code it
follows: the MVBench notebook's ``get_index`` (transcribed), qwen-vl-utils ``fetch_video`` (called: it is
installed) plus lmms-eval's Qwen2.5-VL wrapper subsample (transcribed), and OVO-Bench's Qwen2-VL wrapper
(``get_max_frames`` transcribed, ``fetch_video`` called on a chunk cut as ``chunk_videos.py`` cuts it).
"""
import math
import os

import numpy as np
import pytest
import torch
from qwen_vl_utils.vision_process import fetch_video

from mmrl.data.schema import VideoRef
from mmrl.data.synth_video import write_mp4
from mmrl.eval.benchmark_def import load_benchmark
from mmrl.eval.frame_rules import FRAME_RULES
from mmrl.eval.synth_bench import write_frame_folder
from mmrl.media.decode import MediaBudget, decode_indices, decode_video, probe
from mmrl.media.sampling import (frame_range, get_index, lmms_subsample, prefix_last, qwen_indices, qwen_nframes,
                                 qwen_video_max_pixels)


def _clip(n, h=48, w=80, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, size=(1, h, w, 3), dtype=np.uint8)
    ramp = (np.arange(n, dtype=np.int64)[:, None, None, None] * 9) % 255  # each frame distinct
    return ((base.astype(np.int64) + ramp) % 255).astype(np.uint8)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A 45-frame, 10 fps MP4 (4.5 s) and its pixels."""
    d = tmp_path_factory.mktemp("clips")
    frames = _clip(45)
    path = str(d / "c45.mp4")
    write_mp4(path, frames, 10.0)
    return path, frames


# --- MVBench get_index -------------------------------------------------------------------------------------------
def test_get_index_video_no_bound():
    # max_frame 99, seg 12.375: int(6.1875 + round(12.375 i)); round(49.5) = 50 (half to even)
    assert get_index(100, 30.0, None, 0, 8) == [6, 18, 31, 43, 56, 68, 80, 93]


def test_get_index_video_bound():
    assert get_index(300, 30.0, (2.0, 6.0), 0, 4) == [75, 105, 135, 165]     # [60, 180], seg 30
    assert get_index(300, 30.0, (8.0, 20.0), 0, 4) == [247, 262, 277, 291]   # end capped at 299, seg 14.75
    assert get_index(300, 30.0, (0.0, 1.0), 0, 2) == [7, 22]                # [0, 30], seg 15


def test_get_index_frame_folder():
    # 30 JPEGs 00001..00030: first_idx 1, max_frame = 30, seg 29/4 = 7.25
    assert get_index(30, 3.0, None, 1, 4) == [4, 11, 18, 26]
    # bound at fps 3: round(1.5) = 2, round(7.5) = 8 (half to even); seg 1.5
    assert get_index(10, 3.0, (0.5, 2.5), 1, 4) == [2, 4, 5, 6]
    # a bound starting at 0 still starts at frame 1: [1, 9], seg 4
    assert get_index(10, 3.0, (0.0, 3.0), 1, 2) == [3, 7]


def _notebook_get_index(bound, fps, max_frame, first_idx, n):
    """Ask-Anything video_chat2/mvbench.ipynb MVBench_dataset.get_index, transcribed."""
    start, end = bound if bound else (-100000, 100000)
    start_idx = max(first_idx, round(start * fps))
    end_idx = min(round(end * fps), max_frame)
    seg = float(end_idx - start_idx) / n
    return np.array([int(start_idx + (seg / 2) + np.round(seg * i)) for i in range(n)]).tolist()


def test_get_index_matches_notebook():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n_frames, fps = int(rng.integers(20, 2000)), float(rng.choice([3, 24, 25, 29.97, 30]))
        n, first = int(rng.choice([4, 8, 16, 32])), int(rng.integers(0, 2))
        bound = None
        if rng.random() < 0.5:
            s = float(rng.uniform(0, n_frames / fps))
            bound = (s, s + float(rng.uniform(1, 30)))
        assert get_index(n_frames, fps, bound, first, n) == _notebook_get_index(bound, fps, n_frames - 1 + first,
                                                                                first, n)


def test_get_index_rule_on_a_frame_folder(tmp_path):
    """The notebook's read_frame opens f"{idx:05d}.jpg" for get_index(first_idx=1): the same pixels here."""
    from PIL import Image

    folder = write_frame_folder(str(tmp_path / "tvqa"), _clip(20, 28, 28))
    info = probe(folder, "x", frame_fps=3.0)
    bdef = load_benchmark("mvbench")
    idx, lo, hi = FRAME_RULES.get("get_index")(info, {"bound": (1.0, 5.0)}, bdef.sampling, bdef.pixels)
    official = _notebook_get_index((1.0, 5.0), 3.0, 20, 1, 16)  # file numbers from 1
    assert idx == [i - 1 for i in official] and (lo, hi) == (784, 50176)
    media = decode_indices(info, idx, "x", max_pixels=28 * 28)
    want = np.stack([np.asarray(Image.open(os.path.join(folder, f"{i:05d}.jpg")).convert("RGB")) for i in official])
    assert torch.equal(media.frames, torch.from_numpy(want).permute(0, 3, 1, 2))


# --- qwen-vl-utils and the wrappers ----------------------------------------------------------------------------------
def test_frame_range_agrees_with_qwen_vl_utils():
    """frame_range is qwen-vl-utils' calculate_video_frame_range mirrored without torch (the data pre-flight
    applies it): the same (first, last), and a refusal where it refuses, over a grid of ranges."""
    from qwen_vl_utils import vision_process as qvp

    times = (None, -1.0, 0.0, 0.1, 0.25, 0.5, 1.0, 1.9, 2.0, 3.0, 9.0)
    for total, fps in ((1, 1.0), (8, 4.0), (45, 10.0), (30, 29.97)):
        for start in times:
            for end in times:
                ele = {k: v for k, v in (("video_start", start), ("video_end", end)) if v is not None}
                try:
                    want = qvp.calculate_video_frame_range(ele, total, fps)[:2]
                except ValueError:
                    want = None
                try:
                    got = frame_range(total, fps, start, end)
                except ValueError:
                    got = None
                assert got == want, (total, fps, start, end)


def test_check_frames_is_the_decoders_and_the_preflights_rule():
    """8 frames at 4 fps, range [0.5, 1.0] s: frames ceil(2.0)=2 .. floor(4.0)=4, so 3 in range."""
    from mmrl.data.schema import VideoRef
    from mmrl.errors import DataError
    from mmrl.media.frame_budget import check_frames

    with pytest.raises(DataError, match="clip has 3 frames in range but 4 were requested"):
        check_frames(VideoRef(path="v.mp4", start=0.5, end=1.0), 4, 8, 4.0, "s1")
    assert check_frames(VideoRef(path="v.mp4", start=0.5, end=1.0, nframes=2), 16, 8, 4.0, "s1") == (2, 4, 2)
    assert check_frames(VideoRef(path="v.mp4", fps=2.0), 16, 8, 4.0, "s1") == (0, 7, None)  # the rate decides
    with pytest.raises(DataError, match="1 frame\\(s\\) in range"):
        check_frames(VideoRef(path="v.mp4"), None, 1, 4.0, "s1")


def test_sampling_helpers_hand_computed():
    assert frame_range(45, 10.0, 0.25, 2.0) == (3, 20)          # ceil(2.5), floor(20)
    assert frame_range(45, 10.0, None, 99.0) == (0, 44)         # end clamped to the duration
    with pytest.raises(ValueError, match="selects no frame"):
        frame_range(45, 10.0, 9.0, 10.0)
    assert prefix_last(45, 10.0, 2.0) == 19 and prefix_last(45, 10.0, 2.05) == 20   # t < end
    assert prefix_last(45, 10.0, 99.0) == 44 and prefix_last(45, 10.0, None) == 44
    assert qwen_nframes(45, 10.0, sample_fps=2.0) == 8           # 4.5 s * 2 = 9 -> floor to even
    assert qwen_nframes(12, 10.0, sample_fps=2.0) == 4           # 2.4 -> at least FPS_MIN_FRAMES = 4
    assert qwen_nframes(20, 10.0, nframes=7) == 8                # round(7 / 2) * 2, half to even
    assert qwen_indices(0, 19, 4) == [0, 6, 13, 19]
    assert lmms_subsample(8, 32) == list(range(8))               # fewer than 32: all
    assert lmms_subsample(100, 32)[:3] == [0, 3, 6] and len(lmms_subsample(100, 32)) == 32
    assert lmms_subsample(100, 32)[-1] == 99
    # fetch_video's per-frame cap: 768 * 28 * 28 up to 300 frames, then MODEL_SEQ_LEN-bound
    assert qwen_video_max_pixels(8, 200704, 1605632) == (200704, 602112)
    assert qwen_video_max_pixels(600, 200704, 1605632) == (200704, 301056)   # 90,316,800 / 600 * 2
    assert qwen_video_max_pixels(8, None, 151200) == (100352, 151200)


def _lmms_wrapper(video_len):
    """lmms_eval/models/simple/qwen2_5_vl.py generate_until: the positions kept among fetch_video's frames."""
    indices = np.unique(np.linspace(0, video_len - 1, 32, dtype=int))
    if video_len - 1 not in indices:
        indices = np.unique(np.append(indices, video_len - 1))
    return indices.tolist()


@pytest.mark.parametrize("bound", [None, (0.25, 3.9)])
def test_lmms_rule_equals_fetch_video_and_the_wrapper(clip, bound):
    path, _ = clip
    bdef = load_benchmark("mvbench_lmms", overrides={"pixels.min_pixels": 784, "pixels.max_pixels": 3136})
    ele = {"type": "video", "video": path, "min_pixels": 784, "max_pixels": 3136}
    if bound:
        ele.update(video_start=bound[0], video_end=bound[1])
    video, meta = fetch_video(ele, return_video_metadata=True)
    official = [meta["frames_indices"][p] for p in _lmms_wrapper(video.shape[0])]
    info = probe(path, "x")
    idx, lo, hi = FRAME_RULES.get("lmms_qwen2_5_vl")(info, {"bound": bound}, bdef.sampling, bdef.pixels)
    assert idx == list(map(int, official))
    media = decode_indices(info, idx, "x", max_pixels=hi, min_pixels=lo)
    assert tuple(media.frames.shape[-2:]) == tuple(video.shape[-2:])


def test_lmms_default_pixels_equal_fetch_video(tmp_path):
    """The YAML's own budgets (min 200,704 / max 1,605,632) give fetch_video's frame size."""
    path = str(tmp_path / "c12.mp4")
    write_mp4(path, _clip(12), 10.0)
    bdef = load_benchmark("mvbench_lmms")
    video = fetch_video({"video": path, "min_pixels": 200704, "max_pixels": 1605632})
    info = probe(path, "x")
    idx, lo, hi = FRAME_RULES.get("lmms_qwen2_5_vl")(info, {}, bdef.sampling, bdef.pixels)
    assert (len(idx), lo, hi) == (4, 200704, 602112)
    media = decode_indices(info, idx, "x", max_pixels=hi, min_pixels=lo)
    assert tuple(media.frames.shape[-2:]) == tuple(video.shape[-2:])


@pytest.mark.parametrize("realtime", [1.2, 2.0, 3.7, 9.0])
def test_ovo_rule_equals_qwen2vl_wrapper_on_the_chunk(tmp_path, clip, realtime):
    """Cut the chunk as chunk_videos.py does (frames with t < ceil(realtime), capped), then run the official
    wrapper's sampling on it; the rule on the source video must pick the same frames at the same size."""
    path, frames = clip
    end = min(math.ceil(realtime), 4.5)
    chunk = str(tmp_path / "chunk.mp4")
    write_mp4(chunk, frames[: prefix_last(45, 10.0, end) + 1], 10.0)
    import decord

    nframes = min(64, len(decord.VideoReader(chunk)) - 2)  # QWen2VL.py get_max_frames
    video, meta = fetch_video({"video": chunk, "max_pixels": 360 * 420, "nframes": nframes},
                              return_video_metadata=True)
    bdef = load_benchmark("ovobench")
    info = probe(path, "x")
    idx, lo, hi = FRAME_RULES.get("ovo_qwen2_vl")(info, {"end": float(math.ceil(realtime))}, bdef.sampling,
                                                  bdef.pixels)
    assert idx == list(map(int, meta["frames_indices"]))
    media = decode_indices(info, idx, "x", max_pixels=hi, min_pixels=lo)
    assert tuple(media.frames.shape[-2:]) == tuple(video.shape[-2:])
    assert media.timestamps[-1] < end


def test_training_loader_uses_the_same_rules(clip, tmp_path):
    """decode_video (training, synthetic eval): nframes over [start, end] by frame_range + qwen_indices."""
    path, _ = clip
    media = decode_video(VideoRef(path=path, start=0.25, end=2.0, nframes=4), "x", MediaBudget(max_pixels=3136))
    assert media.timestamps == [i / 10.0 for i in qwen_indices(3, 20, 4)]
    folder = write_frame_folder(str(tmp_path / "f"), _clip(12, 28, 28))
    media = decode_video(VideoRef(path=folder, frame_fps=3.0, nframes=2), "x", MediaBudget(max_pixels=784))
    assert media.timestamps == [0.0, 11 / 3]


def test_lmms_rule_bound_on_a_frame_folder(tmp_path):
    """TVQA from the main branch: a 3-fps frame folder with the item's bound, as the 3-fps segment clip would be."""
    folder = write_frame_folder(str(tmp_path / "tvqa"), _clip(16, 28, 28))
    info = probe(folder, "x", frame_fps=3.0)
    bdef = load_benchmark("mvbench_lmms")
    idx = FRAME_RULES.get("lmms_qwen2_5_vl")(info, {"bound": (0.667, 4.333)}, bdef.sampling, bdef.pixels)[0]
    # frames ceil(2.001)=3 .. floor(12.999)=12 (10 frames, 3.33 s): 6.67 at 2 fps -> 6; linspace(3, 12, 6).round()
    assert idx == [3, 5, 7, 8, 10, 12]
