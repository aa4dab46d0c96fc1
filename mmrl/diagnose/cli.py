"""``mmrl diagnose``: the fixed-rollout counterfactual diagnostic on checkpoints and a data set.

    mmrl diagnose --checkpoint runs/sft/final --checkpoint runs/dapo/final --steps 0,200 \\
        --data world/test.json --labeler mmrl.data.synth_claims:claim_support --out diag/ [--config run.yaml]

``--config`` (with dotted overrides after the flags) supplies the data section (frame/pixel budgets, the prompt
instruction); ``cli.py`` wires the subcommand with ``add_parser(subparsers)``.
"""
from __future__ import annotations

import argparse
import json
from typing import List, Optional

from mmrl.errors import ConfigError


def _params(pairs: List[str]) -> dict:
    out = {}
    for p in pairs or []:
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise ConfigError(f"--intervention-param needs key=value, got {p!r}")
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def _steps(text: Optional[str], n: int) -> List[float]:
    if not text:
        return [float(i) for i in range(n)]
    vals = [float(x) for x in text.split(",") if x.strip()]
    if len(vals) != n:
        raise ConfigError(f"--steps has {len(vals)} values for {n} checkpoints")
    return vals


def run_diagnose(args) -> dict:
    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples
    from mmrl.diagnose.core import diagnose_samples, summarize_all
    from mmrl.diagnose.report import write_outputs
    from mmrl.models.loading import load_model, load_processor
    from mmrl.registry import import_object

    cfg = load_config(args.config or [], args.overrides or [])
    data_path = args.data or cfg.data.test
    if not data_path:
        raise ConfigError("diagnose needs --data (or data.test in the config)")
    if args.media_root:
        cfg.data.media_root = args.media_root
    samples, skipped = load_samples(data_path, cfg.data.media_root, on_error=cfg.data.on_error)
    if args.limit:
        samples = samples[: args.limit]
    labeler = import_object(args.labeler, "claim labeler") if args.labeler else None
    extractor = import_object(args.claim_extractor, "claim extractor") if args.claim_extractor else None
    intervention = (args.intervention, _params(args.intervention_param))
    also = {t: (t, {}) for t in args.also_intervention or []}
    runs = []
    for ckpt, step in zip(args.checkpoint, _steps(args.steps, len(args.checkpoint))):
        model, processor = load_model(ckpt), load_processor(ckpt)
        recs = diagnose_samples(model, processor, samples, cfg.data, intervention, n=args.n,
                                max_new_tokens=args.max_new_tokens, greedy=args.n == 1 and not args.sample,
                                seed=args.seed, labeler=labeler, extractor=extractor, also=also)
        runs.append({"checkpoint": ckpt, "step": step, "records": recs, "summary": summarize_all(recs, list(also))})
    path = write_outputs(args.out, runs, f"{args.intervention} {json.dumps(intervention[1])}", list(also))
    result = {"report": str(path), "skipped_samples": len(skipped),
              "summaries": [{"checkpoint": r["checkpoint"], **r["summary"]} for r in runs]}
    print(json.dumps(result, indent=2))
    return result


def add_parser(subparsers) -> argparse.ArgumentParser:
    s = subparsers.add_parser("diagnose", help="EFS and claim persistence: re-score fixed responses under an intervened image")
    s.add_argument("--checkpoint", action="append", required=True, help="model directory (repeatable)")
    s.add_argument("--steps", help="training step of each checkpoint, comma-separated (default 0, 1, ...)")
    s.add_argument("--data", help="annotation file (default: data.test of --config)")
    s.add_argument("--media-root")
    s.add_argument("--config", action="append", help="YAML config for the data section (repeatable)")
    s.add_argument("--out", required=True)
    s.add_argument("--intervention", default="patch_mask", help="registered view transform or module:function")
    s.add_argument("--intervention-param", action="append", default=[], metavar="KEY=VALUE",
                   help="transform parameter (default patch_mask: patch=14 p=0.5 value=0)")
    s.add_argument("--also-intervention", action="append", default=[], metavar="TRANSFORM",
                   help="re-score the same responses under this transform too (its defaults, e.g. full_mask); "
                        "its numbers are reported as <key>_<TRANSFORM> (repeatable)")
    s.add_argument("--labeler", help="module:function(sentence, sample_meta) -> True/False/None (supported?)")
    s.add_argument("--claim-extractor", help="module:function(sentence) -> bool, in addition to the lexicon")
    s.add_argument("--n", type=int, default=1, help="responses per sample (n > 1 samples at temperature 1)")
    s.add_argument("--sample", action="store_true", help="sample even with n = 1 (default greedy)")
    s.add_argument("--max-new-tokens", type=int, default=64)
    s.add_argument("--limit", type=int, default=0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("overrides", nargs="*", help="dotted config overrides (data.max_pixels=3136 ...)")
    s.set_defaults(fn=run_diagnose)
    return s
