"""The miniature of PACG's table (specs/algorithms.md §2, issue 14): GRPO, DAPO, DAPO+PACG, VPPO, VPPO+PACG from one
SFT checkpoint on the claims world, over seeds; accuracy, unsupported claims, claim persistence, EFS and step cost.

    .venv/bin/python bench/pacg.py [--seeds 0 1 2] [--warmup-steps 600] [--sft-steps 300] [--rl-steps 30] [--n-train 512] [--n-test 64]
        [--prompts-per-step 4] [--n 4] [--max-new-tokens 128] [--out runs/pacg] [--report FILE] [--render-only]
        [--unsupported-source prior|random] [--arms grpo dapo ...] [overrides ...]

World (``mmrl.data.synth_claims``): one coloured square per image; questions about its colour or location carry a
prior ("most squares here are red", right 60% + chance of the time). SFT traces state one claim per attribute
inside ``<think>``; the claim about the attribute NOT asked contradicts the image in 30% of the traces while the
answer stays right: ``--unsupported-source random`` (default) draws a wrong value nothing in the text predicts;
``prior`` also states a prior for the attribute not asked and the unsupported claim repeats it (text-predictable,
the hallucination PACG targets). One SFT checkpoint (seed 0) is the start point of every arm and seed: a perception
warm-up (``--warmup-steps`` on the same kind of images with an uninformative prior and letter answers, the demo's recipe:
a tiny model trained on traces alone copies the stated prior and never looks, EFS ≈ 0), then ``--sft-steps`` on the
traces.

Arms (``algorithm`` section; everything else equal: steps, lr, prompts per step, n, reward = accuracy only):

- ``grpo``: GRPO advantage, seq-mean loss, clip 0.2, no KL;
- ``dapo``: DAPO (clip 0.2 / 0.28, token-mean, dynamic sampling on accuracy, at most 1 resampling round);
- ``dapo+pacg``: PACG over that DAPO (κ = 1, γ = 0.5, η = 0.5, batch z-score; VPPO's patch intervention);
- ``vppo``: VPPO over that DAPO (TAS α_min = 0.9, TGF k = 0.4, the same re-scoring pass);
- ``vppo+pacg``: PACG over that VPPO (one shared re-scoring pass);
- optional: ``dapo+pacg_q`` (the quantile gate, q = 0.2), ``dapo+pacg_full`` (persistence under ``full_mask``).

The arms of a seed are stepped round-robin in one process (each with its own RNG stream), so step times are
measured side by side under the same machine load. Eval: ``mmrl diagnose`` on the held-out split, greedy, with the
world's claim labeler: accuracy, the share of correct responses with at least one unsupported claim, the mean
persistence of supported and unsupported claims (under the patch intervention and under ``full_mask``), EFS per
token. Tables: ``pacg_table.py`` (95% CIs over seeds, differences paired by seed).
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
from pacg_table import render  # noqa: E402

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
    # PACG's other intervention (spec §2): persistence under a fully black image
    "dapo+pacg_full": ["algorithm.name=pacg", "algorithm.clip_high=0.28",
                       "algorithm.params={intervention: full_mask, intervention_params: {value: 0}, "
                       f"base: {{name: dapo, params: {{{_DAPO}}}}}}}"],
}
DEFAULT_ARMS = ["grpo", "dapo", "dapo+pacg", "vppo", "vppo+pacg"]


def costs(history: List[Dict[str, float]]) -> Dict[str, float]:
    med = lambda k: statistics.median([h.get(k, 0.0) for h in history]) if history else float("nan")  # noqa: E731
    return {"step_s": med("time/step"), "rollout_s": med("time/rollout"),
            "update_s": med("time/update"), "resample_rounds": statistics.mean([h.get("resample_rounds", 0.0) for h in history])}


def diagnose(model_dir: str, cfg, samples, smoke: bool = False) -> Dict[str, float]:
    """``mmrl diagnose``'s numbers under VPPO's patch blackening, plus ``<key>_full`` under ``full_mask`` (the same
    greedy responses re-scored on a black image). Fails (``_preflight.check_truncation``) when more than 5% of the
    greedy responses are cut by max new tokens, unless ``smoke``."""
    from _preflight import check_truncation

    from mmrl.data.synth_claims import claim_support
    from mmrl.diagnose.core import diagnose_samples, summarize_all
    from mmrl.models.loading import load_model, load_processor
    from mmrl.views.patch_transforms import FULL_MASK, VPPO_PATCH

    model, proc = load_model(model_dir), load_processor(model_dir)
    recs = diagnose_samples(model, proc, samples, cfg.data, VPPO_PATCH, max_new_tokens=cfg.rollout.max_new_tokens,
                            labeler=claim_support, seed=0, also={"full": FULL_MASK})
    if not smoke:
        check_truncation([r["truncated"] for r in recs], cfg.rollout.max_new_tokens, what="greedy test responses")
    return summarize_all(recs, ["full"])


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

    from mmrl.models.loading import load_processor
    from pacg_preflight import check_trace_room, trace_lengths

    world = out / "world"
    info = make_claims_world(str(world), args.n_train, args.n_test, seed=0, unsupported_source=args.unsupported_source)
    if not args.smoke:  # a response cut before its answer measures the budget, not the method
        tok = load_processor(load_config(None, list(args.overrides)).model.path).tokenizer
        check_trace_room(args.max_new_tokens, trace_lengths(world / "train.json", tok))
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
    res = {"world": info["stats"], "sft": diagnose(str(out / "sft" / "final"), cfg, samples, args.smoke)}
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
        res["arms"][arm.name] = {"eval": diagnose(final, arm.cfg, samples, args.smoke), "cost": c, "last_algo_metrics": last,
                                 "algo_means": means, "side_by_side": [a.name for a in arms]}
    path.write_text(json.dumps(res, indent=1))
    return res


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--arms", nargs="+", default=DEFAULT_ARMS, choices=list(ARMS),
                   help="arms already in OUT/seedS.json are kept, not rerun (add an arm to an earlier run)")
    p.add_argument("--warmup-steps", type=int, default=600, help="perception warm-up SFT steps (letters only; 0 = none)")
    p.add_argument("--warmup-lr", type=float, default=3e-4)
    p.add_argument("--unsupported-source", choices=["random", "prior"], default="random",
                   help="claims world: an unsupported claim repeats a prior stated in the question, or is a random wrong value")
    p.add_argument("--sft-steps", type=int, default=300)
    p.add_argument("--sft-lr", type=float, default=1e-3)
    p.add_argument("--rl-steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--n-train", type=int, default=512)
    p.add_argument("--n-test", type=int, default=64)
    p.add_argument("--prompts-per-step", type=int, default=4)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=128,
                   help="must exceed the longest SFT trace (50 tokens with its end token; checked); at 64 and 96, "
                        "5.7%% and 5.3%% of the SFT start's sampled responses were cut (bench/pacg_preflight.py)")
    p.add_argument("--smoke", action="store_true", help="plumbing run: max new tokens may be below the SFT traces")
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
    arms = [a for a in args.arms if all(a in r["arms"] for r in results)]
    table = render(prep, results, args, arms)
    print(table)
    if args.report:
        Path(args.report).write_text(table)
    return table


if __name__ == "__main__":
    main()
