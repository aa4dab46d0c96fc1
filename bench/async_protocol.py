"""Asynchronous rollouts with and without rollout correction against the synchronous run, under the miniature
protocol (issue 45 item 4, ``docs/miniatures.md``) on the demo world from the base: one process per protocol seed,
then one render of ``docs/results/async.md``.

    python bench/async_protocol.py --seeds 0 1 2 --only S [--rl-steps 300] [--sft-steps 600] [--n-train 1024]
        [--n-test 400] [--n-val 128] [--lr-grid ...] [--kl-grid ...] [--until preflight|grid|arms]
        [--out runs/async_protocol] [--seed-dir bench/results/async_protocol] [--smoke] [overrides ...]
    python bench/async_protocol.py --seeds 0 1 2 --render [--report docs/results/async.md] [--notes FILE]

Per seed (``seed_plan``: its own world, SFT and RL seed), each stage resumable (a rerun keeps finished stages):

1. **pre-flight**: the demo's video world (``mmrl.demo.WORLD``: 2 s clips, 4 frames of 56 px, fixed options) with
   ``--n-train`` training clips and ``--n-test + --n-val`` held-out clips split into test and validation files; SFT
   from ``--model`` (``base``) with the demo's SFT (``configs/demo.yaml``, ``--sft-steps``); the start's greedy test
   accuracy per question type against chance;
2. **grid**: the synchronous GRPO arm (``configs/demo.yaml``: 16 prompts x 8 responses) at every ``(lr, KL)`` for
   ``--rl-steps`` steps, scored by greedy accuracy on the validation file; the seeds' grids pooled over those that
   finished (``pooled_selection``, waiting ``--wait-min``) pick one setting; the chosen run IS the ``sync`` arm;
3. **arms** from the same SFT start, steps and setting: ``async1_corr`` (``rollout.asynchronous.max_staleness=1``,
   the default ``algorithm.rollout_correction``: ``token_truncate`` at 2), ``async1_nocorr`` (the same with
   ``rollout_correction.mode=none``) and ``coin_flip`` (the sync arm with the coin-flip reward).

Every RL run is ``RLTrainer.run`` (the path that starts the rollout worker), timed as a stage: wall minutes and CPU
minutes of this process plus its children (the rollout worker, ``RUSAGE_CHILDREN`` after it is joined). Each arm's
model is evaluated greedily on the seed's test file; its step metrics (``mismatch/*``, ``rollout_corr/*``,
``async/*``, ``time/*``) are kept as means over the steps. The seed record (``--seed-dir``/seed<S>.json) is small and
committed; ``--render`` builds the results file from the records (``bench/async_protocol_table.py``).
"""
from __future__ import annotations

import argparse
import json
import resource
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
from _arms import log  # noqa: E402
from _protocol import (Clock, SeedState, Selection, add_protocol_args, add_seed_process_args,  # noqa: E402
                       add_stage_args, apply_setting, coin_flip_config, grid_key, grid_todo, seed_main, seed_plan,
                       seed_process, write_seed_record)
from async_protocol_table import ARM_OVERRIDES, LATER, render_records  # noqa: E402

SCRIPT = "bench/async_protocol.py"
DEMO = REPO / "configs" / "demo.yaml"
KEPT_PREFIXES = ("mismatch/", "rollout_corr/", "async/", "time/", "reward/", "algo/frac_groups_zero_std")


class RunClock(Clock):
    """``Clock`` whose CPU minutes also count the children this process waited for (the rollout worker)."""

    def __enter__(self) -> "RunClock":
        self.children = _children_cpu_s()
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        if exc[0] is None:
            cpu = self.cpu_s + _children_cpu_s() - self.children
            self.st.data["cpu_minutes"][self.key] = cpu / 60


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def step_means(history: List[Dict[str, float]]) -> Dict[str, float]:
    """Mean over the steps of every kept metric (``KEPT_PREFIXES``); ``time/*`` also over the steps after the first
    (``<key>@2+``: the first holds the worker's start)."""
    keys = sorted({k for h in history for k in h if k.startswith(KEPT_PREFIXES)})
    out = {k: statistics.mean(h[k] for h in history if k in h) for k in keys}
    rest = history[1:] or history
    out.update({f"{k}@2+": statistics.mean(h[k] for h in rest if k in h) for k in keys
                if k.startswith("time/") and any(k in h for h in rest)})
    return out


def make_world(sd: Path, args, seed: int) -> Path:
    """The seed's demo world: ``train.json``, ``test.json`` (the first ``n_test`` held-out clips) and ``val.json``
    (the other ``n_val``); made once."""
    from mmrl.data.synth_video import make_video_world
    from mmrl.demo import WORLD

    world = sd / "world"
    if not (world / "val.json").exists():
        make_video_world(str(world), args.n_train, args.n_test + args.n_val, seed=seed_plan(seed).world_seed, **WORLD)
        held = json.loads((world / "test.json").read_text())
        (world / "test.json").write_text(json.dumps(held[:args.n_test], indent=1))
        (world / "val.json").write_text(json.dumps(held[args.n_test:], indent=1))
    return world


def arm_config(name: str, sd: Path, args, seed: int, sel: Selection, test: str = "test.json"):
    """The arm's config: the demo's, on the seed's world and SFT start, ``--rl-steps`` steps, the setting ``sel``,
    the arm's overrides (``ARM_OVERRIDES``); ``coin_flip`` with the coin-flip reward."""
    from mmrl.config import load_config

    world = sd / "world"
    out = sd / "grid" / f"select_lr{sel.lr:g}_kl{sel.kl:g}" if name == "sync" else sd / name
    cfg = load_config([str(DEMO)], [
        f"data.train={world / 'train.json'}", f"data.test={world / test}", f"model.path={sd / 'sft' / 'final'}",
        f"train.seed={seed_plan(seed).rl_seed}", f"train.steps={args.rl_steps}", "train.save_every=0",
        "train.eval_every=0", f"train.out_dir={out}", *ARM_OVERRIDES[name], *args.overrides])
    cfg = apply_setting(cfg, sel)
    return coin_flip_config(cfg) if name == "coin_flip" else cfg


def evaluate(model_dir: str, test_json: Path, data_cfg) -> Dict:
    """Greedy accuracy on ``test_json`` (``mmrl.eval.synthetic``): overall, macro and per question type."""
    from mmrl.eval.synthetic import evaluate_checkpoint

    r = evaluate_checkpoint(model_dir, str(test_json), data_cfg)
    return {k: r[k] for k in ("accuracy", "macro_accuracy", "per_qtype", "n") if k in r}


def preflight(seed: int, args, sd: Path, st: SeedState) -> Dict:
    """World, SFT from ``--model``, the start's test accuracy per question type with its chance level."""
    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples
    from mmrl.train.sft import run_sft

    world = make_world(sd, args, seed)
    if not (sd / "sft" / "final" / "config.json").exists():
        cfg = load_config([str(DEMO)], [f"data.train={world / 'train.json'}", f"model.path={args.model}",
                                        f"train.seed={seed_plan(seed).sft_seed}", f"sft.steps={args.sft_steps}",
                                        f"train.out_dir={sd / 'sft'}", *args.overrides])
        with Clock(st, "sft"):
            run_sft(cfg, quiet=True, overwrite=True)
        st.save()
    if "sft" not in st.data["evals"]:
        cfg = arm_config("sync", sd, args, seed, Selection(args.lr_grid[0], args.kl_grid[0]))
        with Clock(st, "eval_sft"):
            st.data["evals"]["sft"] = evaluate(str(sd / "sft" / "final"), world / "test.json", cfg.data)
        samples, _ = load_samples(str(world / "test.json"), str(world))
        per: Dict[str, List[float]] = {}
        for s in samples:
            per.setdefault(s.qtype, []).append(1.0 / max(1, len(s.candidates or [])))
        st.data["chance"] = {q: statistics.mean(v) for q, v in sorted(per.items())}
        st.data["stopped"] = ""
        st.save()
        log(f"[seed {seed}] SFT start: test accuracy {100 * st.data['evals']['sft']['accuracy']:.1f}")
    st.data.setdefault("stopped", "")
    return {}


def train(name: str, cfg, st: SeedState, seed: int) -> str:
    """``RLTrainer.run`` of arm ``name`` (timed as ``rl_<name>``), its step means kept; returns its model's path."""
    from mmrl.train.rl_trainer import RLTrainer

    with RunClock(st, f"rl_{name}"):
        history = RLTrainer(cfg, quiet=True).run(overwrite=True)
    st.data["algo_means"][name] = step_means(history)
    st.save()
    log(f"[seed {seed}] {name}: {len(history)} steps in {st.data['minutes'][f'rl_{name}']:.1f} min "
        f"({st.data['cpu_minutes'][f'rl_{name}']:.1f} CPU min)")
    return str(Path(cfg.train.out_dir) / "final")


def grid(seed: int, args, proto, sd: Path, st: SeedState) -> None:
    """The sync arm at every grid point, scored on the validation file; its wall and CPU minutes kept per point."""
    for lr, kl, k in grid_todo(st, proto, sd / "grid"):
        cfg = arm_config("sync", sd, args, seed, Selection(lr, kl), test="val.json")
        path = train("sync", cfg, st, seed)
        st.data.setdefault("grid_runs", {})[k] = {
            "minutes": st.data["minutes"]["rl_sync"], "cpu_minutes": st.data["cpu_minutes"]["rl_sync"],
            "means": st.data["algo_means"]["sync"]}
        with Clock(st, f"val_{k}"):
            st.data["grid"][k] = evaluate(path, sd / "world" / "val.json", cfg.data)["accuracy"]
        st.save()
        log(f"[seed {seed}] grid {k}: validation accuracy {100 * st.data['grid'][k]:.1f}")


def arms(seed: int, args, sd: Path, st: SeedState, sel: Selection) -> None:
    """The grid's chosen run is ``sync`` (its costs from the grid); then ``LATER`` in order, each evaluated."""
    k = grid_key(sel.lr, sel.kl)
    if "sync" not in st.data["evals"]:
        run = st.data["grid_runs"][k]
        st.data["minutes"]["rl_sync"], st.data["cpu_minutes"]["rl_sync"] = run["minutes"], run["cpu_minutes"]
        st.data["algo_means"]["sync"] = run["means"]
        cfg = arm_config("sync", sd, args, seed, sel)
        with Clock(st, "eval_sync"):
            st.data["evals"]["sync"] = evaluate(str(Path(cfg.train.out_dir) / "final"), sd / "world" / "test.json",
                                                cfg.data)
        st.save()
    for name in LATER:
        if name in st.data["evals"]:
            continue
        cfg = arm_config(name, sd, args, seed, sel)
        path = train(name, cfg, st, seed)
        with Clock(st, f"eval_{name}"):
            st.data["evals"][name] = evaluate(path, sd / "world" / "test.json", cfg.data)
        st.save()
        log(f"[seed {seed}] {name}: test accuracy {100 * st.data['evals'][name]['accuracy']:.1f}")


def run_one(seed: int, args, proto) -> Dict:
    return seed_process(seed, args, proto, lambda sd, st: preflight(seed, args, sd, st),
                        lambda sd, st, rec: grid(seed, args, proto, sd, st),
                        lambda sd, st, sel: arms(seed, args, sd, st, sel),
                        lambda rec, state: write_record(seed, state, args, proto))


def write_record(seed: int, state: Dict, args, proto) -> Dict:
    """``SEED_DIR/seed<S>.json``: the command, the settings and the seed's state."""
    record = {"seed": seed, "command": proto.command, "plan": vars(seed_plan(seed)),
              "settings": {k: getattr(args, k) for k in ("n_train", "n_test", "n_val", "sft_steps", "rl_steps",
                                                         "lr_grid", "kl_grid", "model", "overrides")},
              **{k: v for k, v in state.items() if k != "grid_runs"},
              "grid_runs": {k: {"minutes": v["minutes"], "cpu_minutes": v["cpu_minutes"]}
                            for k, v in state.get("grid_runs", {}).items()}}
    return write_seed_record(args.seed_dir, seed, record)


def render_main(args, argv: List[str]) -> Path:
    from _protocol import Protocol

    recs = {}
    for s in args.seeds:
        p = Path(args.seed_dir) / f"seed{s}.json"
        if p.exists():
            recs[s] = json.loads(p.read_text())
    if not recs:
        raise SystemExit(f"--render: no seed record in {args.seed_dir} for seeds {args.seeds}")
    first = next(iter(recs.values()))
    render_cmd = shlex.join(["python", SCRIPT, *argv])
    seed_cmd = first["command"].replace(f"--only {first['seed']}", "--only $s")
    command = f"for s in {' '.join(map(str, recs))}; do OMP_NUM_THREADS=1 {seed_cmd}; done; {render_cmd}"
    st = first["settings"]
    proto = Protocol(command=command, seeds=sorted(recs), n_test=st["n_test"], n_val=st["n_val"],
                     lr_grid=st["lr_grid"], kl_grid=st["kl_grid"], smoke="--smoke" in first["command"].split())
    notes = Path(args.notes).read_text() if args.notes else ""
    res = render_records(recs, proto, notes)
    path = res.write(args.report)
    print(res.render(), end="", flush=True)
    return path


def own_args(ap: argparse.ArgumentParser) -> None:
    add_stage_args(ap)
    ap.add_argument("--n-train", type=int, default=1024, help="training clips (the demo's 1,024)")
    ap.add_argument("--sft-steps", type=int, default=600, help="SFT steps from --model (the demo's 600)")
    ap.add_argument("--rl-steps", type=int, default=300, help="GRPO steps per arm (the demo's 300)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_protocol_args(ap, n_test=400, n_val=128)
    add_seed_process_args(ap, "async", own_args, wait_min=0.0, deadline_for="nothing (every arm runs)")
    return ap


def main(argv=None) -> None:
    return seed_main(argv, build_parser(), SCRIPT, render_main, run_one)


if __name__ == "__main__":
    main()
