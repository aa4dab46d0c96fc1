"""Offline trajectory rectification (AdSeek, "rectified bootstrapping"; ``/work/shared/specs/abstracts.md``): RL
episodes that answered wrong or never looked at the evidence are rewritten into corrected episodes, a set of
scripts for multi-turn SFT (``sft.turns``, ``mmrl.tools.turn_sft``).

An episode (a line of a run's ``trajectories.jsonl``, ``mmrl.tools.trajectory_log``) is rewritten when its
final answer is wrong or its seek IoU with the sample's evidence segments is 0. The rewrite keeps the model's own
earlier turns that were valid tool calls (in order, within the suite's budgets: at most ``max_calls`` calls and
``max_turns`` turns with the corrections), drops the invalid ones (refused calls, truncated turns, turns with
several calls) and its answer turn, adds one ``video_seek`` on each evidence segment that no kept seek already
covers (clip time, written in ``seek`` style: ``exact`` seconds with ``nframes`` frames or a ``whole``-second
window, ``mmrl.data.seek_script``), and ends with the gold answer. Episodes that were right and saw the
evidence are left out; identical rewrites of a sample are written once.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from mmrl.data.schema import Sample
from mmrl.data.seek_script import seek_call

WRONG, NO_EVIDENCE = "wrong_answer", "no_evidence"


@dataclass
class RectifyCounts:
    episodes: int = 0
    right_and_seen: int = 0  # right answer, seek IoU > 0: left out
    wrong_answer: int = 0  # rewritten because the answer was wrong (IoU > 0)
    no_evidence: int = 0  # rewritten because the seek IoU was 0 (right answer)
    both: int = 0  # wrong answer and IoU 0
    rewritten: int = 0  # scripts written (after duplicates)
    duplicates: int = 0
    turns_kept: int = 0  # the model's valid call turns kept in the rewrites
    turns_dropped: int = 0  # invalid turns and wrong answers dropped
    seeks_added: int = 0
    unknown_sample: int = 0  # episodes of samples missing from the data: skipped and counted
    no_annotation: int = 0  # rewritten for a wrong answer, but the sample has no evidence segment to seek

    def as_dict(self) -> Dict[str, int]:
        return asdict(self)


def gold_turn(sample: Sample) -> str:
    """The answer turn of a right episode: the gold letter (multiple choice), else the answer as text."""
    if sample.is_choice:
        return sample.answer_letter
    return str(sample.meta.get("sft_response") or sample.answer)


def _valid_call(turn: Dict) -> bool:
    return "tool" in turn and bool(turn.get("valid")) and not turn.get("truncated") and not turn.get("ignored_calls")


def _covers(intervals: Iterable[Tuple[float, float]], seg: Tuple[float, float]) -> bool:
    return any(a <= seg[0] + 1e-9 and seg[1] <= b + 1e-9 for a, b in intervals)


def rewrite(record: Dict, sample: Sample, max_calls: int, max_turns: int, nframes: int = 4,
            seek: str = "exact") -> Tuple[List[str], int, int, int]:
    """``(turns, kept, dropped, seeks added)`` of the corrected episode of ``record`` on ``sample``."""
    offset = (sample.video.start or 0.0) if sample.video is not None else 0.0
    segments = [(a - offset, b - offset) for a, b in sample.evidence.segments] if sample.video is not None else []
    turns = record["turns"]
    valid = [t for t in turns if _valid_call(t)]
    dropped = len(turns) - len(valid)
    kept: List[Dict] = []
    for t in valid:  # keep the model's calls while the missing seeks and the answer still fit the budgets
        seen = [tuple(k["interval"]) for k in kept + [t] if k.get("tool") == "video_seek" and "interval" in k]
        missing = sum(not _covers(seen, s) for s in segments)
        if len(kept) + 1 + missing <= max_calls and len(kept) + 1 + missing + 1 <= max_turns:
            kept.append(t)
        else:
            dropped += 1
    seen = [tuple(k["interval"]) for k in kept if k.get("tool") == "video_seek" and "interval" in k]
    seeks = [seek_call(a, b, seek, nframes=nframes) for a, b in segments if not _covers(seen, (a, b))]
    if len(kept) + len(seeks) > max_calls or len(kept) + len(seeks) + 1 > max_turns:
        raise ValueError(f"sample {sample.id}: {len(seeks)} evidence segments do not fit the suite's budgets "
                         f"({max_calls} calls, {max_turns} turns)")
    return [k["model_text"] for k in kept] + seeks + [gold_turn(sample)], len(kept), dropped, len(seeks)


def rectify(records: Iterable[Dict], samples: Dict[str, Sample], max_calls: int, max_turns: int,
            nframes: int = 4, seek: str = "exact") -> Tuple[List[Dict], RectifyCounts]:
    """The corrected scripts (``{"id", "turns", "why", "step", "kept", "dropped"}``) and the counts."""
    counts, out, seen = RectifyCounts(), [], set()
    for rec in records:
        counts.episodes += 1
        sample: Optional[Sample] = samples.get(rec["id"])
        if sample is None:
            counts.unknown_sample += 1
            continue
        wrong, blind = not rec["correct"], rec["seek_iou"] <= 0
        if not (wrong or blind):
            counts.right_and_seen += 1
            continue
        if wrong and blind:
            counts.both += 1
        elif wrong:
            counts.wrong_answer += 1
        else:
            counts.no_evidence += 1
        if not sample.evidence.segments:
            counts.no_annotation += 1
        turns, kept, dropped, added = rewrite(rec, sample, max_calls, max_turns, nframes, seek)
        key = (sample.id, tuple(turns))
        if key in seen:
            counts.duplicates += 1
            continue
        seen.add(key)
        counts.rewritten += 1
        counts.turns_kept += kept
        counts.turns_dropped += dropped
        counts.seeks_added += added
        out.append({"id": sample.id, "turns": turns, "why": [w for w, on in ((WRONG, wrong), (NO_EVIDENCE, blind)) if on],
                    "step": rec.get("step"), "kept": kept, "dropped": dropped})
    return out, counts


def write_scripts(scripts: List[Dict], path: str) -> None:
    from pathlib import Path

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for s in scripts:
            f.write(json.dumps(s) + "\n")
