"""Overlap efficiency of asynchronous rollouts on the demo config (docs/async_rollouts.md).

    OMP_NUM_THREADS=1 .venv/bin/python bench/async_overlap.py [--steps 4] [--staleness 1] [--n-train 128] [--set K=V ...]

Runs the demo's GRPO (configs/demo.yaml: tiny Qwen2.5-VL, 16 prompts x 8 responses) for ``--steps`` steps
synchronously, then with ``rollout.asynchronous.max_staleness = --staleness`` (a rollout worker process, one thread
each), and prints the per-step phases (``time/*`` metrics, mean over the steps after the first, which holds the
worker's start) and

    overlap efficiency = async step time / max(generation, update) of the synchronous run

where generation = ``time/rollout`` and update = ``time/step - time/rollout`` (rewards, scoring, update). 1.0 is a
perfect overlap; the synchronous run's own ratio, (generation + update) / max(...), is the ceiling (<= 2).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _run(cfg_files, overrides):
    from mmrl.config import load_config
    from mmrl.train.rl_trainer import RLTrainer

    return RLTrainer(load_config(cfg_files, overrides), quiet=True).run()


def phases(history, skip: int = 1):
    """Mean seconds of generation (``time/rollout``), the rest and the whole step (``time/step``) over the steps
    after the first ``skip`` (the first holds the worker's start)."""
    rows = history[skip:] or history
    gen = statistics.mean(r["time/rollout"] for r in rows)
    step = statistics.mean(r["time/step"] for r in rows)
    return gen, step - gen, step


def overlap_efficiency(async_step: float, sync_gen: float, sync_update: float) -> float:
    """async step time / max(generation, update) of the synchronous run: 1.0 = perfect overlap."""
    return async_step / max(sync_gen, sync_update)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--staleness", type=int, default=1)
    ap.add_argument("--n-train", type=int, default=128)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides for both runs")
    args = ap.parse_args(argv)

    from mmrl.data.synth_video import make_video_world
    from mmrl.demo import WORLD
    from mmrl.models.tiny import ensure_tiny_model

    tmp = Path(tempfile.mkdtemp(prefix="mmrl_async_overlap_"))
    info = make_video_world(str(tmp / "world"), args.n_train, 8, seed=0, **WORLD)
    ensure_tiny_model()
    base = [f"data.train={info['train']}", f"train.steps={args.steps}", "train.save_every=0", "train.eval_every=0",
            *args.set]
    files = [str(REPO / "configs" / "demo.yaml")]
    sync = phases(_run(files, base + [f"train.out_dir={tmp / 'sync'}"]))
    hist = _run(files, base + [f"train.out_dir={tmp / 'async'}", f"rollout.asynchronous.max_staleness={args.staleness}"])
    asy = phases(hist)
    rest = hist[1:] or hist
    wait, worker, unpack = (statistics.mean(r[k] for r in rest)
                            for k in ("time/rollout_wait", "time/worker_generation", "time/rollout_unpack"))
    print(f"demo config{' with ' + ' '.join(args.set) if args.set else ''}, {args.steps} steps (mean of steps 2..{args.steps}), one torch thread per process\n")
    print("| run | generation s | rewards+scoring+update s | step s | overlap efficiency |")
    print("|---|---|---|---|---|")
    print(f"| sync | {sync[0]:.3f} | {sync[1]:.3f} | {sync[2]:.3f} | {overlap_efficiency(sync[2], sync[0], sync[1]):.2f} |")
    print(f"| async k={args.staleness} | {asy[0]:.3f} (wait {wait:.3f}) | {asy[1]:.3f} | {asy[2]:.3f} | "
          f"{overlap_efficiency(asy[2], sync[0], sync[1]):.2f} |")
    print(f"\nasync: the worker generated a batch in {worker:.3f} s (the trainer's own generation: {sync[0]:.3f} s); the "
          f"trainer waited {wait:.3f} s for it and unpacked it in {unpack:.3f} s")


if __name__ == "__main__":
    main()
