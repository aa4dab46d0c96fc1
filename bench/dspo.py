"""DSPO vs GRPO on the mood world (issue 17), from the same format-SFT checkpoint, over seeds.

    .venv/bin/python bench/dspo.py [--seeds 0 1 2] [--sft-steps 300] [--rl-steps 30] [--n-train 96] [--n-test 48]
        [--max-new-tokens 170] [--out runs/dspo]

Per seed: one mood world (``make_mood_world``), one SFT on the world's gold four-step responses
(``meta.reference_response``, written as text answers so ``run_sft`` trains on them), then four RL arms from that
checkpoint with ``configs/dspo_mood.yaml``'s settings:

- ``grpo``: rewards 1.0 acc + 0.1 fmt (``dspo_accuracy``, ``dspo_format``), GRPO advantage;
- ``dspo``: + 0.3 R_div and CVIG (0.1 R_cf, w-gated R_div);
- ``no_cvig``: ``algorithm.params.cvig=false`` (R_div with uniform w, no R_cf);
- ``no_dedr``: the ``dspo_div`` weight and ``div_weight`` 0 (CVIG's R_cf only).

Eval: greedy responses on the test split, parsed, scored by ``mmrl.eval.emotion`` (top-1, KL to the annotator
distribution, top-k overlap with k = 5, candidate diversity in VAD, box IoU with the cue) and the well-formed rate;
R_cf is the training mean of ``algo/cvig/r_cf`` over the run (CVIG arms only; the eval does not re-score). The table
prints per seed and the mean over seeds, then the direction DSPO - GRPO per seed.

Measured (smoke scale, 1 seed; not a result): ``bench/dspo.py --seeds 0 --sft-steps 300 --rl-steps 3 --n-train 48
--n-test 12 --max-new-tokens 170 --n 4 --prompts-per-step 2`` took ~9 min on the shared 2 cores (SFT 1.3 s/step,
loss 0.023 at step 300; every arm 100% well-formed on the test split; CVIG scored 25-75% of the responses per step).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

ARMS = {
    "grpo": ["algorithm.name=grpo", "rewards.2.weight=0.0"],
    "dspo": [],
    "no_cvig": ["algorithm.params.cvig=false"],
    "no_dedr": ["rewards.2.weight=0.0", "algorithm.params.div_weight=0.0"],
}
METRICS = ("top1", "kl_to_annotators", "topk_overlap", "candidate_diversity", "box_iou", "well_formed", "r_cf")


def sft_world(world: dict, out: Path) -> str:
    """The train split with each item's gold four-step response as a text answer (what ``run_sft`` trains on)."""
    items = json.loads(Path(world["train"]).read_text())
    for it in items:
        it["answer"], it["answer_type"] = it["meta"]["reference_response"], "text"
    path = Path(world["out_dir"]) / "sft.json"  # beside the images its paths point to
    path.write_text(json.dumps(items))
    return str(path)


def evaluate(model, processor, cfg, test_path: str, max_new_tokens: int, preds: Path) -> dict:
    from mmrl.data.annotations import load_samples
    from mmrl.eval.emotion import emotion_metrics
    from mmrl.eval.synthetic import evaluate_samples
    from mmrl.rewards.dspo_format import parse_dspo
    from mmrl.rewards.dspo_rewards import evidence_box, get_lexicon

    samples, _ = load_samples(test_path)
    evaluate_samples(model, processor, samples, cfg.data, max_new_tokens=max_new_tokens, predictions_path=str(preds))
    rows = {r["id"]: r for r in map(json.loads, preds.read_text().splitlines())}
    parses = [parse_dspo(rows[s.id].get("response", ""), k=5) for s in samples]
    return emotion_metrics(parses, [s.answer for s in samples], [s.meta["emotion_dist"] for s in samples],
                           [evidence_box(s, None) for s in samples], get_lexicon(""), k=5)


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
    sft_dir = out / "sft"
    cfg = load_config(cfg_file, base + [f"data.train={sft_world(world, out)}", f"train.out_dir={sft_dir}",
                                        f"sft.steps={args.sft_steps}", f"sft.batch_size={args.sft_batch}",
                                        f"sft.lr={args.sft_lr}"])
    run_sft(cfg, quiet=True)
    ckpt = str(sft_dir / "final")
    res = {}
    for arm, extra in ARMS.items():
        torch.manual_seed(seed)
        tok = [] if arm == "grpo" else [f"algorithm.params.tokenizer={ckpt}"]
        cfg = load_config(cfg_file, base + [f"model.path={ckpt}", f"train.out_dir={out / arm}", *tok, *extra])
        tr = RLTrainer(cfg, quiet=True)
        hist = tr.run()
        m = evaluate(tr.model, tr.processor, cfg, world["test"], args.max_new_tokens, out / arm / "predictions.jsonl")
        rcf = [h["algo/cvig/r_cf"] for h in hist if "algo/cvig/r_cf" in h]
        m["r_cf"] = sum(rcf) / len(rcf) if rcf else float("nan")
        res[arm] = m
        print(f"seed {seed} {arm}: " + " ".join(f"{k}={m[k]:.3f}" for k in METRICS), flush=True)
    (out / "results.json").write_text(json.dumps(res, indent=1))
    return res


def table(all_res: dict) -> str:
    head = "| seed | arm | " + " | ".join(METRICS) + " |\n|" + "---|" * (len(METRICS) + 2) + "\n"
    lines = []
    for seed, res in all_res.items():
        for arm, m in res.items():
            lines.append(f"| {seed} | {arm} | " + " | ".join(f"{m[k]:.3f}" for k in METRICS) + " |")
    for arm in ARMS:
        vals = [r[arm] for r in all_res.values()]
        lines.append(f"| mean | {arm} | " + " | ".join(f"{sum(v[k] for v in vals) / len(vals):.3f}" for k in METRICS) + " |")
    dirs = ["", "DSPO - GRPO per seed: " + "; ".join(
        f"seed {s}: " + ", ".join(f"{k} {r['dspo'][k] - r['grpo'][k]:+.3f}" for k in METRICS[:5]) for s, r in all_res.items())]
    return head + "\n".join(lines + dirs)


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
    args = ap.parse_args(argv)
    all_res = {s: run_seed(s, args) for s in args.seeds}
    text = table(all_res)
    (Path(args.out) / "table.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
