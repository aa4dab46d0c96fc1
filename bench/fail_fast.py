"""How fast a bad input fails, against what a config error and a weight load cost (issue 27's last must-show).

Each run is a fresh ``python -m mmrl train`` (or, for (b), the same entry path up to the loaded weights) in its own
subprocess, timed in wall seconds and in CPU seconds (user + system of the child, ``resource.getrusage``):

- (a) a config error: an unknown key (``train.stepz=2``), refused while the config is read; and, shown apart (not in
  the ratios), (a2) one only the algorithm registry can find (``algorithm.params.nope=1``), which costs the torch
  import the registry needs (``mmrl train`` runs those checks after the data pre-flight);
- (b) a config check that passes, then the weight load the way a run loads (``mmrl.cli_run._prepare_run`` -- config,
  run directory, data pre-flight, the registry checks -- then ``load_model_and_processor``): what an error found
  only once the weights are in costs;
- (c) each bad data file: a missing video file, an annotation without ``answer``, an empty file, a truncated MP4.

Printed per case: the median over ``--reps`` rounds (the cases interleaved in each round), and the ratios
``c / (a + b)`` (the issue's "a config error plus weight load") and ``c / b``; the target is < 0.25.

    python bench/fail_fast.py                                  # the tiny model
    python bench/_real_checkpoint.py /tmp/prefail_3b           # a random-init Qwen2.5-VL-3B in bf16 (~8 GB)
    python bench/fail_fast.py --model /tmp/prefail_3b --dtype bfloat16
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_LOAD = """
import sys
from mmrl.cli import build_parser
from mmrl.cli_run import _prepare_run
from mmrl.models.loading import load_model_and_processor
args = build_parser("train").parse_args(["train"] + sys.argv[1:])
cfg = _prepare_run(args, "train")[0]
model, proc = load_model_and_processor(cfg.model)
print(sum(p.numel() for p in model.parameters()))
"""


def bad_data(world: Path, out: Path) -> dict:
    """``{case: annotation file}``: the world's train split with one bad item each (media paths made absolute)."""
    items = json.loads((world / "train.json").read_text())
    for it in items:
        it["video"] = str(world / it["video"])

    def write(name, edit):
        copy = json.loads(json.dumps(items))
        edit(copy)
        (out / name).write_text(json.dumps(copy))
        return out / name

    data = Path(items[3]["video"]).read_bytes()
    (out / "broken.mp4").write_bytes(data[: len(data) // 2])  # a truncated upload
    (out / "empty.json").write_text("")
    return {"missing video": write("missing_video.json", lambda c: c[2].update(video=str(out / "gone.mp4"))),
            "missing field": write("missing_field.json", lambda c: c[5].pop("answer")),
            "empty file": out / "empty.json",
            "corrupt MP4": write("corrupt.json", lambda c: c[3].update(video=str(out / "broken.mp4"))),
            "good": write("good.json", lambda c: None)}


def timed(cmd, env) -> tuple:
    """``(wall s, CPU s, return code, last stderr line, last stdout line)`` of one subprocess."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    err, out = ([x for x in t.splitlines() if x.strip()] for t in (p.stderr, p.stdout))
    return wall, cpu, p.returncode, err[-1] if err else "", out[-1] if out else ""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="model.path (default: the embedded tiny model)")
    ap.add_argument("--dtype", default="float32", help="model.dtype (bfloat16 for a bf16 checkpoint)")
    ap.add_argument("--reps", type=int, default=3, help="rounds; each runs every case once")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every run")
    args = ap.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS=str(args.threads))
    with tempfile.TemporaryDirectory(prefix="mmrl_fail_fast_") as tmp:
        tmp = Path(tmp)
        from mmrl.data.synth_video import make_video_world

        make_video_world(str(tmp / "world"), 24, 8, seed=0)
        files = bad_data(tmp / "world", tmp)
        base = ["--config", "configs/demo.yaml", "--overwrite", f"model.path={args.model}",
                f"model.dtype={args.dtype}", f"train.out_dir={tmp / 'run'}"]
        if args.dtype != "float32":
            base.append("train.precision=bf16" if args.dtype == "bfloat16" else "train.precision=fp16")
        mmrl = [sys.executable, "-m", "mmrl", "train"]
        cases = {"(a) config error": mmrl + base + [f"data.train={files['good']}", "train.stepz=2"],
                 "(a2) registry config error": mmrl + base + [f"data.train={files['good']}", "algorithm.params.nope=1"],
                 "(b) config check + weight load": [sys.executable, "-c", _LOAD] + base
                 + [f"data.train={files['good']}"]}
        cases.update({f"(c) {k}": mmrl + base + [f"data.train={v}"] for k, v in files.items() if k != "good"})
        runs = {k: [] for k in cases}
        lines = {}
        for r in range(args.reps):
            for name, cmd in cases.items():
                wall, cpu, rc, line, out = timed(cmd, env)
                expect_rc = 0 if name.startswith("(b)") else 2
                if rc != expect_rc:
                    raise SystemExit(f"{name}: exit {rc}, expected {expect_rc}: {line}")
                runs[name].append((wall, cpu))
                lines[name] = f"loaded {int(out):,} parameters" if name.startswith("(b)") else f"`{line}`"
                print(f"round {r + 1}: {name}: {wall:.2f} s wall, {cpu:.2f} s CPU", file=sys.stderr, flush=True)
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
    (aw, ac), (bw, bc) = med["(a) config error"], med["(b) config check + weight load"]
    print(f"model.path={args.model} model.dtype={args.dtype}; median of {args.reps} rounds, OMP_NUM_THREADS="
          f"{args.threads}\n")
    print("| case | wall s | CPU s | wall c/(a+b) | CPU c/(a+b) | wall c/b | CPU c/b |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (w, c) in med.items():
        ratios = (f"{w / (aw + bw):.3f} | {c / (ac + bc):.3f} | {w / bw:.3f} | {c / bc:.3f}"
                  if name.startswith("(c)") else "— | — | — | —")
        print(f"| {name} | {w:.2f} | {c:.2f} | {ratios} |")
    print()
    for name, line in lines.items():
        print(f"- {name}: {line}")


if __name__ == "__main__":
    main()
