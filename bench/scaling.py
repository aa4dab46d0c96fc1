"""Cost curves: CPU seconds per RL step and peak memory against four axes, for mmrl and (where it has the path) TRL.

    OMP_NUM_THREADS=1 .venv/bin/python bench/scaling.py [--quick] [--steps 3] [--warmup 1] [--reps 2]
                                                        [--axes responses length frames turns] [--out runs/scaling]

Axes (the others at their base: ``--prompts`` 2 prompts x ``--base-n`` 4 responses, ``--base-len`` 16 new tokens,
the image world of ``bench/vs_trl.py``: 56x56 PNGs, 4 image tokens):

- ``responses``: responses per prompt 4, 8, 16, 32, 64 (mmrl and TRL's ``GRPOTrainer``, ``bench/_trl_arm.py``);
- ``length``: new tokens per response 4, 16, 64, 256, 1024 (mmrl and TRL). Every response runs to the length:
  mmrl's sampler never draws ``<|im_end|>`` (added to the engine's suppressed tokens), TRL generates with
  ``min_new_tokens`` = the length (the random tiny model otherwise stops at ~half of 1024); the same on every
  axis. The tables give the measured tokens per response;
- ``frames``: frames per clip 4, 8, 16, 32 (``data.nframes`` on a video world of 32-frame 56x56 clips at 8 fps).
  mmrl only: TRL 1.16's ``GRPOTrainer`` keeps only the ``prompt``/``image``/``images`` columns and takes only image
  parts from a prompt (``_generate``), so it has no video input path;
- ``turns``: model turns per episode 1, 2, 4, 8 (mmrl's ``multi_turn`` loop with a scripted environment answering
  each turn but the last with a 4-frame 56x56 clip, ``--base-len`` tokens per turn; 1 = the ``single_turn`` loop).
  mmrl only: TRL's ``GRPOTrainer`` multi-turn exists only as tool calling, driven by the model's own tool calls.

Each point of each arm is a fresh subprocess (torch/OpenMP threads pinned to 1) running ``--steps`` full RL steps
(rollout, rewards, one forward/backward, AdamW; micro-batch = the whole step, so memory follows the batch), of
which the first ``--warmup`` are not timed. Per run: the median CPU seconds (user + sys of the process, robust to the
shared box's load) and wall seconds of the timed steps, the child's peak RSS (``os.wait4``'s ``ru_maxrss``) and its
growth over the RSS the process had when the first step began (model, data, imports loaded). The points run
in repetition order (every point once, then again), the tables report medians over repetitions, and results are
rewritten after every run. ``bench/scaling_report.py``: the growth fits, tables and plot.
Outputs: ``<out>/results.json``, ``docs/results/scaling.md`` and ``docs/results/scaling.png`` (``--doc`` prefix).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
MARK = "@@SCALING_RESULT@@"
FULL = {"responses": [4, 8, 16, 32, 64], "length": [4, 16, 64, 256, 1024], "frames": [4, 8, 16, 32], "turns": [1, 2, 4, 8]}
QUICK = {"responses": [4, 8], "length": [4, 16], "frames": [4, 8], "turns": [1, 2]}
TRL_AXES = ("responses", "length")
NO_TRL = {"frames": "no path: TRL 1.16's GRPOTrainer keeps only the prompt/image/images columns and reads only image "
                    "parts of a prompt (no video input).",
          "turns": "no path: TRL's GRPOTrainer has no scripted-environment multi-turn loop (only model-driven tool calls)."}


# ---------------------------------------------------------------- inside a fresh subprocess ---------------------
def _scripted_env(frames: int = 4):
    """An environment that answers every model turn with a new seeded ``frames``-frame 56x56 clip."""
    import torch

    from mmrl.data.schema import Media
    from mmrl.rollout.agent_loop import Environment, Observation

    count = [0]

    class Clips(Environment):
        def reset(self, sample, media):
            self.i, self.k = count[0], 0
            count[0] += 1

        def step(self, text):
            self.k += 1
            g = torch.Generator().manual_seed(self.i * 101 + self.k)
            clip = Media("obs", frames=torch.randint(0, 255, (frames, 3, 56, 56), dtype=torch.uint8, generator=g),
                         timestamps=[0.5 * f for f in range(frames)], fps=2.0)
            return Observation(f"Here is part {self.k}.", media=clip)

    return Clips


def run_mmrl(spec: Dict) -> Dict:
    import torch

    from mmrl.config import load_config
    from mmrl.train.rl_trainer import RLTrainer

    cfg = load_config([str(REPO / "configs/demo.yaml")], spec["overrides"])
    tr = RLTrainer(cfg, quiet=True)
    eng = tr.engine  # every response runs to the length: <|im_end|> joins the tokens the sampler never draws
    if not (hasattr(eng, "suppress") and hasattr(eng, "eos_id")):
        raise RuntimeError("the rollout engine has no 'suppress'/'eos_id': bench/scaling.py cannot force the length")
    eng.suppress = list(eng.suppress) + [eng.eos_id]
    if spec.get("turns", 1) > 1:
        from mmrl.rollout.agent_loop import build_agent_loop

        tr.agent_loop = build_agent_loop("multi_turn", processor=tr.processor, env_factory=_scripted_env(),
                                         max_turns=spec["turns"])
    count = {"tokens": 0, "samples": 0}
    rollout = tr.rollout

    def counted(*a, **k):
        si, trajs = rollout(*a, **k)
        count["tokens"] += sum(int(t.loss_mask.sum()) for t in trajs)  # the model's tokens (observations masked)
        count["samples"] += len(trajs)
        return si, trajs

    tr.rollout = counted
    pre = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    per_step = []
    for _ in range(spec["steps"]):
        c0, t0 = time.process_time(), time.perf_counter()
        tr.train_step()
        per_step.append({"cpu": time.process_time() - c0, "step": time.perf_counter() - t0, **count})
        count.update(tokens=0, samples=0)
    return {"per_step": per_step, "pre_kb": pre, "threads": torch.get_num_threads()}


def run_trl(spec: Dict) -> Dict:
    import torch
    import trl

    from _trl_arm import run_trl as trl_arm

    pre = [0]
    train = trl.GRPOTrainer.train

    def noted(self, *a, **k):  # the RSS when training starts: model, data and trainer built
        pre[0] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return train(self, *a, **k)

    trl.GRPOTrainer.train = noted
    config = trl.GRPOConfig

    def forced(**kw):  # every completion runs to the length: HF's min_new_tokens masks EOS until then
        return config(**kw, generation_kwargs={"min_new_tokens": spec["max_new_tokens"]})

    trl.GRPOConfig = forced
    res = trl_arm(spec)
    return {"per_step": res["per_step"], "pre_kb": pre[0], "threads": torch.get_num_threads()}


def _child(arm: str, spec_path: str) -> None:
    import torch

    torch.set_num_threads(1)
    spec = json.loads(Path(spec_path).read_text())
    res = run_trl(spec) if arm == "trl" else run_mmrl(spec)
    print(MARK + json.dumps(res), flush=True)


# ---------------------------------------------------------------- orchestration --------------------------------
def spawn(arm: str, spec: Dict, log: Path) -> Dict:
    """Run one point in a fresh process; its own rusage (``os.wait4``) gives peak RSS and total CPU."""
    log.parent.mkdir(parents=True, exist_ok=True)
    spec_path = log.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec, indent=1))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore", TRANSFORMERS_VERBOSITY="error",
               HF_DATASETS_DISABLE_PROGRESS_BARS="1")
    t = time.time()
    with open(log, "w") as f:
        p = subprocess.Popen([sys.executable, __file__, "--_arm", arm, "--_spec", str(spec_path)], cwd=REPO, env=env,
                             stdout=subprocess.PIPE, stderr=f, text=True)
        out = p.stdout.read()
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        f.write("\n---- stdout ----\n" + out)
    lines = [l for l in out.splitlines() if l.startswith(MARK)]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"{arm} run failed (exit {p.returncode}); see {log}")
    res = json.loads(lines[-1][len(MARK):])
    return {"ru_maxrss_kb": ru.ru_maxrss, "process_cpu_s": ru.ru_utime + ru.ru_stime, "run_wall_s": time.time() - t, **res}


def summarize(res: Dict, warmup: int) -> Dict:
    steps = res["per_step"][warmup:] or res["per_step"][-1:]
    samples = sum(s["samples"] for s in steps)
    return {"cpu_s": statistics.median(s["cpu"] for s in steps), "wall_s": statistics.median(s["step"] for s in steps),
            "peak_mb": res["ru_maxrss_kb"] / 1024, "delta_mb": max(res["ru_maxrss_kb"] - res["pre_kb"], 0) / 1024,
            "tokens_per_response": sum(s["tokens"] for s in steps) / max(samples, 1),
            "samples_per_step": samples / len(steps), "process_cpu_s": res["process_cpu_s"], "threads": res["threads"]}


def prepare(out: Path, seed: int) -> Dict:
    from mmrl.data.synth_image import make_image_world
    from mmrl.data.synth_video import make_video_world
    from mmrl.models.tiny import ensure_tiny_model

    img, vid = out / "world_image", out / "world_video32"
    if not (img / "train.json").exists():
        make_image_world(str(img), 32, 4, seed=seed)
    if not (vid / "train.json").exists():
        make_video_world(str(vid), 16, 4, seed=seed, size=56, n_frames=32, fps=8.0, fixed_options=True)
    return {"model": str(ensure_tiny_model()), "image": img, "video": vid}


def point(a, prep: Dict, axis: str, x: int, arm: str, out: Path) -> Dict:
    """The spec of one run: the base setting with ``axis`` set to ``x``."""
    n = x if axis == "responses" else a.base_n
    length = x if axis == "length" else a.base_len
    world = prep["video"] if axis == "frames" else prep["image"]
    mb = a.prompts * n  # one micro-batch per step: memory follows the batch
    if arm == "trl":
        return {"model": prep["model"], "world": str(world), "seed": a.seed, "threads": 1, "prompts_per_step": a.prompts,
                "n": n, "micro_batch": mb, "max_new_tokens": length, "temperature": 1.0, "lr": 1e-4, "grad_clip": 1.0,
                "steps": a.steps, "out": str(out)}
    ov = [f"model.path={prep['model']}", f"data.train={world / 'train.json'}", f"train.out_dir={out}",
          f"train.steps={a.steps}", f"train.prompts_per_step={a.prompts}", f"rollout.n={n}",
          f"rollout.max_new_tokens={length}", "rollout.temperature=1.0", "rollout.top_p=1.0", "train.lr=1e-4",
          f"train.micro_batch={mb}", "train.grad_clip=1.0", f"train.seed={a.seed}", "train.num_threads=1",
          "train.save_every=0", "train.eval_every=0", "data.max_pixels=3136", "data.preflight=none"]
    if axis == "frames":
        ov.append(f"data.nframes={x}")
    return {"overrides": ov, "steps": a.steps, "turns": x if axis == "turns" else 1}


def command(a, reps: int) -> str:
    parts = ["OMP_NUM_THREADS=1 .venv/bin/python bench/scaling.py"] + (["--quick"] if a.quick else [])
    parts += [f"--steps {a.steps}", f"--warmup {a.warmup}", f"--reps {reps}", f"--prompts {a.prompts}",
              f"--base-n {a.base_n}", f"--base-len {a.base_len}", "--axes " + " ".join(a.axes)]
    return " ".join(parts) + ("" if a.trl else " --no-trl")


def write(a, results: Dict, doc: Path, commands: List[str]) -> str:
    """``docs/results/scaling.md`` and ``.png`` from the runs so far; ``commands``: the invocations that made them."""
    from scaling_report import AXIS_LABELS, axis_table, fits, fits_table, growth_summary, plot

    S = {ax: {arm: {x: [summarize(r, a.warmup) for r in runs] for x, runs in pts.items()} for arm, pts in arms.items()}
         for ax, arms in results.items()}
    threads = sorted({s["threads"] for arms in S.values() for pts in arms.values() for v in pts.values() for s in v})
    reps = max(len(v) for arms in S.values() for pts in arms.values() for v in pts.values())
    lines = ["Command: " + ", then ".join(f"`{c}`" for c in commands), "",
             f"Tiny Qwen2.5-VL (the embedded random model), CPU, {'/'.join(map(str, threads))} torch thread(s); base setting {a.prompts} prompts x "
             f"{a.base_n} responses x {a.base_len} new tokens on the 56x56 image world; one fresh process per point and arm; "
             f"{a.steps} RL steps per run, the first {a.warmup} not timed; per run the median over its timed steps, then "
             f"the median over {reps} repetition(s) (the tables' reps column). CPU s = user + sys of the process per step (the box is shared, "
             "wall times stretch with its load); peak RSS = the child's ru_maxrss (os.wait4); RSS growth = peak minus "
             "the RSS when the first step began. Micro-batch = the whole step. Every response runs to its length (EOS "
             "suppressed; the tokens/response column is measured). Frames: 56x56 clips give 2 video tokens per frame "
             "(8 at 4 frames, 64 at 32) in a step that decodes the same 16 tokens per response. Turns: each turn but the "
             "last is answered with a 4-frame clip, so a turn adds 16 model tokens and 8 video tokens.", "",
             "![cost curves](scaling.png)", "", "## Growth (log-log slopes)", "",
             "Slope of log(cost) on log(axis): over all points, and between the last two points (the growth once fixed "
             "costs stop dominating; the name is that of the last-two slope).", "", fits_table(fits(S)), "",
             "In words (CPU s per step, slope between the last two points): " + growth_summary(fits(S)), ""]
    for axis in a.axes:
        if axis in S:
            lines += [f"## {AXIS_LABELS[axis]}", "", axis_table(S, axis, NO_TRL.get(axis)), ""]
    doc.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines)
    doc.with_suffix(".md").write_text(text)
    plot(S, str(doc.with_suffix(".png")), f"mmrl vs TRL GRPOTrainer, CPU, 1 thread: {commands[-1]}")
    return text


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two points per axis (smoke test)")
    ap.add_argument("--steps", type=int, default=3, help="RL steps per run (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="leading steps not timed (default 1)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of every point (default 2)")
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step (default 2)")
    ap.add_argument("--base-n", type=int, default=4, help="responses per prompt off the responses axis (default 4)")
    ap.add_argument("--base-len", type=int, default=16, help="new tokens (per turn) off the length axis (default 16)")
    ap.add_argument("--axes", nargs="+", default=list(FULL), choices=list(FULL))
    ap.add_argument("--no-trl", dest="trl", action="store_false", help="mmrl only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(REPO / "runs" / "scaling"))
    ap.add_argument("--doc", default=str(REPO / "docs" / "results" / "scaling"), help="writes <doc>.md and <doc>.png")
    ap.add_argument("--resume", action="store_true",
                    help="add --reps more repetitions to <out>/results.json (same settings; --reps 0: only rewrite the docs)")
    ap.add_argument("--_arm", help=argparse.SUPPRESS)
    ap.add_argument("--_spec", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._arm:
        return _child(a._arm, a._spec)
    if a.warmup >= a.steps:
        ap.error("--warmup must be below --steps")
    grid = QUICK if a.quick else FULL
    out = Path(a.out).resolve()
    prep = prepare(out, a.seed)
    plan = [(axis, x, arm) for axis in a.axes for x in grid[axis]
            for arm in (("mmrl", "trl") if a.trl and axis in TRL_AXES else ("mmrl",))]
    results: Dict = {axis: {} for axis in a.axes}
    commands, done = [], 0
    if a.resume:
        old = json.loads((out / "results.json").read_text())
        keys = ("quick", "steps", "warmup", "prompts", "base_n", "base_len", "axes", "trl", "seed")
        if any(old["args"][k] != getattr(a, k) for k in keys):
            ap.error(f"--resume: settings differ from {out / 'results.json'}: " + str({k: old["args"][k] for k in keys}))
        results, commands = old["results"], old["commands"]
        done = max(len(v) for arms in results.values() for pts in arms.values() for v in pts.values())
    if a.reps:  # --resume --reps 0: only rewrite the docs from the results
        commands.append(command(a, a.reps) + (" --resume" if a.resume else ""))
    text = ""
    for rep in range(done, done + a.reps):
        for axis, x, arm in plan:
            tag = f"{axis}{x}_{arm}_rep{rep}"
            res = spawn(arm, point(a, prep, axis, x, arm, out / "runs" / tag), out / "logs" / f"{tag}.log")
            results[axis].setdefault(arm, {}).setdefault(f"{x:g}", []).append(res)
            s = summarize(res, a.warmup)
            print(f"[scaling] rep {rep + 1}/{done + a.reps} {axis}={x} {arm}: {s['cpu_s']:.3f} CPU s/step, {s['wall_s']:.3f} "
                  f"wall s/step, peak {s['peak_mb']:.0f} MB (+{s['delta_mb']:.0f}), {s['tokens_per_response']:.1f} "
                  f"tokens/response, run {res['run_wall_s']:.0f} s", flush=True)
            (out / "results.json").write_text(json.dumps({"args": vars(a), "commands": commands, "results": results}))
            text = write(a, results, Path(a.doc), commands)
    text = text or write(a, results, Path(a.doc), commands)
    print(text)
    return text


if __name__ == "__main__":
    main()
