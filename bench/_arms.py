"""What the RL benches share (``bpo_vs_grpo.py``, ``pacg.py``, ``fastrl.py``): arms stepped side by side, each on
its own RNG stream, and seeds run in child processes.

An arm is one ``RLTrainer`` advanced one step at a time. Around each of its steps (and evaluations) the global RNG
state (Python, NumPy, torch: ``mmrl.train.checkpoint.rng_state``) is set to the arm's saved state and saved again
afterwards, so an arm's run is the one it would have alone however the arms are interleaved; stepping the arms of
a seed round-robin in one process measures their step times side by side, under the same machine load.
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def rng_state():
    from mmrl.train.checkpoint import rng_state as state

    return state()


def set_rng(state) -> None:
    from mmrl.train.checkpoint import set_rng_state

    set_rng_state(state)


class Arm:
    """One RL run (``RLTrainer``, built from ``cfg``) advanced one step at a time on its own RNG stream.

    ``run_dir``: also write ``<out_dir>/config.yaml`` and ``metrics.jsonl`` as ``mmrl train`` would, and save the
    last checkpoint in ``finish``."""

    def __init__(self, name: str, cfg, run_dir: bool = False):
        from mmrl.train.rl_trainer import RLTrainer

        self.name, self.cfg = name, cfg
        self.trainer = RLTrainer(cfg, quiet=True)  # seeds the global RNGs
        self.rng = rng_state()
        self.history: List[Dict[str, float]] = []  # train_step's metrics, one dict per step
        self.logger = None
        if run_dir:
            from mmrl.config import to_yaml
            from mmrl.train.metrics import MetricsLogger

            out = Path(cfg.train.out_dir)
            out.mkdir(parents=True, exist_ok=True)
            (out / "config.yaml").write_text(to_yaml(cfg))
            self.logger = MetricsLogger(str(out), tensorboard=False)

    def on_own_stream(self, fn: Callable):
        """``fn()`` with the global RNGs set to this arm's stream (which it then advances)."""
        set_rng(self.rng)
        result = fn()
        self.rng = rng_state()
        return result

    def step(self) -> Dict[str, float]:
        m = self.on_own_stream(self.trainer.train_step)
        if self.logger is not None:
            self.logger.log(self.trainer.step, m)
        self.history.append(m)
        return m

    def finish(self) -> str:
        """Export the model to ``<out_dir>/final`` (with ``run_dir``: save the checkpoint, close the metrics log
        first) and free the trainer before the next arm's evaluation; returns the export's path."""
        out = Path(self.cfg.train.out_dir)
        if self.logger is not None:
            self.trainer.save()
            self.logger.close()
        out.mkdir(parents=True, exist_ok=True)
        path = self.trainer.export(str(out / "final"))
        self.trainer = None
        return str(path)


def step_logged(arm: Arm, steps: int, seed: int) -> None:
    """``steps`` steps of ``arm``, each quarter logged with its last step's seconds and total reward."""
    for i in range(steps):
        m = arm.step()
        if (i + 1) % max(1, steps // 4) == 0:
            log(f"[seed {seed}] {arm.name} step {i + 1}/{steps}: {m.get('time/step', 0):.2f} s, "
                f"reward {m.get('reward/total', float('nan')):.2f}")


def step_round_robin(arms: Dict[str, Arm], step: int) -> None:
    """One step of every arm; who goes first rotates with ``step``, so no arm always runs first or last."""
    order = list(arms)
    k = step % len(order)
    for name in order[k:] + order[:k]:
        arms[name].step()


def run_seeds_in_processes(script: Path, seeds: List[int], jobs: int, out: Path,
                           argv_for: Callable[[int], List[str]]) -> List[Dict]:
    """Run ``python script *argv_for(seed)`` per seed, ``jobs`` at a time; each child writes
    ``out/seed<S>/seed_result.json``, returned in seed order. A failed child raises (its log is on stderr)."""

    def one(seed: int) -> Dict:
        cmd = [sys.executable, str(Path(script).resolve()), *argv_for(seed)]
        log(f"[seed {seed}] child process: {shlex.join(cmd)}")
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"seed {seed} failed (exit {proc.returncode}); its log is above")
        return json.loads((out / f"seed{seed}" / "seed_result.json").read_text())

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, seeds))
