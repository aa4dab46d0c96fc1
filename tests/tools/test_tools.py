"""Built-in tools, the registry and suites, and every bad-input case of a tool call (issue 11 item 4): each is an
error observation with a counted reason, never an exception and never a read outside the episode's media."""
import json
import math

import pytest
import torch

from mmrl.data.annotations import load_samples
from mmrl.errors import ConfigError
from mmrl.tools import EpisodeState, ToolBudget, load_suite, media_tokens, resolve_tool, run_call, tool
from mmrl.tools.metrics import tool_metrics
from mmrl.tools.registry import TOOLS, ToolOutput

from support import REPO

SUITE = str(REPO / "tools" / "video_seek.yaml")


@pytest.fixture(scope="module")
def video_sample(video_world):
    return load_samples(str(video_world / "train.json"))[0][0]


@pytest.fixture(scope="module")
def image_sample(image_world):
    return load_samples(str(image_world / "train.json"))[0][0]


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return load_suite(SUITE)


def _state(sample, **budget):
    return EpisodeState(sample=sample, media=None, budget=ToolBudget(**{"max_calls": 4, "max_media_tokens": 512, **budget}))


def _call(name, **arguments):
    return "I will look.<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _duration(sample):
    import decord

    vr = decord.VideoReader(sample.video.path)
    return len(vr) / vr.get_avg_fps()


def test_video_seek_returns_frames_of_the_interval(video_sample, suite):
    st = _state(video_sample, max_frames=4)
    dur = _duration(video_sample)
    rec = run_call(_call("video_seek", start=0.25 * dur, end=0.75 * dur, nframes=4), suite.tools, st)
    assert rec.valid, rec.message
    m = rec.output.media
    assert m.is_video and m.frames.shape[0] == 4 and m.frames.dtype == torch.uint8
    assert all(0.25 * dur - 1e-6 <= t <= 0.75 * dur + 1e-6 for t in m.timestamps)
    assert m.frames.shape[-1] * m.frames.shape[-2] <= st.budget.frame_max_pixels
    assert rec.media_tokens == media_tokens(m) == st.media_tokens_used > 0 and st.calls == 1
    assert rec.info()["interval"] == [0.25 * dur, 0.75 * dur]
    by_rate = run_call(_call("video_seek", start=0.0, end=dur, fps=30.0), suite.tools, st)
    assert by_rate.valid and by_rate.output.media.frames.shape[0] == 4  # capped by max_frames


def test_zoom_crops_a_video_frame_and_an_image(video_sample, image_sample, suite):
    st = _state(video_sample)
    rec = run_call(_call("zoom", time=0.5, box=[0.0, 0.0, 0.5, 0.5]), suite.tools, st)
    assert rec.valid, rec.message
    img = rec.output.media.image
    assert img.shape[0] == 3 and img.shape[1] % 28 == 0 and img.shape[2] % 28 == 0
    assert img.shape[1] * img.shape[2] <= st.budget.frame_max_pixels
    st2 = _state(image_sample)
    rec2 = run_call(_call("zoom", box=[0.25, 0.25, 0.75, 0.75]), suite.tools, st2)
    assert rec2.valid and rec2.output.media.image is not None
    # the crop is of the source: zooming into a region of one colour gives (nearly) that colour only
    from PIL import Image

    src = torch.from_numpy(__import__("numpy").asarray(Image.open(image_sample.image.path).convert("RGB")).copy())
    centre = src[src.shape[0] // 2, src.shape[1] // 2].float()
    tiny = run_call(_call("zoom", box=[0.49, 0.49, 0.51, 0.51]), suite.tools, _state(image_sample)).output.media.image
    assert (tiny.float().mean(dim=(1, 2)) - centre).abs().max() < 40


def _position_coded_png(path, h=56, w=84):
    """A ``h x w`` (non-square) image whose pixel at (row, col) is ``(4 * row, 2 * col, 0)``: a crop names its rows
    and columns."""
    from PIL import Image

    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    Image.fromarray(torch.stack([4 * rows, 2 * cols, torch.zeros_like(rows)], -1).to(torch.uint8).numpy()).save(path)
    from mmrl.data.schema import ImageRef, Sample

    return Sample("coded", "q?", ["a", "b"], "a", image=ImageRef(str(path)))


# (box [x0, y0, x1, y1], the rows and columns of the 56 x 84 source it must return), by hand: rows int(y0 * 56) to
# ceil(y1 * 56) - 1, columns int(x0 * 84) to ceil(x1 * 84) - 1, at least one of each
ZOOM_CROPS = [
    ([0.25, 0.5, 0.75, 1.0], range(28, 56), range(21, 63)),  # 28 x 42: multiples of 14, returned as cut
    ([0.0, 0.25, 0.5, 0.75], range(14, 42), range(0, 42)),
    ([0.3, 0.6, 0.301, 0.601], range(33, 34), range(25, 26)),  # one pixel (row 33, column 25), resized to 28 x 28
]


@pytest.mark.parametrize("box,rows,cols", ZOOM_CROPS)
def test_zoom_maps_the_box_x_on_the_width_and_y_on_the_height(tmp_path, suite, box, rows, cols):
    sample = _position_coded_png(tmp_path / "coded.png")
    st = EpisodeState(sample=sample, media=None, budget=ToolBudget(factor=14))
    rec = run_call(_call("zoom", box=box), suite.tools, st)
    assert rec.valid, rec.message
    img = rec.output.media.image.long()
    if len(rows) * len(cols) >= 28 * 28:  # within the pixel budget at sides of multiples of 14: not resized
        expected_r = (4 * torch.tensor(list(rows)))[:, None].expand(len(rows), len(cols))
        expected_g = (2 * torch.tensor(list(cols)))[None, :].expand(len(rows), len(cols))
        assert img.shape == (3, len(rows), len(cols))
        assert torch.equal(img[0], expected_r) and torch.equal(img[1], expected_g)
    else:  # one source pixel, upsampled: uniform
        assert img.shape == (3, 28, 28)
        assert (img[0] == 4 * rows[0]).all() and (img[1] == 2 * cols[0]).all()


def test_no_tool_call_means_the_model_answered(video_sample, suite):
    assert run_call("The answer is (A).", suite.tools, _state(video_sample)) is None


BAD = [
    ("malformed_json", '<tool_call>{"name": "video_seek", "arguments": {"start": 0,</tool_call>'),
    ("malformed_call", '<tool_call>["video_seek", 0, 1]</tool_call>'),
    ("unknown_tool", _call("rm_rf", start=0, end=1)),
    ("invalid_arguments", _call("video_seek", start="zero", end=1)),  # wrong type
    ("invalid_arguments", _call("video_seek", start=0)),  # missing key
    ("invalid_arguments", _call("video_seek", start=0, end=1, path="/etc/passwd")),  # a path: no such argument
    ("invalid_arguments", _call("video_seek", start="/etc/passwd", end=1)),
    ("invalid_arguments", _call("video_seek", start=0, end=1e300)),  # huge number
    ("invalid_arguments", _call("video_seek", start=0, end=1, nframes=4, fps=2)),  # both
    ("invalid_arguments", _call("zoom", box=[0, 0, 2, 1], time=0)),
    ("non_finite", '<tool_call>{"name": "video_seek", "arguments": {"start": NaN, "end": 1}}</tool_call>'),
    ("non_finite", '<tool_call>{"name": "video_seek", "arguments": {"start": 0, "end": 1e999}}</tool_call>'),
    ("non_finite", '<tool_call>{"name": "video_seek", "arguments": {"start": -Infinity, "end": 1}}</tool_call>'),
    ("out_of_range", _call("video_seek", start=2.0, end=1.0)),
    ("out_of_range", _call("video_seek", start=5000.0, end=5001.0)),
    ("out_of_range", _call("zoom", box=[0.5, 0.5, 0.2, 0.9], time=0)),
    ("too_long", _call("video_seek", start=0, end=1, note="x" * 10_000)),
]


@pytest.mark.parametrize("reason,text", BAD, ids=[f"{r}-{i}" for i, (r, _) in enumerate(BAD)])
def test_bad_calls_are_error_observations_with_a_reason(video_sample, suite, reason, text, monkeypatch):
    opened = []
    import decord

    real = decord.VideoReader
    monkeypatch.setattr(decord, "VideoReader", lambda path, *a, **k: opened.append(path) or real(path, *a, **k))
    st = _state(video_sample)
    rec = run_call(text, suite.tools, st)
    assert rec is not None and not rec.valid and rec.reason == reason, (rec.reason, rec.message)
    assert rec.message and rec.output is None and st.calls == 1 and st.media_tokens_used == 0
    assert set(opened) <= {video_sample.video.path}  # never a read outside the episode's own video


def test_calls_past_the_budget_are_refused(video_sample, suite):
    st = _state(video_sample, max_calls=2)
    ok = _call("video_seek", start=0.0, end=1.0, nframes=2)
    assert run_call(ok, suite.tools, st).valid and run_call(ok, suite.tools, st).valid
    rec = run_call(ok, suite.tools, st)
    assert not rec.valid and rec.reason == "over_budget" and st.calls == 3
    media = _state(video_sample, max_media_tokens=1)  # any frames exceed one visual token
    rec = run_call(ok, suite.tools, media)
    assert not rec.valid and rec.reason == "over_budget" and media.media_tokens_used == 0
    frames = _state(video_sample, max_frames=2)
    assert run_call(_call("video_seek", start=0.0, end=1.0, nframes=4), suite.tools, frames).reason == "over_budget"


def test_a_failing_tool_is_counted_not_raised(video_sample):
    def boom(state):
        raise RuntimeError("kaput")

    if "test_boom" not in TOOLS:  # registered once per process (mutation testing runs the tests twice)
        tool("test_boom", {"type": "object", "properties": {}, "additionalProperties": False})(boom)
    rec = run_call(_call("test_boom"), {"test_boom": resolve_tool("test_boom")}, _state(video_sample))
    assert not rec.valid and rec.reason == "tool_failed" and "kaput" in rec.message


def count_frames(state, n: int):
    """A user tool given as module:function with its schema in the suite."""
    return ToolOutput(text=f"{n} frames")


def test_suite_yaml_user_tools_and_errors(tmp_path, video_sample):
    p = tmp_path / "suite.yaml"
    p.write_text("max_turns: 2\nbudget: {max_calls: 1}\ntools:\n  - name: video_seek\n"
                 "  - name: test_tools:count_frames\n    schema: {type: object, properties: {n: {type: integer}},"
                 " required: [n], additionalProperties: false}\n")
    s = load_suite(str(p))
    assert set(s.tools) == {"video_seek", "count_frames"} and s.config.budget.max_calls == 1
    assert "<tools>" in s.system_block() and '"name": "count_frames"' in s.system_block()
    rec = run_call(_call("count_frames", n=3), s.tools, _state(video_sample))
    assert rec.valid and rec.output.text == "3 frames"
    bad = {
        "tools:\n  - name: no_such_tool\n": "tools.0.name",
        "budget: {max_calls: 1, shell: true}\ntools:\n  - name: zoom\n": "shell",
        "max_turns: 0\ntools:\n  - name: zoom\n": "max_turns",
        "tools:\n  - name: test_tools:count_frames\n": "tools.0.name",  # plain function without a schema
        "tools:\n  - name: zoom\n  - name: zoom\n": "tools.1.name",
        "tools: []\n": "tools",
    }
    for text, key in bad.items():
        p.write_text(text)
        with pytest.raises(ConfigError, match=key):
            load_suite(str(p))


def test_compact_prompt_lists_one_line_per_tool(tmp_path, tiny_model_path):
    """``prompt: compact`` renders the tool list as one line per tool (argument names and types, optional ones
    marked ``?``) with the same ``<tool_call>`` format, and that is what the model's system turn holds; an unknown
    value is a ConfigError naming the key."""
    from mmrl.models.loading import load_processor
    from mmrl.rollout.agent_loop_tools import tool_loop

    full = load_suite(SUITE)
    p = tmp_path / "compact.yaml"
    p.write_text(open(SUITE).read() + "\nprompt: compact\n")
    compact = load_suite(str(p))
    assert full.config.prompt == "full" and compact.config.prompt == "compact"
    assert compact.system_block() == (
        "\n\n# Tools\nvideo_seek(start: number, end: number, nframes?: integer, fps?: number)\n"
        "zoom(time?: number, box: array)\n"
        'Call one as <tool_call>{"name": <function-name>, "arguments": <args-json-object>}</tool_call>')
    proc = load_processor(tiny_model_path)
    prompt = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
    seen = {name: tool_loop(proc, s)._system(prompt) for name, s in (("full", full), ("compact", compact))}
    assert compact.system_block() + "<|im_end|>" in seen["compact"] and "<tools>" not in seen["compact"]
    assert full.system_block() + "<|im_end|>" in seen["full"]
    n = {k: len(proc.tokenizer.encode(v)) for k, v in seen.items()}
    assert n["compact"] * 4 < n["full"], n  # 1,189 -> 153 tokens of the tool list with the tiny tokenizer
    p.write_text(open(SUITE).read() + "\nprompt: short\n")
    with pytest.raises(ConfigError, match="key 'prompt'"):
        load_suite(str(p))


def test_tool_metrics_count_reasons():
    from mmrl.data.schema import Segment, Trajectory

    def traj(turns):
        z = torch.zeros(1, dtype=torch.long)
        return Trajectory("s", 0, "original", "anchor", z, z, z.float(), z.bool(), "", turns=turns,
                          segments=[Segment("model", z), Segment("env", z), Segment("model", z)])

    calls = [{"tool": "video_seek", "valid": True, "call_media_tokens": 8},
             {"tool": "zoom", "valid": False, "reason": "out_of_range"}]
    m = tool_metrics([traj(calls), traj([{"tool": "x", "valid": False, "reason": "unknown_tool"}])])
    assert m["tools/calls_per_episode"] == 1.5 and math.isclose(m["tools/invalid_frac"], 2 / 3)
    assert math.isclose(m["tools/invalid/out_of_range"], 1 / 3) and m["tools/invalid/too_long"] == 0.0
    assert m["tools/turns_per_episode"] == 2 and m["tools/media_tokens_per_episode"] == 4
    assert tool_metrics([]) == {}


def test_memory_recall_on_a_scripted_stream(suite):
    from mmrl.data.schema import Media
    from mmrl.tools import StreamMemory, TOOLS

    tools = {"memory_recall": resolve_tool("memory_recall")}

    def chunk(i):  # chunk i covers [2i, 2i+2) s with 2 frames of value i
        return (2.0 * i, 2.0 * i + 2, Media("c", frames=torch.full((2, 3, 56, 56), i, dtype=torch.uint8),
                                           timestamps=[2.0 * i, 2.0 * i + 1], fps=1.0))

    st = _state(None)
    st.memory = StreamMemory(chunks=[chunk(i) for i in range(8)], current=6)
    rec = run_call(_call("memory_recall", start=0.0, end=100.0), tools, st)
    assert rec.valid and rec.info()["chunks"] == [2, 3, 4, 5]  # at most 4, strictly before chunk 6, latest first
    assert rec.output.media.frames[:, 0, 0, 0].tolist() == [2, 2, 3, 3, 4, 4, 5, 5]
    again = run_call(_call("memory_recall", start=0.0, end=100.0), tools, st)
    assert again.valid and again.info()["chunks"] == [0, 1]  # each chunk at most once
    assert run_call(_call("memory_recall", start=0.0, end=100.0), tools, st).reason == "out_of_range"
    st2 = _state(None)
    st2.memory = StreamMemory(chunks=[chunk(i) for i in range(8)], current=6)
    assert run_call(_call("memory_recall", start=12.5, end=13.0), tools, st2).reason == "out_of_range"  # chunk 6: now
    assert run_call(_call("memory_recall", start=3.0, end=3.5), tools, st2).info()["chunks"] == [1]
    assert run_call(_call("memory_recall", start=0.0, end=1.0), tools, _state(None)).reason == "out_of_range"  # no stream


def test_media_a_tool_returns_is_checked(video_sample):
    from mmrl.data.schema import Media

    outs = {
        "test_odd_frames": Media("x", frames=torch.zeros(3, 3, 56, 56, dtype=torch.uint8), timestamps=[0, 1, 2]),
        "test_float_image": Media("x", image=torch.zeros(3, 56, 56)),
        "test_odd_size": Media("x", image=torch.zeros(3, 50, 56, dtype=torch.uint8)),
        "test_too_big": Media("x", image=torch.zeros(3, 280, 280, dtype=torch.uint8)),
    }
    for name, media in outs.items():
        if name not in TOOLS:
            tool(name, {"type": "object"})(lambda state, _m=media: ToolOutput("x", media=_m))
        st = _state(video_sample)
        rec = run_call(_call(name), {name: resolve_tool(name)}, st)
        assert not rec.valid and rec.reason == "bad_media" and st.media_tokens_used == 0, (name, rec.message)
    if "test_not_output" not in TOOLS:
        tool("test_not_output", {"type": "object"})(lambda state: "frames")
    rec = run_call(_call("test_not_output"), {"test_not_output": resolve_tool("test_not_output")}, _state(video_sample))
    assert rec.reason == "tool_failed" and "ToolOutput" in rec.message
