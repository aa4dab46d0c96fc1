"""``mmrl`` command line: make-tiny-model, data synth, sft, train, eval, views preview, demo.

Run configs are YAML plus dotted overrides: ``mmrl train --config configs/grpo_demo.yaml rollout.n=8``.
User-facing errors (bad config key, bad sample, missing file) print one line and exit with status 2.
"""
from __future__ import annotations

import argparse
import json
import sys

from mmrl.errors import MMRLError


def _cfg(args):
    from mmrl.config import load_config

    return load_config(args.config or [], args.overrides)


def cmd_make_tiny(args) -> None:
    from mmrl.models.tiny import make_tiny_model

    print(make_tiny_model(args.out))


def cmd_synth(args) -> None:
    if args.kind == "video":
        from mmrl.data.synth_video import make_video_world

        info = make_video_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size,
                                n_frames=args.frames, fps=args.fps)
    else:
        from mmrl.data.synth_image import make_image_world

        info = make_image_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size)
    print(json.dumps(info, indent=2, default=str))


def cmd_sft(args) -> None:
    from mmrl.train.sft import run_sft

    cfg = _cfg(args)
    if args.dry_run:
        return _plan(cfg, "sft")
    run_sft(cfg, quiet=args.quiet)


def _plan(cfg, what: str) -> None:
    from mmrl.config import to_yaml

    print(f"# plan: mmrl {what} (dry run: config built and validated, no weights loaded)")
    print(to_yaml(cfg))
    if what == "train":
        from mmrl.train.plan import describe_plan

        for line in describe_plan(cfg):
            print(f"# {line}")


def cmd_train(args) -> None:
    cfg = _cfg(args)
    if args.dry_run:
        return _plan(cfg, "train")
    from mmrl.train.rl_trainer import RLTrainer

    RLTrainer(cfg, quiet=args.quiet).run(resume=args.resume)


def cmd_eval(args) -> None:
    from mmrl.eval.cli_bench import eval_main

    eval_main(args)


def cmd_views_preview(args) -> None:
    from mmrl.views.preview_cli import preview_main

    preview_main(args)


def cmd_demo(args) -> None:
    from mmrl.demo import run_demo

    run_demo(out_dir=args.out, seed=args.seed, quick=args.quick, overrides=args.overrides)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mmrl", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("make-tiny-model", help="write the embedded tiny Qwen2.5-VL checkpoint")
    s.add_argument("out")
    s.set_defaults(fn=cmd_make_tiny)

    d = sub.add_parser("data", help="datasets").add_subparsers(dest="data_cmd", required=True)
    s = d.add_parser("synth", help="generate a synthetic world (real MP4s / PNGs + annotations)")
    s.add_argument("--out", required=True)
    s.add_argument("--kind", choices=["video", "image"], default="video")
    s.add_argument("--n-train", type=int, default=512)
    s.add_argument("--n-test", type=int, default=128)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--size", type=int, default=56)
    s.add_argument("--frames", type=int, default=8)
    s.add_argument("--fps", type=float, default=4.0)
    s.set_defaults(fn=cmd_synth)

    for name, fn, helptext in (("sft", cmd_sft, "supervised warm-up"), ("train", cmd_train, "RL training")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("--config", action="append", help="YAML config (repeatable; later files override)")
        s.add_argument("--dry-run", action="store_true", help="build and print the config and plan; load nothing")
        s.add_argument("--quiet", action="store_true")
        if name == "train":
            s.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in train.out_dir")
        s.add_argument("overrides", nargs="*", help="dotted overrides key=value")
        s.set_defaults(fn=fn)

    e = sub.add_parser("eval", help="evaluate on a benchmark (eval/<name>.yaml)")
    from mmrl.eval.cli_bench import add_eval_arguments

    add_eval_arguments(e)
    e.set_defaults(fn=cmd_eval)

    v = sub.add_parser("views", help="counterfactual view sets").add_subparsers(dest="views_cmd", required=True)
    s = v.add_parser("preview", help="contact sheet of every view of one sample")
    s.add_argument("--viewset", required=True)
    s.add_argument("--data", required=True)
    s.add_argument("--sample", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--nframes", type=int, default=8)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(fn=cmd_views_preview)

    s = sub.add_parser("demo", help="tiny model -> synthetic video world -> SFT -> GRPO -> eval")
    s.add_argument("--out", default="runs/demo")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--quick", action="store_true", help="a few steps only (smoke test)")
    s.add_argument("overrides", nargs="*", help="dotted overrides applied to configs/demo.yaml")
    s.set_defaults(fn=cmd_demo)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.fn(args)
    except MMRLError as e:
        print(f"mmrl: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
