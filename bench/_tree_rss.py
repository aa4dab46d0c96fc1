"""Peak RSS of a bench arm's child processes (``bench/vs_trl.py``'s arms: the rollout worker).

``children_hwm_kb(peaks)`` records, per live descendant of this process, its high-water RSS: ``VmHWM`` in
``/proc/<pid>/status`` (the peak of the process's current image). ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` would
not do: Linux keeps the pre-``exec`` image's peak, so a child forked from a 400 MB process that runs ``true``
reports 400 MB there (checked: 311 MB after ``subprocess.run(["true"])`` from a 300 MB Python). Call it where the
children are at their peak (after their work) and before they end: a child that ended is not seen.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict


def vm_hwm_kb(status: str) -> int:
    """The ``VmHWM:`` line of a ``/proc/<pid>/status`` text, in kB (0 where absent: a kernel thread, a zombie)."""
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)


def children_hwm_kb(peaks: Dict[int, int]) -> None:
    """Update ``peaks`` (pid -> kB) with the ``VmHWM`` of each live descendant of this process."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            status = Path(f"/proc/{child.pid}/status").read_text()
        except OSError:  # ended meanwhile
            continue
        peaks[child.pid] = max(peaks.get(child.pid, 0), vm_hwm_kb(status))
