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


def test_call_record_info_keys():
    from mmrl.tools.calls import CallRecord
    from mmrl.tools.registry import ToolOutput

    ok = CallRecord("video_seek", {"start": 0}, True, latency_s=0.5, media_tokens=4, output=ToolOutput("x", info={"frames": 2}))
    assert ok.info() == {"tool": "video_seek", "arguments": {"start": 0}, "valid": True, "latency_s": 0.5,
                         "call_media_tokens": 4, "frames": 2}
    bad = CallRecord("zoom", {}, False, reason="out_of_range", message="too far", ignored_calls=1)
    assert bad.info() == {"tool": "zoom", "arguments": {}, "valid": False, "latency_s": 0.0, "call_media_tokens": 0,
                          "reason": "out_of_range", "error": "too far", "ignored_calls": 1}


# the text of a turn -> the refusal's reason and the exact message the model reads next
MESSAGES = [
    ('<tool_call>{"name": "zoom", "arguments": {"box": [0, 0, 1, 1], "time": NaN}}</tool_call>', "non_finite",
     "NaN is not a number JSON allows"),
    ('<tool_call>{"name": "zoom", "arguments": {"box": [0, 0, 1e999, 1], "time": 1}}</tool_call>', "non_finite",
     "the call holds a number that is not finite"),  # an overflowing literal inside a list
    ('<tool_call>{"name": "zoom", "arguments": {"box": [0, 0, 1, 1], "time": 1e999}}</tool_call>', "non_finite",
     "the call holds a number that is not finite"),
    ('<tool_call>{"name": 3, "arguments": {}}</tool_call>', "malformed_call", 'a call is {"name": <tool name>, "arguments": {...}}'),
    ('<tool_call>{"name": "zoom", "arguments": [1]}</tool_call>', "malformed_call", 'a call is {"name": <tool name>, "arguments": {...}}'),
    ('<tool_call>{"name": "zoom"}</tool_call>', "invalid_arguments", "zoom: arguments: 'box' is a required property"),
    ('<tool_call>{"name": "zoom", "arguments": {"box": [0, 0, 1]}}</tool_call>', "invalid_arguments",
     "zoom: box: [0, 0, 1] is too short"),
    ('<tool_call>{"name": "video_seek", "arguments": {"start": 0, "end": "x"}}</tool_call>', "invalid_arguments",
     "video_seek: end: 'x' is not of type 'number'"),
    ('<tool_call>{"name": "video_seek", "arguments": {"start": 0,</tool_call>', "malformed_json",
     "the call is not valid JSON (Expecting property name enclosed in double quotes at character 48)"),
    ('<tool_call>{"name": "' + "r" * 70 + '", "arguments": {}}</tool_call>', "unknown_tool",
     "no tool '" + "r" * 64 + "'; tools: video_seek, zoom"),
    (_call("video_seek", start=3, end=3), "out_of_range", "start (3) must be before end (3)"),
    (_call("video_seek", start=8, end=9), "out_of_range", "the video is 8.00 s long; start 8 is past its end"),
    (_call("zoom", time=8.0, box=[0, 0, 1, 1]), "out_of_range", "the video is 8.00 s long; time 8.0 is past its end"),
    (_call("video_seek", start=0, end=8, nframes=10), "over_budget", "at most 8 frames per call; 10 were asked"),
    (_call("video_seek", start=0.2, end=0.9, nframes=2), "out_of_range", "[0.2, 0.9] s covers fewer than 2 frames at 1.00 fps"),
]


@pytest.mark.parametrize("text,reason,message", MESSAGES, ids=[f"{r}-{i}" for i, (_, r, _) in enumerate(MESSAGES)])
def test_refusals_name_their_reason_and_say_why(film, tools, text, reason, message):
    rec = run_call(text, tools, _state(film, 12.0, 20.0))
    assert (rec.reason, rec.message) == (reason, message)
    assert rec.info()["reason"] == reason and rec.info()["error"] == message
    if reason in ("non_finite", "malformed_call", "malformed_json"):  # no name could be read from the call
        assert rec.name == "?" and rec.info()["tool"] == "?"


def test_call_length_limit_and_spent_calls(film, tools):
    body = json.dumps({"name": "video_seek", "arguments": {"start": 0, "end": 2, "nframes": 2}})
    st = _state(film, 12.0, 20.0, max_call_chars=len(body), max_calls=1)
    assert run_call("<tool_call>" + body + "</tool_call>", tools, st).valid  # exactly the limit: accepted
    rec = run_call("<tool_call>" + body + "</tool_call>", tools, st)
    assert (rec.reason, rec.message) == ("over_budget", "the episode's 1 tool calls are spent")
    long = run_call("<tool_call>" + body + " </tool_call>", tools, _state(film, 12.0, 20.0, max_call_chars=len(body) - 1))
    assert (long.reason, long.message) == ("too_long", f"the call has {len(body)} characters; at most {len(body) - 1} are accepted")
    media = _state(film, 12.0, 20.0, max_media_tokens=5)
    run_call(_call("video_seek", start=0, end=8, nframes=8), tools, media)
    rec = run_call(_call("video_seek", start=0, end=8, nframes=8), tools, media)
    assert rec.message == "the result has 4 visual tokens; 1 of the episode's media budget are left"


def test_seek_on_an_episode_without_video_and_a_clip_under_a_second(film, tools):
    img = Sample("img", "q?", ["a", "b"], "a")
    rec = run_call(_call("video_seek", start=0, end=1), tools, EpisodeState(sample=img, media=None, budget=ToolBudget()))
    assert (rec.reason, rec.message) == ("out_of_range", "this episode has no video")
    rec = run_call(_call("video_seek", start=0, end=1), tools, EpisodeState(sample=None, media=None, budget=ToolBudget()))
    assert (rec.reason, rec.message) == ("out_of_range", "this episode has no video")
    short = run_call(_call("video_seek", start=0.6, end=0.9), tools, _state(film, 12.0, 12.5))
    assert (short.reason, short.message) == ("out_of_range", "the video is 0.50 s long; start 0.6 is past its end")
    missing = run_call(_call("video_seek", start=0, end=1), tools, _state(film + "_gone", 0.0, None))
    assert missing.reason == "tool_failed" and "sample 'clip'" in missing.message


@pytest.mark.parametrize("fps,clip,time,frame", [(2.0, (None, None), 0.0, 0), (2.0, (None, None), 3.0, 6),
                                                 (2.0, (5.0, 10.0), 1.25, 12), (0.5, (None, None), 5.0, 2)])
def test_zoom_frame_at_other_frame_rates(film, tools, fps, clip, time, frame):
    sample = Sample("clip", "q?", ["a", "b"], "a", video=VideoRef(film, start=clip[0], end=clip[1], frame_fps=fps))
    rec = run_call(_call("zoom", time=time, box=[0.0, 0.0, 1.0, 1.0]), tools,
                   EpisodeState(sample=sample, media=None, budget=ToolBudget()))
    assert rec.valid, rec.message
    assert int(rec.output.media.image[0, 0, 0]) == 4 * frame
    assert rec.output.text == f"Zoomed into [0.0, 0.0, 1.0, 1.0] at {time:.2f} s."


U8 = torch.uint8
MEDIA = [  # what a tool returns -> the refusal's message, or None when the processor takes it as is
    (dict(image=torch.zeros(3, 112, 112, dtype=U8)), None),  # exactly frame_max_pixels
    (dict(frames=torch.zeros(2, 3, 28, 56, dtype=U8), timestamps=[0.0, 1.0]), None),
    (dict(), "the tool returned a Media without frames or image"),
    (dict(image=torch.zeros(4, 56, 56, dtype=U8)), "media must be uint8 [T, 3, H, W] or [3, H, W]; got torch.uint8 [4, 56, 56]"),
    (dict(image=torch.zeros(3, 56, 84)), "media must be uint8 [T, 3, H, W] or [3, H, W]; got torch.float32 [3, 56, 84]"),
    (dict(image=torch.zeros(3, 140, 112, dtype=U8)), "frames of 140x112: sides must be multiples of 28 within 12544 pixels"),
    (dict(frames=torch.zeros(0, 3, 28, 28, dtype=U8), timestamps=[]),
     "a video needs an even number (>= 2) of frames with a timestamp each; got 0 frames, 0 timestamps"),
    (dict(frames=torch.zeros(2, 3, 28, 28, dtype=U8), timestamps=[0.0]),
     "a video needs an even number (>= 2) of frames with a timestamp each; got 2 frames, 1 timestamps"),
]


@pytest.mark.parametrize("kw,message", MEDIA, ids=[str(i) for i in range(len(MEDIA))])
def test_check_media_by_case(kw, message):
    from mmrl.data.schema import Media
    from mmrl.tools.calls import check_media
    from mmrl.tools.registry import ToolError

    media = Media("x", **kw)
    if message is None:
        check_media(media, ToolBudget())
    else:
        with pytest.raises(ToolError) as e:
            check_media(media, ToolBudget())
        assert (e.value.reason, str(e.value)) == ("bad_media", message)


@pytest.mark.parametrize("mode", ["L", "RGBA", "P"])
def test_zoom_converts_any_image_to_rgb(tmp_path, tools, mode):
    from mmrl.data.schema import ImageRef

    path = tmp_path / f"img_{mode}.png"
    Image.fromarray(np.full((56, 84, 3), 120, dtype=np.uint8)).convert(mode).save(path)
    sample = Sample("img", "q?", ["a", "b"], "a", image=ImageRef(str(path)))
    rec = run_call(_call("zoom", box=[0.0, 0.0, 1.0, 1.0]), tools, EpisodeState(sample=sample, media=None, budget=ToolBudget()))
    assert rec.valid, rec.message
    assert rec.output.media.image.shape[0] == 3 and abs(int(rec.output.media.image[0, 10, 10]) - 120) <= 20  # a palette rounds the grey
