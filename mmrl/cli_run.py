"""``mmrl train`` / ``mmrl sft``: the config, resume mode, run-directory rules and pre-flight of a run, its dry-run
plan and its end-of-run summary.

A real run checks what needs no torch first (the config's keys, types, ranges and paths, the run directory, the
machine's packages and the data pre-flight), then imports the registries for the rest of the config: a bad input
costs neither a torch import nor a weight load (tests/train/test_preflight_light.py).
"""
from __future__ import annotations

import argparse

from mmrl.errors import ConfigError


def _cfg(args, kind: str, registries: bool = True):
    """The validated config of ``--config`` and the overrides; ``registries=False``: the torch-free checks only."""
    from mmrl.config import load_config
    from mmrl.validate import check_yaml, validate

    check_yaml(args.config or [])
    cfg = load_config(args.config or [], args.overrides, registries=registries)
    validate(cfg, kind, data_paths=not (args.no_data_check and getattr(args, "dry_run", False)), registries=registries)
    return cfg


def _run_mode(args) -> tuple:
    resume = "auto" if args.auto_resume else bool(args.resume)
    if args.resume and args.auto_resume:
        raise ConfigError("--resume and --auto-resume exclude each other")
    return resume, args.overwrite


def _prepare_run(args, kind: str):
    """Config, resume mode, run-directory rules and pre-flight of ``mmrl sft`` / ``mmrl train``:
    ``(cfg, resume, overwrite, (samples, left out))``; ``None`` after a dry run's plan or with ``--preflight-only``.
    A dry run runs the data pre-flight too (not with ``--no-data-check``: planning for another machine) and stops
    where the run would; it leaves out the machine's checks (packages, GPUs)."""
    cfg = _cfg(args, kind, registries=args.dry_run)
    resume, overwrite = _run_mode(args)
    run_note = _run_dir_note(cfg, kind, resume, overwrite, args.dry_run)
    if args.dry_run:
        data_note = []
        if not args.no_data_check:
            from mmrl.train.preflight import check_data

            check_data(cfg, kind, log=lambda line: data_note.append(f"# {line}"))
        _plan(cfg, kind, "\n".join([run_note] + data_note))
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


def add_run_arguments(s: argparse.ArgumentParser, fn) -> None:
    """The arguments of ``mmrl train`` / ``mmrl sft`` (``fn``: the command)."""
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
