"""The trajectories of a multi-turn RL run, kept for ``mmrl rectify`` and ``mmrl tools preview``:
``<train.out_dir>/trajectories.jsonl``, one line per episode of every step (rank 0 only; multi-turn runs are
single-rank so far).

A line holds the step (1-based, the step the episode was generated for), the sample id, the group and pack, the
episode's scores (``mmrl.tools.evaluate.episode_row``: final answer, correctness, calls, seek IoU, tokens), its
rewards, and its model turns: each turn's text and, for a tool call, the tool, arguments, validity, refusal
reason and the interval it returned. A resumed run first drops the lines of steps after its checkpoint, so the
file always matches the run's metrics.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Iterator, List

FILE = "trajectories.jsonl"
TURN_KEYS = ("turn", "model_text", "truncated", "tool", "arguments", "valid", "reason", "interval", "frames",
             "box", "time", "end", "ignored_calls")


def trajectory_record(traj, sample, candidates, step: int) -> Dict:
    from mmrl.tools.evaluate import episode_row

    turns = [{k: t[k] for k in TURN_KEYS if k in t} for t in traj.turns if t.get("turn", -1) >= 0]
    return {"step": int(step), "group": int(traj.group_id), "pack": int(traj.pack_id),
            **episode_row(traj, sample, candidates), "rewards": {k: float(v) for k, v in traj.rewards.items()},
            "turns": turns}


def log_trajectories(tr, si, trajs) -> None:
    """Append the step's episodes to ``<out_dir>/trajectories.jsonl`` (runs of tool episodes, main rank); ``tr`` is
    the step's context (``mmrl.train.step.StepContext``)."""
    if not tr.loop.tool_episodes or not tr.backend.is_main():
        return
    path = Path(tr.cfg.train.out_dir) / FILE
    path.parent.mkdir(parents=True, exist_ok=True)  # a bare train_step() runs before run() made the directory
    with open(path, "a") as f:
        for t in trajs:
            rec = trajectory_record(t, si.samples[t.sample_id], si.candidates[(t.sample_id, t.view)], tr.step + 1)
            f.write(json.dumps(rec) + "\n")


def truncate_after(out_dir: str, step: int) -> None:
    """Drop the lines of steps after ``step`` (a resume from that step's checkpoint regenerates them)."""
    path = Path(out_dir) / FILE
    if path.exists():
        keep = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
        path.write_text("".join(line + "\n" for line in keep))


def read_trajectories(path: str) -> Iterator[Dict]:
    from mmrl.errors import DataError

    p = Path(path)
    if p.is_dir():
        p = p / FILE
    if not p.exists():
        raise DataError(f"no trajectories at {p} (a multi-turn run, rollout.agent_loop=multi_turn, writes them)")
    for i, line in enumerate(p.read_text().splitlines(), 1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{p}:{i}: not JSON ({e.msg})") from None


def records(path: str) -> List[Dict]:
    return list(read_trajectories(path))
