"""Skip accounting: every sample left out of training is written to ``skipped.jsonl`` with its reason.

One row per sample, the first time it fails: ``{"id", "file", "stage", "reason", "step"}`` where ``stage`` is
``load`` (annotation item rejected when the file is read: missing answer, missing media, ...) or ``rollout`` /
``sft`` (media decode or prompt build failed during a step). A sample that failed once is excluded from later
epochs (``excluded``, consulted by ``DataStream``). Past ``data.max_skip_frac`` of the training split, or when
no sample is usable at all, training stops with an error naming the file. On resume, rows written after the
checkpoint step are dropped (those samples are tried again, as in the uninterrupted run).
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

from mmrl.errors import DataError

FILE = "skipped.jsonl"
_PREFIX = re.compile(r"^(sample '[^']*'(, file '[^']*')?: )?(item \d+: )?")


def reason_kind(reason: str) -> str:
    """A reason without its sample-specific prefix (``sample 'x', file 'y': `` / ``item 3: ``), for counting."""
    return _PREFIX.sub("", reason, count=1)


class SkipLog:
    def __init__(self, out_dir: str, data_file: str, n_items: int, max_frac: float, files: Dict[str, str],
                 resume_step: int = 0, write: bool = True):
        """``n_items``: items in the annotation file (usable + rejected at load); ``files``: sample id -> media;
        ``write=False`` on the ranks other than 0 (same bookkeeping, no file)."""
        self.path = Path(out_dir) / FILE
        self.data_file, self.n_items, self.max_frac, self.files = data_file, n_items, max_frac, files
        self.write = write
        self.rows: List[dict] = []
        if self.path.exists() and resume_step > 0:
            self.rows = [r for r in (json.loads(x) for x in self.path.read_text().splitlines() if x.strip())
                         if r.get("step", 0) <= resume_step]
        if write:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("".join(json.dumps(r) + "\n" for r in self.rows))
        self.excluded: Set[str] = {r["id"] for r in self.rows}

    def add(self, pairs: Iterable[Tuple[str, str]], stage: str, step: int) -> int:
        """Record ``(sample id, reason)`` pairs not seen before; returns how many were new. Checks the limit."""
        new = [(sid, why) for sid, why in pairs if sid not in self.excluded]
        rows = [{"id": sid, "file": self.files.get(sid, self.data_file), "stage": stage, "reason": why, "step": step}
                for sid, why in dict(new).items()]
        self.rows.extend(rows)
        self.excluded.update(r["id"] for r in rows)
        if rows and self.write:
            with self.path.open("a") as f:
                f.write("".join(json.dumps(r) + "\n" for r in rows))
        self.check()
        return len(new)

    def check(self) -> None:
        n = len(self.excluded)
        if self.n_items and n >= self.n_items:
            raise DataError(f"none of its {self.n_items} items is usable ({self._reasons()}); every one is listed in "
                            f"{self.path}", path=self.data_file)
        if self.n_items and n / self.n_items > self.max_frac:
            raise DataError(f"{n} of {self.n_items} samples skipped ({100 * n / self.n_items:.1f}%), more than "
                            f"data.max_skip_frac={self.max_frac}; most common: {self._reasons()}; all listed in "
                            f"{self.path}", path=self.data_file)

    def _reasons(self, top: int = 2) -> str:
        # the reason without its sample-specific prefix ("sample 'x', file 'y': ...")
        common = Counter(reason_kind(r["reason"]) for r in self.rows).most_common(top)
        return "; ".join(f"{k!r} x{v}" for k, v in common)

    def summary(self) -> Optional[str]:
        """One line for the end of the run, or None when nothing was skipped."""
        if not self.rows:
            return None
        by_stage = Counter(r["stage"] for r in self.rows)
        stages = ", ".join(f"{v} at {k}" for k, v in sorted(by_stage.items()))
        return (f"{len(self.rows)} of {self.n_items} samples skipped ({stages}); most common: {self._reasons()}; "
                f"listed in {self.path}")


def skip_log_for(out_dir: str, data_cfg, samples, load_skipped, resume_step: int = 0, write: bool = True) -> SkipLog:
    """The skip log of a training run over ``samples`` (usable) and ``load_skipped`` ((id, reason) at load)."""
    files = {s.id: _media_path(s) for s in samples}
    log = SkipLog(out_dir, data_cfg.train, len(samples) + len(load_skipped), data_cfg.max_skip_frac, files,
                  resume_step, write)
    log.add(load_skipped, "load", 0)
    return log


def _media_path(sample) -> str:
    ref = sample.video or sample.image
    return ref.path if ref is not None else ""


def record_step_skips(tr, pairs) -> Dict[str, float]:
    """The step's skipped ``(sample id, reason)`` pairs of every rank into trainer ``tr``'s log (all ranks keep
    the same exclusions, so that they keep drawing the same prompts); the step's metrics about them."""
    if getattr(tr, "skips", None) is None:  # a step run outside RLTrainer.run (tests, benches)
        return {}
    every = [p for part in tr.backend.gather(list(pairs)) for p in part]
    tr.skips.add(every, "rollout", tr.step + 1)
    return {"skipped_total": float(len(tr.skips.excluded))}


def check_loaded(data_cfg, samples, load_skipped) -> None:
    """Right after the annotation file is read: refuse a file with no usable item, or with more rejected items
    than ``data.max_skip_frac`` allows, naming the file and the most common reasons."""
    n = len(samples) + len(load_skipped)
    if not load_skipped or (samples and len(load_skipped) / n <= data_cfg.max_skip_frac):
        return
    common = Counter(reason_kind(why) for _, why in load_skipped).most_common(2)
    reasons = "; ".join(f"{k!r} x{v}" for k, v in common)
    if not samples:
        raise DataError(f"none of its {n} items is usable ({reasons})", path=data_cfg.train)
    raise DataError(f"{len(load_skipped)} of {n} items rejected ({100 * len(load_skipped) / n:.1f}%), more than "
                    f"data.max_skip_frac={data_cfg.max_skip_frac}; most common: {reasons}", path=data_cfg.train)
