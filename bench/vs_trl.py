"""mmrl vs TRL's GRPOTrainer on one CPU, at equal work; plus mmrl on video, the floor, and the algorithms side by side.

    .venv/bin/python bench/vs_trl.py [--steps 6] [--warmup 1] [--reps 3] [--threads 1] [--out runs/vs_trl]
                                     [--lengths 4 64 256 512] [--no-algos] [--no-video] [--no-trl] [--no-floor]
                                     [--algo-sft-steps 40] [--mmrl-baseline] [--thread-counts 1 2] [--no-async]

Every run is a fresh subprocess (fair peak RSS, no shared caches), in the order ``mmrl, TRL`` (at ``--threads``,
then at each other of ``--thread-counts``), ``mmrl async, floor, mmrl-video, floor-video, algorithms...`` for each
length, repeated ``--reps`` times (A B A B ...). Both frameworks get the same tiny Qwen2.5-VL checkpoint, the same
synthetic single-image task (``make_image_world``: 56x56 PNGs, 4 image tokens), ``--prompts`` prompts x ``--n``
responses per step, ``--max-new-tokens`` (or each of ``--lengths``), temperature 1.0, AdamW at ``--lr`` (constant),
grad clip 1.0, micro-batch ``--micro-batch``, fp32, ``--threads`` torch/OpenMP threads (the image arms also at each
of ``--thread-counts``), and ``--steps`` optimizer steps of which the first ``--warmup`` are not timed. Rewards:
mmrl's ``accuracy`` + 0.1 x ``format`` (TRL: the same rules). The async arm is mmrl's image arm with
``rollout.asynchronous.max_staleness=1``: trainer + rollout worker, 1 thread each. The floor (``bench/floor.py``)
is the same step's bare computation in plain torch, on the image and on the video world.

First the headline table (``bench/_speed_headline.py``), a row per length: mmrl at its best setting (highest median
steps/s among the sync arms and the async arm) against TRL at its best thread count, the steps/s and peak-RSS
ratios, and the overlap efficiency (async step / max(generation, update) of the sync run at 1 thread). Then per run
kind: processes x threads, steps/s, samples/s (generated completions), generated tokens/s, peak RSS (summed over
the run's processes: its own ``ru_maxrss`` + its live children's ``VmHWM``, ``bench/_tree_rss.py``: the rollout
worker's), and seconds per step in generation / scoring / update (definitions in ``bench/README.md``); then best-mmrl / best-TRL ratios with
min/median/max over the repetitions (pairs of the same repetition). With several ``--lengths``, a table with a row
per length at ``--threads`` (mmrl vs TRL, vs the floor, video vs its floor) comes before the per-length tables; the
tables are rewritten after every repetition. Then the algorithm table on the video world (at the first length only):
time per step of GRPO, DAPO, GSPO, BPO (configs/bpo_demo.yaml), T-GRPO (configs/tgrpo_demo.yaml) as ratios to
GRPO, and BPO's ``view_time_share``. The algorithms start from a short SFT warm-up of the tiny model
(``--algo-sft-steps``, made once and kept in ``--out``) so that rewards vary and DAPO's dynamic sampling is not degenerate.

``--mmrl-baseline`` adds an arm with mmrl's shared-prompt prefill/scoring switched off (``model.generate`` with
``num_return_sequences`` and one forward per full sequence), to show what that change buys.
Results: ``<out>/results.json`` and ``<out>/table.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _speed_headline import ASYNC_KIND, arm_name, headline, headline_table, overlap, setting, spread, thread_kind  # noqa: E402
from async_overlap import phases  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's mmrl, not an installed one
MARK = "@@VS_TRL_RESULT@@"


# ---------------------------------------------------------------- arms (run inside a fresh subprocess) ----------
def _child(arm: str, spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    import torch

    torch.set_num_threads(spec["threads"])
    if arm == "trl":
        from _trl_arm import run_trl

        res = run_trl(spec)
        res["threads"] = torch.get_num_threads()
    elif arm == "floor":
        from floor import run_floor

        res = run_floor(spec)
    else:
        from _mmrl_arm import run_mmrl

        res = run_mmrl(spec)
    print(MARK + json.dumps(res), flush=True)


# ---------------------------------------------------------------- orchestration --------------------------------
def _spawn(kind: str, arm: str, spec: Dict, out: Path) -> Dict:
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / f"{kind}.spec.json"
    spec_path.write_text(json.dumps(spec, indent=1))
    threads = spec["threads"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false",
               PYTHONWARNINGS="ignore", TRANSFORMERS_VERBOSITY="error", HF_DATASETS_DISABLE_PROGRESS_BARS="1")
    t = time.time()
    p = subprocess.run([sys.executable, __file__, "--_arm", arm, "--_spec", str(spec_path)], cwd=REPO, env=env,
                       capture_output=True, text=True)
    (out / f"{kind}.log").write_text(p.stdout + "\n---- stderr ----\n" + p.stderr)
    lines = [l for l in p.stdout.splitlines() if l.startswith(MARK)]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"{kind} run failed (exit {p.returncode}); see {out / (kind + '.log')}:\n{p.stderr[-3000:]}")
    res = json.loads(lines[-1][len(MARK):])
    res["wall_s"] = time.time() - t
    return res


def summarize(res: Dict, warmup: int) -> Dict:
    steps = res["per_step"][warmup:] or res["per_step"][-1:]
    T = sum(s["step"] for s in steps)
    k = len(steps)
    samples = sum(s["samples"] for s in steps)
    out = {
        "steps_per_s": k / T, "samples_per_s": samples / T, "tokens_per_s": sum(s["tokens"] for s in steps) / T,
        # summed over the arm's processes: its own peak + its live children's (the rollout worker: bench/_mmrl_arm.py)
        "peak_rss_mb": (res["peak_rss_kb"] + res.get("children_peak_rss_kb", 0)) / 1024, "s_per_step": T / k,
        "processes": res.get("processes", 1), "threads": res.get("threads", 0),
        "cpu_per_step": sum(s["cpu"] for s in steps) / k,
        "gen": sum(s["gen"] for s in steps) / k, "score": sum(s["score"] for s in steps) / k,
        "view_time_share": sum(s.get("view_time_share", 0.0) for s in steps) / k,
        "resample_rounds": sum(s.get("resample_rounds", 0.0) for s in steps) / k,
        "samples_per_step": samples / k,
    }
    out["update"] = out["s_per_step"] - out["gen"] - out["score"]
    if "time/step" in res["per_step"][0]:  # mmrl's own phases, for the overlap efficiency
        out["t_gen"], out["t_update"], out["t_step"] = phases(res["per_step"], skip=warmup)
    return out


def _mmrl_spec(a, model: str, world: Path, configs: List[str], extra: List[str], out: Path) -> Dict:
    ov = [f"model.path={model}", f"data.train={world / 'train.json'}", f"train.out_dir={out}", f"train.steps={a.steps}",
          f"train.prompts_per_step={a.prompts}", f"rollout.n={a.n}", f"rollout.max_new_tokens={a.max_new_tokens}",
          "rollout.temperature=1.0", "rollout.top_p=1.0", f"train.lr={a.lr}", f"train.micro_batch={a.micro_batch}",
          "train.grad_clip=1.0", f"train.seed={a.seed}", f"train.num_threads={a.threads}", "train.save_every=0",
          "train.eval_every=0", "data.max_pixels=3136"]
    return {"configs": configs, "overrides": ov + extra, "threads": a.threads, "seed": a.seed}


ALGOS = [  # name, config files (on top of configs/demo.yaml), overrides
    ("GRPO", [], []),
    ("DAPO", [], ["algorithm.name=dapo", "algorithm.loss_agg=token-mean", "algorithm.clip_high=0.28"]),
    ("GSPO", [], ["algorithm.name=gspo", "algorithm.loss=gspo"]),
    ("BPO", ["configs/bpo_demo.yaml"], []),
    ("T-GRPO", ["configs/tgrpo_demo.yaml"], []),
]


def _prepare(a, out: Path) -> Dict:
    from mmrl.data.synth_image import make_image_world
    from mmrl.data.synth_video import make_video_world
    from mmrl.models.tiny import ensure_tiny_model

    model = str(ensure_tiny_model())
    img, vid = out / "world_image", out / "world_video"
    if not (img / "train.json").exists():
        make_image_world(str(img), a.n_train, 8, seed=a.seed)
    if (a.video or a.algos) and not (vid / "train.json").exists():
        from mmrl.demo import WORLD

        make_video_world(str(vid), a.n_train, 8, seed=a.seed, **WORLD)
    warm = model
    if a.algos and a.algo_sft_steps > 0:
        warm_dir = out / f"sft_warm_{a.algo_sft_steps}"
        if not (warm_dir / "final" / "config.json").exists():
            from mmrl.config import load_config
            from mmrl.train.sft import run_sft

            cfg = load_config([str(REPO / "configs/demo.yaml")],
                              [f"model.path={model}", f"data.train={vid / 'train.json'}", f"train.out_dir={warm_dir}",
                               f"sft.steps={a.algo_sft_steps}", "sft.lr=1e-3", f"train.seed={a.seed}",
                               f"train.num_threads={a.threads}"])
            t = time.time()
            run_sft(cfg, quiet=True)
            print(f"[vs_trl] SFT warm-up for the algorithm table: {a.algo_sft_steps} steps in {time.time() - t:.0f} s", flush=True)
        warm = str(warm_dir / "final")
    return {"model": model, "image": img, "video": vid, "warm": warm}


def _fmt_row(name: str, s: Dict) -> str:
    return (f"| {name} | {setting(int(s['processes']), int(s['threads']))} | {s['steps_per_s']:.3f} | "
            f"{s['samples_per_s']:.1f} | {s['tokens_per_s']:.1f} | {s['peak_rss_mb']:.0f} | {s['s_per_step']:.3f} | "
            f"{s['cpu_per_step']:.3f} | {s['gen']:.3f} | {s['score']:.3f} | {s['update']:.3f} |")


def _median_summary(runs: List[Dict]) -> Dict:
    keys = runs[0].keys()
    return {k: statistics.median(r[k] for r in runs) for k in keys}


def _arm_kinds(a) -> Dict[str, List[str]]:
    """The image-world arms of each framework (the headline's candidates), in the order the tables list them."""
    counts = [a.threads] + [t for t in a.thread_counts if t != a.threads]
    return {"mmrl": [thread_kind("mmrl", t, a.threads) for t in counts] + ([ASYNC_KIND] if a.asynchronous else []),
            "trl": [thread_kind("trl", t, a.threads) for t in counts]}


def _asked_threads(a, kind: str) -> int:
    """The threads per process a run kind asks for: 1 for the async arm, t for ``<framework>_t<t>``, else ``--threads``."""
    if kind == ASYNC_KIND:
        return 1
    head, _, tail = kind.rpartition("_t")
    return int(tail) if head in ("mmrl", "trl") and tail.isdigit() else a.threads


def report(a, results: Dict[str, List[Dict]]) -> str:
    S = {k: [summarize(r, a.warmup) for r in v] for k, v in results.items()}
    off = sorted({f"{k}: {r.get('threads')}" for k, v in results.items() for r in v
                  if r.get("threads") != _asked_threads(a, k)})
    lines = [f"WARNING: runs used other thread counts than asked ({', '.join(off)})", ""] if off else []
    lines += [f"Settings: {a.prompts} prompts x {a.n} responses per step, max_new_tokens {a.max_new_tokens}, temperature 1.0, "
              f"AdamW lr {a.lr}, micro-batch {a.micro_batch}, {a.steps} steps ({a.warmup} warm-up not timed), "
              f"{a.threads} threads (image arms also at {a.thread_counts}; async: 1 per process), {a.reps} repetitions, "
              "fresh process per run; peak RSS summed over an arm's processes.", "",
              "Medians over repetitions (seconds per step split into generation / scoring / update; async: gen = the "
              "trainer's wait for the worker's batch):", "",
              "| run | processes x threads | steps/s | samples/s | gen tokens/s | peak RSS MB | s/step | CPU s/step | gen s "
              "| score s | update s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    names = {"mmrl_baseline": "mmrl, shared prefill off (image)", "mmrl_video": "mmrl (video, 4 frames)",
             "floor": "floor, plain torch (image)", "floor_video": "floor, plain torch (video)", ASYNC_KIND:
             "mmrl async k=1 (image)"}
    kinds = _arm_kinds(a)
    for k in kinds["mmrl"] + kinds["trl"] + ["mmrl_baseline", "mmrl_video", "floor", "floor_video"]:
        if k in S:
            name = names.get(k) or ("TRL GRPOTrainer (image)" if k.startswith("trl") else "mmrl (image)")
            lines.append(_fmt_row(name, _median_summary(S[k])))
    h = headline(S, kinds["mmrl"], kinds["trl"])
    if h is not None:
        m, t = h["mmrl"], h["trl"]
        pairs = list(zip(S[m], S[t]))
        lines += ["", f"Best mmrl arm, {arm_name(m, S[m][0])}, / best TRL arm, {arm_name(t, S[t][0])} (best = highest "
                  "median steps/s), per repetition pair (min / median / max):", "",
                  "| metric | min / median / max |", "|---|---|",
                  f"| steps/s ratio | {spread(h['steps_ratio'])} |",
                  f"| samples/s ratio | {spread([x['samples_per_s'] / y['samples_per_s'] for x, y in pairs])} |",
                  f"| generated tokens/s ratio | {spread([x['tokens_per_s'] / y['tokens_per_s'] for x, y in pairs])} |",
                  f"| peak RSS ratio | {spread(h['rss_ratio'])} |",
                  f"| CPU seconds per step, TRL / mmrl | {spread([y['cpu_per_step'] / x['cpu_per_step'] for x, y in pairs])} |"]
        if "mmrl_baseline" in S:
            pb = list(zip(S["mmrl"], S["mmrl_baseline"]))
            lines.append(f"| steps/s, shared prefill on / off (at --threads) | {spread([m['steps_per_s'] / b['steps_per_s'] for m, b in pb])} |")
    o = overlap(S, thread_kind("mmrl", 1, a.threads))
    if o is not None:
        lines += ["", f"Overlap efficiency (async step / max(generation, update) of the synchronous run at 1 thread, "
                  f"mmrl's time/* metrics): {o['async_step']:.3f} / max({o['gen']:.3f}, {o['update']:.3f}) = "
                  f"{o['efficiency']:.2f} (1.00 = perfect overlap; the synchronous run's own: {o['ceiling']:.2f})"]
    algos = [n for n, _, _ in ALGOS if f"algo_{n}" in S]
    if algos:
        lines += ["", "Algorithms on the video world (same settings, SFT-warmed tiny model), time per step as a ratio "
                  "to GRPO (per repetition, min / median / max):", "",
                  "| algorithm | s/step (median) | / GRPO | responses per step | gen s | score s | update s | view_time_share | resample rounds |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for n in algos:
            runs = S[f"algo_{n}"]
            med = _median_summary(runs)
            ratio = spread([r["s_per_step"] / g["s_per_step"] for r, g in zip(runs, S["algo_GRPO"])])
            lines.append(f"| {n} | {med['s_per_step']:.3f} | {ratio} | {med['samples_per_step']:.0f} | {med['gen']:.3f} | "
                         f"{med['score']:.3f} | {med['update']:.3f} | {med['view_time_share']:.3f} | {med['resample_rounds']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per run (default 6)")
    ap.add_argument("--warmup", type=int, default=1, help="leading steps not timed (default 1)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions, A B A B ... (default 3)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch / OpenMP threads in every run (default 1: stable on a shared 2-core box, see README)")
    ap.add_argument("--thread-counts", type=int, nargs="+", default=[1, 2],
                    help="the image arms of both frameworks also run at each of these thread counts; the headline "
                         "takes each framework's best (default 1 2)")
    ap.add_argument("--no-async", dest="asynchronous", action="store_false",
                    help="skip mmrl's asynchronous arm (rollout.asynchronous.max_staleness=1, 2 processes x 1 thread)")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step (default 16)")
    ap.add_argument("--n", type=int, default=8, help="responses per prompt, the group size (default 8)")
    ap.add_argument("--max-new-tokens", type=int, default=4, help="new tokens per response (one length)")
    ap.add_argument("--lengths", type=int, nargs="+", default=None,
                    help="several --max-new-tokens in one invocation (e.g. 4 64 256 512): one table over lengths")
    ap.add_argument("--micro-batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-train", type=int, default=256, help="training samples in each synthetic world")
    ap.add_argument("--algo-sft-steps", type=int, default=40,
                    help="SFT steps (lr 1e-3) warming the model for the algorithm table (0 = random init)")
    ap.add_argument("--no-video", dest="video", action="store_false", help="skip the mmrl video-world run")
    ap.add_argument("--no-algos", dest="algos", action="store_false", help="skip the algorithm table")
    ap.add_argument("--no-trl", dest="trl", action="store_false", help="skip TRL (mmrl figures only)")
    ap.add_argument("--mmrl-baseline", action="store_true", help="add mmrl with shared-prompt prefill/scoring off")
    ap.add_argument("--no-floor", dest="floor", action="store_false",
                    help="skip the floor (bench/floor.py: the step's bare computation in plain torch)")
    ap.add_argument("--out", default="runs/vs_trl")
    ap.add_argument("--_arm", help=argparse.SUPPRESS)
    ap.add_argument("--_spec", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._arm:
        return _child(a._arm, a._spec)
    if a.warmup >= a.steps:
        ap.error("--warmup must be below --steps")
    if min(a.thread_counts + [a.threads]) < 1:
        ap.error("--threads and --thread-counts must be at least 1")
    if a.trl:
        try:
            import trl  # noqa: F401
        except ImportError:
            ap.error("trl is not installed: pip install -e '.[bench]' (or pass --no-trl)")
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    import torch

    torch.set_num_threads(a.threads)
    prep = _prepare(a, out)
    lengths = a.lengths or [a.max_new_tokens]
    plans = {L: _plan(argparse.Namespace(**dict(vars(a), max_new_tokens=L)), prep, out / f"len{L}" if a.lengths else out,
                      algos=a.algos and L == lengths[0]) for L in lengths}
    results = {L: {k: [] for k, _, _ in plans[L]} for L in lengths}
    for rep in range(a.reps):
        for L in lengths:
            for kind, arm, spec in plans[L]:
                spec = dict(spec)
                if arm == "mmrl":
                    spec["overrides"] = [o if not o.startswith("train.out_dir=") else f"{o}/rep{rep}" for o in spec["overrides"]]
                res = _spawn(f"{kind}_len{L}_rep{rep}", arm, spec, out / "logs")
                results[L][kind].append(res)
                s = summarize(res, a.warmup)
                print(f"[vs_trl] rep {rep + 1}/{a.reps} {L:4d} tokens {kind:14s} {s['s_per_step']:.3f} s/step  "
                      f"{s['samples_per_s']:.1f} samples/s  peak RSS {s['peak_rss_mb']:.0f} MB  (run {res['wall_s']:.0f} s)",
                      flush=True)
        table = _write(argparse.Namespace(**dict(vars(a), reps=rep + 1)), lengths, results, out)  # partial tables too
    print("\n" + table)


def _write(a, lengths: List[int], results: Dict, out: Path) -> str:
    tables = [report(argparse.Namespace(**dict(vars(a), max_new_tokens=L)), results[L]) for L in lengths]
    if len(lengths) > 1:
        tables.insert(0, lengths_table(a, lengths, results))
    kinds = _arm_kinds(a)
    summaries = {L: {k: [summarize(r, a.warmup) for r in v] for k, v in results[L].items()} for L in lengths}
    tables.insert(0, headline_table(lengths, summaries, kinds["mmrl"], kinds["trl"], thread_kind("mmrl", 1, a.threads)))
    table = "\n\n".join(tables)
    by_length = {str(L): r for L, r in results.items()} if a.lengths else results[lengths[0]]
    (out / "results.json").write_text(json.dumps({"args": vars(a), "results": by_length}, indent=1))
    (out / "table.md").write_text(table + "\n")
    return table


def _plan(a, prep: Dict, out: Path, algos: bool) -> List:
    """The runs of one length, in the order a repetition runs them: (kind, arm, spec)."""
    plan = []
    for t in [a.threads] + [t for t in a.thread_counts if t != a.threads]:  # the image arms at each thread count
        at = argparse.Namespace(**dict(vars(a), threads=t))
        mk, tk = thread_kind("mmrl", t, a.threads), thread_kind("trl", t, a.threads)
        plan.append((mk, "mmrl", _mmrl_spec(at, prep["model"], prep["image"], ["configs/demo.yaml"], [], out / mk)))
        if a.trl:
            plan.append((tk, "trl", {"model": prep["model"], "world": str(prep["image"]), "seed": a.seed, "threads": t,
                                     "prompts_per_step": a.prompts, "n": a.n, "micro_batch": a.micro_batch,
                                     "max_new_tokens": a.max_new_tokens, "temperature": 1.0, "lr": a.lr,
                                     "grad_clip": 1.0, "steps": a.steps, "out": str(out / tk)}))
    if a.asynchronous:  # trainer + rollout worker, one thread each (the worker takes the trainer's count)
        a1 = argparse.Namespace(**dict(vars(a), threads=1))
        plan.append((ASYNC_KIND, "mmrl", _mmrl_spec(a1, prep["model"], prep["image"], ["configs/demo.yaml"],
                                                    ["rollout.asynchronous.max_staleness=1"], out / ASYNC_KIND)))
    floor = {"model": prep["model"], "seed": a.seed, "threads": a.threads, "prompts_per_step": a.prompts, "n": a.n,
             "max_new_tokens": a.max_new_tokens, "lr": a.lr, "grad_clip": 1.0, "steps": a.steps}
    if a.floor:
        plan.append(("floor", "floor", dict(floor, world=str(prep["image"]))))
    if a.mmrl_baseline:
        spec = _mmrl_spec(a, prep["model"], prep["image"], ["configs/demo.yaml"], [], out / "mmrl_baseline")
        plan.append(("mmrl_baseline", "mmrl", dict(spec, baseline=True)))
    if a.video:
        plan.append(("mmrl_video", "mmrl", _mmrl_spec(a, prep["model"], prep["video"], ["configs/demo.yaml"], [],
                                                      out / "mmrl_video")))
        if a.floor:
            plan.append(("floor_video", "floor", dict(floor, world=str(prep["video"]))))
    if algos:
        for name, files, extra in ALGOS:
            if name == "BPO":  # rollout.n = packs x 4 views: the nearest multiple of 4 (the old fixed 2 packs = 8)
                extra = extra + [f"rollout.n={4 * max(1, a.n // 4)}"]
            plan.append((f"algo_{name}", "mmrl", _mmrl_spec(a, prep["warm"], prep["video"], ["configs/demo.yaml"] + files,
                                                             extra, out / f"algo_{name}")))
    return plan


def lengths_table(a, lengths: List[int], results: Dict[int, Dict[str, List[Dict]]]) -> str:
    """One row per length: mmrl vs TRL (per repetition pair, min / median / max) and mmrl vs the floor."""
    lines = [f"mmrl vs TRL and the floor by response length ({a.prompts} prompts x {a.n} responses, {a.threads} thread(s), "
             f"{a.steps} steps ({a.warmup} warm-up), {a.reps} repetitions; ratios per repetition: min / median / max; "
             "s/step and gen/update s are medians):", "",
             "| new tokens | mmrl s/step | TRL s/step | mmrl / TRL steps/s | TRL / mmrl CPU s per step | peak RSS mmrl / TRL | mmrl gen / score+update s "
             "| TRL gen / score+update s | floor s/step | mmrl / floor | video s/step | video floor s/step | video / floor |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for L in lengths:
        S = {k: [summarize(r, a.warmup) for r in v] for k, v in results[L].items()}
        med = {k: _median_summary(v) for k, v in S.items()}

        def cell(k, f):
            return f(med[k]) if k in med else "-"

        def ratio(x, y, f):
            return spread([f(m, t) for m, t in zip(S[x], S[y])]) if x in S and y in S else "-"

        lines.append(" | ".join([
            f"| {L}", cell("mmrl", lambda m: f"{m['s_per_step']:.3f}"), cell("trl", lambda m: f"{m['s_per_step']:.3f}"),
            ratio("mmrl", "trl", lambda m, t: m["steps_per_s"] / t["steps_per_s"]),
            ratio("mmrl", "trl", lambda m, t: t["cpu_per_step"] / m["cpu_per_step"]),
            ratio("mmrl", "trl", lambda m, t: m["peak_rss_mb"] / t["peak_rss_mb"]),
            cell("mmrl", lambda m: f"{m['gen']:.2f} / {m['update'] + m['score']:.2f}"),
            cell("trl", lambda m: f"{m['gen']:.2f} / {m['update'] + m['score']:.2f}"),
            cell("floor", lambda m: f"{m['s_per_step']:.3f}"),
            ratio("mmrl", "floor", lambda m, f: m["s_per_step"] / f["s_per_step"]),
            cell("mmrl_video", lambda m: f"{m['s_per_step']:.3f}"), cell("floor_video", lambda m: f"{m['s_per_step']:.3f}"),
            ratio("mmrl_video", "floor_video", lambda m, f: m["s_per_step"] / f["s_per_step"])]) + " |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
