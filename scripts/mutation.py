"""Mutation testing of the modules that decide rewards, updates, frames, checkpoints, views and annotations.

Runs mutmut (``pip install -e ".[dev]"``) once per module group, each in its own scratch copy of the project
(``runs/mutation/<group>/``) so that every group mutates only its files and runs only its fast tests
(``-m "not slow"``), with one worker (this machine has 2 shared cores) and a wall-clock budget per group.
A mutant is *caught* when a test fails (or times out) on it; the score is caught / (caught + survived), with
the mutants listed in ``EQUIVALENT`` (argued in docs/testing.md) left out of the denominator.

    python scripts/mutation.py                       # every group
    python scripts/mutation.py rewards update        # some groups
    python scripts/mutation.py --budget-min 10 views # another time budget per group (minutes)

Prints one line per group and the surviving mutants (``mutmut show NAME`` in the group's folder prints a diff),
and writes ``runs/mutation/summary.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# group -> (files mutated, test files run on each mutant)
GROUPS = {
    "rewards": (["mmrl/rewards/*"], ["tests/rewards"]),
    "update": (["mmrl/train/update.py"], ["tests/train/test_update.py"]),
    "decode": (["mmrl/media/decode.py"], ["tests/media/test_decode.py"]),
    "checkpoint": (["mmrl/train/checkpoint.py", "mmrl/train/optim.py"], ["tests/train/test_checkpoint.py"]),
    "views": (["mmrl/views/transforms.py", "mmrl/views/video_transforms.py", "mmrl/views/image_transforms.py",
               "mmrl/views/viewset.py"], ["tests/views/test_transforms.py", "tests/views/test_viewset.py",
                                          "tests/views/test_view_cases.py"]),
    "annotations": (["mmrl/data/annotations.py"], ["tests/data/test_annotations.py",
                                                   "tests/data/test_annotation_validation.py"]),
    "ovobench_score": (["mmrl/eval/ovobench_score.py"], ["tests/eval/test_eval_ovobench.py"]),
}

# Mutants argued equivalent in docs/testing.md (no input can tell them from the original): excluded from the score.
EQUIVALENT: set[str] = set()

CAUGHT = {1, 3, 36, -24, 24, 152, 255, -11, -9}  # mutmut's exit codes for killed / timeout / crash


def _prepare(group: str, work: Path) -> None:
    files, tests = GROUPS[group]
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "mmrl", work / "mmrl", ignore=ignore)
    shutil.copytree(ROOT / "tests", work / "tests", ignore=ignore)
    tests = [t for t in tests if (ROOT / t).exists()]
    lines = ["[tool.mutmut]", 'source_paths = ["mmrl"]', f"only_mutate = {json.dumps(files)}",
             f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
             'pytest_add_cli_args = ["-m", "not slow", "-p", "no:cacheprovider", "-q", "-x"]',
             "use_git_change_detection = false", "",
             "[tool.pytest.ini_options]", 'testpaths = ["tests"]',
             'markers = ["slow: end-to-end tests (still run in CI)"]',
             'filterwarnings = ["ignore::DeprecationWarning", "ignore::FutureWarning"]', ""]
    (work / "pyproject.toml").write_text("\n".join(lines))


def _collect(work: Path) -> dict:
    caught, survived, other = [], [], []
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        for name, code in json.loads(meta.read_text()).get("exit_code_by_key", {}).items():
            if name in EQUIVALENT:
                continue
            (caught if code in CAUGHT else survived if code == 0 else other).append(name)
    denom = len(caught) + len(survived)
    return {"caught": len(caught), "survived": survived, "not_run": len(other),
            "score": round(100.0 * len(caught) / denom, 1) if denom else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("groups", nargs="*", help=f"groups to run (default all): {', '.join(GROUPS)}")
    ap.add_argument("--budget-min", type=float, default=15.0, help="wall-clock budget per group, minutes")
    ap.add_argument("--out", default=str(ROOT / "runs" / "mutation"))
    args = ap.parse_args(argv)
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown:
        ap.error(f"unknown group(s) {unknown}; known: {', '.join(GROUPS)}")
    out = Path(args.out)
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for group in args.groups or list(GROUPS):
        work = out / group
        _prepare(group, work)
        t0 = time.time()
        try:
            proc = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", "1"], cwd=work, env=env,
                                  timeout=args.budget_min * 60, capture_output=True, text=True)
            (work / "mutmut.log").write_text(proc.stdout + proc.stderr)
            finished = proc.returncode == 0
        except subprocess.TimeoutExpired as e:
            (work / "mutmut.log").write_text(str(e.stdout or "") + str(e.stderr or ""))
            finished = False
        res = _collect(work)
        res.update(seconds=round(time.time() - t0), finished=finished)
        summary[group] = res
        print(f"{group:15s} caught {res['caught']:3d}, survived {len(res['survived']):3d}, not run {res['not_run']:3d}"
              f" -> score {res['score']}%{'' if finished else ' (budget hit or error: see mutmut.log)'}"
              f" in {res['seconds']} s", flush=True)
        for name in res["survived"]:
            print(f"    survived: {name}")
        out.mkdir(parents=True, exist_ok=True)
        summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
