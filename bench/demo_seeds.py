"""The README's demo table: run the embedded demo (SFT -> GRPO -> eval) for 3 seeds and print held-out
accuracy after SFT and after GRPO, per seed and mean +- std.

    .venv/bin/python bench/demo_seeds.py [--seeds 0 1 2] [--out runs/demo_seeds] [overrides ...]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="runs/demo_seeds")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    from mmrl.demo import run_demo

    results = []
    for seed in args.seeds:
        t = time.time()
        r = run_demo(out_dir=f"{args.out}/seed{seed}", seed=seed, overrides=args.overrides, quiet=True)
        results.append(r)
        print(f"seed {seed}: SFT {100 * r['sft']['accuracy']:.1f}%  GRPO {100 * r['rl']['accuracy']:.1f}%  "
              f"({(time.time() - t) / 60:.1f} min)", flush=True)
    qtypes = sorted(results[0]["sft"]["per_qtype"])
    lines = ["| seed | stage | " + " | ".join(qtypes) + " | overall | minutes |", "|" + "---|" * (len(qtypes) + 4)]
    for r in results:
        for stage in ("sft", "rl"):
            e = r[stage]
            cells = " | ".join(f"{100 * e['per_qtype'].get(q, 0):.1f}" for q in qtypes)
            lines.append(f"| {r['seed']} | {'SFT' if stage == 'sft' else 'SFT+GRPO'} | {cells} | {100 * e['accuracy']:.1f} | "
                         f"{r['minutes']:.1f} |")
    sft = [100 * r["sft"]["accuracy"] for r in results]
    rl = [100 * r["rl"]["accuracy"] for r in results]
    delta = [b - a for a, b in zip(sft, rl)]
    sd = (lambda x: statistics.stdev(x) if len(x) > 1 else 0.0)
    lines.append("")
    lines.append(f"Held-out accuracy, mean +- std over seeds {args.seeds}: SFT {statistics.mean(sft):.1f} +- {sd(sft):.1f}, "
                 f"SFT+GRPO {statistics.mean(rl):.1f} +- {sd(rl):.1f}, GRPO - SFT {statistics.mean(delta):+.1f} +- {sd(delta):.1f} pp "
                 f"(RL above SFT in {sum(d > 0 for d in delta)}/{len(delta)} seeds)")
    table = "\n".join(lines)
    print(table)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "table.md").write_text(table + "\n")
    (Path(args.out) / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
