"""Training progress for a person watching: rich's bar on a terminal, one plain line per step (at most one every
``train.log_every_s`` seconds) when the output is not a terminal (a SLURM or nohup log), where a redrawn bar would
show up once, at the end.

A line reads ``train step 12/57 (21%) | reward 0.412 | acc 0.375 | kl 0.0012 | tok/s 35.2 | 4.1 s/step | elapsed
49s | left 3m05s``: the step's metrics that exist (``reward/total``, ``reward/accuracy``, ``kl``, ``sft/loss``,
``tokens_per_s``, and ``eval/accuracy`` as ``held-out acc``), the mean wall-clock seconds per step of this process,
and the time left at that pace, ``(total - step) x s/step``. The first and the last step, and every step that
evaluates, always get a line.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, Dict, Optional, TextIO

# (metric key, label, format) of a line, in order; a key the step lacks is left out
FIELDS = (("reward/total", "reward", "{:.3f}"), ("reward/accuracy", "acc", "{:.3f}"), ("kl", "kl", "{:.4g}"),
          ("sft/loss", "loss", "{:.4f}"), ("tokens_per_s", "tok/s", "{:.1f}"), ("eval/accuracy", "held-out acc", "{:.3f}"))


def duration(seconds: float) -> str:
    """``49s``, ``3m05s``, ``2h07m``."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_line(name: str, step: int, total: int, metrics: Dict[str, float], per_step: float, elapsed: float) -> str:
    parts = [f"{name} step {step}/{total} ({100 * step // max(total, 1)}%)"]
    parts += [f"{label} {fmt.format(metrics[k])}" for k, label, fmt in FIELDS if isinstance(metrics.get(k), (int, float))]
    parts += [f"{per_step:.1f} s/step", f"elapsed {duration(elapsed)}", f"left {duration((total - step) * per_step)}"]
    return " | ".join(parts)


class StepProgress:
    """``with StepProgress(total, "train", start=step, every_s=cfg.train.log_every_s) as p: p.update(step, m)``.

    ``stream`` (default stdout) decides: a terminal gets the rich bar, anything else the lines; ``disable`` prints
    nothing (``--quiet``, ranks other than 0). ``clock`` is for tests."""

    def __init__(self, total: int, name: str, start: int = 0, every_s: float = 30.0, disable: bool = False,
                 stream: Optional[TextIO] = None, clock: Callable[[], float] = time.monotonic):
        self.total, self.name, self.start, self.every_s, self.disable = total, name, start, every_s, disable
        self.stream = stream if stream is not None else sys.stdout
        self.clock = clock
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar = self.task = None
        self.t0 = self.last_line = None

    def __enter__(self) -> "StepProgress":
        self.t0 = self.clock()
        if self.tty and not self.disable:
            from mmrl.train.metrics import progress

            self.bar = progress(self.total, self.name).__enter__()
            self.task = self.bar.add_task(self.name, total=self.total, completed=self.start, info="")
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def update(self, step: int, metrics: Dict[str, float]) -> None:
        if self.disable:
            return
        if self.bar is not None:
            info = " ".join(f"{label} {fmt.format(metrics[k])}" for k, label, fmt in FIELDS[:2] + FIELDS[3:4]
                            if isinstance(metrics.get(k), (int, float)))
            self.bar.update(self.task, completed=step, info=info)
            return
        now = self.clock()
        due = (self.last_line is None or step >= self.total or now - self.last_line >= self.every_s
               or "eval/accuracy" in metrics)
        if not due:
            return
        self.last_line = now
        elapsed = now - self.t0
        per_step = elapsed / max(step - self.start, 1)
        print(progress_line(self.name, step, self.total, metrics, per_step, elapsed), file=self.stream, flush=True)
