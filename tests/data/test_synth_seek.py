"""The seek world: the overview misses the flash, a seek on the evidence finds it, the teacher's call is valid."""
import math

import pytest
import torch

from mmrl.data.annotations import load_samples
from mmrl.data.synth_seek import make_seek_world, overview_indices, teacher
from mmrl.data.synth_video import PALETTE
from mmrl.media.decode import MediaBudget, load_media

from support import REPO

SUITE = str(REPO / "tools" / "video_seek.yaml")


@pytest.fixture(scope="module")
def seek_world(tmp_path_factory):
    out = tmp_path_factory.mktemp("seek_world")
    make_seek_world(str(out), 6, 2, seed=0, duration=8.0, fps=4.0, flash_frames=2, overview=4)
    return out


def _colour_share(frames: torch.Tensor, colour) -> float:
    """Share of the top-left quarter's pixels within 40 of ``colour`` (frames ``[T, 3, H, W]``)."""
    h, w = frames.shape[-2:]
    x = frames[:, :, : h // 2, : w // 2].float()
    return float(((x - torch.tensor(colour).view(1, 3, 1, 1)).abs().max(dim=1).values < 40).float().mean())


def test_overview_misses_and_seek_finds_the_flash(seek_world):
    from mmrl.rewards import REWARDS, RewardContext
    from mmrl.tools import EpisodeState, ToolBudget, load_suite, run_call
    from mmrl.data.schema import Trajectory

    samples, _ = load_samples(str(seek_world / "train.json"))
    suite = load_suite(SUITE)
    assert {s.answer for s in samples} <= set(PALETTE) and len({s.answer for s in samples}) >= 3
    for s in samples:
        (t0, t1), = s.evidence.segments
        assert 0 < t1 - t0 <= 1.0
        overview = load_media(s, MediaBudget(nframes=4, max_pixels=56 * 56))
        assert _colour_share(overview.frames, PALETTE[s.answer]) == 0.0  # the overview shows no flash
        item = {"evidence": {"segments": [[t0, t1]]}, "candidates": s.candidates, "answer": s.answer}
        window = min(math.floor(t0) + 2, 8.0) - math.floor(t0)  # whole: 2 s of whole seconds from floor(t0), in the clip
        for seek, iou in (("exact", 1.0), ("whole", (t1 - t0) / window)):
            call, letter = teacher(item, seek=seek, nframes=2)
            assert letter == s.answer_letter
            st = EpisodeState(sample=s, media=overview, budget=ToolBudget())
            rec = run_call(call, suite.tools, st)
            assert rec.valid, rec.message
            shown = [_colour_share(f[None], PALETTE[s.answer]) > 0.9 for f in rec.output.media.frames]
            assert all(shown) if seek == "exact" else sum(shown) == 2  # the seek shows the flash (all its frames)
            turns = [{"turn": 0, **rec.info()}]
            z = torch.zeros(1, dtype=torch.long)
            ctx = [RewardContext(sample=s, trajectory=Trajectory(s.id, 0, "original", "anchor", z, z, z.float(), z.bool(),
                                                                 "", turns=turns), candidates=s.candidates)]
            assert REWARDS.get("seek_iou")(ctx) == [pytest.approx(iou)]


def test_timed_question_and_fixed_options(tmp_path):
    """``time_in_question`` names the teacher's whole-second window in the question; ``fixed_options`` lists all
    colours in canonical order; a bad teacher style is refused."""
    import json

    make_seek_world(str(tmp_path), 4, 2, seed=1, duration=8.0, overview=4, time_in_question=True, fixed_options=True)
    items = json.loads((tmp_path / "train.json").read_text())
    scripts = [json.loads(x) for x in (tmp_path / "teacher.jsonl").read_text().splitlines()]
    for it, sc in zip(items, scripts):
        args = json.loads(sc["turns"][0][len("<tool_call>"):-len("</tool_call>")])["arguments"]
        assert it["question"] == f"What colour flashes between {args['start']} and {args['end']} s?"
        (t0, t1), = it["evidence"]["segments"]
        assert args["start"] <= t0 < t1 <= args["end"] == args["start"] + 2
        assert it["candidates"] == list(PALETTE)
    with pytest.raises(ValueError, match="teacher_seek"):
        make_seek_world(str(tmp_path / "bad"), 1, 0, duration=8.0, overview=4, teacher_seek="rounded")


def test_flash_avoids_every_overview_and_the_cue_marks_its_time(seek_world):
    import json

    items = json.loads((seek_world / "train.json").read_text())
    avoid = overview_indices(32, 4)
    for it in items:
        a, b = it["meta"]["flash_frames"]
        assert not any(i in avoid for i in range(a - 1, b + 2))
    lines = (seek_world / "teacher.jsonl").read_text().splitlines()
    assert len(lines) == len(items) and json.loads(lines[0])["turns"][0].startswith("<tool_call>")
    s = load_samples(str(seek_world / "train.json"))[0][0]
    m = load_media(s, MediaBudget(nframes=2, max_pixels=56 * 56))
    bottom = m.frames[0, 0, -4:, :].float().mean(dim=0)  # the grey cue on the bottom rows
    x = float((bottom > 80).float().nonzero().float().mean()) / m.frames.shape[-1]
    (t0, t1), = s.evidence.segments
    assert abs(x - (t0 + t1) / 2 / 8.0) < 0.15
