"""SIGINT / SIGTERM -> checkpoint at the next step boundary, then stop with a one-line resume command.

Cluster schedulers send SIGTERM before preemption; Ctrl-C sends SIGINT. Inside ``graceful_stop()`` the first
signal only sets a flag; the training loop calls ``stop.check(save)`` after each step, which saves a checkpoint
and raises ``Interrupted`` (exit status 128 + signal number, the shell convention). A second signal stops at once.
"""
from __future__ import annotations

import shlex
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, List, Optional

from mmrl.errors import MMRLError

_COMMAND: Optional[List[str]] = None  # the CLI's argv, set by mmrl.cli.main


def set_command(argv: List[str]) -> None:
    global _COMMAND
    _COMMAND = list(argv)


def resume_command(out_dir: str) -> str:
    """The command that continues this run: the CLI's own command with ``--resume`` (``--overwrite`` and
    ``--auto-resume`` dropped), or the Python call when the run was started from Python."""
    if _COMMAND is None:
        return f"run again with resume=True and train.out_dir={out_dir}"
    args = [a for a in _COMMAND if a not in ("--overwrite", "--resume", "--auto-resume")]
    # flags must stay before the positional overrides: insert right after the subcommand
    at = next((i + 1 for i, a in enumerate(args) if a in ("train", "sft")), len(args))
    return shlex.join(["mmrl", *args[:at], "--resume", *args[at:]])


class Interrupted(MMRLError):
    def __init__(self, signum: int, step: int, checkpoint: Path, out_dir: str):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        name = signal.Signals(signum).name
        super().__init__(f"{name} received: stopped after step {step}, checkpoint {checkpoint}; "
                         f"resume with: {resume_command(out_dir)}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopFlag:
    def __init__(self):
        self.signum: Optional[int] = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def check(self, save: Callable[[], Path], step: int, out_dir: str,
              agree: Optional[Callable[[bool], bool]] = None) -> None:
        """At a step boundary: if a stop was requested, ``save()`` a checkpoint and raise ``Interrupted``.
        ``agree`` turns this process's flag into the decision of all ranks (any rank signalled -> all stop at
        the same step, so that the collective save cannot hang)."""
        requested = self.signum is not None
        if agree is not None:
            requested = agree(requested)
        if requested:
            raise Interrupted(self.signum or signal.SIGTERM, step, save(), out_dir)


@contextmanager
def graceful_stop():
    """Yield a ``StopFlag`` set by SIGINT/SIGTERM while the block runs; the old handlers come back afterwards.
    The first signal prints one line (also under ``--quiet``). Outside the main thread (signals cannot be caught
    there) the flag is never set."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum, frame):
        if flag.signum is not None:  # second signal: stop now
            for s, h in old.items():
                signal.signal(s, h)
            raise KeyboardInterrupt
        flag.signum = signum
        print(f"\nmmrl: {signal.Signals(signum).name} received: saving a checkpoint after the current step "
              "(send it again to stop at once, without saving)", file=sys.stderr, flush=True)

    for s in old:
        signal.signal(s, handler)
    try:
        yield flag
    finally:
        for s, h in old.items():
            signal.signal(s, h)
