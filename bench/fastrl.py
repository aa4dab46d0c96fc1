"""FastRL (MDAP pruning + ARS, specs/algorithms.md §4, issue 15): GRPO, DAPO and GSPO, each with and without the
``fastrl`` wrapper, from the same SFT checkpoint, on a synthetic video world whose responses reason before they
answer (about 40 tokens, ``mmrl.data.reasoning``), over seeds.

    .venv/bin/python bench/fastrl.py [--seeds 0 1 2] [--bases grpo dapo gspo] [--warmup-steps 600] [--sft-steps 300]
        [--sft-lr 3e-4] [--[no-]answer-first] [--rl-lr 0] [--rl-steps 100] [--n-sft 1024] [--n-rl 256] [--n-test 128]
        [--prompts-per-step 8] [--n 8] [--eval-every 10] [--tau 0.8] [--jobs 1] [--out runs/fastrl] [--reuse-sft]
        [--sft-only] [--render-only] [overrides ...]

Per seed: one world (``make_video_world`` with the demo's clips) whose train split gets the reasoning SFT targets;
the SFT start point is the demo's letter-answer SFT (``--warmup-steps``: perception) followed by an SFT on
the reasoning targets (``--sft-steps`` at ``--sft-lr``), both on the whole train split (``--n-sft``). By default
the reasoning target opens with the chosen letter (``--answer-first``): trained to reason first, the tiny model
loses its perception and sits at chance (25-34% held-out, where RL does not move it; bench/results/fastrl.md
records those runs), while opening with the letter keeps the warm-up's perception. The reasoning SFT's lr matters:
150 steps at 1e-3 collapsed 2 of 3 seeds onto one letter, 150 steps at 3e-4 left all three near chance (27-31%,
the answer tag not yet copying the opening letter), 300 steps at 3e-4 (the default) reach 78 / 65 / 30% on seeds
0 / 1 / 2 with no letter above 45% of the answers. ``--sft-only`` stops after each seed's SFT and prints its
held-out accuracy and predicted-letter counts (the same counts go into the results), to check the start point
before RL is spent on it.
Then every arm trains on the first ``--n-rl`` clips of that
split (a small RL split, so that the run spans several epochs and ARS, which acts at epoch boundaries, acts), with
the same steps, lr, prompts per step and rewards (accuracy + 0.5 x ``answer_tag_format``: FastRL's r = acc + 0.5 fmt).
Arms: ``grpo`` (PPO clip, seq-mean), ``dapo`` (clip 0.2/0.28, token-mean, dynamic sampling), ``gspo`` (sequence
ratio loss), and ``<base>_fastrl`` = ``{name: fastrl, params: {base: <base>, tau, total_steps: --rl-steps}}``.

The arms are stepped round-robin in one process, each with its own saved RNG state, so their wall-clock is measured
side by side under the same machine load. Every ``--eval-every`` steps (and at the end) each arm is evaluated greedily
on the held-out split (outside its clock). Columns:

- final held-out accuracy;
- wall-clock (sum of the arm's step times) and tokens (generated + trained, i.e. response tokens decoded plus
  response tokens of the rows that enter the actor pass, x ppo_epochs) until the arm's held-out accuracy first
  reaches the UNWRAPPED base's final accuracy (the base itself reaches it at its own first such eval point);
  the speed-up is base / FastRL, per seed;
- kept fraction (rows entering the old/ref/actor passes over rows the base selected) and mean rollout count
  (responses generated per prompt).

Writes ``--out``/results.json, table.md (the README table, also printed) and time_to_accuracy.png.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]  # this checkout's mmrl, not another installed copy
from _arms import Arm, log, run_seeds_in_processes, step_round_robin  # noqa: E402
from fastrl_table import pair_stats, plot, render  # noqa: E402,F401  (pair_stats: the tests use it from here)

DEMO = REPO / "configs" / "demo.yaml"
BASES: Dict[str, List[str]] = {  # base -> overrides (loss side of the method; the spec is algorithm.name)
    "grpo": ["algorithm.loss=ppo", "algorithm.loss_agg=seq-mean-token-mean"],
    "dapo": ["algorithm.loss=ppo", "algorithm.clip_high=0.28", "algorithm.loss_agg=token-mean"],
    "gspo": ["algorithm.loss=gspo"],
}
REWARDS = "rewards=[{name: accuracy, weight: 1.0}, {name: answer_tag_format, weight: 0.5}]"


# ---- one arm, stepped and evaluated on its own RNG stream -------------------------------------------------------
class TimedArm(Arm):
    """An arm (``bench/_arms.py``) that also records its cost and its held-out accuracy curve."""

    def __init__(self, name: str, cfg, acc0: float):
        super().__init__(name, cfg)
        self.wall = self.tokens = 0.0
        self.points = [{"step": 0, "wall": 0.0, "tokens": 0.0, "acc": acc0}]
        self.steps: List[Dict[str, float]] = []
        self._seen: Dict[str, float] = {}
        select = self.trainer.spec.select

        def recorded(batch, out):  # what the step trains on and how many responses each prompt got
            sel = select(batch, out)
            m = sel.train_mask
            self._seen = {"trained_tokens": float(batch.lengths[m].sum()), "rows": float(len(batch)),
                          "selected": float(m.sum()), "prompts": float(batch.groups["prompt"].unique().numel())}
            return sel

        self.trainer.spec.select = recorded

    def step(self) -> Dict[str, float]:
        m = super().step()
        epochs = self.cfg.algorithm.ppo_epochs
        gen, trained = m.get("work/response_tokens", 0.0), self._seen.get("trained_tokens", 0.0) * epochs
        self.wall += m["time/step"]
        self.tokens += gen + trained
        self.steps.append({"time": m["time/step"], "rollout": m.get("time/rollout", 0.0),
                           "update": m.get("time/scoring", 0.0) + m.get("time/update", 0.0),
                           "gen_tokens": gen, "trained_tokens": trained,
                           "kept_frac": m.get("algo/fastrl/kept_frac", 1.0),
                           "rollouts_per_prompt": self._seen.get("rows", 0.0) / max(self._seen.get("prompts", 1.0), 1.0),
                           "reward": m.get("reward/accuracy", float("nan"))})
        return m

    def evaluate(self) -> float:
        acc = float(self.on_own_stream(self.trainer.evaluate)["eval/accuracy"])
        self.points.append({"step": self.trainer.step, "wall": self.wall, "tokens": self.tokens, "acc": acc})
        return acc

    def summary(self) -> Dict:
        st = self.steps
        mean = lambda k: statistics.mean(s[k] for s in st) if st else float("nan")  # noqa: E731
        return {"final_acc": self.points[-1]["acc"], "points": self.points, "wall": self.wall, "tokens": self.tokens,
                "kept_frac": mean("kept_frac"), "rollouts_per_prompt": mean("rollouts_per_prompt"),
                "median_step_s": statistics.median(s["time"] for s in st) if st else float("nan"),
                "rollout_s": mean("rollout"), "update_s": mean("update"),
                "gen_tokens": sum(s["gen_tokens"] for s in st), "trained_tokens": sum(s["trained_tokens"] for s in st)}


def pred_letters(predictions: Path) -> Dict[str, int]:
    """How often each letter is the parsed answer in an evaluation's predictions (None: no parsable answer), sorted:
    a reasoning SFT that collapsed onto one letter shows here before any RL is spent on it."""
    rows = [json.loads(line) for line in predictions.read_text().splitlines() if line.strip()]
    return dict(sorted(Counter(str(r.get("pred")) for r in rows).items()))


# ---- one seed ---------------------------------------------------------------------------------------------------
def arm_overrides(base: str, fastrl: bool, args) -> List[str]:
    if not fastrl:
        return [f"algorithm.name={base}"] + BASES[base]
    return (["algorithm.name=fastrl", f"algorithm.params={{base: {base}, tau: {args.tau}, ngram: {args.ngram}, "
             f"total_steps: {args.rl_steps}}}"] + BASES[base])


def run_seed(seed: int, args, out: Path) -> Dict:
    from mmrl.config import load_config
    from mmrl.data.reasoning import add_reasoning_targets
    from mmrl.data.synth_video import make_video_world
    from mmrl.demo import WORLD
    from mmrl.models.tiny import ensure_tiny_model
    from mmrl.train.sft import run_sft

    import torch

    torch.set_num_threads(1)  # the machine is shared: one core per seed
    t0 = time.time()
    world = out / "world"
    info = make_video_world(str(world), args.n_sft, args.n_test, seed=seed, **WORLD)
    reasoning = world / "train_reasoning.json"  # the letter-answer split stays as it is, for the warm-up
    reasoning.write_text(Path(info["train"]).read_text())
    add_reasoning_targets(str(reasoning), answer_first=args.answer_first, styles=args.reasoning_styles, seed=seed)
    items = json.loads(reasoning.read_text())
    rl_train = world / "rl_train.json"
    rl_train.write_text(json.dumps(items[: args.n_rl], indent=1))
    tiny = ensure_tiny_model()
    common = [f"data.test={info['test']}", f"train.seed={seed}", f"train.prompts_per_step={args.prompts_per_step}",
              f"rollout.n={args.n}", f"rollout.max_new_tokens={args.max_new_tokens}", "train.save_every=0", REWARDS]
    sft_path = str(out / "sft" / "final")
    done = out / "sft" / "sft_done.json"
    warm = {"warmup_steps": args.warmup_steps, "n_sft": args.n_sft, "seed": seed, "overrides": list(args.overrides)}
    want = dict(warm, sft_steps=args.sft_steps, sft_lr=args.sft_lr, answer_first=args.answer_first,
                reasoning_styles=args.reasoning_styles)
    if args.reuse_sft and done.exists() and json.loads(done.read_text()) == want:
        log(f"[seed {seed}] reusing the SFT checkpoint {sft_path}")
    else:
        start = str(tiny)
        if args.warmup_steps:  # perception first, on letter answers (the demo's SFT), then the reasoning format
            warm_done = out / "warmup" / "warmup_done.json"
            if not (args.reuse_sft and warm_done.exists() and json.loads(warm_done.read_text()) == warm):
                run_sft(load_config([str(DEMO)], common + [f"data.train={info['train']}", f"train.out_dir={out / 'warmup'}",
                                                           f"sft.steps={args.warmup_steps}"] + list(args.overrides)),
                        quiet=True, overwrite=True)
                warm_done.write_text(json.dumps(warm))
            start = str(out / "warmup" / "final")
        lr = [f"sft.lr={args.sft_lr}"] if args.sft_lr else []
        run_sft(load_config([str(DEMO)], common + [f"data.train={reasoning}", f"train.out_dir={out / 'sft'}",
                                                   f"model.path={start}", f"sft.steps={args.sft_steps}"] + lr
                            + list(args.overrides)), quiet=True, overwrite=True)
        done.write_text(json.dumps(want))
    sft_min = (time.time() - t0) / 60
    log(f"[seed {seed}] SFT {args.warmup_steps} letter + {args.sft_steps} reasoning steps on {args.n_sft} clips: "
        f"{sft_min:.1f} min")

    arms: Dict[str, TimedArm] = {}
    acc0 = None
    for base in args.bases:
        for fast in (False, True):
            if acc0 is not None and args.sft_only:
                break
            name = f"{base}_fastrl" if fast else base
            cfg = load_config([str(DEMO)], common + [f"data.train={rl_train}", f"train.out_dir={out / name}",
                                                     f"model.path={sft_path}", f"train.steps={args.rl_steps}"]
                              + ([f"train.lr={args.rl_lr}"] if args.rl_lr else [])
                              + arm_overrides(base, fast, args) + list(args.overrides))
            arms[name] = TimedArm(name, cfg, acc0 if acc0 is not None else 0.0)
            if acc0 is None:  # every arm starts from the same checkpoint: evaluate it once
                acc0 = float(arms[name].trainer.evaluate()["eval/accuracy"])
                arms[name].points[0]["acc"] = acc0
                letters = pred_letters(Path(cfg.train.out_dir) / "predictions" / f"step_{0:06d}.jsonl")
    top = max(letters.values()) / max(sum(letters.values()), 1)
    log(f"[seed {seed}] SFT start: held-out accuracy {100 * acc0:.1f}%, predicted letters {letters} "
        f"(most frequent {100 * top:.0f}%)")
    if args.sft_only:
        return {"seed": seed, "acc0": acc0, "sft_letters": letters, "minutes": {"sft": sft_min}}
    log(f"[seed {seed}] SFT held-out accuracy {100 * acc0:.1f}%; RL {args.rl_steps} steps x {args.prompts_per_step} "
        f"prompts x {args.n}, arms {list(arms)} side by side")
    t1 = time.time()
    order = list(arms)
    for step in range(args.rl_steps):
        step_round_robin(arms, step)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.rl_steps:
            accs = {n: arms[n].evaluate() for n in order}
            log(f"[seed {seed}] step {step + 1}: " + ", ".join(
                f"{n} {100 * a:.1f}% ({arms[n].wall:.0f}s)" for n, a in accs.items()))
    res = {"seed": seed, "acc0": acc0, "sft_letters": letters, "arms": {n: a.summary() for n, a in arms.items()},
           "minutes": {"sft": sft_min, "rl": (time.time() - t1) / 60, "total": (time.time() - t0) / 60}}
    (out / "seed_result.json").write_text(json.dumps(res, indent=2))
    return res


# ---- driver -----------------------------------------------------------------------------------------------------
def child_argv(args, out: Path, seed: int) -> List[str]:
    """The command line of one seed's child process (``--jobs``)."""
    cmd = ["--seeds", str(seed), "--out", str(out), "--jobs", "1"]
    for k in ("warmup_steps", "sft_steps", "sft_lr", "rl_lr", "rl_steps", "n_sft", "n_rl", "n_test", "prompts_per_step", "n", "eval_every",
              "max_new_tokens", "tau", "ngram", "reasoning_styles"):
        if getattr(args, k) is not None:
            cmd += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
    flags = (["--reuse-sft"] if args.reuse_sft else []) + (["--sft-only"] if args.sft_only else []) + (["--answer-first"] if args.answer_first else ["--no-answer-first"])
    return cmd + ["--bases", *args.bases, *flags, *args.overrides]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--bases", nargs="+", default=list(BASES), choices=list(BASES))
    ap.add_argument("--warmup-steps", type=int, default=600, help="letter-answer SFT steps (the demo's SFT, at "
                    "configs/demo.yaml's sft.lr) before the reasoning SFT; 0 = none")
    ap.add_argument("--sft-steps", type=int, default=300, help="SFT steps on the reasoning targets")
    ap.add_argument("--sft-lr", type=float, default=3e-4, help="lr of the reasoning SFT (0: configs/demo.yaml's sft.lr)")
    ap.add_argument("--answer-first", action=argparse.BooleanOptionalAction, default=True,
                    help="reasoning targets open with the chosen letter (mmrl.data.reasoning)")
    ap.add_argument("--rl-lr", type=float, default=0.0, help="lr of the RL arms (0: configs/demo.yaml's train.lr, 1e-4)")
    ap.add_argument("--rl-steps", type=int, default=100)
    ap.add_argument("--n-sft", type=int, default=1024, help="train clips (SFT split)")
    ap.add_argument("--n-rl", type=int, default=256, help="first clips of the train split used for RL")
    ap.add_argument("--n-test", type=int, default=128)
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--n", type=int, default=8, help="rollout.n = G")
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--tau", type=float, default=0.8)
    ap.add_argument("--ngram", type=int, default=1)
    ap.add_argument("--reasoning-styles", type=int, default=1,
                    help="reasoning styles of the SFT targets (mmrl.data.reasoning.STYLES; > 1 gives MDAP's similarity "
                         "test diverse responses to act on: bench/fastrl_preflight.py measures it)")
    ap.add_argument("--jobs", type=int, default=1, help="seeds run at once, each in a child process")
    ap.add_argument("--out", default="runs/fastrl")
    ap.add_argument("--render-only", action="store_true", help="print the table again from an earlier --out")
    ap.add_argument("--sft-only", action="store_true", help="stop after each seed's SFT: print its held-out accuracy "
                    "and predicted-letter counts (a check of the start point before RL is spent on it)")
    ap.add_argument("--reuse-sft", action="store_true", help="keep an earlier --out's SFT checkpoint of the same "
                    "seed, steps, train size and overrides (the world is rebuilt: it is deterministic)")
    ap.add_argument("overrides", nargs="*", help="dotted config overrides for every stage and arm")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    for k in ("rl_steps", "eval_every", "n_rl", "n_sft", "n_test", "prompts_per_step", "n"):
        if getattr(args, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be >= 1")
    if args.n_rl > args.n_sft:
        ap.error("--n-rl must be <= --n-sft (the RL split is the first --n-rl clips of the train split)")
    out = Path(args.out)
    t0 = time.time()
    if args.render_only:
        results = [json.loads((out / f"seed{s}" / "seed_result.json").read_text()) for s in args.seeds]
    elif args.jobs > 1 and len(args.seeds) > 1:
        results = run_seeds_in_processes(Path(__file__), args.seeds, args.jobs, out,
                                         lambda seed: child_argv(args, out, seed))
    else:
        results = [run_seed(s, args, out / f"seed{s}") for s in args.seeds]
    if args.sft_only:
        for r in results:
            print(f"seed {r['seed']}: SFT held-out accuracy {100 * r['acc0']:.1f}%, predicted letters {r['sft_letters']}")
        return
    table = render(results, args)
    if not args.render_only:
        table += f"\nWall time of this command: {(time.time() - t0) / 60:.1f} min.\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(table)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    plot(results, args, out / "time_to_accuracy.png")
    print(table)


if __name__ == "__main__":
    main()
