"""DSPO vs GRPO on the mood world (issue 17), from the same format-SFT checkpoint, over seeds.

    .venv/bin/python bench/dspo.py [--seeds 0 1 2] [--sft-steps 300] [--rl-steps 30] [--n-train 96] [--n-test 48]
        [--max-new-tokens 170] [--out runs/dspo]

Per seed: one mood world (``make_mood_world``), one SFT on the world's gold four-step responses
(``meta.reference_response``, written as text answers so ``run_sft`` trains on them), then four RL arms from that
checkpoint with ``configs/dspo_mood.yaml``'s settings:

- ``grpo``: rewards 1.0 acc + 0.1 fmt (``dspo_accuracy``, ``dspo_format``), GRPO advantage;
- ``dspo``: + 0.3 R_div and CVIG (0.1 R_cf, w-gated R_div; V^CF zeroes the visual tokens in each response's box);
- ``no_cvig``: ``algorithm.params.cvig=false`` (R_div with uniform w, no R_cf);
- ``no_dedr``: the ``dspo_div`` weight 0 (``div_weight`` follows it: CVIG's R_cf only).

Eval: ``mmrl eval emotion``'s scoring (``mmrl.eval.benchmarks.emotion.evaluate``): greedy responses on the held-out test split,
top-1, KL to the annotator distribution, top-k overlap (k = 5), candidate diversity in VAD, box IoU with the cue and
the well-formed rate; R_cf is the training mean of ``algo/cvig/r_cf`` over the run (CVIG arms only; the eval does
not re-score). The table gives each arm's mean ± 95% CI over seeds with the per-seed values, then DSPO minus each
other arm per seed (KL: lower is better).

Measured: ``bench/results/dspo.md`` (3 seeds, 48 train / 24 held-out test images, SFT 300 steps, then 10 and 30 RL
steps of 2 prompts x G = 4 per arm; ~40 min of SFT and 2-10 min per arm per seed on the shared 2 cores). Seeds can
run as separate processes (``--seeds 0``, ``--seeds 1``, ...) into one ``--out`` and be tabled with ``--table-only``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from bpo_table import ci95  # noqa: E402

ARMS = {
    "grpo": ["algorithm.name=grpo", "rewards.2.weight=0.0"],
    "dspo": [],
    "no_cvig": ["algorithm.params.cvig=false"],
    "no_dedr": ["rewards.2.weight=0.0"],  # dspo's div_weight follows the dspo_div reward's weight (0)
}
METRICS = ("top1", "kl_to_annotators", "topk_overlap", "candidate_diversity", "box_iou", "well_formed", "r_cf")
LOWER_IS_BETTER = {"kl_to_annotators"}


def sft_world(world: dict, out: Path) -> str:
    """The train split with each item's gold four-step response as a text answer (what ``run_sft`` trains on)."""
    items = json.loads(Path(world["train"]).read_text())
    for it in items:
        it["answer"], it["answer_type"] = it["meta"]["reference_response"], "text"
    path = Path(world["out_dir"]) / "sft.json"  # beside the images its paths point to
    path.write_text(json.dumps(items))
    return str(path)


def evaluate(model, processor, cfg, test_path: str, max_new_tokens: int, preds: Path) -> dict:
    """``mmrl eval emotion``'s scoring (``mmrl.eval.benchmarks.emotion.evaluate``) on the held-out test split."""
    from mmrl.eval.benchmarks.emotion.evaluate import evaluate_emotion, k_of_instruction, load_emotion_samples
    from mmrl.rewards.dspo_rewards import get_lexicon
    from mmrl.rollout.base import build_engine

    samples, skipped = load_emotion_samples(test_path)
    engine = build_engine("hf", model=model, processor=processor)
    return evaluate_emotion(samples, processor, cfg.data, engine, get_lexicon(""), max_new_tokens,
                            k_of_instruction(cfg.data.prompt.instruction), predictions_path=str(preds),
                            load_errors=skipped)


def run_seed(seed: int, args) -> dict:
    import torch

    from mmrl.config import load_config
    from mmrl.data.synth_mood import make_mood_world
    from mmrl.train.rl_trainer import RLTrainer
    from mmrl.train.sft import run_sft

    out = Path(args.out) / f"seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    world = make_mood_world(str(out / "world"), args.n_train, args.n_test, seed=seed)
    base = [f"data.train={world['train']}", f"data.test={world['test']}", f"train.seed={seed}",
            f"rollout.max_new_tokens={args.max_new_tokens}", f"train.steps={args.rl_steps}", "train.eval_every=0",
            "train.save_every=0", f"train.prompts_per_step={args.prompts_per_step}", f"rollout.n={args.n}"]
    cfg_file = [str(REPO / "configs" / "dspo_mood.yaml")]
    if args.sft_from:  # the SFT checkpoint of an earlier run of this bench (same seed, so the same world)
        ckpt = str(Path(args.sft_from) / f"seed{seed}" / "sft" / "final")
        if not Path(ckpt).is_dir():
            raise SystemExit(f"--sft-from: {ckpt} is not a checkpoint")
    else:
        sft_dir = out / "sft"
        cfg = load_config(cfg_file, base + [f"data.train={sft_world(world, out)}", f"train.out_dir={sft_dir}",
                                            f"sft.steps={args.sft_steps}", f"sft.batch_size={args.sft_batch}",
                                            f"sft.lr={args.sft_lr}"])
        t0 = time.perf_counter()
        run_sft(cfg, quiet=True)
        print(f"seed {seed} sft: {time.perf_counter() - t0:.0f} s", flush=True)
        ckpt = str(sft_dir / "final")
    res = {}
    for arm, extra in ARMS.items():
        t0 = time.perf_counter()
        torch.manual_seed(seed)
        tok = [] if arm == "grpo" else [f"algorithm.params.tokenizer={ckpt}"]
        cfg = load_config(cfg_file, base + [f"model.path={ckpt}", f"train.out_dir={out / arm}", *tok, *extra])
        tr = RLTrainer(cfg, quiet=True)
        hist = tr.run()
        m = evaluate(tr.model, tr.processor, cfg, world["test"], args.max_new_tokens, out / arm / "predictions.jsonl")
        rcf = [h["algo/cvig/r_cf"] for h in hist if "algo/cvig/r_cf" in h]
        m["r_cf"] = sum(rcf) / len(rcf) if rcf else float("nan")
        m["train_reward"] = sum(h["reward/total"] for h in hist) / len(hist)
        m["time_s"] = time.perf_counter() - t0
        res[arm] = m
        print(f"seed {seed} {arm}: " + " ".join(f"{k}={_num(m[k])}" for k in METRICS) + f" ({m['time_s']:.0f} s)",
              flush=True)
    (out / "results.json").write_text(json.dumps(res, indent=1))
    return res


def _num(v) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def _ci(xs) -> str:
    """mean ± half-width of the 95% t-interval (``bench/bpo_table.py``'s ``ci95``)."""
    m, lo, hi = ci95([x for x in xs if x is not None])
    if math.isnan(m):
        return "n/a"
    return f"{m:.3f}" if math.isnan(lo) else f"{m:.3f} ± {(hi - lo) / 2:.3f}"


def table(all_res: dict) -> str:
    """Per arm: mean ± 95% CI over seeds (per-seed values in brackets); then per-seed differences."""
    seeds = list(all_res)
    head = "| metric | " + " | ".join(ARMS) + " |\n|" + "---|" * (len(ARMS) + 1)
    rows = [head]
    for k in METRICS:
        cells = []
        for arm in ARMS:
            xs = [all_res[s][arm][k] for s in seeds]
            cells.append(f"{_ci(xs)} ({', '.join(_num(x) for x in xs)})")
        rows.append(f"| {k} | " + " | ".join(cells) + " |")
    rows += ["", "| difference | metric | per seed (" + ", ".join(str(s) for s in seeds) + ") | mean ± 95% CI | "
             "seeds better / worse / equal |", "|---|---|---|---|---|"]
    for a, b in (("dspo", "grpo"), ("dspo", "no_cvig"), ("dspo", "no_dedr")):
        for k in METRICS[:6]:
            d = [all_res[s][a][k] - all_res[s][b][k] if None not in (all_res[s][a][k], all_res[s][b][k]) else None
                 for s in seeds]
            sign = -1 if k in LOWER_IS_BETTER else 1
            better = sum(1 for x in d if x is not None and sign * x > 1e-12)
            worse = sum(1 for x in d if x is not None and sign * x < -1e-12)
            rows.append(f"| {a} − {b} | {k} | " + ", ".join("n/a" if x is None else f"{x:+.3f}" for x in d)
                        + f" | {_ci(d)} | {better} / {worse} / {len(d) - better - worse} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--sft-batch", type=int, default=16)
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--rl-steps", type=int, default=30)
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--n-train", type=int, default=96)
    ap.add_argument("--n-test", type=int, default=48)
    ap.add_argument("--max-new-tokens", type=int, default=170)  # the reference response is ~153 tokens
    ap.add_argument("--out", default="runs/dspo")
    ap.add_argument("--sft-from", help="reuse the SFT checkpoints <DIR>/seed<s>/sft/final of an earlier run (same "
                                       "--n-train / --n-test, so the same worlds) instead of training them")
    ap.add_argument("--table-only", action="store_true",
                    help="no runs: the table of the seeds' results.json already under --out (seeds run apart)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    if args.table_only:
        all_res = {s: json.loads((Path(args.out) / f"seed{s}" / "results.json").read_text()) for s in args.seeds}
    else:
        all_res = {s: run_seed(s, args) for s in args.seeds}
    text = table(all_res)
    (Path(args.out) / "table.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
