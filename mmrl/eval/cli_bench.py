"""``mmrl eval <benchmark>``: the command-line glue over the registry and the generic runner.

``<benchmark>`` is any ``eval/<name>.yaml`` (or a path to one). The YAML is the protocol: a flag overrides a
YAML field only when given (``FLAG_KEYS`` names the field of each flag), as do ``key=value`` overrides, and a
field the benchmark would not read is refused when it loads. ``--show-protocol`` prints the resolved protocol
(one ``key: value`` per line) and exits; ``--score-only FILES`` scores existing result files (OVO-Bench).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional

import yaml

from mmrl.errors import ConfigError
from mmrl.eval.hooks import EvalInputs  # no torch: `mmrl eval --help` builds this module's parser without it

FLAG_KEYS = {"num_segments": "sampling.num_segments", "nframes": "sampling.max_frames", "fps": "sampling.fps",
             "min_pixels": "pixels.min_pixels", "max_pixels": "pixels.max_pixels",
             "max_new_tokens": "generation.max_new_tokens", "layout": "data.layout",
             "system_placement": "prompt.system_placement", "chunked": "chunking.chunked",
             "parser_mode": "parser_mode", "on_error": "data.on_error"}
PROTOCOLS = {"original": "mvbench", "ask-anything": "mvbench", "lmms-eval": "mvbench_lmms", "lmms": "mvbench_lmms",
             "lmms_eval": "mvbench_lmms"}


def add_eval_arguments(e: argparse.ArgumentParser) -> None:
    """The ``mmrl eval`` arguments (every protocol flag defaults to None: the YAML decides)."""
    e.add_argument("bench", help="a benchmark: eval/<name>.yaml (mvbench, mvbench_lmms, ovobench, synthetic, emotion) "
                                 "or a path to a YAML")
    e.add_argument("overrides", nargs="*", help="dotted YAML overrides key=value (e.g. sampling.num_segments=8)")
    e.add_argument("--show-protocol", action="store_true", help="print the resolved protocol and exit")
    e.add_argument("--model", help="checkpoint folder or 'tiny'")
    e.add_argument("--data", help="synthetic: annotation file")
    e.add_argument("--data-root", help="MVBench root (json/ + video/, or test.json); OVO-Bench data folder")
    e.add_argument("--anno", help="OVO-Bench annotation file (default: <data-root>/<data.annotations>)")
    e.add_argument("--video-root", help="videos (default: <data-root>/<data.video_dir>)")
    e.add_argument("--protocol", help="mvbench: original (eval/mvbench.yaml) | lmms-eval (eval/mvbench_lmms.yaml)")
    e.add_argument("--score-only", nargs="*", help="OVO-Bench: score existing result files")
    e.add_argument("--viewset", help="synthetic: a view set (per-view metrics)")
    e.add_argument("--out")
    e.add_argument("--limit", type=int, default=0, help="items per task (0 = all)")
    e.add_argument("--batch", type=int, default=8, help="prompts per generate call")
    e.add_argument("--nframes", type=int, help="sampling.max_frames")
    e.add_argument("--num-segments", type=int, help="sampling.num_segments (MVBench get_index)")
    e.add_argument("--fps", type=float, help="sampling.fps")
    e.add_argument("--min-pixels", type=int, help="pixels.min_pixels (per frame)")
    e.add_argument("--max-pixels", type=int, help="pixels.max_pixels (per frame)")
    e.add_argument("--max-new-tokens", type=int, help="generation.max_new_tokens")
    e.add_argument("--layout", choices=["auto", "official", "hf_video"], help="data.layout (MVBench)")
    e.add_argument("--system-placement", choices=["system_and_user", "system", "user", "none"],
                   help="prompt.system_placement")
    e.add_argument("--parser-mode", choices=["text", "list"], help="parser_mode (OVO-Bench)")
    e.add_argument("--chunked", action="store_true", default=None, help="chunking.chunked (OVO-Bench)")
    e.add_argument("--tasks", help="comma-separated task names (default: all)")
    e.add_argument("--on-error", choices=["raise", "skip"], help="data.on_error (synthetic)")
    e.add_argument("--retry-errors", action="store_true", help="redo queries that failed")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.add_argument("--streaming", action="store_true",
                   help="OVO-Bench: also run the model as a streaming agent (one pass per video) and report both "
                        "protocols side by side (docs/streaming.md)")
    e.add_argument("--stream-config", default="tools/streaming.yaml", help="with --streaming: the stream settings")
    e.add_argument("--device", help="cuda | cpu (default: cuda when available)")
    e.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="default: bfloat16 on GPU")


def overrides_from_args(args) -> Dict[str, Any]:
    """Dotted YAML key -> value for every protocol flag given, then the ``key=value`` overrides."""
    out = {key: getattr(args, dest) for dest, key in FLAG_KEYS.items() if getattr(args, dest, None) is not None}
    for item in getattr(args, "overrides", None) or []:
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override '{item}' is not key=value")
        out[key] = yaml.safe_load(val)
    return out


def benchmark_name(args) -> str:
    """``--protocol`` picks the MVBench YAML (``original`` -> mvbench, ``lmms-eval`` -> mvbench_lmms)."""
    if args.protocol is None:
        return args.bench
    if args.bench not in ("mvbench", "mvbench_lmms"):
        raise ConfigError(f"--protocol is for mvbench; '{args.bench}' has one protocol (its YAML)")
    try:
        return PROTOCOLS[args.protocol.lower()]
    except KeyError:
        raise ConfigError(f"unknown MVBench protocol '{args.protocol}' (original | lmms-eval)") from None


def load_for_eval(model_path: str, device: Optional[str] = None, dtype: Optional[str] = None):
    """Model, processor and an HF rollout engine; on a GPU by default when one is present (bfloat16)."""
    import torch

    from mmrl.models.loading import load_model, load_processor
    from mmrl.rollout.base import build_engine

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    model = load_model(model_path, dtype=dtype, device=device)
    processor = load_processor(model_path)
    return model, processor, build_engine("hf", model=model, processor=processor)


def _inputs(args, needs) -> EvalInputs:
    inputs = EvalInputs(data_root=args.data_root, video_root=args.video_root, anno=args.anno, data=args.data,
                        viewset=args.viewset)
    for name, val in vars(inputs).items():
        if val is not None and name not in needs:
            raise ConfigError(f"mmrl eval {args.bench}: --{name.replace('_', '-')} is not used by this benchmark "
                              f"(it reads: {', '.join('--' + n.replace('_', '-') for n in needs)})")
    if "data_root" in needs and "anno" not in needs and not args.data_root:
        raise ConfigError(f"mmrl eval {args.bench}: --data-root is required")
    if "data" in needs and not args.data:
        raise ConfigError(f"mmrl eval {args.bench}: --data is required (an annotation file)")
    for flag, val in (("--data-root", args.data_root), ("--data", args.data), ("--viewset", args.viewset)):
        if val and not os.path.exists(val):
            raise ConfigError(f"{flag} {val}: not found")
    return inputs


def eval_main(args) -> Dict[str, Any]:
    """Entry point of ``mmrl eval`` (arguments: ``add_eval_arguments``)."""
    from mmrl.eval.runner import EvalSettings, run_benchmark
    from mmrl.eval.report import markdown

    overrides = overrides_from_args(args)
    from mmrl.eval.protocol import describe, load_protocol, protocol_text  # imports torch (the frame rules)

    bdef, hooks = load_protocol(benchmark_name(args), overrides)
    if args.show_protocol:
        print(protocol_text(describe(bdef, hooks)), end="")
        return {}
    if args.score_only is not None:
        if hooks.score_only is None:
            raise ConfigError(f"--score-only: benchmark '{bdef.name}' has no result-file scorer")
        scores = hooks.score_only(args.score_only, bdef)
        print(hooks.table(scores), end="")
        if hooks.line:
            print(hooks.line(scores))
        if args.out:
            from mmrl.eval.report import build_summary, write_report

            summary = build_summary(bdef.name, bdef.protocol, scores.get("parsers", bdef.parser), scores,
                                    meta={"score_only": list(args.score_only)})
            print(json.dumps(write_report(args.out, summary, hooks.table(scores))))
        return scores
    if not args.model:
        raise ConfigError(f"mmrl eval {args.bench}: --model is required (a checkpoint folder or 'tiny')")
    inputs = _inputs(args, hooks.inputs)
    if args.retry_errors and hooks.queries is None:
        raise ConfigError(f"--retry-errors: benchmark '{bdef.name}' is not resumable (it reruns whole)")
    tasks: List[str] = [t for t in (args.tasks or "").split(",") if t]
    settings = EvalSettings(out_dir=args.out or f"runs/eval_{bdef.name}", batch=args.batch, limit=args.limit or 0,
                            tasks=tasks, retry_errors=args.retry_errors, progress=not args.no_progress,
                            model_name=args.model, overrides=overrides)
    if args.streaming and hooks.name != "ovobench":
        raise ConfigError(f"--streaming is for ovobench; '{bdef.name}' has no streaming protocol")
    _, processor, engine = load_for_eval(args.model, args.device, args.dtype)
    if args.streaming:
        from mmrl.eval.benchmarks.ovobench.stream import run_side_by_side

        both = run_side_by_side(bdef, hooks, inputs, settings, processor, engine, args.stream_config)
        print(both["table"], end="")
        print(f"\nreports: {settings.out_dir}/offline/summary.md, {settings.out_dir}/streaming/summary.json, "
              f"{settings.out_dir}/side_by_side.md")
        return both
    summary, table = run_benchmark(bdef, hooks, inputs, settings, processor, engine)
    print(markdown(summary, table), end="")
    print(f"\nreport: {settings.out_dir}/summary.md  summary: {settings.out_dir}/summary.json")
    if hooks.line:
        print(hooks.line(summary["scores"]))
    sys.stdout.flush()
    return summary
