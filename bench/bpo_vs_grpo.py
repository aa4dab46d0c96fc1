"""The miniature of BPO's table (specs/algorithms.md §1, issues 3 and 16): GRPO vs T-GRPO vs BPO, budget-matched,
from the same SFT checkpoint, on the synthetic video world (optionally with a prior to unlearn), over seeds.

    .venv/bin/python bench/bpo_vs_grpo.py [--seeds 0 1 2] [--arms grpo grpo_g2 ...] [--sft-steps 600]
        [--rl-steps 300] [--n-train 1024] [--n-test 256] [--prompts-per-step 16] [--sft-null-share 0.05]
        [--prior frequent|phrasing|tint] [--prior-strength 0.8] [--cost-tokens 256] [--jobs 1] [--out runs/bpo_vs_grpo]
        [--report FILE] [--seed-dir DIR] [--arm 'NAME CONFIG... KEY=VALUE...' ...] [--render-only] [overrides ...]
    .venv/bin/python bench/bpo_vs_grpo.py --pool DIR [DIR ...] [--report FILE]

Defaults are the demo's (``configs/demo.yaml``, ``mmrl.demo``): 600 SFT steps, 300 RL steps x 16 prompts at
lr 1e-4, a 1024 / 256 clip world.

Per seed: one synthetic video world (``make_video_world``; ``--prior``: the train split leans on a prior, the
held-out split is debiased and ``test_biased.json`` keeps it), one SFT warm-up with ``configs/demo.yaml``'s SFT
settings, then the RL arms from that checkpoint with the same steps, lr, prompts per step and prompt format:

- ``grpo`` / ``grpo_g2`` / ``grpo_g32``: ``configs/demo.yaml`` with G = 8 / 2 / 32 responses on the original clip;
- ``tgrpo`` ``configs/tgrpo_demo.yaml``: as in Video-R1, 8 ordered + 4 shuffled-frame responses (plain
  permutation; a shuffle that leaves a static clip as it was is skipped), KL β = 0.04, the length bonus;
- ``bpo``   ``configs/bpo_demo.yaml``: 2 packs x 4 views (original, stable, sensitive, blank) = 8 generations,
  budget-matched to ``grpo``;
- ``bpo_p8``: 8 packs x 4 views = 32, budget-matched to ``grpo_g32`` (and with as many anchors as ``grpo``);
- ``bpo_anchor``: BPO with the anchor view only (``views/bpo_anchor_only.yaml``), 2 packs = 2, matched to
  ``grpo_g2``: BPO's estimator, loss and reward without any counterfactual view.

``--arms`` picks among them (default: all); ``--arm`` adds an arm of your own (config files and dotted overrides;
a BPO arm must match the budget of a GRPO-family arm). ``--jobs 2`` runs two seeds at once in child processes;
``--render-only`` prints the table again from an earlier ``--out``. ``--seed-dir DIR`` also writes each seed's
results as ``DIR/seed<S>.json`` (with its command and settings; small, to commit), and ``--pool DIR ...`` renders
the table from such records of several runs (``bench/bpo_pool.py``; seeds recovered from an older results markdown
by ``bench/bpo_recover.py`` pool the same way).

The arms are stepped round-robin in one process (each with its own saved RNG state, so an arm's run is the one it
would have alone), so the step-time ratios are measured side by side under the same machine load. After the
seeds, ``--cost-tokens N`` (default 256; 0 = off) measures the plain BPO / GRPO step ratio when every response is
N tokens long (the untrained tiny model rarely stops), a few steps from a fresh world.

SFT data: the train split plus ``--sft-null-share`` (5%) "nothing to see" items (the world's empty background clip,
answered with the abstention option: the tiny model has no prior for the option, and without them no arm ever
samples it). Prompt format: the abstention option is the last candidate of every question at every stage.

Eval: every arm (and the SFT checkpoint) on the held-out split with ``views/bpo_eval.yaml``, greedy. Its null views
are canvases no stage trained on (black, light gray, noise, a gradient, a drifting texture); stability counts only
views that change the pixels; sensitivity is scored against each view's expected answer (the mapped one for
``reverse``). With ``--prior``, accuracy on the biased split and the share of null answers that give the prior
answer too. The table (``bench/bpo_table.py``) gives 95% t-intervals and per-seed values for every difference.
"""
from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]  # this checkout's mmrl, not an installed one
from _arms import Arm, log, run_seeds_in_processes, step_round_robin  # noqa: E402
from bpo_cli import SETTINGS, build_parser  # noqa: E402
from bpo_arms import ARMS, DEMO, budgets_text, check_budgets, cost_at_length, rollout_budget, step_costs  # noqa: E402
from bpo_table import render  # noqa: E402
from bpo_world import add_abstain_option, add_null_sft_items  # noqa: E402

EVAL_VIEWS = REPO / "views" / "bpo_eval.yaml"
TEMPORAL = ("direction", "order")


def summarize(res: Dict, n_per_qtype: Dict[str, int], biased: Optional[Dict] = None) -> Dict:
    vm = res.get("view_metrics", {})
    pq = res["per_qtype"]
    n_t = sum(n_per_qtype.get(q, 0) for q in TEMPORAL if q in pq)
    temporal = sum(pq[q] * n_per_qtype[q] for q in TEMPORAL if q in pq) / n_t if n_t else float("nan")
    nan = float("nan")
    out = {"macro": res["macro_accuracy"], "accuracy": res["accuracy"], "temporal": temporal,
           "abstain_f1": vm.get("abstain_f1", nan), "abstain_precision": vm.get("abstain_precision", nan),
           "abstain_recall": vm.get("abstain_recall", nan), "stability": vm.get("stability_rate", nan),
           "sensitivity": vm.get("sensitivity_rate", nan), "sens_mapped": vm.get("sensitivity_mapped", nan),
           "sens_removed": vm.get("sensitivity_removed", nan), "no_look": vm.get("answer_without_looking", nan),
           "null_prior": vm.get("null_prior_rate", nan), "per_qtype": pq,
           "null_recall": {k[len("abstain_recall/"):]: v for k, v in vm.items() if k.startswith("abstain_recall/")},
           "view_acc": {k[len("view_acc/"):]: v for k, v in vm.items() if k.startswith("view_acc/")},
           "n": {k[2:]: v for k, v in vm.items() if k.startswith("n/") and "/" not in k[2:]}}
    out["n"]["anchors"] = res["n"]
    out["n"]["views_skipped"] = vm.get("views_skipped", 0.0)
    if biased is not None:
        out["macro_biased"] = biased["macro_accuracy"]
    else:
        out.pop("null_prior")
    return out


def run_seed(seed: int, args, out: Path) -> Dict:
    from mmrl.config import load_config
    from mmrl.data.synth_video import make_video_world
    from mmrl.demo import WORLD
    from mmrl.eval.synthetic import evaluate_checkpoint
    from mmrl.models.tiny import ensure_tiny_model
    from mmrl.train.sft import run_sft
    from mmrl.views import ViewSet

    t_seed = time.time()
    world = out / "world"
    info = make_video_world(str(world), args.n_train, args.n_test, seed=seed, prior=args.prior,
                            prior_strength=args.prior_strength, **WORLD)  # the demo's world
    ensure_tiny_model()
    base = load_config([str(DEMO)], list(args.overrides))
    abst = base.data.prompt.abstain_text
    train, test, biased = world / "train_abst.json", world / "test_abst.json", world / "test_biased_abst.json"
    add_abstain_option(info["train"], str(train), abst)
    add_abstain_option(info["test"], str(test), abst)
    if args.prior:
        add_abstain_option(info["test_biased"], str(biased), abst)
    common = [f"data.train={train}", f"data.test={test}", f"train.seed={seed}",
              f"train.prompts_per_step={args.prompts_per_step}", "train.save_every=0"]
    sft_train = world / "sft_train.json"
    n_null = add_null_sft_items(str(train), str(sft_train), args.sft_null_share, abst, world, seed)
    log(f"[seed {seed}] world {args.n_train}/{args.n_test} ready ({time.time() - t_seed:.0f} s); SFT {args.sft_steps} "
        f"steps on {args.n_train} + {n_null} empty-scene items")

    t = time.time()
    sft_cfg = load_config([str(DEMO)], common + [f"train.out_dir={out / 'sft'}", f"sft.steps={args.sft_steps}",
                                                 f"data.train={sft_train}"] + list(args.overrides))
    run_sft(sft_cfg, quiet=True)
    sft_path = str(out / "sft" / "final")
    sft_min = (time.time() - t) / 60
    log(f"[seed {seed}] SFT done ({sft_min:.1f} min); RL {args.rl_steps} steps x {args.prompts_per_step} prompts, "
        f"arms {list(args.arms)} side by side")

    t = time.time()
    arms = {}
    for name, items in args.arms.items():
        files = [i for i in items if "=" not in i]
        cfg = load_config([str(DEMO)] + files, common + [f"train.out_dir={out / name}", f"model.path={sft_path}",
                                                         f"train.steps={args.rl_steps}"] + list(args.overrides)
                          + [i for i in items if "=" in i])
        arms[name] = Arm(name, cfg, run_dir=True)
    first = next(iter(arms.values()))
    one_per_qtype = list({s.qtype: s for s in first.trainer.samples}.values())
    budgets = {n: rollout_budget(a, one_per_qtype) for n, a in arms.items()}
    check_budgets(arms, budgets)
    log(f"[seed {seed}] generations per prompt: " + ", ".join(f"{n} {sorted(set(b.values()))}" for n, b in budgets.items()))
    order = list(arms)
    for step in range(args.rl_steps):
        step_round_robin(arms, step)
        if (step + 1) % max(1, args.rl_steps // 5) == 0:
            log(f"[seed {seed}] RL step {step + 1}/{args.rl_steps}: " + ", ".join(
                f"{n} {arms[n].history[-1].get('time/step', 0):.1f}s acc {arms[n].history[-1].get('reward/accuracy', float('nan')):.2f}"
                for n in order))
    costs = {n: step_costs(a.history) for n, a in arms.items()}
    algos = {n: a.cfg.algorithm.name for n, a in arms.items()}
    paths = {n: a.finish() for n, a in arms.items()}
    rl_min = (time.time() - t) / 60

    t = time.time()
    data_cfg = sft_cfg.data
    viewset = ViewSet.load(str(EVAL_VIEWS), abstain_text=abst)
    n_per_qtype = info["counts"]["test"]
    evals = {}
    for name, path in [("sft", sft_path)] + list(paths.items()):
        res = evaluate_checkpoint(path, str(test), data_cfg, out_dir=str(out / f"eval_{name}"), viewset=viewset)
        res_b = evaluate_checkpoint(path, str(biased), data_cfg) if args.prior else None
        evals[name] = summarize(res, n_per_qtype, res_b)
    eval_min = (time.time() - t) / 60
    minutes = (time.time() - t_seed) / 60
    log(f"[seed {seed}] done in {minutes:.1f} min (SFT {sft_min:.1f}, RL {rl_min:.1f}, eval {eval_min:.1f}): "
        + ", ".join(f"{n} macro {100 * e['macro']:.1f} F1 {100 * e['abstain_f1']:.1f}" for n, e in evals.items()))
    result = {"seed": seed, "eval": evals, "costs": costs, "budgets": budgets, "algos": algos,
              "minutes": {"total": minutes, "sft": sft_min, "rl": rl_min, "eval": eval_min}}
    (out / "seed_result.json").write_text(json.dumps(result, indent=2))
    return result


def child_argv(args, out: Path, seed: int) -> List[str]:
    """The command line of one seed's child process (``--jobs``): the step-time ratios stay side by side, since a
    seed's arms share one process and so one load."""
    cmd = ["--seeds", str(seed), "--arms", *[a for a in args.arms if a in ARMS], "--out", str(out),
           "--sft-steps", str(args.sft_steps), "--rl-steps", str(args.rl_steps), "--n-train", str(args.n_train),
           "--n-test", str(args.n_test), "--prompts-per-step", str(args.prompts_per_step),
           "--sft-null-share", str(args.sft_null_share), "--cost-tokens", "0"]
    if args.prior:
        cmd += ["--prior", args.prior, "--prior-strength", str(args.prior_strength)]
    for name, items in args.arms.items():
        if name not in ARMS:
            cmd += ["--arm", shlex.join([name, *items])]
    return cmd + list(args.overrides)


def main(argv=None) -> None:
    ap = build_parser(__doc__.split("\n\n")[0])
    args = ap.parse_args(argv)
    if args.pool:
        given = [k for k, v in vars(args).items()
                 if k not in ("pool", "report") and v != ap.get_default(k) and not (k == "overrides" and v == [])]
        if given:
            ap.error(f"--pool renders from the records alone; it takes only --report (got {', '.join(given)})")
        from bpo_pool import pool_main

        return pool_main(args)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if "grpo" not in args.arms:
        ap.error("--arms must include grpo (every ratio and difference is taken against it)")
    args.arms = {a: ARMS[a] for a in args.arms}
    for spec in args.arm:
        name, *items = shlex.split(spec)
        if name in ARMS:
            ap.error(f"--arm {name}: the name is taken (built-in arms: {', '.join(ARMS)})")
        args.arms[name] = [i if "=" in i or Path(i).is_absolute() else str(Path(i).resolve()) for i in items]
    from mmrl.config import load_config
    from mmrl.demo import N_TEST, N_TRAIN

    demo = load_config([str(DEMO)], list(args.overrides))
    for key, value in (("sft_steps", demo.sft.steps), ("rl_steps", demo.train.steps), ("n_train", N_TRAIN),
                       ("n_test", N_TEST), ("prompts_per_step", demo.train.prompts_per_step)):
        if getattr(args, key) is None:
            setattr(args, key, value)
    t0 = time.time()
    out = Path(args.out)
    if args.render_only:  # the table names the command that trained and its wall time, not this one
        results = [json.loads((out / f"seed{s}" / "seed_result.json").read_text()) for s in args.seeds]
        run = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
        args.argv, wall_min, cost_long = run.get("argv", args.argv), run.get("wall_min", 0.0), run.get("cost_long")
        args.commands = run.get("commands")  # several runs into one --out (e.g. seeds added later)
        for k, v in (run.get("settings") or {}).items():  # the world and schedule the results were trained with
            setattr(args, k, v)
    else:
        if args.jobs > 1 and len(args.seeds) > 1:
            results = run_seeds_in_processes(Path(__file__), args.seeds, args.jobs, out,
                                             lambda seed: child_argv(args, out, seed))
        else:
            results = [run_seed(s, args, out / f"seed{s}") for s in args.seeds]
        cost_long = cost_at_length(args, out / "cost_long") if args.cost_tokens > 0 else None
        wall_min = (time.time() - t0) / 60
    table = render(results, args, wall_min, budgets_text(results), cost_long)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(table)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    # after any child process wrote its own: the command that trained and its wall time, for --render-only
    run = {"argv": args.argv, "wall_min": wall_min, "cost_long": cost_long,
           "settings": {k: getattr(args, k) for k in SETTINGS}}
    if getattr(args, "commands", None):
        run["commands"] = args.commands
    (out / "run.json").write_text(json.dumps(run))
    if args.seed_dir:
        from bpo_pool import write_seed_records

        write_seed_records(results, Path(args.seed_dir), run)
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(table)
    print(table, end="", flush=True)


if __name__ == "__main__":
    main()
