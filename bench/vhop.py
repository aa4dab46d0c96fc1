"""VHOP-Router miniature: retrieval success by level for the single-step retriever and the router after SFT,
+imitation and +RL, and agentic search with (a) single-step top-k calls against (b) one router call.

Per seed: a synthetic VHOP world (``mmrl.data.synth_vhop``; the test split is its own corpus, held out), the three
stages on the embedded tiny Qwen2.5-VL (``mmrl.retrieval.train_*``, the configs in configs/vhop_*.yaml scaled by the
flags below), greedy router chains on the test queries, and the single-step retriever on the SFT router's embedder
(the same weights: top-``max_hops`` images of the query embedding; success = every gold image among them).
Agentic arms: ``bench/vhop_agent.py`` (real tool loop and processor, a scripted ideal reader as the agent).

    OMP_NUM_THREADS=1 python bench/vhop.py --seeds 0 1 2 --out runs/bench_vhop
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

ARMS = ("single_step", "sft", "imitate", "rl")
ARM_LABEL = {"single_step": "single-step top-k (SFT embedder)", "sft": "router: SFT", "imitate": "router: +imitation",
             "rl": "router: +RL"}
LEVELS = (1, 2, 3, 4, 5)


def one_seed(a) -> dict:
    import torch

    torch.set_num_threads(1)
    from mmrl.data.synth_vhop import make_vhop_world
    from mmrl.retrieval.index import CorpusIndex
    from mmrl.retrieval.retriever import SingleStepRetriever
    from mmrl.retrieval.train_common import build_router, load_data, success_by_level
    from mmrl.retrieval.train_loop import run_stage
    from mmrl.retrieval.train_stages import load_stage_config
    from mmrl.retrieval.train_imitate import ImitateLoss
    from mmrl.retrieval.train_rl import RLLoss
    from mmrl.retrieval.train_sft import SFTLoss

    out = Path(a.out) / f"seed{a.seed}"
    make_vhop_world(str(out / "world"), a.n_train, a.n_test, seed=a.seed, size=a.size, colours=a.colours,
                    shapes=a.shapes, scene_cap=a.scene_cap, emblem_scale=a.emblem_scale)
    train_q, test_q = out / "world" / "queries_train.json", out / "world" / "queries_test.json"
    base = [f"data.train={train_q}", f"data.eval={test_q}",
            f"train.seed={a.seed}", f"router.max_hops={a.max_hops}", f"router.top_k={a.top_k}"] + (
        [f"model.pooling={a.pooling}"] if a.pooling else [])
    cfgs = {
        "sft": load_stage_config("sft", [str(REPO / "configs/vhop_sft.yaml")], base + [
            f"train.out_dir={out / 'sft'}", f"train.steps={a.sft_steps}", f"train.save_every={a.sft_steps}"]),
        "imitate": load_stage_config("imitate", [str(REPO / "configs/vhop_imitate.yaml")], base + [
            f"train.out_dir={out / 'imitate'}", f"train.steps={a.il_steps}", f"train.save_every={a.il_steps}",
            f"train.init_from={out / 'sft'}"]),
        "rl": load_stage_config("rl", [str(REPO / "configs/vhop_rl.yaml")], base + [
            f"train.out_dir={out / 'rl'}", f"train.steps={a.rl_steps}", f"train.save_every={a.rl_steps}",
            f"train.init_from={out / 'imitate'}", f"rl.ref_from={out / 'sft'}"]),
    }
    data = load_data(cfgs["sft"], say=lambda *_: None)
    res = {}
    for stage, loss in (("sft", SFTLoss), ("imitate", ImitateLoss), ("rl", RLLoss)):
        res[stage] = run_stage(cfgs[stage], loss(), overwrite=True, quiet=True, data=data)
        print(f"seed {a.seed} {stage}: {res[stage]}", flush=True)
    # single step on the SFT embedder, over the held-out corpus
    sft = build_router(load_stage_config("sft", [str(out / "sft" / "config.yaml")],
                                         [f"train.init_from={out / 'sft'}"]), data[2][0])
    corpus, queries = data[2]
    index = CorpusIndex.build(sft.embedder.eval(), corpus)
    found = SingleStepRetriever(sft.embedder).retrieve_batch([q.query for q in queries], index, a.max_hops)
    ok_chains = [q.chain if set(q.chain) <= set(f.ids) else [] for q, f in zip(queries, found)]
    res["single_step"] = success_by_level(queries, ok_chains)
    res["single_step"]["images"] = float(a.max_hops)
    if not a.no_agent:
        from bench.vhop_agent import run_agent, write_suite
        from mmrl.models.loading import load_processor

        proc = load_processor("tiny")
        qfile = str(test_q)
        res["agent"] = {
            "single_step": run_agent(qfile, write_suite(out, "single_step", str(out / "sft" / "final" / "embedder"),
                                                        a.agent_k, a.agent_calls), proc, a.agent_k, a.agent_calls),
            "router": run_agent(qfile, write_suite(out, "router", str(out / "rl"), a.max_hops, a.agent_calls),
                                proc, a.max_hops, a.agent_calls),
        }
    (out / "result.json").write_text(json.dumps(res, indent=2))
    return res


def table(results: dict, args) -> str:
    from bpo_table import fmt_ci

    seeds = sorted(results)
    lines = [f"Retrieval success on held-out test queries (own corpus), % (mean [95% CI] over seeds {seeds}; "
             "per-seed values in brackets)", "",
             "| retriever | " + " | ".join(f"L{l}" for l in LEVELS) + " | all | hops/images |",
             "|---|" + "---|" * (len(LEVELS) + 2)]
    for arm in ARMS:
        cells = []
        for key in [f"success/L{l}" for l in LEVELS] + ["success"]:
            xs = [results[s][arm].get(key, float("nan")) for s in seeds]
            cells.append(f"{fmt_ci(xs)} ({', '.join(f'{100 * x:.0f}' for x in xs)})")
        extra = [results[s][arm].get("hops", results[s][arm].get("images")) for s in seeds]
        cells.append(f"{sum(extra) / len(extra):.2f}")
        lines.append(f"| {ARM_LABEL[arm]} | " + " | ".join(cells) + " |")
    if all("agent" in results[s] for s in seeds):
        lines += ["", "Agentic search on the same test queries (scripted ideal reader as the agent; per task, mean "
                  "[95% CI] over seeds)", "", "| tool | success % | agent tokens | in-context images | calls |",
                  "|---|---|---|---|---|"]
        for arm, label in (("single_step", f"(a) single-step top-{args.agent_k} per call"),
                           ("router", "(b) router, one chain per call")):
            row = []
            for key, scale in (("success", 100.0), ("tokens", 1.0), ("images", 1.0), ("calls", 1.0)):
                xs = [results[s]["agent"][arm][key] for s in seeds]
                row.append(f"{fmt_ci(xs, scale=scale)} ({', '.join(f'{scale * x:.1f}' for x in xs)})")
            lines.append(f"| {label} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default="runs/bench_vhop")
    p.add_argument("--n-train", type=int, default=30)
    p.add_argument("--n-test", type=int, default=25)
    # the world (mmrl.data.synth_vhop.make_vhop_world); the defaults are the world of bench/results/vhop.md
    p.add_argument("--size", type=int, default=56, help="image side (px)")
    p.add_argument("--colours", type=int, default=8, help="main-object colours (1..12)")
    p.add_argument("--shapes", type=int, default=5, help="main-object shapes (1..5)")
    p.add_argument("--scene-cap", type=int, default=24, help="images per scene before a fresh scene opens")
    p.add_argument("--emblem-scale", type=float, default=0.28, help="emblem plate side / image side")
    p.add_argument("--pooling", choices=("mean", "last"), help="embedder pooling (default: the configs')")
    p.add_argument("--sft-steps", type=int, default=300)
    p.add_argument("--il-steps", type=int, default=40)
    p.add_argument("--rl-steps", type=int, default=15)
    p.add_argument("--max-hops", type=int, default=6)
    p.add_argument("--top-k", type=int, default=50)
    p.add_argument("--agent-k", type=int, default=6, help="images per single-step call in the agentic arm (a)")
    p.add_argument("--agent-calls", type=int, default=6, help="tool calls per agentic episode")
    p.add_argument("--no-agent", action="store_true")
    p.add_argument("--seed", type=int, help=argparse.SUPPRESS)  # one seed in a worker process
    p.add_argument("--write", default=None, help="also write the table to this markdown file")
    a = p.parse_args()
    if a.seed is not None:
        one_seed(a)
        return
    procs = []
    for s in a.seeds:  # one process per seed, in parallel (each single-threaded)
        argv = [sys.executable, __file__, "--seed", str(s)] + [x for x in sys.argv[1:]]
        procs.append(subprocess.Popen(argv))
    if any(pr.wait() for pr in procs):
        raise SystemExit("a seed failed (see its output above)")
    results = {s: json.loads((Path(a.out) / f"seed{s}" / "result.json").read_text()) for s in a.seeds}
    text = table(results, a)
    cmd = "OMP_NUM_THREADS=1 python " + " ".join(["bench/vhop.py"] + sys.argv[1:])
    print(text)
    if a.write:
        Path(a.write).parent.mkdir(parents=True, exist_ok=True)
        Path(a.write).write_text(f"# VHOP-Router miniature\n\nCommand: `{cmd}`\n\n{text}\n")


if __name__ == "__main__":
    main()
