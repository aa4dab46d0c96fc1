"""Per-phase step time of RL algorithms on the demo config, side by side in one process (and optionally a cProfile).

    .venv/bin/python bench/step_profile.py [--arms grpo bpo] [--steps 6] [--warmup 2] [--profile bpo] [--top 25]

Builds a small world with the demo's clip settings (``mmrl.demo.WORLD``), the tiny model, and one ``RLTrainer`` per
arm (``grpo`` = configs/demo.yaml, ``bpo`` / ``tgrpo`` = plus configs/bpo_demo.yaml / tgrpo_demo.yaml), steps the
arms round-robin so every ratio is measured under the same load, and prints the median of each phase the trainer
times (``time/*``) and the step-time ratio to the first arm. ``--profile ARM`` adds a cProfile of 3 more steps of
that arm, sorted by internal time. Use one thread (``OMP_NUM_THREADS=1``) on a shared box.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
CONFIGS = {"grpo": [], "bpo": ["configs/bpo_demo.yaml"], "tgrpo": ["configs/tgrpo_demo.yaml"]}
PHASES = ("time/step", "time/rollout", "time/decode", "time/views", "time/scoring", "time/update")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arms", nargs="+", default=["grpo", "bpo"], choices=sorted(CONFIGS))
    ap.add_argument("--steps", type=int, default=6, help="timed steps per arm")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per arm first")
    ap.add_argument("--n-train", type=int, default=128)
    ap.add_argument("--profile", default=None, help="an arm to cProfile for 3 more steps")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)

    from mmrl.config import load_config
    from mmrl.data.synth_video import make_video_world
    from mmrl.demo import WORLD
    from mmrl.models.tiny import ensure_tiny_model
    from mmrl.train.rl_trainer import RLTrainer

    tmp = Path(tempfile.mkdtemp(prefix="mmrl_step_profile_"))
    info = make_video_world(str(tmp / "world"), args.n_train, 8, seed=0, **WORLD)
    ensure_tiny_model()
    trainers = {}
    for arm in args.arms:
        cfg = load_config([str(REPO / "configs" / "demo.yaml")] + [str(REPO / f) for f in CONFIGS[arm]],
                          [f"data.train={info['train']}", f"train.out_dir={tmp / arm}", "train.save_every=0"])
        trainers[arm] = RLTrainer(cfg, quiet=True)
    for _ in range(args.warmup):
        for t in trainers.values():
            t.train_step()
    hist = {arm: [] for arm in trainers}
    for _ in range(args.steps):
        for arm, t in trainers.items():
            hist[arm].append(t.train_step())
    base = args.arms[0]
    med = {arm: {k: statistics.median(m.get(k, 0.0) for m in h) for k in PHASES} for arm, h in hist.items()}
    print(f"median seconds per step over {args.steps} steps ({args.warmup} warm-up), arms stepped round-robin:\n")
    print("| arm | " + " | ".join(k[5:] for k in PHASES) + f" | step / {base} |")
    print("|---|" + "---|" * (len(PHASES) + 1))
    for arm in trainers:
        print(f"| {arm} | " + " | ".join(f"{med[arm][k]:.4f}" for k in PHASES)
              + f" | {med[arm]['time/step'] / med[base]['time/step']:.2f} |")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(3):
            trainers[args.profile].train_step()
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(args.top)
        print(f"\ncProfile of 3 {args.profile} steps:\n" + buf.getvalue())


if __name__ == "__main__":
    main()
