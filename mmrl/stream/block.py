"""One episode's stream: the block of chunks it decides on, its questions, the memory it starts from, and the
chunk feeder that decodes the archive (every chunk from the stream's start to the block's end).

A block lives in ``Sample.meta["stream"]`` (``StreamBlock.to_meta``), so a training set is an ordinary annotation
file of samples whose video is the stream's MP4 (``mmrl.data.synth_stream`` writes one; the streaming eval builds
blocks from OVO-Bench annotations). The oracle's fields (``chunk_notes``: what each chunk shows; ``facts``: the
salient memory lines) drive the teacher (``mmrl.stream.teacher``) and the memory reward; the policy never sees them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch

from mmrl.data.schema import Media, Sample, VideoRef
from mmrl.errors import DataError
from mmrl.stream.config import StreamConfig
from mmrl.stream.record import AnswerEvent, MemoryLine, Probe, StreamQuestion

Chunk = Tuple[float, float, Media]  # (start s, end s, frames): the layout of mmrl.tools.episode.StreamMemory


@dataclass
class StreamBlock:
    video: str
    first_chunk: int
    n_chunks: int
    questions: List[StreamQuestion] = field(default_factory=list)
    memory_initial: List[MemoryLine] = field(default_factory=list)
    facts: List[MemoryLine] = field(default_factory=list)  # oracle: salient facts with their ranges
    chunk_notes: Dict[int, str] = field(default_factory=dict)  # oracle: what chunk k shows (teacher thinks)
    recalled: List[int] = field(default_factory=list)  # chunks recalled by earlier blocks of the same stream
    answers_before: List[AnswerEvent] = field(default_factory=list)  # answers given by earlier blocks
    stream_id: str = ""

    @property
    def last_chunk(self) -> int:
        return self.first_chunk + self.n_chunks - 1

    def to_meta(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        del d["video"]  # the sample's own video reference (relative to its annotation file) names it
        d["chunk_notes"] = {str(k): v for k, v in self.chunk_notes.items()}
        return d

    @staticmethod
    def from_meta(d: Dict[str, Any], video: Optional[str] = None) -> "StreamBlock":
        d = dict(d)
        qs = []
        for q in d.get("questions", []):
            q = dict(q)
            q["probes"] = [Probe(**p) for p in q.get("probes", [])]
            q["evidence"] = [tuple(e) for e in q.get("evidence", [])]
            qs.append(StreamQuestion(**q))
        d["questions"] = qs
        d["memory_initial"] = [MemoryLine(**x) for x in d.get("memory_initial", [])]
        d["facts"] = [MemoryLine(**x) for x in d.get("facts", [])]
        d["chunk_notes"] = {int(k): v for k, v in d.get("chunk_notes", {}).items()}
        d["answers_before"] = [AnswerEvent(**a) for a in d.get("answers_before", [])]
        if video is not None:
            d["video"] = video
        if "video" not in d:
            raise KeyError("video")
        return StreamBlock(**d)


def block_of(sample: Sample) -> StreamBlock:
    """The block of a stream sample; ``DataError`` naming the sample when ``meta['stream']`` is missing or bad."""
    raw = (sample.meta or {}).get("stream")
    if not isinstance(raw, dict):
        raise DataError("not a stream sample: meta['stream'] is missing (mmrl data synth --kind stream writes it)",
                        sample_id=sample.id)
    try:
        block = StreamBlock.from_meta(raw, video=sample.video.path if sample.video else raw.get("video"))
    except (TypeError, ValueError, KeyError) as e:
        raise DataError(f"meta['stream'] is malformed: {e}", sample_id=sample.id) from None
    if block.first_chunk < 0 or block.n_chunks < 1:
        raise DataError(f"meta['stream']: first_chunk {block.first_chunk} / n_chunks {block.n_chunks} out of range",
                        sample_id=sample.id)
    return block


def block_sample(block: StreamBlock, sample_id: str) -> Sample:
    """A ``Sample`` carrying ``block`` (its video reference points at the stream's MP4); its ``answer`` lists the
    gold answers (``qid: answer``; a forward question's final one), for reading only: rewards use the record."""
    gold = "; ".join(f"{q.qid}: {'/'.join(q.gold) if q.gold else (q.probes[-1].gold if q.probes else '?')}"
                     for q in block.questions)
    return Sample(id=sample_id, question="(stream)", candidates=[], answer=gold or "-", qtype="stream",
                  answer_type="text",
                  video=VideoRef(path=block.video), meta={"stream": block.to_meta()})


def decode_chunks(video: str, cfg: StreamConfig, last_chunk: int, sample_id: str, factor: int = 28) -> List[Chunk]:
    """Chunks ``0 .. last_chunk`` of ``video``: frames at ``k * chunk_s + j / fps`` (nearest source frame), resized
    within the config's pixel budget; ``DataError`` naming the sample when the video is shorter."""
    from mmrl.media.decode import decode_indices, probe  # lazy: a config naming the stream loop loads no decoder

    info = probe(video, sample_id)
    per = cfg.frames_per_chunk
    times = [k * cfg.chunk_seconds + j / cfg.fps for k in range(last_chunk + 1) for j in range(per)]
    idx = [int(round(t * info.fps)) for t in times]
    if idx[-1] >= info.num_frames:
        raise DataError(f"stream needs {last_chunk + 1} chunks of {cfg.chunk_seconds:g} s but the video lasts "
                        f"{info.duration:.2f} s", sample_id=sample_id, path=video)
    media = decode_indices(info, idx, sample_id, cfg.frame_max_pixels, cfg.frame_min_pixels, factor)
    out: List[Chunk] = []
    for k in range(last_chunk + 1):
        sl = slice(k * per, (k + 1) * per)
        out.append((k * cfg.chunk_seconds, (k + 1) * cfg.chunk_seconds,
                    Media(sample_id=sample_id, frames=media.frames[sl], timestamps=times[sl], fps=cfg.fps)))
    return out


def join_chunks(chunks: List[Chunk], sample_id: str) -> Media:
    """One video of consecutive chunks (frames concatenated in time order)."""
    return Media(sample_id=sample_id, frames=torch.cat([c[2].frames for c in chunks]),
                 timestamps=[t for c in chunks for t in c[2].timestamps], fps=chunks[0][2].fps)
