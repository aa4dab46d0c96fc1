"""The embedded end-to-end demo: tiny Qwen2.5-VL -> synthetic video world (real MP4s) -> SFT warm-up -> GRPO -> eval.

Prints held-out accuracy per question type after SFT and after RL, and writes a run report. The SFT length is
chosen short on purpose so that RL has room to improve (see ``bench/demo_seeds.py`` for the 3-seed table).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Dict

from mmrl.environment import float_environment

DEMO_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "demo.yaml"
N_TRAIN, N_TEST = 1024, 256
WORLD = dict(size=56, n_frames=4, fps=2.0, fixed_options=True)  # 2 s clips, all 4 frames fed to the model;
# fixed option order: a letter always names the same value, so the 2-layer model learns in minutes
EVAL_EVERY = 50  # held-out accuracy during GRPO: the report's held-out curves
# CPU float results depend on the reduction order, which the thread count decides: one thread everywhere
PINNED_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def pin_threads() -> Dict[str, str]:
    """Fix what the demo's numbers depend on besides the seed: one intra-op and one inter-op torch thread and the
    BLAS/OpenMP thread variables (effective for libraries initialised after this call; ``make demo`` also sets
    them before Python starts). Returns the settings that matter, to print."""
    for key, value in PINNED_ENV.items():
        os.environ[key] = value
    import torch

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or parallel work already ran in this process
        pass
    env = float_environment()
    # the CPU model beside its kernel capability: which recorded table a run should match (README, docs/results/demo.md)
    keys = ("python", "torch", "cpu", "cpu model", "intra-op threads", "inter-op threads", "transformers", "decord")
    return {**{k: env[k] for k in keys}, **PINNED_ENV}


def header(seed: int, settings: Dict[str, str]) -> str:
    """The demo's first line: the seed and ``pin_threads``' settings (``cpu model AMD EPYC`` among them)."""
    return f"[demo] seed {seed}; " + ", ".join(f"{k} {v}" for k, v in settings.items())


def _table(rows: Dict[str, Dict]) -> str:
    qtypes = sorted({q for r in rows.values() for q in r["per_qtype"]})
    head = "| stage | " + " | ".join(qtypes) + " | macro | overall |"
    lines = [head, "|" + "---|" * (len(qtypes) + 3)]
    for stage, r in rows.items():
        cells = [f"{100 * r['per_qtype'].get(q, 0):.1f}" for q in qtypes]
        lines.append(f"| {stage} | " + " | ".join(cells) + f" | {100 * r['macro_accuracy']:.1f} | {100 * r['accuracy']:.1f} |")
    return "\n".join(lines)


def run_demo(out_dir: str = "runs/demo", seed: int = 0, quick: bool = False, overrides=None, quiet: bool = False) -> Dict:
    settings = pin_threads()
    from mmrl.config import load_config
    from mmrl.data.synth_video import make_video_world
    from mmrl.eval.synthetic import evaluate_checkpoint
    from mmrl.models.tiny import ensure_tiny_model
    from mmrl.train.report import write_report
    from mmrl.train.rl_trainer import RLTrainer
    from mmrl.train.sft import run_sft

    t_start = time.time()
    if not quiet:
        print(header(seed, settings))
    out = Path(out_dir)
    world = out / "world"
    n_train, n_test = (64, 32) if quick else (N_TRAIN, N_TEST)
    make_video_world(str(world), n_train, n_test, seed=seed, **WORLD)
    ensure_tiny_model()
    common = [f"data.train={world / 'train.json'}", f"data.test={world / 'test.json'}", f"train.seed={seed}"]
    quick_o = ["sft.steps=4", "train.steps=3", "train.prompts_per_step=4", "rollout.n=4"] if quick else []
    sft_cfg = load_config([str(DEMO_CONFIG)], common + [f"train.out_dir={out / 'sft'}"] + quick_o + list(overrides or []))
    if not quiet:
        print(f"[demo] SFT warm-up: {sft_cfg.sft.steps} steps")
    run_sft(sft_cfg, quiet=quiet, overwrite=True)  # the demo rebuilds its world and runs from scratch
    sft_eval = evaluate_checkpoint(str(out / "sft" / "final"), str(world / "test.json"), sft_cfg.data, out_dir=str(out / "eval_sft"))
    rl_cfg = load_config([str(DEMO_CONFIG)], common + [f"train.out_dir={out / 'rl'}", f"model.path={out / 'sft' / 'final'}",
                                                       f"train.eval_every={2 if quick else EVAL_EVERY}"]
                         + quick_o + list(overrides or []))
    if not quiet:
        print(f"[demo] GRPO: {rl_cfg.train.steps} steps x {rl_cfg.train.prompts_per_step} prompts x {rl_cfg.rollout.n} responses")
    RLTrainer(rl_cfg, quiet=quiet).run(overwrite=True)
    rl_eval = evaluate_checkpoint(str(out / "rl" / "final"), str(world / "test.json"), rl_cfg.data, out_dir=str(out / "eval_rl"))
    table = _table({"after SFT": sft_eval, "after GRPO": rl_eval})
    result = {"seed": seed, "settings": settings, "sft": sft_eval, "rl": rl_eval, "minutes": (time.time() - t_start) / 60}
    (out / "demo_result.json").write_text(json.dumps(result, indent=2))
    write_report(str(out / "rl"), title=f"mmrl demo (seed {seed})", extra=table)
    if not quiet:
        print("\nHeld-out accuracy (%) on the synthetic video world, greedy decoding:\n" + table)
        print(f"\n[demo] done in {result['minutes']:.1f} min; report: {out / 'rl' / 'report.md'}")
    return result
