"""``mmrl rectify``: rectified bootstrapping (AdSeek) from one config, or one rectification of a finished run.

- ``mmrl rectify --run RUN_DIR [--out FILE]``: read the run's ``trajectories.jsonl`` and ``config.yaml`` (its
  ``data.train`` and ``rollout.tools`` suite), rewrite the episodes that answered wrong or never saw the evidence
  (``mmrl.tools.rectify``), write the scripts (default ``RUN_DIR/rectified.jsonl``) and print the counts.
- ``mmrl rectify --config cfg.yaml [key=value ...]``: the pipeline RL -> rectify -> SFT -> RL in
  ``train.out_dir``: ``rl1/`` (the config as given: a multi-turn tool run), ``rectified.jsonl`` and
  ``rectify.json`` (counts), ``sft/`` (multi-turn SFT of ``rl1/final`` on the rectified scripts, ``sft.steps``,
  ``sft.batch_size``, ``sft.lr``) and ``rl2/`` (the same RL config from ``sft/final``). With ``rectify.val`` the
  SFT stage is a set of candidates ``sft/<tag>/`` chosen by validation accuracy (``mmrl.tools.rectify_select``,
  ``select.json``) and ``rl2/`` starts from the winner. A stage whose ``final/`` exists is not run again, so an
  interrupted pipeline continues where it stopped.
- ``rectify.control: true`` also runs the control (b') in ``control/``: the same SFT stage (the same candidates and
  validation choice) from ``rl1/final`` on ``rectify.teacher``'s scripts of the very samples rectify rewrote (same
  ids, same count, no rectification), then the same RL stage. Rectified minus control isolates what rectifying the
  model's own episodes adds over more SFT on correct episodes with a validated setting.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Dict, Optional

from mmrl.config import Config
from mmrl.errors import ConfigError, DataError
from mmrl.data.seek_script import SEEK_STYLES


def rectify_run(run_dir: str, out: Optional[str] = None, nframes: int = 4, cfg: Optional[Config] = None,
                seek: str = "exact") -> Dict:
    """Rectify the episodes of the multi-turn run in ``run_dir``; returns the counts (and writes the scripts)."""
    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples
    from mmrl.tools.rectify import rectify, write_scripts
    from mmrl.tools.suite import load_suite
    from mmrl.tools.trajectory_log import records

    run = Path(run_dir)
    if cfg is None:
        if not (run / "config.yaml").exists():
            raise ConfigError(f"--run {run_dir}: no config.yaml (not an mmrl train run directory)")
        cfg = load_config([str(run / "config.yaml")])
    if not cfg.rollout.tools:
        raise ConfigError(f"--run {run_dir}: the run has no tool suite (rollout.tools); nothing to rectify")
    suite = load_suite(cfg.rollout.tools).config
    samples, _ = load_samples(cfg.data.train, cfg.data.media_root, on_error="skip")
    scripts, counts = rectify(records(str(run)), {s.id: s for s in samples}, suite.budget.max_calls,
                              suite.max_turns, nframes=nframes, seek=seek)
    out = out or str(run / "rectified.jsonl")
    write_scripts(scripts, out)
    return {"scripts": out, **counts.as_dict()}


def teacher_scripts_of(rectified: str, teacher: str, out: Path) -> int:
    """Write to ``out`` the teacher script of every sample in ``rectified`` (in its order, each id once): the
    control's SFT set. A rewritten sample without a teacher script is a DataError naming it and the file."""
    from mmrl.tools.turn_sft import read_scripts

    ids = list(dict.fromkeys(json.loads(x)["id"] for x in Path(rectified).read_text().splitlines() if x.strip()))
    by_id = {r["id"]: r for r in read_scripts(teacher)}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise DataError(f"rectify.teacher {teacher}: no teacher script for {len(missing)} rewritten samples "
                        f"(e.g. {missing[0]!r}); the control needs one per sample")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps({"id": i, "turns": by_id[i]["turns"]}) + "\n" for i in ids))
    return len(ids)


def _sft_then_rl(cfg: Config, root: Path, start: Path, scripts: str, quiet: bool, say, label: str) -> Dict:
    """Stages 2-3 in ``root``: SFT of ``start`` on ``scripts`` (the candidates of ``rectify.*`` chosen on
    ``rectify.val`` when set, else ``sft.*``), then RL from the SFT model in ``root/rl2``."""
    from mmrl.train.rl_trainer import RLTrainer
    from mmrl.train.sft import run_sft

    sft, rl2, chosen = root / "sft", root / "rl2", None
    if cfg.rectify.val:  # every candidate setting fine-tuned and scored on the validation split
        from mmrl.tools.rectify_select import select

        say(f"mmrl rectify: stage 2/3{label}, SFT candidates on {scripts} in {sft}, chosen on {cfg.rectify.val}")
        chosen = select(cfg, root, str(start), scripts, _stage, quiet, say)
        sft = Path(chosen["path"]).parent
    elif not (sft / "final").exists():
        say(f"mmrl rectify: stage 2/3{label}, SFT on {scripts} in {sft}")
        run_sft(_stage(cfg, sft, model__path=str(start), sft__turns=scripts), quiet=quiet, resume="auto")
    if not (rl2 / "final").exists():
        say(f"mmrl rectify: stage 3/3{label}, RL in {rl2}")
        RLTrainer(_stage(cfg, rl2, model__path=str(sft / "final")), quiet=quiet).run(resume="auto")
    out = {"sft": str(sft), "rl2": str(rl2), "final": str(rl2 / "final")}
    if chosen is not None:
        out["selection"] = chosen
    return out


def _stage(cfg: Config, out_dir: Path, **changes) -> Config:
    c = copy.deepcopy(cfg)
    c.train.out_dir = str(out_dir)
    for key, value in changes.items():
        section, name = key.split("__")
        setattr(getattr(c, section), name, value)
    return c


def run_pipeline(cfg: Config, quiet: bool = False, nframes: int = 4, say=print, seek: str = "exact") -> Dict:
    """RL -> rectify -> SFT -> RL under ``cfg.train.out_dir``; returns the rectification counts and stage paths."""
    from mmrl.rollout.agent_loop import loop_class
    from mmrl.train.rl_trainer import RLTrainer

    if not cfg.rollout.tools or not loop_class(cfg.rollout.agent_loop).capabilities.tool_episodes:
        raise ConfigError("mmrl rectify: the pipeline needs a tool run (rollout.agent_loop=multi_turn and rollout.tools)")
    if cfg.sft.turns:
        raise ConfigError("config key 'sft.turns': mmrl rectify sets it to the rectified scripts; leave it unset")
    root = Path(cfg.train.out_dir)
    root.mkdir(parents=True, exist_ok=True)
    rl1 = root / "rl1"
    if not (rl1 / "final").exists():
        say(f"mmrl rectify: stage 1/3, RL in {rl1}")
        RLTrainer(_stage(cfg, rl1), quiet=quiet).run(resume="auto")
    scripts = root / "rectified.jsonl"
    selecting = bool(cfg.rectify.val)
    if not (root / "rectify.json").exists() or (not (root / "sft" / "final").exists() and not selecting):
        counts = rectify_run(str(rl1), str(scripts), nframes=nframes, cfg=cfg, seek=seek)
        (root / "rectify.json").write_text(json.dumps(counts, indent=2))
        say(f"mmrl rectify: {counts['rewritten']} of {counts['episodes']} episodes rewritten -> {scripts}")
        if not counts["rewritten"]:
            raise DataError(f"mmrl rectify: no episode of {rl1} needed rectifying; nothing to fine-tune on")
    counts = json.loads((root / "rectify.json").read_text())
    out = {**counts, "rl1": str(rl1), **_sft_then_rl(cfg, root, rl1 / "final", str(scripts), quiet, say, "")}
    if cfg.rectify.control:
        control = root / "control"
        teacher = control / "teacher_of_rectified.jsonl"
        n = teacher_scripts_of(str(scripts), cfg.rectify.teacher, teacher)
        out["control"] = {"samples": n, "scripts": str(teacher),
                          **_sft_then_rl(cfg, control, rl1 / "final", str(teacher), quiet, say, " (control)")}
    return out


def add_arguments(s) -> None:
    s.add_argument("--run", help="a finished multi-turn run directory: rectify its trajectories.jsonl")
    s.add_argument("--out", help="with --run: the scripts file (default RUN_DIR/rectified.jsonl)")
    s.add_argument("--config", action="append", help="YAML config of the pipeline's RL stages (repeatable)")
    s.add_argument("--nframes", type=int, default=4, help="frames of each added evidence seek (--seek exact)")
    s.add_argument("--seek", choices=SEEK_STYLES, default="exact",
                   help="how an added evidence seek names its interval: exact seconds, or a 2 s window of whole seconds")
    s.add_argument("--quiet", action="store_true", help="no progress bars")
    s.add_argument("overrides", nargs="*", help="with --config: dotted overrides key=value")


def rectify_main(args, load_cfg) -> None:
    """``mmrl rectify``; ``load_cfg()`` builds and validates the pipeline's config (the CLI's ``--config`` rules)."""
    if bool(args.run) == bool(args.config):
        raise ConfigError("mmrl rectify: give --run RUN_DIR (rectify a run) or --config cfg.yaml (the pipeline)")
    if args.nframes < 2 or args.nframes % 2:
        raise ConfigError(f"--nframes must be an even number >= 2 (video_seek returns frame pairs), got {args.nframes}")
    if args.run:
        if args.overrides:
            raise ConfigError("mmrl rectify --run takes no overrides (the run's config.yaml is used)")
        print(json.dumps(rectify_run(args.run, args.out, nframes=args.nframes, seek=args.seek), indent=2))
        return
    if args.out:
        raise ConfigError("--out applies to --run; the pipeline writes into train.out_dir")
    print(json.dumps(run_pipeline(load_cfg(), quiet=args.quiet, nframes=args.nframes, seek=args.seek), indent=2))
