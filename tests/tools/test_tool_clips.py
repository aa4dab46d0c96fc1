"""Tools on a sample whose clip is a segment of a longer file (issue 30): ``video_seek`` and ``zoom`` read only
inside the clip and report clip-relative times; the media budget is cumulative over an episode's calls; the first
``<tool_call>`` of a turn is the one that runs; ``tool_format`` counts calls, not turns.

The file is a folder of 60 frames at 1 fps (a 60 s video) whose frame ``i`` is uniform with value ``4 * i``, so
the returned pixels name the source frames."""
import json

import numpy as np
import pytest
import torch
from PIL import Image

from mmrl.data.schema import Sample, Trajectory, VideoRef
from mmrl.rewards import REWARDS, RewardContext
from mmrl.tools import EpisodeState, ToolBudget, load_suite, media_tokens, run_call

from support import REPO


@pytest.fixture(scope="module")
def film(tmp_path_factory):
    root = tmp_path_factory.mktemp("film") / "frames"
    root.mkdir()
    for i in range(60):
        Image.fromarray(np.full((28, 28, 3), 4 * i, dtype=np.uint8)).save(root / f"{i:05d}.png")
    return str(root)


@pytest.fixture(scope="module")
def tools():
    return load_suite(str(REPO / "tools" / "video_seek.yaml")).tools


def _state(film, start, end, **budget):
    sample = Sample("clip", "q?", ["a", "b"], "a", video=VideoRef(film, start=start, end=end, frame_fps=1.0))
    return EpisodeState(sample=sample, media=None, budget=ToolBudget(**{"max_calls": 8, "max_frames": 8,
                                                                          "max_media_tokens": 4096, **budget}))


def _call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def _source_frames(media):
    return [int(v) // 4 for v in media.frames[:, 0, 0, 0]]


# clip [start, end] of the 60 s file, seek arguments -> source frames returned, clip-relative timestamps
SEEKS = [
    ((12.0, 20.0), dict(start=0, end=8, nframes=8), list(range(12, 20)), [float(t) for t in range(8)]),
    ((12.0, 20.0), dict(start=2, end=6, nframes=4), [14, 15, 16, 17], [2.0, 3.0, 4.0, 5.0]),
    ((12.0, 20.0), dict(start=4, end=30, nframes=4), [16, 17, 18, 19], [4.0, 5.0, 6.0, 7.0]),  # cut at the clip's end
    ((12.0, 20.0), dict(start=0, end=100, nframes=2), [12, 19], [0.0, 7.0]),
    ((12.0, None), dict(start=40, end=48, nframes=2), [52, 59], [40.0, 47.0]),  # no end: to the file's end
    ((30.0, 34.5), dict(start=0, end=10, nframes=4), [30, 31, 33, 34], [0.0, 1.0, 3.0, 4.0]),  # end inside frame 34
    ((None, 10.0), dict(start=6, end=20, nframes=4), [6, 7, 8, 9], [0.0 + 6, 7.0, 8.0, 9.0]),
]


@pytest.mark.parametrize("clip,args,frames,times", SEEKS, ids=[f"{c}-{a['start']}-{a['end']}" for c, a, _, _ in SEEKS])
def test_seek_on_a_clip_returns_only_its_frames_with_clip_relative_times(film, tools, clip, args, frames, times):
    """A seek on the clip [12 s, 20 s] of a 60 s file returns only frames of [12, 20), timestamped from the clip's
    start; an interval past the clip's end is cut there."""
    st = _state(film, *clip)
    rec = run_call(_call("video_seek", **args), tools, st)
    assert rec.valid, rec.message
    m = rec.output.media
    assert _source_frames(m) == frames
    assert m.timestamps == pytest.approx(times)
    clip_len = (clip[1] if clip[1] is not None else 60.0) - (clip[0] or 0.0)
    assert rec.output.info["interval"] == [float(args["start"]), min(float(args["end"]), clip_len)]
    assert f"from {times[0]:.2f} s to {times[-1]:.2f} s" in rec.output.text


@pytest.mark.parametrize("clip,args", [
    ((12.0, 20.0), dict(start=8, end=9)),  # the clip is 8 s long: starts at its end
    ((12.0, 20.0), dict(start=9, end=30)),  # frames 21.. of the file exist, but not in this clip
    ((50.0, None), dict(start=10, end=11)),  # 10 s clip to the file's end
])
def test_seek_past_the_clip_is_out_of_range_even_where_the_file_goes_on(film, tools, clip, args):
    rec = run_call(_call("video_seek", **args), tools, _state(film, *clip))
    assert not rec.valid and rec.reason == "out_of_range" and "s long" in rec.message


@pytest.mark.parametrize("clip,time,frame", [((12.0, 20.0), 3.0, 15), ((12.0, 20.0), 0.0, 12), ((12.0, 20.0), 7.9, 19),
                                              ((30.0, None), 29.5, 59)])
def test_zoom_reads_the_frame_at_clip_time(film, tools, clip, time, frame):
    rec = run_call(_call("zoom", time=time, box=[0.25, 0.25, 0.75, 0.75]), tools, _state(film, *clip))
    assert rec.valid, rec.message
    assert int(rec.output.media.image[0, 0, 0]) == 4 * frame


def test_zoom_past_the_clip_end_is_out_of_range(film, tools):
    rec = run_call(_call("zoom", time=8.5, box=[0.0, 0.0, 1.0, 1.0]), tools, _state(film, 12.0, 20.0))
    assert not rec.valid and rec.reason == "out_of_range"


# media budget (visual tokens) -> which of three seeks of 8 frames (4 tokens each at 28x28) run
BUDGETS = [(12, [True, True, True]), (11, [True, True, False]), (8, [True, True, False]), (7, [True, False, False]),
           (4, [True, False, False]), (3, [False, False, False])]


@pytest.mark.parametrize("budget,valid", BUDGETS, ids=[str(b) for b, _ in BUDGETS])
def test_the_media_budget_is_cumulative_over_the_episode(film, tools, budget, valid):
    st = _state(film, 12.0, 20.0, max_media_tokens=budget)
    recs = [run_call(_call("video_seek", start=0, end=8, nframes=8), tools, st) for _ in range(3)]
    assert [r.valid for r in recs] == valid
    assert all(r.reason == "over_budget" for r in recs if not r.valid)
    used = [media_tokens(r.output.media) for r in recs if r.valid]
    assert all(u == 4 for u in used) and st.media_tokens_used == sum(used) <= budget
    assert [r.media_tokens for r in recs] == [4 if v else 0 for v in valid]


def test_the_first_tool_call_of_a_turn_runs_and_the_others_are_counted(film, tools):
    st = _state(film, 12.0, 20.0)
    text = ("Let me look. " + _call("video_seek", start=2, end=4, nframes=2) + " and also "
            + _call("video_seek", start=6, end=8, nframes=2) + _call("zoom", time=1.0, box=[0, 0, 1, 1]))
    rec = run_call(text, tools, st)
    assert rec.valid and rec.name == "video_seek" and rec.arguments == {"start": 2, "end": 4, "nframes": 2}
    assert _source_frames(rec.output.media) == [14, 15] and rec.ignored_calls == 2 and st.calls == 1
    assert rec.info()["ignored_calls"] == 2
    bad_first = _call("video_seek", start=9, end=10) + _call("video_seek", start=0, end=2)
    rec = run_call(bad_first, tools, st)  # the first is out of the clip: refused, the second does not run instead
    assert not rec.valid and rec.reason == "out_of_range" and rec.arguments == {"start": 9, "end": 10}
    assert st.calls == 2 and st.media_tokens_used == media_tokens(run_call(_call("video_seek", start=2, end=4, nframes=2),
                                                                          tools, _state(film, 12.0, 20.0)).output.media)


def _turns_ctx(turns):
    z = torch.zeros(1, dtype=torch.long)
    s = Sample("s", "q?", ["a", "b"], "a")
    return RewardContext(sample=s, trajectory=Trajectory("s", 0, "original", "anchor", z, z, z.float(), z.bool(), "",
                                                         turns=turns), candidates=["a", "b"])


CALL_OK, CALL_BAD = {"tool": "video_seek", "valid": True}, {"tool": "zoom", "valid": False}
ANSWER, OBSERVED = {"turn": 2, "model_text": "(A)"}, {"turn": -1, "observation": "hello"}


@pytest.mark.parametrize("turns,want", [
    ([CALL_OK, CALL_BAD, ANSWER], 0.5),  # valid calls / calls: the answering turn is no call
    ([OBSERVED, CALL_OK, ANSWER, ANSWER], 1.0),
    ([CALL_BAD, ANSWER, ANSWER, ANSWER], 0.0),
    ([CALL_OK, CALL_OK, CALL_BAD, ANSWER], 2 / 3),
    ([ANSWER], 0.25),  # no call at all: no_call
])
def test_tool_format_is_valid_calls_over_calls_not_turns(turns, want):
    assert REWARDS.get("tool_format")([_turns_ctx(turns)], no_call=0.25) == [pytest.approx(want)]
