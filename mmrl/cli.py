"""mmrl command line: make-tiny-model, base build, data synth, sft, train, eval, views preview, demo.

Run configs are YAML plus dotted overrides: mmrl train --config configs/demo.yaml rollout.n=8.
User-facing errors (bad config key, bad sample, missing file) print one line and exit with status 2;
--debug shows the full traceback instead. SIGINT/SIGTERM during training save a checkpoint at the next step
and print the command that resumes it.
"""
from __future__ import annotations

import argparse
import sys
import traceback
from typing import Optional

from mmrl import __version__
from mmrl.cli_run import _cfg, add_run_arguments, cmd_sft, cmd_train
from mmrl.cli_synth import add_synth_arguments
from mmrl.errors import ConfigError, MMRLError


def cmd_make_tiny(args) -> None:
    from mmrl.models.tiny import TinySpec, make_tiny_model

    print(make_tiny_model(args.out, TinySpec(family=args.family)))


def cmd_eval(args) -> None:
    from mmrl.eval.cli_bench import eval_main
    from mmrl.validate import check_model_path

    # a folder that is not a checkpoint: one line before anything loads (--show-protocol, --score-only load none)
    if args.model and args.score_only is None and not args.show_protocol:
        check_model_path(args.model, "--model")
    eval_main(args)


def cmd_views_preview(args) -> None:
    from mmrl.views.preview_cli import preview_main

    preview_main(args)


def cmd_rectify(args) -> None:
    from mmrl.tools.rectify_pipeline import rectify_main

    args.no_data_check = False
    rectify_main(args, lambda: _cfg(args, "train"))


def cmd_base(args) -> None:
    from mmrl.models.base_recipe import base_path, is_built, load_recipe, recipe_hash

    recipe = load_recipe(args.recipe, args.overrides)
    if args.base_cmd == "hash":
        digest = recipe_hash(recipe)
        built = "built" if is_built(base_path(digest)) else "not built"
        print(f"{digest}  {base_path(digest)}  ({built}; model.path: base:{digest})")
        return
    from mmrl.train.base_build import build_base, build_progress

    if args.base_cmd == "progress":
        build_progress(recipe, per_type=args.per_type)
        return
    build_base(recipe, force=args.force, quiet=args.quiet)


def cmd_demo(args) -> None:
    from mmrl.demo import run_demo

    run_demo(out_dir=args.out, seed=args.seed, quick=args.quick, overrides=args.overrides)


def cmd_list(args) -> None:
    from mmrl.reference import page

    print(page(args.kind), end="")


def cmd_docs(args) -> None:
    from mmrl.reference import main as docs_main

    if docs_main(["--check"] if args.check else []):
        raise ConfigError("docs/reference is stale: run `mmrl docs` and commit docs/reference/")


def cmd_report(args) -> None:
    from mmrl.train.report import report_main

    report_main(args.runs, out=args.out, title=args.title)


class _Help(argparse.RawDescriptionHelpFormatter):
    """Every option's default after its help (unless the help already states it); descriptions kept as written."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default is None or action.default is False or not action.option_strings \
                or action.default == argparse.SUPPRESS:
            return text
        return f"{text} (default: %(default)s)"


def _sub(parent, name: str, help: str, common):
    return parent.add_parser(name, help=help, description=help, formatter_class=_Help, parents=[common])


# Subcommands whose parsers import torch and the models (their modules' packages register built-ins on import):
# built only when chosen, so `mmrl --help` and the light commands start in well under a second. Otherwise each is
# listed by its help line alone (tests/core/test_cli_lazy.py checks these lines equal the full parsers' own).
LAZY_HELP = {
    "eval": "evaluate on a benchmark (eval/<name>.yaml)",
    "tools": "tool episodes",
    "rectify": "rectified bootstrapping: rewrite a tool run's wrong or evidence-blind episodes into an SFT set "
               "(--run), or run RL -> rectify -> SFT -> RL from one config (--config)",
    "diagnose": "EFS and claim persistence: re-score fixed responses under an intervened image",
    "vhop": "VHOP-Router training stages (sft, imitate, rl)",
}


def _builds(name: str, only, sub) -> bool:
    """Whether to build subcommand ``name`` in full (``only`` is None or names it); else list it by its help line."""
    if only is None or only == name:
        return True
    sub.add_parser(name, help=LAZY_HELP[name], add_help=False)
    return False


def chosen_command(argv) -> Optional[str]:
    """The subcommand an argument list names (its first word that is not an option), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The whole parser (``only=None``), or one whose heavy subcommands other than ``only`` are help lines only."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="on an error, show the full traceback (default: one line)")
    p = argparse.ArgumentParser(prog="mmrl", description=__doc__, formatter_class=_Help)
    p.add_argument("--version", action="version", version=f"mmrl {__version__}")
    p.add_argument("--debug", action="store_true", help="on an error, show the full traceback instead of one line")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = _sub(sub, "make-tiny-model", "write an embedded tiny checkpoint (Qwen2.5-VL unless --family)", common)
    s.add_argument("out", help="output folder")
    s.add_argument("--family", default="qwen2_5_vl", choices=["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"],
                   help="model family (docs/models.md)")
    s.set_defaults(fn=cmd_make_tiny)

    d = sub.add_parser("data", help="datasets").add_subparsers(dest="data_cmd", required=True, metavar="COMMAND")
    s = _sub(d, "synth", "generate a synthetic world (real MP4s / PNGs + annotations)", common)
    add_synth_arguments(s)

    for name, fn, helptext in (("sft", cmd_sft, "supervised warm-up"), ("train", cmd_train, "RL training")):
        add_run_arguments(_sub(sub, name, helptext, common), fn)

    if _builds("eval", only, sub):
        e = sub.add_parser("eval", help=LAZY_HELP["eval"], formatter_class=_Help)
        from mmrl.eval.cli_bench import add_eval_arguments

        add_eval_arguments(e)
        e.set_defaults(fn=cmd_eval)

    v = sub.add_parser("views", help="counterfactual view sets").add_subparsers(dest="views_cmd", required=True,
                                                                                metavar="COMMAND")
    s = _sub(v, "preview", "contact sheet of every view of one sample", common)
    s.add_argument("--viewset", required=True, help="view set YAML")
    s.add_argument("--data", required=True, help="annotation file")
    s.add_argument("--sample", required=True, help="sample id")
    s.add_argument("--out", required=True, help="output PNG")
    s.add_argument("--nframes", type=int, help="frames to show (default: every frame of the clip)")
    s.add_argument("--seed", type=int, default=0, help="seed of the random views")
    s.set_defaults(fn=cmd_views_preview)

    if _builds("tools", only, sub):
        from mmrl.tools.preview_cli import add_parser as add_tools

        add_tools(sub, common)
    if _builds("rectify", only, sub):
        from mmrl.tools.rectify_pipeline import add_arguments as add_rectify

        s = _sub(sub, "rectify", LAZY_HELP["rectify"], common)
        add_rectify(s)
        s.set_defaults(fn=cmd_rectify)
    if _builds("diagnose", only, sub):
        from mmrl.diagnose.cli import add_parser as add_diagnose

        add_diagnose(sub)
    if _builds("vhop", only, sub):
        from mmrl.retrieval.router_cli import add_parser as add_vhop

        add_vhop(sub, common)

    from mmrl.reference import PAGES

    s = _sub(sub, "list", "print the registered names of one kind with their parameters (docs/reference/<kind>.md)",
             common)
    s.add_argument("kind", choices=sorted(PAGES), help="what to list")
    s.set_defaults(fn=cmd_list)
    s = _sub(sub, "docs", "write docs/reference/*.md from the registries (--check: fail when they are stale)", common)
    s.add_argument("--check", action="store_true", help="compare instead of writing; exit 2 when a page differs")
    s.set_defaults(fn=cmd_docs)
    s = _sub(sub, "report", "draw a run's report (report.md and plots), or overlay several runs in one", common)
    s.add_argument("runs", nargs="+", help="run directories (each with metrics.jsonl)")
    s.add_argument("--out", help="output folder (default: the run itself; with several runs, required)")
    s.add_argument("--title", help="report title")
    s.set_defaults(fn=cmd_report)

    b = sub.add_parser("base", help="the tiny base that can see (docs/base_model.md)").add_subparsers(
        dest="base_cmd", required=True, metavar="COMMAND")
    for name, helptext in (("build", "pre-train the tiny base on the perception corpus (cached by recipe hash)"),
                           ("hash", "print a recipe's hash, cache folder and whether it is built"),
                           ("progress", "evaluate an unfinished build's latest checkpoint on a held-out subset")):
        s = _sub(b, name, helptext, common)
        s.add_argument("--recipe", help="recipe YAML (fields of mmrl.models.base_recipe.BaseRecipe; default recipe "
                                        "when omitted)")
        s.add_argument("overrides", nargs="*", help="recipe overrides key=value (e.g. steps=10, mix.null=2)")
        if name == "build":
            s.add_argument("--force", action="store_true", help="rebuild even when the cache holds this recipe")
            s.add_argument("--quiet", action="store_true", help="no progress bar")
        if name == "progress":
            s.add_argument("--per-type", type=int, default=10, help="held-out items per attribute")
        s.set_defaults(fn=cmd_base)

    s = _sub(sub, "demo", "tiny model -> synthetic video world -> SFT -> GRPO -> eval", common)
    s.add_argument("--out", default="runs/demo", help="output folder (replaced on every run)")
    s.add_argument("--seed", type=int, default=0, help="world and training seed")
    s.add_argument("--quick", action="store_true", help="a few steps only (smoke test)")
    s.add_argument("overrides", nargs="*", help="dotted overrides applied to configs/demo.yaml")
    s.set_defaults(fn=cmd_demo)
    return p


def main(argv=None) -> int:
    from mmrl.train.interrupt import Interrupted, set_command

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # valid anywhere on the line, also between dotted overrides
    argv = [a for a in argv if a != "--debug"]
    parser = build_parser(chosen_command(argv) or "")
    args, rest = parser.parse_known_args(argv)
    # argparse takes the dotted overrides in one run: those after a flag (`a=1 --resume b=2`) come back here
    extra = [a for a in rest if "=" in a and not a.startswith("-")]
    if len(extra) != len(rest) or (extra and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(a for a in rest if a not in extra or not hasattr(args, 'overrides'))}")
    if extra:
        args.overrides = list(args.overrides or []) + extra
    set_command(argv)
    try:
        args.fn(args)
    except Interrupted as e:
        print(f"mmrl: {e}", file=sys.stderr)
        return e.exit_code
    except MMRLError as e:
        if debug:
            traceback.print_exc()
        print(f"mmrl: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print("mmrl: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug, not bad input: still one line unless --debug
        if debug:
            raise
        where = traceback.extract_tb(e.__traceback__)[-1]
        print(f"mmrl: internal error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
              f"(at {where.filename}:{where.lineno}; run with --debug for the full traceback)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
