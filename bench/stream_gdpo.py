"""Streaming agents on the synthetic OVO-format world (issue 18; specs/algorithms.md §5): the offline-protocol model
(GRPO), the streaming agent after masked SFT, after GRPO on the summed rewards, and after Stream-GDPO, over seeds.

    .venv/bin/python bench/stream_gdpo.py [--seeds 0 1 2] [--n-train 8] [--n-test 4] [--sft-steps 200]
        [--rl-steps 20] [--offline-sft-steps 200] [--action-weight 1.0] [--out runs/stream_gdpo] [--report FILE]
        [--render-only]   (seeds may run as separate processes into one --out, then --render-only)
        [--reuse-offline OLD_OUT]   (take the offline arm of an earlier run of the same seeds and worlds)

Per seed (everything seeded by it): a world (``mmrl data synth --kind stream``: 16-s streams of 1-s chunks at 2 fps,
56x56 frames; per stream a backward EPM, a real-time ATR and forward CRR and REC items in OVO-Bench's own format);

- **offline GRPO**: the offline protocol's queries of the training streams (one per item / forward probe, the
  prefix ``[0, ceil(t)]`` and the exact OVO prompt) as single-turn samples: SFT on the gold answer, then GRPO with
  the official OVO parser as the reward; evaluated offline (one query per prefix);
- **stream SFT**: masked SFT on the oracle's stream blocks (``configs/stream_gdpo.yaml``, ``mmrl sft``);
- **stream GRPO (sum)**: from that checkpoint, GRPO on R_out + R_fmt + ½R_tool + ½R_mem (``configs/stream_grpo_sum.yaml``);
- **Stream-GDPO**: from that checkpoint, the decoupled advantage (``configs/stream_gdpo.yaml``); the two RL arms share
  steps, lr, prompts, rollouts and seed; they differ only in the advantage.

Evaluation on the held-out test streams (``mmrl eval ovobench --streaming``: both protocols, official scorer):
BT, RT, FT, the weighted overall (WTI weighting), recall validity (valid recalls / recall actions), the memory
scores of every compaction against the world's facts (S_time, S_keep: ``mmrl.rewards.stream_memory``), and the
visual tokens shown per query; and a no-model reference row (``no_tracking_row``). Table: mean ± 95% CI over
seeds, per-seed values below.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's mmrl, whatever the venv has installed
sys.path.insert(0, str(REPO / "bench"))

ARMS = ["offline_grpo", "stream_sft", "stream_grpo_sum", "stream_gdpo"]
LABEL = {"offline_grpo": "offline protocol, GRPO", "stream_sft": "streaming, masked SFT",
         "stream_grpo_sum": "streaming, GRPO on the sum", "stream_gdpo": "streaming, Stream-GDPO"}
METRICS = [("BT", "bt"), ("RT", "rt"), ("FT", "ft"), ("weighted overall", "overall"), ("recall validity", "recall_valid"),
           ("S_time", "s_time"), ("S_keep", "s_keep"), ("visual tokens / query", "vtok")]
BASELINE = "no_tracking"  # reference row, no model: each forward question answered once, when asked, with its first probe's gold
LABEL[BASELINE] = "no model: first forward answer, never updated"
OFFLINE_QUERIES: Dict[str, Any] = {}  # sample id -> EvalQuery (the offline reward's official parser and gold)


# ---- the offline arm ------------------------------------------------------------------------------------------------
def offline_samples(items, video_root: str, nframes: int, max_pixels: int):
    """The offline protocol's queries of ``items`` as single-turn samples: the OVO prompt as the question (no options
    appended, no extra instruction), the query's prefix as the video, the gold as a text answer."""
    from mmrl.data.schema import Sample, VideoRef
    from mmrl.eval.benchmark_def import load_benchmark
    from mmrl.eval.benchmarks.ovobench.protocol import build_queries

    out = []
    for q in build_queries(items, load_benchmark("ovobench"), video_root):
        sid = f"ovo_{q.id}"
        OFFLINE_QUERIES[sid] = q
        out.append(Sample(id=sid, question=q.user, candidates=[], answer=str(q.gold), qtype=q.task, answer_type="text",
                          video=VideoRef(path=q.video.path, start=0.0, end=q.video.end, nframes=nframes,
                                         max_pixels=max_pixels)))
    return out


def register_offline_reward() -> None:
    from mmrl.eval.driver import score_query
    from mmrl.rewards import REWARDS

    if "ovo_official" not in REWARDS:
        @REWARDS.register("ovo_official")
        def ovo_official(ctx):  # the official OVO-Bench parser of the query, on the response
            return [float(score_query(OFFLINE_QUERIES[c.sample.id], c.trajectory.text)) for c in ctx]


# ---- runs -----------------------------------------------------------------------------------------------------------
def run_seed(seed: int, args, out: Path) -> Dict[str, Dict[str, float]]:
    import torch

    from mmrl.config import RewardConfig, load_config
    from mmrl.data.annotations import save_samples
    from mmrl.stream.dataset import make_stream_dataset
    from mmrl.train.rl_trainer import RLTrainer
    from mmrl.train.sft import run_sft

    torch.set_num_threads(1)
    world = make_stream_dataset(str(out / "world"), args.n_train, args.n_test, seed=seed)
    common = [f"train.seed={seed}", "train.num_threads=1", f"data.train={world['train']}"]
    times: Dict[str, float] = {}

    # masked SFT on the oracle's streams, then the two RL arms from it
    t0 = time.perf_counter()
    sft = load_config([str(REPO / "configs/stream_gdpo.yaml")],
                      common + ["model.path=tiny", f"train.out_dir={out / 'stream_sft'}", f"sft.steps={args.sft_steps}",
                                f"sft.batch_size={args.sft_batch}", f"train.micro_batch={args.sft_batch}"])
    run_sft(sft, quiet=True, overwrite=True)
    times["stream_sft"] = time.perf_counter() - t0
    models = {"stream_sft": out / "stream_sft" / "final"}
    for arm, files, extra in (
            ("stream_grpo_sum", ["configs/stream_gdpo.yaml", "configs/stream_grpo_sum.yaml"], []),
            ("stream_gdpo", ["configs/stream_gdpo.yaml"], [f"algorithm.params.action_loss_weight={args.action_weight}"])):
        t0 = time.perf_counter()
        cfg = load_config([str(REPO / f) for f in files],
                          common + extra + [f"model.path={models['stream_sft']}", f"train.out_dir={out / arm}",
                                            f"train.steps={args.rl_steps}", f"train.prompts_per_step={args.prompts_per_step}",
                                            f"rollout.n={args.n}", f"train.lr={args.rl_lr}"])
        RLTrainer(cfg, quiet=True).run(overwrite=True)
        times[arm] = time.perf_counter() - t0
        models[arm] = out / arm / "final"

    if args.reuse_offline:
        times["offline_grpo"] = reuse_offline(Path(args.reuse_offline) / out.name, out, world)
        (out / "times.json").write_text(json.dumps(times))
        return evaluate_seed(out, world, args)
    # the offline protocol's model: SFT then GRPO on the training streams' offline queries
    t0 = time.perf_counter()
    register_offline_reward()
    items_train = json.loads(Path(world["ovo_train"]).read_text())
    off_path = out / "offline_train.json"
    save_samples(offline_samples(items_train, world["video_root"], args.nframes, 3136), str(off_path))
    base = [f"train.seed={seed}", "train.num_threads=1", f"data.train={off_path}", "data.prompt.instruction=''",
            f"data.nframes={args.nframes}", "data.max_pixels=3136", "rollout.max_new_tokens=4"]
    cfg = load_config([str(REPO / "configs/demo.yaml")],
                      base + ["model.path=tiny", f"train.out_dir={out / 'offline_sft'}", f"sft.steps={args.offline_sft_steps}",
                              "sft.batch_size=16", "train.micro_batch=16", "sft.lr=1e-3"])
    run_sft(cfg, quiet=True, overwrite=True)
    cfg = load_config([str(REPO / "configs/demo.yaml")],
                      base + [f"model.path={out / 'offline_sft' / 'final'}", f"train.out_dir={out / 'offline_grpo'}",
                              f"train.steps={args.rl_steps}", f"train.prompts_per_step={args.prompts_per_step * 4}",
                              f"rollout.n={args.n}", f"train.lr={args.rl_lr}", "train.save_every=0"])
    cfg.rewards = [RewardConfig("ovo_official", 1.0)]
    RLTrainer(cfg, quiet=True).run(overwrite=True)
    times["offline_grpo"] = time.perf_counter() - t0
    models["offline_grpo"] = out / "offline_grpo" / "final"

    (out / "times.json").write_text(json.dumps(times))
    return evaluate_seed(out, world, args)


def reuse_offline(old: Path, out: Path, world: Dict[str, Any]) -> float:
    """The offline arm of an earlier run of the same seed (its model, its evaluation, its training time): the offline
    protocol never sees stream question ids, so it is the same run when the world's OVO files are byte-identical
    (checked; ``ValueError`` otherwise). Returns its training seconds."""
    import filecmp
    import shutil

    for key in ("ovo_train", "ovo_test"):
        prev = old / "world" / Path(world[key]).name
        if not filecmp.cmp(prev, world[key], shallow=False):
            raise ValueError(f"--reuse-offline: {prev} differs from {world[key]} (not the same world)")
    for d in ("offline_grpo/final", "eval_offline_grpo"):
        shutil.rmtree(out / d, ignore_errors=True)
        shutil.copytree(old / d, out / d)
    return json.loads((old / "times.json").read_text())["offline_grpo"]


def evaluate_seed(out: Path, world: Dict[str, Any], args) -> Dict[str, Dict[str, Any]]:
    """Every arm's final model on the held-out streams (the world's own test ids); ``rows.json``."""
    times = json.loads((out / "times.json").read_text())
    rows: Dict[str, Dict[str, Any]] = {}
    for arm in ARMS:
        ev = out / f"eval_{arm}"
        if not (ev / "side_by_side.md").exists():
            evaluate(out / arm / "final", world, ev, args)
        both = {k: json.loads((ev / k / "summary.json").read_text()) for k in ("offline", "streaming")}
        both["offline"]["cost"] = offline_cost_of(ev)
        rows[arm] = dict(arm_metrics(arm, both, world, ev), train_s=times[arm])
    (out / "rows.json").write_text(json.dumps(rows, indent=1))
    return rows


def no_tracking_row(ovo_test: Path) -> Dict[str, float]:
    """The reference row: an agent that answers each forward question once, when it is asked, with the gold of its
    first probe (what "not yet" is: CRR "No", REC's first count ...) and never updates or answers a choice question;
    official scorer, the held-out streams' own items."""
    sc = no_tracking_scores(ovo_test)
    nan = float("nan")
    return {"bt": sc["modes"]["backward"]["acc"] / 100, "rt": sc["modes"]["realtime"]["acc"] / 100,
            "ft": sc["modes"]["forward"]["acc"] / 100, "overall": sc["weighted_overall"] / 100, "vtok": nan,
            "recall_valid": nan, "s_time": nan, "s_keep": nan, "train_s": nan}


def no_tracking_scores(ovo_test: Path) -> Dict[str, Any]:
    """The official scores (``score_results``: per task and mode) of the no-model agent of ``no_tracking_row``."""
    from mmrl.eval.benchmark_def import load_benchmark
    from mmrl.eval.benchmarks.ovobench.protocol import assemble_results
    from mmrl.eval.benchmarks.ovobench.score import score_results
    from mmrl.stream.ovo import group_by_video, stream_questions, stream_responses
    from mmrl.stream.record import AnswerEvent

    bdef = load_benchmark("ovobench")
    items = json.loads(Path(ovo_test).read_text())
    responses: Dict[str, Any] = {}
    for _, its in group_by_video(items).items():
        answers = [AnswerEvent(q.qid, str(q.probes[0].gold), q.asked, int(q.asked))
                   for q in stream_questions(its) if q.probes]
        responses.update(stream_responses(its, answers))
    return score_results(assemble_results(items, responses, bdef), bdef)


def offline_cost_of(ev: Path) -> Dict[str, float]:
    from mmrl.eval.benchmarks.ovobench.stream import offline_cost
    from mmrl.eval.report import read_jsonl

    return offline_cost(read_jsonl(ev / "offline" / "predictions.jsonl"))


def evaluate(model: Path, world: Dict[str, Any], out: Path, args) -> Dict[str, Any]:
    """``mmrl eval ovobench --streaming`` on the test streams: both protocols, official scorer."""
    from mmrl.cli import build_parser
    from mmrl.eval.cli_bench import eval_main

    argv = ["eval", "ovobench", "--model", str(model), "--anno", world["ovo_test"], "--video-root", world["video_root"],
            "--nframes", str(args.nframes), "--min-pixels", "784", "--max-pixels", "3136", "--max-new-tokens", "8",
            "--streaming", "--out", str(out), "--no-progress", "--device", "cpu"]
    return eval_main(build_parser().parse_args(argv))


def arm_metrics(arm: str, both: Dict[str, Any], world: Dict[str, Any], out: Path) -> Dict[str, float]:
    """The arm's protocol (offline for the offline model, streaming for the others): scores, recall validity, memory
    scores of the compactions against the world's facts, visual tokens shown per query."""
    from mmrl.eval.report import read_jsonl
    from mmrl.rewards.stream_memory import s_keep, s_time
    from mmrl.stream.record import EpisodeRecord

    proto = both["offline"] if arm == "offline_grpo" else both["streaming"]
    modes = proto["scores"]["modes"]
    row = {"bt": modes["backward"]["acc"] / 100, "rt": modes["realtime"]["acc"] / 100, "ft": modes["forward"]["acc"] / 100,
           "overall": proto["scores"]["weighted_overall"] / 100, "vtok": proto["cost"]["visual_tokens_shown"],
           "recall_valid": float("nan"), "s_time": float("nan"), "s_keep": float("nan")}
    if arm == "offline_grpo":
        return row
    oracle = json.loads(Path(world["oracle_test"]).read_text())
    recalls = valid = 0
    st, sk = [], []
    for video in read_jsonl(out / "streaming" / "stream_records.jsonl"):
        facts = [(f[2], float(f[0]), float(f[1])) for f in oracle[video["video"]]["facts"]]
        for raw in video["records"]:
            rec = EpisodeRecord.from_dict(raw)
            for s in rec.subturns:
                if s.action.kind == "recall":
                    recalls += 1
                    valid += s.valid
            for c in rec.compactions:
                post = [(m.note, m.start, m.end) for m in c.post]
                seen = [f for f in facts if f[1] < c.time]
                st.append(s_time(post, c.time, [(a, b) for _, a, b in seen]))
                sk.append(s_keep(post, [n for n, _, b in seen if b <= c.time]))
    row.update(recall_valid=valid / recalls if recalls else float("nan"), recalls=float(recalls),
               s_time=sum(st) / len(st) if st else float("nan"), s_keep=sum(sk) / len(sk) if sk else float("nan"))
    return row


# ---- table ----------------------------------------------------------------------------------------------------------
def render(per_seed: Dict[int, Dict[str, Dict[str, Dict[str, float]]]], cmd: str, args) -> str:
    seeds = sorted(per_seed)
    lines = [f"# Streaming agents: offline GRPO vs masked SFT vs GRPO on the sum vs Stream-GDPO ({len(seeds)} seeds)", "",
             f"Command: `{cmd}`", "",
             f"Scale: tiny Qwen2.5-VL (random init), per seed a world of {args.n_train} training and {args.n_test} "
             f"held-out 16-s streams (4 blocks of 4 chunks each; 1-s chunks at 2 fps, 56x56); masked SFT "
             f"{args.sft_steps} steps x {args.sft_batch} blocks; RL {args.rl_steps} steps x {args.prompts_per_step} "
             f"blocks x {args.n} rollouts, lr {args.rl_lr}, Stream-GDPO action-branch weight {args.action_weight:g} "
             f"(1 = off: the RL arms differ only in the advantage); offline arm: SFT {args.offline_sft_steps} x 16 "
             f"queries, GRPO {args.rl_steps} steps x {4 * args.prompts_per_step} queries x {args.n}. Held-out streams "
             f"only. Scores in % (official OVO-Bench scorer, greedy); mean with 95% t-interval over seeds.", ""]
    lines += table(per_seed)
    return "\n".join(lines) + "\n"


def table(per_seed) -> List[str]:
    from bpo_table import fmt_ci

    seeds = sorted(per_seed)
    scale = {"vtok": 1.0}
    rows = per_seed
    arms = ARMS + [BASELINE] * all(BASELINE in rows[s] for s in seeds)
    lines = ["| arm | " + " | ".join(m for m, _ in METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    for arm in arms:
        cells = [fmt_ci([rows[s][arm][k] for s in seeds], scale=scale.get(k, 100.0)) for _, k in METRICS]
        lines.append(f"| {LABEL[arm]} | " + " | ".join(cells) + " |")
    lines += ["", "| seed | arm | " + " | ".join(m for m, _ in METRICS) + " | recalls | train s |",
              "|---|---|" + "---|" * (len(METRICS) + 2)]
    for s in seeds:
        for arm in arms:
            r = rows[s][arm]
            vals = [("n/a" if r[k] != r[k] else f"{r[k] * scale.get(k, 100.0):.1f}") for _, k in METRICS]
            lines.append(f"| {s} | {LABEL[arm]} | " + " | ".join(vals) + f" | {r.get('recalls', float('nan')):.0f} | "
                         f"{r['train_s']:.0f} |".replace("nan", "n/a"))
    d = [rows[s]["stream_gdpo"]["overall"] - rows[s]["stream_grpo_sum"]["overall"] for s in seeds]
    lines += ["", f"Stream-GDPO minus GRPO-on-the-sum, weighted overall (points): {fmt_ci(d, signed=True)} "
                  f"(per seed: {', '.join(f'{100 * x:+.1f}' for x in d)}).", ""]
    return lines


def main(argv: List[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--n-train", type=int, default=8)
    p.add_argument("--n-test", type=int, default=4)
    p.add_argument("--sft-steps", type=int, default=200)
    p.add_argument("--sft-batch", type=int, default=4)
    p.add_argument("--offline-sft-steps", type=int, default=200)
    p.add_argument("--rl-steps", type=int, default=20)
    p.add_argument("--rl-lr", type=float, default=1e-4)
    p.add_argument("--prompts-per-step", type=int, default=2)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--action-weight", type=float, default=1.0,
                   help="Stream-GDPO's action-branch loss weight (1 = off: the two RL arms differ only in the advantage)")
    p.add_argument("--nframes", type=int, default=4)  # the shortest prefix (2 s at 2 fps) holds 5 frames
    p.add_argument("--out", default="runs/stream_gdpo")
    p.add_argument("--report", default=str(REPO / "bench/results/stream_gdpo.md"))
    p.add_argument("--render-only", action="store_true")
    p.add_argument("--reuse-offline", default="",
                   help="an earlier --out of the same seeds: take its offline arm (model, eval, time) instead of "
                        "retraining it (checked to be the same world; the offline protocol shows no stream ids)")
    p.add_argument("--eval-only", action="store_true", help="re-evaluate the trained models of each seed in --out")
    args = p.parse_args(argv)
    out = Path(args.out)
    per_seed = {}
    for s in args.seeds:
        d = out / f"seed{s}"
        rows = d / "rows.json"
        if args.eval_only:
            w = d / "world"
            world = {"ovo_test": str(w / "ovo_test.json"), "video_root": str(w / "videos"),
                     "oracle_test": str(w / "oracle_test.json")}
            per_seed[s] = evaluate_seed(d, world, args)
        elif args.render_only or rows.exists():
            per_seed[s] = json.loads(rows.read_text())
        else:
            per_seed[s] = run_seed(s, args, d)
        per_seed[s][BASELINE] = no_tracking_row(d / "world" / "ovo_test.json")
    cmd = "OMP_NUM_THREADS=1 .venv/bin/python bench/stream_gdpo.py " + " ".join(sys.argv[1:] if argv is None else argv)
    text = render(per_seed, cmd.strip(), args)
    print(text)
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(text)


if __name__ == "__main__":
    main()
