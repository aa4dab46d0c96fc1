"""``mmrl tools preview``: the picture of one tool episode (``mmrl.tools.preview.episode_sheet``: the prompt's
overview, then each call with its arguments and the frames it returned).

- ``--run RUN_DIR --sample ID [--step N]``: an episode the run saved (``trajectories.jsonl``; the latest step
  that holds the sample unless ``--step``; ``--episode k`` picks among that step's episodes of the sample). Its
  model turns are replayed through the run's tool suite (``mmrl.tools.turn_sft.replay``), so the frames are
  those the tools returned during training.
- ``--model CKPT --suite tools/video_seek.yaml --data test.json --sample ID``: a greedy rollout of the
  checkpoint on that sample.

Prints the episode's turns as JSON (with its answer and seek IoU) and writes the PNG.
"""
from __future__ import annotations

import json
from mmrl.errors import ConfigError, DataError


def _sample(data: str, media_root, sample_id: str):
    from mmrl.data.annotations import load_samples

    samples, _ = load_samples(data, media_root, on_error="skip")
    found = [s for s in samples if s.id == sample_id]
    if not found:
        raise DataError(f"--sample {sample_id!r} is not in {data}")
    return found[0]


def _request(processor, sample, data_cfg):
    from mmrl.rollout.step_inputs import build_step_inputs

    si = build_step_inputs([sample], processor, data_cfg, lambda role, n_views: 1, None, seed=0)
    if si.skipped:
        raise DataError(f"sample {sample.id}: {si.skipped[0][1]}")
    return si, si.requests[0]


def _saved_episode(run: str, sample_id: str, step, episode: int) -> dict:
    from mmrl.tools.trajectory_log import records

    recs = [r for r in records(run) if r["id"] == sample_id and (step is None or r["step"] == step)]
    if not recs:
        raise DataError(f"--run {run}: no saved episode of sample {sample_id!r}" + (f" at step {step}" if step else ""))
    last = max(r["step"] for r in recs)
    recs = [r for r in recs if r["step"] == last]
    if not 0 <= episode < len(recs):
        raise ConfigError(f"--episode {episode}: step {last} holds {len(recs)} episodes of {sample_id!r}")
    return recs[episode]


def preview_main(args) -> dict:
    from pathlib import Path

    from mmrl.config import load_config
    from mmrl.models.loading import load_processor
    from mmrl.tools.evaluate import episode_row
    from mmrl.tools.preview import episode_sheet
    from mmrl.tools.suite import load_suite

    if bool(args.run) == bool(args.model):
        raise ConfigError("mmrl tools preview: give --run RUN_DIR (a saved episode) or --model CKPT (a rollout)")
    if args.run:
        cfg = load_config([str(Path(args.run) / "config.yaml")]) if (Path(args.run) / "config.yaml").exists() else None
        if cfg is None or not cfg.rollout.tools:
            raise ConfigError(f"--run {args.run}: not a multi-turn tool run (no config.yaml with rollout.tools)")
        data_cfg, suite_path, model_path = cfg.data, args.suite or cfg.rollout.tools, cfg.model.path
        data = args.data or cfg.data.train
    else:
        if not (args.suite and args.data):
            raise ConfigError("mmrl tools preview --model: --suite and --data are needed too")
        data_cfg = load_config([], [f"data.nframes={args.nframes}", f"data.max_pixels={args.max_pixels}"]).data
        suite_path, model_path, data = args.suite, args.model, args.data
    suite = load_suite(suite_path)
    sample = _sample(data, data_cfg.media_root, args.sample)
    processor = load_processor(model_path)
    si, req = _request(processor, sample, data_cfg)
    if args.run:
        from mmrl.tools.turn_sft import replay

        rec = _saved_episode(args.run, args.sample, args.step, args.episode)
        (traj,) = replay(processor, suite, [req], [[t["model_text"] for t in rec["turns"]]])
        traj.expected = req.expected
    else:
        from mmrl.models.loading import load_model
        from mmrl.rollout.agent_loop_tools import tool_loop
        from mmrl.rollout.base import SamplingParams, build_engine

        model = load_model(model_path).eval()
        engine = build_engine("hf", model=model, processor=processor)
        (traj,) = tool_loop(processor, suite).run(engine, [req], SamplingParams(max_new_tokens=args.max_new_tokens,
                                                                               greedy=True))
    episode_sheet(traj, sample, si.media[sample.id], args.out, cell=args.cell)
    row = episode_row(traj, sample, si.candidates[(sample.id, traj.view)])
    info = {"png": str(args.out), **{k: row[k] for k in ("id", "pred", "expected", "correct", "seek_iou", "calls")},
            "turns": [{k: t[k] for k in ("turn", "model_text", "tool", "arguments", "valid", "reason") if k in t}
                      for t in traj.turns if t.get("turn", -1) >= 0]}
    print(json.dumps(info, indent=2, default=str))
    return info


def add_parser(sub, common) -> None:
    t = sub.add_parser("tools", help="tool episodes").add_subparsers(dest="tools_cmd", required=True, metavar="COMMAND")
    s = t.add_parser("preview", help="picture of one tool episode: the overview, each call and the frames it returned",
                     parents=[common])
    s.add_argument("--run", help="a multi-turn run directory: draw an episode it saved (trajectories.jsonl)")
    s.add_argument("--model", help="or a checkpoint: roll it out greedily on the sample")
    s.add_argument("--sample", required=True, help="sample id")
    s.add_argument("--out", required=True, help="output PNG")
    s.add_argument("--suite", help="tool suite YAML (default with --run: the run's rollout.tools)")
    s.add_argument("--data", help="annotation file (default with --run: the run's data.train)")
    s.add_argument("--step", type=int, help="with --run: the step (default: the latest holding the sample)")
    s.add_argument("--episode", type=int, default=0, help="with --run: which of that step's episodes of the sample")
    s.add_argument("--nframes", type=int, default=4, help="with --model: overview frames in the prompt")
    s.add_argument("--max-pixels", type=int, default=3136, help="with --model: pixel budget of a prompt frame")
    s.add_argument("--max-new-tokens", type=int, default=64, help="with --model: tokens per model turn")
    s.add_argument("--cell", type=int, default=96, help="thumbnail side in pixels")
    s.set_defaults(fn=preview_main)
