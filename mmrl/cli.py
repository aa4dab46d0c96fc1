"""mmrl command line: make-tiny-model, base build, data synth, sft, train, eval, views preview, demo.

Run configs are YAML plus dotted overrides: mmrl train --config configs/demo.yaml rollout.n=8.
User-facing errors (bad config key, bad sample, missing file) print one line and exit with status 2;
--debug shows the full traceback instead. SIGINT/SIGTERM during training save a checkpoint at the next step
and print the command that resumes it.
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Optional

from mmrl import __version__
from mmrl.data.seek_script import SEEK_STYLES  # a tuple of names (no torch)
from mmrl.errors import ConfigError, MMRLError


def _cfg(args, kind: str, registries: bool = True):
    """The validated config of ``--config`` and the overrides; ``registries=False``: the torch-free checks only."""
    from mmrl.config import load_config
    from mmrl.validate import check_yaml, validate

    check_yaml(args.config or [])
    cfg = load_config(args.config or [], args.overrides, registries=registries)
    validate(cfg, kind, data_paths=not (args.no_data_check and getattr(args, "dry_run", False)), registries=registries)
    return cfg


def cmd_make_tiny(args) -> None:
    from mmrl.models.tiny import TinySpec, make_tiny_model

    print(make_tiny_model(args.out, TinySpec(family=args.family)))


_SYNTH_FLAGS = {"size": "--size", "n_frames": "--frames", "fps": "--fps", "prior_strength": "--prior-strength",
                "duration": "--duration", "n_val": "--n-val"}


def _synth_image(args):
    from mmrl.data.synth_image import make_image_world

    return make_image_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size)


def _synth_claims(args):
    from mmrl.data.synth_claims import make_claims_world

    return make_claims_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size,
                             unsupported_source=args.unsupported_source or "random")


def _synth_mood(args):
    from mmrl.data.synth_mood import make_mood_world

    return make_mood_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size)


def _synth_seek(args):
    from mmrl.data.synth_seek import make_seek_world

    return make_seek_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size, fps=args.fps,
                           teacher_seek=args.teacher_seek or "whole", time_in_question=args.time_in_question,
                           fixed_options=args.fixed_options, n_val=args.n_val or 0)


def _synth_stream(args):
    from mmrl.stream.dataset import make_stream_dataset

    return make_stream_dataset(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size,
                               duration=args.duration, fps=args.fps)


def _synth_vhop(args):
    from mmrl.data.synth_vhop import make_vhop_world

    return make_vhop_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size)


# flags that only some kinds read: (attribute, flag, kinds); any other kind refuses them
_KIND_FLAGS = (("prior", "--prior", ("video",)), ("fixed_options", "--fixed-options", ("video", "seek")),
               ("unsupported_source", "--unsupported-source", ("claims",)),
               ("teacher_seek", "--teacher-seek", ("seek",)), ("time_in_question", "--time-in-question", ("seek",)),
               ("n_val", "--n-val", ("seek",)), ("duration", "--duration", ("stream",)))


def _check_kind_flags(args) -> None:
    for attr, flag, kinds in _KIND_FLAGS:
        value = getattr(args, attr)
        if value is not None and value is not False and args.kind not in kinds:  # 0 is a value given
            raise ConfigError(f"data synth: {flag} applies to --kind {' or '.join(kinds)} only, not {args.kind}"
                              + (" (claims: options always fixed)" if attr == "fixed_options" else ""))


# the image-like worlds (one builder each); video is built above with its frame checks
_SYNTH_KINDS = {"image": _synth_image, "claims": _synth_claims, "mood": _synth_mood, "seek": _synth_seek,
                "stream": _synth_stream, "vhop": _synth_vhop}


# default (n_train, n_test) per kind where 512/128 does not fit the world: a VHOP split holds 32 scenes x 40 objects
# = 1280 images, about 4.5 per query at the default distractors (512 queries run out of slots; 200 fit)
_COUNTS = {None: (512, 128), "vhop": (200, 50)}


def cmd_synth(args) -> None:
    n_train, n_test = _COUNTS.get(args.kind, _COUNTS[None])
    args.n_train = n_train if args.n_train is None else args.n_train
    args.n_test = n_test if args.n_test is None else args.n_test
    if args.n_train < 1 or args.n_test < 0:
        raise ConfigError(f"data synth: --n-train must be >= 1 and --n-test >= 0, got {args.n_train} and {args.n_test}")
    _check_kind_flags(args)
    args.duration = 16 if args.duration is None else args.duration
    try:
        if args.kind == "video":
            from mmrl.data.synth_video import check_world_args, make_video_world

            check_world_args(args.size, args.frames, args.fps)
            info = make_video_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size,
                                    n_frames=args.frames, fps=args.fps, fixed_options=args.fixed_options,
                                    prior=args.prior, prior_strength=args.prior_strength)
        else:
            if args.size < 24 or args.size % 2:
                raise ValueError(f"size must be an even number >= 24, got {args.size}")
            info = _SYNTH_KINDS[args.kind](args)
    except ValueError as e:
        msg = str(e)
        for name, flag in _SYNTH_FLAGS.items():
            if msg.startswith(name + " "):
                msg = flag + msg[len(name):]
        raise ConfigError(f"data synth: {msg}") from None
    print(json.dumps(info, indent=2, default=str))


def _run_mode(args) -> tuple:
    resume = "auto" if args.auto_resume else bool(args.resume)
    if args.resume and args.auto_resume:
        raise ConfigError("--resume and --auto-resume exclude each other")
    return resume, args.overwrite


def _prepare_run(args, kind: str):
    """Config, resume mode, run-directory rules and pre-flight of ``mmrl sft`` / ``mmrl train``:
    ``(cfg, resume, overwrite, (samples, left out))``; ``None`` after a dry run's plan or with ``--preflight-only``.

    A real run checks what needs no torch first (the config's keys, types, ranges and paths, the run directory, the
    machine's packages and the data pre-flight), then imports the registries for the rest of the config: a bad input
    costs neither a torch import nor a weight load (tests/train/test_preflight_light.py)."""
    cfg = _cfg(args, kind, registries=args.dry_run)
    resume, overwrite = _run_mode(args)
    run_note = _run_dir_note(cfg, kind, resume, overwrite, args.dry_run)
    if args.dry_run:
        _plan(cfg, kind, run_note)
        return None
    if args.no_data_check:  # a real run: fields and files are still checked, the media probe is off
        cfg.data.preflight = "none"
    from mmrl.train.preflight import preflight, preflight_log

    checked = preflight(cfg, kind, log=None if args.quiet else preflight_log())
    from mmrl.config import complete_config
    from mmrl.validate import validate_registries

    complete_config(cfg)
    validate_registries(cfg, kind)
    if args.preflight_only:
        return None
    return cfg, resume, overwrite, checked


def cmd_sft(args) -> None:
    prepared = _prepare_run(args, "sft")
    if prepared is None:
        return
    cfg, resume, overwrite, checked = prepared
    from mmrl.train.sft import run_sft

    run_sft(cfg, quiet=args.quiet, resume=resume, overwrite=overwrite, checked=checked)
    _summary(cfg.train.out_dir)


def _run_dir_note(cfg, kind: str, resume, overwrite: bool, dry_run: bool) -> str:
    """Apply the run-directory rules before anything loads: a real run stops on a violation; a dry run shows what
    a real run would do (start, resume from step N, or stop)."""
    from mmrl.train.run_dir import open_run

    try:
        rd = open_run(cfg.train.out_dir, kind, resume, overwrite, check_only=True)
    except ConfigError as e:
        if not dry_run:
            raise
        return f"# a real run would stop here: {e}"
    if rd.checkpoint is not None:
        return f"# resumes from step {rd.resume_step} ({rd.checkpoint})"
    return f"# starts at step 0 in {cfg.train.out_dir}" + (" (replacing the run there)" if overwrite else "")


def _plan(cfg, what: str, run_note: str = "") -> None:
    from mmrl.config import to_yaml

    print(f"# plan: mmrl {what} (dry run: config built and validated, no weights loaded)")
    print(to_yaml(cfg))
    if what == "train":
        from mmrl.train.plan import describe_plan

        for line in describe_plan(cfg):
            print(f"# {line}")
    else:
        print(f"# {cfg.sft.steps} steps x {cfg.sft.batch_size} samples; lr {cfg.sft.lr}")
    if run_note:
        print(run_note)


def _summary(out_dir: str) -> None:
    """Where the run left its results (the end-of-run summary)."""
    from pathlib import Path

    from mmrl.dist import is_main
    from mmrl.train.run_dir import checkpoints

    if not is_main():  # one summary for N ranks
        return
    out = Path(out_dir)
    lines = [f"mmrl: run finished in {out}"]
    if (out / "final").exists():
        lines.append(f"  final model   {out / 'final'}   (use as model.path, or mmrl eval synthetic --model)")
    ck = checkpoints(out)
    if ck:
        lines.append(f"  checkpoints   {', '.join(p.name for p in ck)} in {out / 'checkpoints'}")
    for name, what in (("metrics.jsonl", "metrics     "), ("report.md", "report      "), ("tb", "tensorboard "),
                       ("skipped.jsonl", "skipped     ")):
        if (out / name).exists() and (name != "skipped.jsonl" or (out / name).stat().st_size):
            lines.append(f"  {what}  {out / name}")
    print("\n".join(lines))


def cmd_train(args) -> None:
    prepared = _prepare_run(args, "train")
    if prepared is None:
        return
    cfg, resume, overwrite, checked = prepared
    from mmrl.train.rl_trainer import RLTrainer

    RLTrainer(cfg, quiet=args.quiet, checked=checked).run(resume=resume, overwrite=overwrite)
    _summary(cfg.train.out_dir)


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
    s.add_argument("--out", required=True, help="output folder (videos/ or images/, train.json, test.json)")
    s.add_argument("--kind", choices=["video", "image", "claims", "mood", "seek", "stream", "vhop"], default="video",
                   help="video clips; single images; images with checkable visual claims (PACG/VPPO); images with "
                        "an emotional cue region (DSPO); long clips with a brief event to seek (tools); video "
                        "streams with OVO-Bench annotations and their blocks (streaming agents); a linked image "
                        "corpus with multi-hop queries (VHOP retrieval; --n-train/--n-test count queries)")
    s.add_argument("--n-train", type=int, default=None,
                   help=f"training questions (default {_COUNTS[None][0]}; " + ", ".join(
                       f"{k} {v[0]}" for k, v in _COUNTS.items() if k) + ": what the world holds)")
    s.add_argument("--n-test", type=int, default=None,
                   help=f"held-out questions (default {_COUNTS[None][1]}; " + ", ".join(
                       f"{k} {v[1]}" for k, v in _COUNTS.items() if k) + ")")
    s.add_argument("--seed", type=int, default=0, help="world seed")
    s.add_argument("--size", type=int, default=56, help="frame side in pixels (even, >= 24)")
    s.add_argument("--frames", type=int, default=8, help="frames per clip (>= 4; video)")
    s.add_argument("--fps", type=float, default=4.0, help="frames per second of the clips (video)")
    s.add_argument("--duration", type=int, default=None, help="seconds per stream (stream; default 16)")
    s.add_argument("--fixed-options", action="store_true",
                   help="list every question's whole answer pool in a fixed order (the demo's world; video, seek)")
    s.add_argument("--prior", choices=["frequent", "phrasing", "tint"], default=None,
                   help="video: a prior to unlearn in the train split (test.json debiased, test_biased.json not)")
    s.add_argument("--prior-strength", type=float, default=0.8, help="P(a train answer follows the prior)")
    s.add_argument("--unsupported-source", choices=["random", "prior"], default=None,
                   help="claims: an unsupported claim is a random wrong value (default) or repeats a prior the "
                        "question states")
    s.add_argument("--teacher-seek", choices=SEEK_STYLES, default=None,
                   help="seek: the teacher seeks a 2 s window of whole seconds (default) or the exact flash interval")
    s.add_argument("--time-in-question", action="store_true",
                   help="seek: the question names the 2 s window that holds the flash")
    s.add_argument("--n-val", type=int, default=None,
                   help="seek: val.json, the train stream's next N clips (a validation split, e.g. for rectify.val)")
    s.set_defaults(fn=cmd_synth)

    for name, fn, helptext in (("sft", cmd_sft, "supervised warm-up"), ("train", cmd_train, "RL training")):
        s = _sub(sub, name, helptext, common)
        s.add_argument("--config", action="append", help="YAML config (repeatable; later files override)")
        s.add_argument("--dry-run", action="store_true", help="validate the config and print the plan; load nothing")
        s.add_argument("--no-data-check", action="store_true",
                       help="skip the media decode probe of the data pre-flight (data.preflight=none; huge sets); "
                            "with --dry-run, planning for another machine: do not require model.path and the data "
                            "files to exist here")
        s.add_argument("--preflight-only", action="store_true",
                       help="run every check that needs no model (config keys and paths, run directory, packages and "
                            "the data pre-flight first, then the registries' checks) and exit; the scripts/ launchers "
                            "run it once before starting the ranks")
        s.add_argument("--quiet", action="store_true", help="no progress bar")
        s.add_argument("--resume", action="store_true",
                       help="continue from the latest checkpoint in train.out_dir (an error when there is none)")
        s.add_argument("--auto-resume", action="store_true",
                       help="continue from the latest checkpoint when there is one, else start at step 0")
        s.add_argument("--overwrite", action="store_true",
                       help="delete the previous run's artifacts in train.out_dir first (else a non-empty run "
                            "directory is refused)")
        s.add_argument("overrides", nargs="*", help="dotted overrides key=value (e.g. rollout.n=8)")
        s.set_defaults(fn=fn)

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
