"""The miniature of PACG's table (specs/algorithms.md §2, issue 14): GRPO, DAPO, DAPO+PACG, VPPO, VPPO+PACG from one
SFT checkpoint on the claims world, over seeds; accuracy, unsupported claims, claim persistence, EFS and step cost.

    .venv/bin/python bench/pacg.py [--seeds 0 1 2] [--warmup-steps 600] [--sft-steps 300] [--rl-steps 30] [--n-train 512] [--n-test 64]
        [--prompts-per-step 4] [--n 4] [--max-new-tokens 40] [--out runs/pacg] [--report FILE] [--render-only]
        [--arms grpo dapo ...] [overrides ...]

World (``mmrl.data.synth_claims``): one coloured square per image; questions about its colour or location carry a
prior ("most squares here are red", right 60% + chance of the time). SFT traces state one claim per attribute
inside ``<think>``; the claim about the attribute NOT asked contradicts the image in 30% of the traces while the
answer stays right. One SFT checkpoint (seed 0) is the start point of every arm and seed: a perception warm-up
(``--warmup-steps`` on the same kind of images with an uninformative prior and letter answers, the demo's recipe:
a tiny model trained on traces alone copies the stated prior and never looks, EFS ≈ 0), then ``--sft-steps`` on the
traces.

Arms (``algorithm`` section; everything else equal: steps, lr, prompts per step, n, reward = accuracy only):

- ``grpo``: GRPO advantage, seq-mean loss, clip 0.2, no KL;
- ``dapo``: DAPO (clip 0.2 / 0.28, token-mean, dynamic sampling on accuracy, at most 1 resampling round);
- ``dapo+pacg``: PACG over that DAPO (κ = 1, γ = 0.5, η = 0.5, batch z-score; VPPO's patch intervention);
- ``vppo``: VPPO over that DAPO (TAS α_min = 0.9, TGF k = 0.4, the same re-scoring pass);
- ``vppo+pacg``: PACG over that VPPO (one shared re-scoring pass).

The arms of a seed are stepped round-robin in one process (each with its own RNG stream), so step times are
measured side by side under the same machine load. Eval: ``mmrl diagnose`` on the held-out split, greedy, with the
world's claim labeler: accuracy, the share of correct responses with at least one unsupported claim, the mean
persistence of supported and unsupported claims (patch intervention), EFS per token.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]  # this checkout's mmrl, whatever the venv has installed
from _arms import Arm, log  # noqa: E402

INSTRUCTION = "Describe what you see in <think></think>, then answer with the option's letter in <answer></answer>."
_DAPO = "dynamic_sampling: true, max_resample_rounds: 1"
ARMS: Dict[str, List[str]] = {
    "grpo": ["algorithm.name=grpo", "algorithm.loss_agg=seq-mean-token-mean"],
    "dapo": ["algorithm.name=dapo", "algorithm.clip_high=0.28", f"algorithm.params={{{_DAPO}}}"],
    "dapo+pacg": ["algorithm.name=pacg", "algorithm.clip_high=0.28",
                  f"algorithm.params={{base: {{name: dapo, params: {{{_DAPO}}}}}}}"],
    "vppo": ["algorithm.name=vppo", "algorithm.clip_high=0.28", f"algorithm.params={{{_DAPO}}}"],
    "vppo+pacg": ["algorithm.name=pacg", "algorithm.clip_high=0.28",
                  f"algorithm.params={{base: {{name: vppo, params: {{{_DAPO}}}}}}}"],
    # PACG's alternative gate (spec §2): flag the top q = 20% most persistent claims of the batch
    "dapo+pacg_q": ["algorithm.name=pacg", "algorithm.clip_high=0.28",
                    f"algorithm.params={{mode: quantile, q: 0.2, base: {{name: dapo, params: {{{_DAPO}}}}}}}"],
}
DEFAULT_ARMS = ["grpo", "dapo", "dapo+pacg", "vppo", "vppo+pacg"]
BASE_OF = {"dapo+pacg": "dapo", "vppo+pacg": "vppo", "dapo+pacg_q": "dapo"}
COLUMNS = [("accuracy", "accuracy", 100), ("correct_with_unsupported", "correct w/ unsupported claim", 100),
           ("persistence_unsupported", "P unsupported", 1), ("persistence_supported", "P supported", 1),
           ("efs_token_mean", "EFS / token", 1), ("claims_per_response", "claims / response", 1)]


def costs(history: List[Dict[str, float]]) -> Dict[str, float]:
    med = lambda k: statistics.median([h.get(k, 0.0) for h in history]) if history else float("nan")  # noqa: E731
    return {"step_s": med("time/step"), "rollout_s": med("time/rollout"),
            "update_s": med("time/update"), "resample_rounds": statistics.mean([h.get("resample_rounds", 0.0) for h in history])}


def diagnose(model_dir: str, cfg, samples) -> Dict[str, float]:
    from mmrl.data.synth_claims import claim_support
    from mmrl.diagnose.core import diagnose_samples, summarize
    from mmrl.models.loading import load_model, load_processor

    model, proc = load_model(model_dir), load_processor(model_dir)
    recs = diagnose_samples(model, proc, samples, cfg.data, max_new_tokens=cfg.rollout.max_new_tokens,
                            labeler=claim_support, seed=0)
    return summarize(recs)


def common_overrides(args, world: Path) -> List[str]:
    return [f"data.train={world / 'train.json'}", f"data.test={world / 'test.json'}", f"data.media_root={world}",
            "data.max_pixels=3136", f"data.prompt.instruction={INSTRUCTION}", f"rollout.n={args.n}",
            f"rollout.max_new_tokens={args.max_new_tokens}", f"train.prompts_per_step={args.prompts_per_step}",
            f"train.lr={args.lr}", "train.micro_batch=32", "train.num_threads=1", f"sft.steps={args.sft_steps}",
            "sft.batch_size=32", f"sft.lr={args.sft_lr}", "rewards=[{name: accuracy, weight: 1.0}]"] + list(args.overrides)


def perception_world(out: Path, n_train: int) -> Path:
    """The warm-up world: claims-world images and questions with an uninformative prior (prior_p = 0) and the
    option letter as the SFT target (no trace), so the only way to the answer is to look."""
    from mmrl.data.synth_claims import make_claims_world

    world = out / "warmup_world"
    info = make_claims_world(str(world), n_train, 1, seed=1, prior_p=0.0)
    items = json.loads(Path(info["train"]).read_text())
    for it in items:
        it["meta"].pop("sft_response")
    Path(info["train"]).write_text(json.dumps(items, indent=1) + "\n")
    return world


def prepare(args, out: Path) -> Dict:
    """The world, the SFT checkpoint (perception warm-up, then the traces) and its diagnosis (shared by every seed)."""
    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples
    from mmrl.data.synth_claims import make_claims_world
    from mmrl.train.sft import run_sft

    world = out / "world"
    info = make_claims_world(str(world), args.n_train, args.n_test, seed=0)
    t = time.time()
    start: List[str] = []  # the user's model.path (default the tiny model) unless warmed up
    if args.warmup_steps:
        warm = perception_world(out, args.n_train)
        cfg = load_config(None, common_overrides(args, warm) + [f"train.out_dir={out / 'warmup'}", "train.seed=0",
                                                                f"sft.steps={args.warmup_steps}", f"sft.lr={args.warmup_lr}"])
        if not (out / "warmup" / "final" / "config.json").exists():
            run_sft(cfg, quiet=True)
        start = [f"model.path={out / 'warmup' / 'final'}"]
        log(f"perception warm-up {args.warmup_steps} steps: {time.time() - t:.0f}s")
    cfg = load_config(None, common_overrides(args, world) + start + [f"train.out_dir={out / 'sft'}", "train.seed=0"])
    if not (out / "sft" / "final" / "config.json").exists():
        run_sft(cfg, quiet=True)
    log(f"SFT {args.sft_steps} steps: {time.time() - t:.0f}s")
    samples, _ = load_samples(str(world / "test.json"), str(world))
    res = {"world": info["stats"], "sft": diagnose(str(out / "sft" / "final"), cfg, samples)}
    (out / "sft.json").write_text(json.dumps(res, indent=1))
    return res


def run_seed(seed: int, args, out: Path) -> Dict:
    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples

    world = out / "world"
    path = out / f"seed{seed}.json"
    res = json.loads(path.read_text()) if path.exists() else {"seed": seed, "arms": {}}
    arms = []
    for name in args.arms:
        if name in res["arms"]:
            continue
        cfg = load_config(None, common_overrides(args, world) + ARMS[name] + [
            f"model.path={out / 'sft' / 'final'}", f"train.out_dir={out / f'seed{seed}' / name.replace('+', '_')}",
            f"train.seed={seed}", f"train.steps={args.rl_steps}"])
        arms.append(Arm(name, cfg))
    t = time.time()
    for step in range(args.rl_steps):
        for arm in arms:
            arm.step()
        if (step + 1) % 10 == 0:
            log(f"seed {seed}: step {step + 1}/{args.rl_steps} ({time.time() - t:.0f}s)")
    samples, _ = load_samples(str(world / "test.json"), str(world))
    for arm in arms:
        c = costs(arm.history)
        last = {k: v for k, v in arm.history[-1].items() if k.startswith("algo/")}
        keys = sorted({k for h in arm.history for k in h if k.startswith("algo/")})
        means = {k: statistics.mean([h[k] for h in arm.history if k in h]) for k in keys}
        final = arm.finish()
        res["arms"][arm.name] = {"eval": diagnose(final, arm.cfg, samples), "cost": c, "last_algo_metrics": last,
                                 "algo_means": means, "side_by_side": [a.name for a in arms]}
    path.write_text(json.dumps(res, indent=1))
    return res


def _ms(xs: List[float], scale: float) -> str:
    xs = [x * scale for x in xs if x == x]
    if not xs:
        return "–"
    if len(xs) == 1:
        return f"{xs[0]:.3f}" if scale == 1 else f"{xs[0]:.1f}"
    m, s = statistics.mean(xs), statistics.stdev(xs)
    return f"{m:.3f} ± {s:.3f}" if scale == 1 else f"{m:.1f} ± {s:.1f}"


def render(prep: Dict, results: List[Dict], args) -> str:
    arms = [a for a in args.arms if all(a in r["arms"] for r in results)]
    seeds = [r["seed"] for r in results]
    head = "| arm | " + " | ".join(h for _, h, _ in COLUMNS) + " |"
    sep = "|---|" + "---|" * len(COLUMNS)
    lines = [f"PACG miniature: claims world ({args.n_train} train / {args.n_test} test images), perception warm-up "
             f"{args.warmup_steps} + trace SFT {args.sft_steps} steps, "
             f"then {args.rl_steps} RL steps x {args.prompts_per_step} prompts x n={args.n} (lr {args.lr}), seeds "
             f"{', '.join(map(str, seeds))}. Accuracy and shares in %, mean ± std over seeds; P = claim persistence "
             "under VPPO's patch blackening (1 = kept without the evidence).", "", head, sep,
             "| SFT (start point) | " + " | ".join(_ms([prep["sft"].get(k, float("nan"))], s) for k, _, s in COLUMNS) + " |"]
    for a in arms:
        lines.append(f"| {a} | " + " | ".join(_ms([r["arms"][a]["eval"].get(k, float("nan")) for r in results], s)
                                             for k, _, s in COLUMNS) + " |")
    lines += ["", "Per seed:", "", "| arm | seed | " + " | ".join(h for _, h, _ in COLUMNS) + " |", "|---|---|" + "---|" * len(COLUMNS)]
    for a in arms:
        for r in results:
            e = r["arms"][a]["eval"]
            lines.append(f"| {a} | {r['seed']} | " + " | ".join(_ms([e.get(k, float("nan"))], s) for k, _, s in COLUMNS) + " |")
    lines += ["", "Step cost (median seconds per step, arms stepped side by side; ratio = arm / its base, per seed):", "",
              "| arm | step s | rollout s (incl. re-scoring) | update s | resample rounds / step | vs base |",
              "|---|---|---|---|---|---|"]
    for a in arms:
        cs = [r["arms"][a]["cost"] for r in results]
        ratio = "–"
        if a in BASE_OF and BASE_OF[a] in arms and all(BASE_OF[a] in r["arms"][a].get("side_by_side", [BASE_OF[a]])
                                                       for r in results):
            ratio = _ms([r["arms"][a]["cost"]["step_s"] / r["arms"][BASE_OF[a]]["cost"]["step_s"] for r in results], 1) + f" × {BASE_OF[a]}"
        lines.append(f"| {a} | {_ms([c['step_s'] for c in cs], 1)} | {_ms([c['rollout_s'] for c in cs], 1)} | "
                     f"{_ms([c['update_s'] for c in cs], 1)} | {_ms([c['resample_rounds'] for c in cs], 1)} | {ratio} |")
    gated = [a for a in arms if a.startswith(("dapo+pacg", "vppo+pacg")) and all("algo_means" in r["arms"][a] for r in results)]
    if gated:
        lines += ["", "PACG gate activity (mean over training steps): claims per step, share of claims flagged, mean gain of a "
                  "flagged claim, mean claim persistence in the batch:", "",
                  "| arm | claims / step | flagged share | gain of flagged | P (batch) |", "|---|---|---|---|---|"]
        for a in gated:
            m = [r["arms"][a]["algo_means"] for r in results]
            lines.append(f"| {a} | " + " | ".join(_ms([x.get(f"algo/pacg/{k}", float("nan")) for x in m], 1) for k in
                                                  ("claims", "flagged_frac", "gain_flagged_mean", "persistence_mean")) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--arms", nargs="+", default=DEFAULT_ARMS, choices=list(ARMS),
                   help="arms already in OUT/seedS.json are kept, not rerun (add an arm to an earlier run)")
    p.add_argument("--warmup-steps", type=int, default=600, help="perception warm-up SFT steps (letters only; 0 = none)")
    p.add_argument("--warmup-lr", type=float, default=3e-4)
    p.add_argument("--sft-steps", type=int, default=300)
    p.add_argument("--sft-lr", type=float, default=1e-3)
    p.add_argument("--rl-steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--n-train", type=int, default=512)
    p.add_argument("--n-test", type=int, default=64)
    p.add_argument("--prompts-per-step", type=int, default=4)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=40)
    p.add_argument("--out", default="runs/pacg")
    p.add_argument("--report", help="also write the table to this file")
    p.add_argument("--render-only", action="store_true", help="print the table from an earlier --out")
    p.add_argument("--sft-only", action="store_true", help="write the world and the SFT checkpoint (kept for later runs)")
    p.add_argument("overrides", nargs="*", help="dotted config overrides for every stage")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.render_only:
        prep = json.loads((out / "sft.json").read_text())
        results = [json.loads((out / f"seed{s}.json").read_text()) for s in args.seeds]
    else:
        t = time.time()
        prep = prepare(args, out)
        if args.sft_only:
            print(json.dumps(prep, indent=1))
            return ""
        results = [run_seed(s, args, out) for s in args.seeds]
        log(f"wall time {(time.time() - t) / 60:.1f} min")
    table = render(prep, results, args)
    print(table)
    if args.report:
        Path(args.report).write_text(table)
    return table


if __name__ == "__main__":
    main()
