"""``mmrl eval``: one subcommand per benchmark with only its own options (``synthetic``, ``mvbench``, ``ovobench``)."""
from __future__ import annotations

from mmrl.errors import ConfigError


def eval_parsers(ev, common, sub, fn) -> None:
    """``mmrl eval <benchmark>``: one subcommand per benchmark, each with only its own options."""
    syn = sub(ev, "synthetic", "held-out accuracy on an MVBench-format annotation file (e.g. data synth's test.json)",
               common)
    syn.add_argument("--model", help="checkpoint folder (e.g. <out_dir>/final) or 'tiny'")
    syn.add_argument("--data", help="annotation file")
    syn.add_argument("--config", help="a training run's config.yaml: its prompt, frames, pixels and max_new_tokens")
    syn.add_argument("--viewset", help="also evaluate on the views of this view set (adds the abstention option)")
    syn.add_argument("--nframes", type=int, help="frames per clip (default: --config's, else 4)")
    syn.add_argument("--max-pixels", type=int, help="pixel budget per frame (default: --config's, else 112*112)")
    syn.add_argument("--max-new-tokens", type=int, help="generation budget (default: --config's, else 8)")
    syn.add_argument("--batch", type=int, default=32, help="prompts per generation batch")
    syn.add_argument("--no-progress", action="store_true", help="no progress bar")
    syn.add_argument("--on-error", choices=["raise", "skip"], default="raise",
                     help="an unusable sample stops the evaluation with its name (as data.on_error in training), or "
                          "with skip is listed in predictions.jsonl and scored wrong")
    for bench, helptext in (("mvbench", "MVBench (original protocol or lmms-eval's)"),
                            ("ovobench", "OVO-Bench (offline scoring of the official rules)")):
        b = sub(ev, bench, helptext, common)
        b.add_argument("--model", help="checkpoint folder or 'tiny'")
        if bench == "mvbench":
            b.add_argument("--data-root", help="MVBench root (json/ and video folders)")
            b.add_argument("--video-root", help="videos, when not under --data-root")
            b.add_argument("--protocol", default="original", help="original | lmms-eval")
            b.add_argument("--num-segments", type=int, help="frames per item (default 16, eval/mvbench*.yaml)")
            b.add_argument("--layout", choices=["official", "hf_video"], help="annotation layout (default: auto)")
            b.set_defaults(nframes=4)  # unused by MVBench (--num-segments), read by the shared settings
        else:
            b.add_argument("--anno", help="annotation file (ovo_bench_new.json)")
            b.add_argument("--video-root", help="source videos, or pre-chunked with --chunked")
            b.add_argument("--chunked", action="store_true", help="--video-root holds {id}.mp4 / {id}_{i}.mp4")
            b.add_argument("--score-only", nargs="*", help="score existing result files instead of running a model")
            b.add_argument("--nframes", type=int, default=4, help="frame cap per query (uniform over the prefix)")
        b.add_argument("--tasks", help="comma-separated task names (default: all)")
        b.add_argument("--max-pixels", type=int, help="pixel budget per frame (default 112*112)")
        b.add_argument("--max-new-tokens", type=int, help=f"generation budget (default: eval/{bench}.yaml)")
        b.add_argument("--batch", type=int, default=8, help="queries per generation batch")
        b.add_argument("--retry-errors", action="store_true", help="redo queries that failed")
        b.add_argument("--no-progress", action="store_true", help="no progress bar")
        b.add_argument("--device", help="cuda | cpu (default: cuda when available)")
        b.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="default: bfloat16 on GPU")
    for p in (syn, *(ev.choices[b] for b in ("mvbench", "ovobench"))):
        p.add_argument("--out", help="output folder (predictions and summary)")
        p.add_argument("--limit", type=int, default=0, help="first N questions only (0 = all)")
        p.set_defaults(fn=fn)


def run_eval(args) -> None:
    """``mmrl eval <benchmark>``."""
    if args.bench == "synthetic":
        from mmrl.eval.synthetic import evaluate_checkpoint
        from mmrl.validate import check_model_path

        if not args.model or not args.data:
            raise ConfigError("mmrl eval synthetic: --model (a checkpoint folder or 'tiny') and --data (an annotation "
                              "file) are required")
        check_model_path(args.model, "--model")
        data_cfg, max_new = _eval_data_cfg(args)
        viewset = None
        if args.viewset:
            from mmrl.views import ViewSet

            viewset = ViewSet.load(args.viewset, abstain_text=data_cfg.prompt.abstain_text)
            print(f"view set '{viewset.name}': each question also lists the abstention option "
                  f"'{viewset.abstain_text}' (right on views that remove the evidence)")
        res = evaluate_checkpoint(args.model, args.data, data_cfg, out_dir=args.out, viewset=viewset, limit=args.limit,
                                  max_new_tokens=max_new, batch_prompts=args.batch, progress=not args.no_progress)
        _print_eval(res, args.out)
    else:
        from mmrl.eval.cli_bench import run_benchmark_cli
        from mmrl.validate import check_model_path

        if args.model and not getattr(args, "score_only", None):
            check_model_path(args.model, "--model")
        run_benchmark_cli(args)


def _eval_data_cfg(args):
    """The data settings of ``eval synthetic``: a training run's config (``--config``) or the defaults, then flags."""
    from mmrl.config import DataConfig

    max_new = 8
    if args.config:
        from mmrl.config import load_config
        from mmrl.validate import check_yaml

        check_yaml([args.config])
        cfg = load_config([args.config])
        data_cfg, max_new = cfg.data, cfg.rollout.max_new_tokens
    else:
        data_cfg = DataConfig()
    data_cfg.on_error = args.on_error
    if args.nframes is not None:
        data_cfg.nframes = args.nframes
    if args.max_pixels is not None:
        data_cfg.max_pixels = args.max_pixels
    if args.max_new_tokens is not None:
        max_new = args.max_new_tokens
    return data_cfg, max_new


def _print_eval(res: dict, out_dir) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="held-out accuracy", caption=f"{res['n']} questions; {res['errors']} unusable (scored wrong)")
    t.add_column("question type")
    t.add_column("accuracy %", justify="right")
    for q, v in res["per_qtype"].items():
        t.add_row(q, f"{100 * v:.1f}")
    t.add_row("macro", f"{100 * res['macro_accuracy']:.1f}")
    t.add_row("overall", f"{100 * res['accuracy']:.1f}")
    for k, v in (res.get("view_metrics") or {}).items():
        t.add_row(k, f"{100 * v:.1f}" if isinstance(v, float) else str(v))
    Console().print(t)
    if out_dir:
        print(f"predictions: {out_dir}/predictions.jsonl; summary: {out_dir}/summary.json")
