"""Frame rules: the ``sampling.rule`` of a benchmark YAML -> which frames a query sees and its pixel budget.

A rule maps ``(VideoInfo, query meta, sampling, pixels)`` to 0-based frame indices and ``(min_pixels,
max_pixels)`` per frame. The index arithmetic lives in ``mmrl.media.sampling`` (one home for every index rule);
a rule only says which official code it follows and which ``sampling`` fields it reads (``uses``): a field a
rule does not read is rejected when the YAML loads (``mmrl.eval.protocol``). Query ``meta`` keys a rule may
read: ``bound`` (``(start, end)`` s, set by the hooks for bound tasks) and ``end`` (a prefix end in seconds).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Tuple

from mmrl.data.schema import Media
from mmrl.errors import DataError
from mmrl.eval.benchmark_def import BenchmarkDef, EvalQuery, PixelsDef, SamplingDef
from mmrl.media.decode import VideoInfo, decode_indices, probe
from mmrl.media.sampling import (frame_range, get_index, lmms_subsample, prefix_last, qwen_indices, qwen_nframes,
                                 qwen_video_max_pixels)
from mmrl.registry import Registry

FRAME_RULES = Registry("frame rule", builtins={__name__: ("get_index", "lmms_qwen2_5_vl", "ovo_qwen2_vl", "qwen_nframes")})
Choice = Tuple[List[int], int, int]  # indices, min_pixels, max_pixels


@dataclass(frozen=True)
class FrameRule:
    fn: Callable[[VideoInfo, Mapping[str, Any], SamplingDef, PixelsDef], Choice]
    uses: Tuple[str, ...]  # sampling fields the rule reads
    needs: Tuple[str, ...]  # sampling fields that must be set
    source: str  # the official code it follows

    def __call__(self, info: VideoInfo, meta: Mapping[str, Any], s: SamplingDef, px: PixelsDef) -> Choice:
        return self.fn(info, meta, s, px)


def frame_rule(name: str, uses: Tuple[str, ...], needs: Tuple[str, ...], source: str):
    """Register ``fn(info, meta, sampling, pixels) -> (indices, min_pixels, max_pixels)`` with what it reads."""
    return FRAME_RULES.register(name, uses=tuple(uses), needs=tuple(needs), source=source)


def frame_rule_info(name: str) -> FrameRule:
    """The rule ``name`` (registered, or ``module:function`` with no declarations) with its declarations."""
    fn, meta = FRAME_RULES.get(name), FRAME_RULES.meta(name)
    return FrameRule(fn, meta.get("uses", ()), meta.get("needs", ()), meta.get("source", ""))


def _bounded(info: VideoInfo, meta: Mapping[str, Any]) -> Tuple[int, int]:
    bound = meta.get("bound")
    return frame_range(info.num_frames, info.fps, *bound) if bound else (0, info.num_frames - 1)


@frame_rule("get_index", uses=("num_segments", "use_bound"), needs=("num_segments",),
            source="Ask-Anything video_chat2/mvbench.ipynb MVBench_dataset.get_index")
def _get_index(info, meta, s, px) -> Choice:
    """Segment midpoints within the bound; a frame folder counts from 1 (``first_idx=1``), as the notebook."""
    first = 1 if info.is_folder else 0
    idx = get_index(info.num_frames, info.fps, meta.get("bound"), first, s.num_segments)
    return [i - first for i in idx], px.min_pixels or 28 * 28, px.max_pixels


@frame_rule("lmms_qwen2_5_vl", uses=("fps", "max_frames", "use_bound"), needs=("max_frames",),
            source="lmms-eval models/simple/qwen2_5_vl.py generate_until + qwen-vl-utils fetch_video")
def _lmms_qwen(info, meta, s, px) -> Choice:
    """qwen-vl-utils at ``fps`` (default 2) over the clip (or the bound range), then the wrapper keeps
    ``linspace(0, n-1, max_frames, dtype=int)`` plus the last; pixels resolved for the decoded ``n`` frames."""
    first, last = _bounded(info, meta)
    n = qwen_nframes(last - first + 1, info.fps, sample_fps=s.fps)
    idx = qwen_indices(first, last, n)
    lo, hi = qwen_video_max_pixels(n, px.min_pixels, px.max_pixels)
    return [idx[k] for k in lmms_subsample(n, s.max_frames)], lo, hi


@frame_rule("ovo_qwen2_vl", uses=("max_frames", "frames_margin"), needs=("max_frames", "frames_margin"),
            source="OVO-Bench models/QWen2VL.py get_max_frames + qwen-vl-utils fetch_video")
def _ovo_qwen2_vl(info, meta, s, px) -> Choice:
    """``nframes = min(max_frames, len(chunk) - margin)`` over the prefix ``[0, end)`` (the chunk), qwen-vl-utils
    rounding and ``linspace``; pixels as ``fetch_video`` resolves them."""
    last = prefix_last(info.num_frames, info.fps, meta.get("end"))
    count = last + 1
    n = qwen_nframes(count, info.fps, nframes=min(s.max_frames, count - s.frames_margin))
    lo, hi = qwen_video_max_pixels(n, px.min_pixels, px.max_pixels)
    return qwen_indices(0, last, n), lo, hi


@frame_rule("qwen_nframes", uses=("max_frames", "use_bound"), needs=("max_frames",),
            source="qwen-vl-utils smart_nframes({'nframes': n}) + _read_video_decord (mmrl's training loader)")
def _qwen_nframes(info, meta, s, px) -> Choice:
    """``max_frames`` frames (rounded to a multiple of 2) spread by ``linspace`` over the clip or its bound."""
    first, last = _bounded(info, meta)
    n = qwen_nframes(last - first + 1, info.fps, nframes=min(s.max_frames, last - first + 1))
    return qwen_indices(first, last, n), px.min_pixels or 28 * 28, px.max_pixels


def prepare_frames(query: EvalQuery, bdef: BenchmarkDef, cache: Dict[str, VideoInfo],
                   factor: int = 28) -> Tuple[Media, Dict[str, Any]]:
    """Decode the frames ``bdef.sampling.rule`` picks for ``query``; ``info`` records what was shown."""
    rule = frame_rule_info(bdef.sampling.rule)
    path = query.video.path
    if path not in cache:
        cache[path] = probe(path, query.id, frame_fps=query.meta.get("frame_fps"))
    info = cache[path]
    try:
        idx, lo, hi = rule(info, query.meta, bdef.sampling, bdef.pixels)
    except ValueError as e:  # an empty range, or fewer frames than the rule needs
        raise DataError(f"cannot sample frames: {e}", sample_id=query.id, path=path) from None
    if hi is None:
        raise DataError("no pixel budget: set pixels.max_pixels", sample_id=query.id, path=path)
    media = decode_indices(info, idx, query.id, max_pixels=hi, min_pixels=lo, factor=factor)
    shown = {"frames": idx, "video_frames": info.num_frames, "video_fps": round(info.fps, 4),
             "video_duration": round(info.duration, 4), "last_frame_t": round(media.timestamps[-1], 4),
             "pixels": [lo, hi], "frame_hw": list(media.frames.shape[-2:])}
    if "end" in query.meta:  # a prefix protocol: where the visible prefix ended (capped at the video)
        end = query.meta["end"]
        shown["prefix_end"] = None if end is None else min(end, round(info.duration, 4))
    return media, shown
