"""Run-directory rules: a run never silently writes over another, and its checkpoints are its own.

``open_run(out_dir, kind, resume, overwrite)`` decides, before anything is written:

- a directory holding a previous run's data (``metrics.jsonl``, ``checkpoints/``, ``final/``) is refused unless
  ``resume`` (continue it) or ``overwrite`` (delete that run's artifacts first) is given;
- ``resume=True`` needs a checkpoint of the same kind of run (``sft`` or ``train``) and says from which step it
  continues; ``resume="auto"`` resumes when there is one and starts fresh (saying so) when there is none;
- each run has an id in ``run.json``; every checkpoint records the id of the run that wrote it, and pruning
  (``keep_checkpoints``) only ever deletes checkpoints of the current run, never in favour of a foreign one.

``open_run(..., check_only=True)`` applies the same rules without touching the disk (the CLI calls it before
the model loads).
"""
from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Union

from mmrl.errors import ConfigError

RUN_FILE = "run.json"
OWNER_FILE = "owner.json"
# what a run writes into its directory; --overwrite deletes exactly these
ARTIFACTS = ("metrics.jsonl", "checkpoints", "final", "tb", "skipped.jsonl", "predictions", "report.md", "rewards.png",
             "views.png", "optim.png", "policy.png", "length.png", "heldout.png", "speed.png", "resumes.jsonl",
             "config.yaml", "trajectories.jsonl", RUN_FILE)
_DATA = ("metrics.jsonl", "checkpoints", "final")

Resume = Union[bool, str]  # False | True | "auto"


@dataclass
class RunDir:
    path: Path
    kind: str
    run_id: str
    checkpoint: Optional[Path] = None  # the checkpoint to resume from, if any

    @property
    def resume_step(self) -> int:
        return checkpoint_step(self.checkpoint) if self.checkpoint is not None else 0


def checkpoint_step(path: Path) -> int:
    return int(Path(path).name.split("_")[-1])


def read_run(out_dir) -> Optional[dict]:
    f = Path(out_dir) / RUN_FILE
    if not f.exists():
        return None
    try:
        return json.loads(f.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"train.out_dir '{out_dir}': unreadable {RUN_FILE}: {e}") from None


def checkpoints(out_dir, run_id: Optional[str] = None) -> List[Path]:
    """Complete checkpoints under ``out_dir/checkpoints`` by step; with ``run_id``, only those that run wrote
    (a checkpoint without an owner file predates run ids and belongs to whichever run owns the directory)."""
    found = sorted(p for p in (Path(out_dir) / "checkpoints").glob("step_*") if p.is_dir())
    if run_id is None:
        return found
    return [p for p in found if owner(p) in (run_id, None)]


def owner(ckpt: Path) -> Optional[str]:
    f = Path(ckpt) / OWNER_FILE
    return json.loads(f.read_text()).get("run_id") if f.exists() else None


def mark_owner(ckpt_dir: Path, out_dir) -> None:
    """Record in a checkpoint being written which run wrote it (the run in ``out_dir/run.json``)."""
    run = read_run(out_dir)
    if run is not None:
        (Path(ckpt_dir) / OWNER_FILE).write_text(json.dumps({"run_id": run["run_id"], "kind": run.get("kind")}))


def prune(out_dir, keep: int, current: Path) -> List[Path]:
    """Delete the current run's oldest checkpoints so that ``keep`` remain (0 = keep all); the checkpoint just
    written and every checkpoint of another run are never deleted. Returns the deleted paths."""
    if keep <= 0:
        return []
    mine = checkpoints(out_dir, owner(current))
    doomed = [p for p in mine if p != Path(current)][: max(0, len(mine) - keep)]
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)
    return doomed


def _holds_data(path: Path) -> List[str]:
    return [name for name in _DATA if (path / name).exists()]


def _describe(path: Path) -> str:
    found = _holds_data(path)
    ck = checkpoints(path)
    if ck:
        found[found.index("checkpoints")] = f"checkpoints up to step {checkpoint_step(ck[-1])}"
    return ", ".join(found)


def open_run(out_dir: str, kind: str, resume: Resume = False, overwrite: bool = False, check_only: bool = False,
             say=print) -> RunDir:
    """Apply the run-directory rules to ``out_dir`` for a run of ``kind`` ('sft' or 'train'); see the module doc."""
    if resume not in (False, True, "auto"):
        raise ValueError(f"resume must be False, True or 'auto', got {resume!r}")
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite exclude each other: continue the run or replace it, not both")
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"config key 'train.out_dir': '{out_dir}' is a file, not a directory")
    run = read_run(path) if path.is_dir() else None
    if run is not None and run.get("kind") not in (None, kind) and (resume or not overwrite) and _holds_data(path):
        raise ConfigError(f"train.out_dir '{out_dir}' holds an '{run.get('kind')}' run, not a '{kind}' run; "
                          "choose another train.out_dir")
    data = _holds_data(path) if path.is_dir() else []
    ckpt = None
    if resume:
        run_id = run.get("run_id") if run else None
        found = checkpoints(path, run_id) if path.is_dir() else []
        ckpt = found[-1] if found else None
        if ckpt is None and resume is True:
            what = f"holds no checkpoint ({_describe(path)})" if data else "holds no run" if path.is_dir() else "does not exist"
            raise ConfigError(f"--resume: train.out_dir '{out_dir}' {what}; nothing to resume from "
                              "(use --auto-resume to start fresh when there is no checkpoint)")
    elif data and not overwrite:
        raise ConfigError(f"train.out_dir '{out_dir}' already holds a run ({_describe(path)}); pass --resume to continue "
                          "it, --overwrite to replace it, or choose another train.out_dir")
    run_id = (run or {}).get("run_id") if ckpt is not None else None
    rd = RunDir(path=path, kind=kind, run_id=run_id or uuid.uuid4().hex[:12], checkpoint=ckpt)
    if check_only:
        return rd
    if (overwrite and data) or (resume == "auto" and ckpt is None and data):
        for name in ARTIFACTS:
            target = path / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        say(f"mmrl: {'--overwrite' if overwrite else '--auto-resume (no checkpoint)'}: removed the previous run's "
            f"artifacts in {out_dir}")
    path.mkdir(parents=True, exist_ok=True)
    (path / RUN_FILE).write_text(json.dumps({"run_id": rd.run_id, "kind": kind}))
    if ckpt is not None:
        say(f"mmrl: resuming {kind} run in {out_dir} from step {rd.resume_step} ({ckpt})")
    elif resume == "auto":
        say(f"mmrl: --auto-resume: no checkpoint in {out_dir}; starting at step 0")
    return rd
