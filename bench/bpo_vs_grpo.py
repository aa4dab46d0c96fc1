"""The miniature of BPO's table (specs/algorithms.md §1, issue 3): GRPO vs T-GRPO vs BPO, budget-matched, from the
same SFT checkpoint, on the synthetic video world, over seeds.

    .venv/bin/python bench/bpo_vs_grpo.py [--seeds 0 1 2] [--sft-steps 600] [--rl-steps 300] [--n-train 1024]
        [--n-test 256] [--prompts-per-step 16] [--sft-null-share 0.05] [--jobs 1] [--out runs/bpo_vs_grpo]
        [--report FILE] [--arm 'NAME CONFIG... KEY=VALUE...' ...] [--render-only] [overrides ...]

Defaults are the demo's (``configs/demo.yaml``, ``mmrl.demo``): 600 SFT steps, 300 RL steps x 16 prompts at
lr 1e-4, a 1024 / 256 clip world: ~7 min per seed for the three arms on the 2 shared cores; the README's run (5 seeds,
two extra arms, ``--jobs 2``) took 34.9 min.

Per seed: one synthetic video world (``make_video_world``), one SFT warm-up with ``configs/demo.yaml``'s SFT
settings (steps, batch, lr), then three RL arms from that checkpoint with the same steps, lr,
prompts per step and prompt format:

- ``grpo``  ``configs/demo.yaml``: G = 8 responses on the original clip (8 generations per prompt);
- ``tgrpo`` ``configs/tgrpo_demo.yaml``: as in Video-R1, 8 ordered + 4 shuffled-frame responses (12 generations
  per prompt, 1.5x the budget; only the 8 ordered ones are trained);
- ``bpo``   ``configs/bpo_demo.yaml``: 2 packs x 4 views (original, stable, sensitive, blank) = 8 generations.

``--arm`` adds an arm of your own (a view set, an anchor mode, a reward weight), e.g.
``--arm 'bpo_paired configs/bpo_demo.yaml algorithm.params.anchor_mode=paired'``: it trains from the same SFT checkpoint,
is evaluated the same way and gets its own rows (a BPO arm must match GRPO's budget). ``--jobs 2`` runs two seeds
at once in child processes; ``--render-only`` prints the table again from an earlier ``--out``.

The arms are stepped round-robin in one process (each with its own saved RNG state, so an arm's run is the
one it would have alone), so the step-time ratio BPO/GRPO is measured side by side under the same machine load.

SFT data. The train split plus ``--sft-null-share`` (default 5%) "nothing to see" items: the world's empty
background clip with a question of the split, answered with the abstention option. The tiny model has no prior
for the option (a pretrained VLM reads "cannot be determined"); without them it never samples the option and no
arm can be rewarded for it (with ``--sft-null-share 0`` every arm's abstention F1 stays 0). The RL arms train on
the train split only; the eval's null view is a different canvas (uniform gray).

Prompt format. The abstention option ("cannot be determined") is appended as the last candidate of every
question of the world, for every stage and arm: SFT (the target only on the empty-scene items), GRPO, T-GRPO and BPO training, and the
eval. GRPO and T-GRPO therefore see the option in training too but are never rewarded for it (accuracy against
the gold letter), so the comparison differs only in views and rewards, not in the prompt.

Eval: every arm (and the SFT checkpoint, for reference) on the held-out split with the BPO view set
(``views/bpo_video.yaml``), greedy: macro accuracy and temporal accuracy (direction + order, pooled) on the
original clips, and over the whole split the abstention F1, stability, sensitivity and answer-without-looking
rates of ``mmrl.rollout.view_metrics``. Printed as mean +- std over seeds, with the per-step cost: BPO step time /
GRPO step time (median step, per seed) and the view-construction share of BPO's step time.
"""
from __future__ import annotations

import argparse
import json
import random
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "configs" / "demo.yaml"
ARMS: Dict[str, List[str]] = {  # name -> config files over configs/demo.yaml, then dotted overrides ("k=v")
    "grpo": [],
    "tgrpo": [str(REPO / "configs" / "tgrpo_demo.yaml")],
    "bpo": [str(REPO / "configs" / "bpo_demo.yaml")],
}
ARM_LABEL = {"sft": "SFT (start point)", "grpo": "GRPO (G=8)", "tgrpo": "T-GRPO (8+4)", "bpo": "BPO (2x4)"}
BUDGET = {"grpo": "8", "tgrpo": "8 ordered + 4 shuffled = 12", "bpo": "2 packs x 4 views = 8"}
EVAL_VIEWS = REPO / "views" / "bpo_video.yaml"
TEMPORAL = ("direction", "order")
PAPER = {"macro": 4.7, "temporal": 7.8, "abstain_f1": 20.0}
COLUMNS = [  # key, header
    ("macro", "macro acc"), ("temporal", "temporal acc (dir+order)"), ("abstain_f1", "abstention F1"),
    ("stability", "stability"), ("sensitivity", "sensitivity"), ("no_look", "answer w/o looking"),
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def add_abstain_option(src: str, dst: str, text: str) -> None:
    """Copy an annotation file with ``text`` appended as the last candidate of every question."""
    items = json.loads(Path(src).read_text())
    for it in items:
        if text.lower() not in {c.lower() for c in it["candidates"]}:
            it["candidates"] = list(it["candidates"]) + [text]
    Path(dst).write_text(json.dumps(items, indent=1) + "\n")


def add_null_sft_items(train: str, dst: str, share: float, text: str, world: Path, seed: int) -> int:
    """Write the SFT data: ``train`` plus ``round(share * len(train))`` "nothing to see" items whose clip is the
    world's empty background (no squares) and whose answer is the abstention option. Returns their count.

    The tiny model has no prior for the abstention option; without a few such items it never samples it, and no
    arm (BPO included) can ever be rewarded for it. Every arm starts from this same SFT checkpoint. The RL arms
    train on ``train`` alone, and the eval's null view is a different canvas (uniform gray, ``gray`` transform).
    """
    import numpy as np

    from mmrl.data.synth_video import render, write_mp4
    from mmrl.demo import WORLD

    items = json.loads(Path(train).read_text())
    k = int(round(share * len(items)))
    if k:
        clip = "videos/empty.mp4"
        frames = np.stack([render([], WORLD["size"]) for _ in range(WORLD["n_frames"])])
        write_mp4(str(world / clip), frames, WORLD["fps"])
        rng = np.random.default_rng(seed)
        for j, i in enumerate(rng.choice(len(items), size=k, replace=False)):
            src = items[int(i)]
            items.append({"id": f"null-{j:05d}", "video": clip, "question": src["question"],
                          "candidates": src["candidates"], "answer": text, "qtype": src["qtype"],
                          "meta": {"null": True}})
    Path(dst).write_text(json.dumps(items, indent=1) + "\n")
    return k


# ---- RL arms stepped side by side ------------------------------------------------------------------------------
def _rng_state():
    import numpy as np
    import torch

    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def _set_rng(state) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(state[0])
    random.setstate(state[1])
    np.random.set_state(state[2])


class Arm:
    """One RL run (``RLTrainer``) that can be advanced one step at a time with its own RNG stream."""

    def __init__(self, name: str, cfg):
        from mmrl.config import to_yaml
        from mmrl.train.metrics import MetricsLogger
        from mmrl.train.rl_trainer import RLTrainer

        self.name, self.cfg = name, cfg
        self.trainer = RLTrainer(cfg, quiet=True)  # seeds the global RNGs
        self.rng = _rng_state()
        out = Path(cfg.train.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(to_yaml(cfg))
        self.logger = MetricsLogger(str(out), tensorboard=False)
        self.history: List[Dict[str, float]] = []

    def step(self) -> Dict[str, float]:
        _set_rng(self.rng)
        m = self.trainer.train_step()
        self.rng = _rng_state()
        self.logger.log(self.trainer.step, m)
        self.history.append(m)
        return m

    def finish(self) -> str:
        self.trainer.save()
        self.logger.close()
        path = self.trainer.export(str(Path(self.cfg.train.out_dir) / "final"))
        self.trainer = None  # free the model and optimizer before the next arm's eval
        return str(path)


def rollout_budget(arm: "Arm", samples) -> Dict[str, int]:
    """Generations per prompt, per question type, as the arm's trainer would request them (no generation)."""
    from mmrl.rollout.step_inputs import build_step_inputs

    tr = arm.trainer
    out = {}
    for s in samples:
        si = build_step_inputs([s], tr.processor, tr.cfg.data, tr.plan, tr.viewset)
        out[s.qtype] = sum(r.n for r in si.requests)
    return out


def step_costs(history: List[Dict[str, float]]) -> Dict[str, float]:
    steps = [h["time/step"] for h in history if "time/step" in h]
    views = sum(h.get("time/views", 0.0) for h in history)
    return {"median_step_s": statistics.median(steps) if steps else float("nan"), "total_step_s": sum(steps),
            "view_share": views / max(sum(steps), 1e-9),
            "rollout_s": statistics.median([h.get("time/rollout", 0.0) for h in history]) if history else 0.0,
            "update_s": statistics.median([h.get("time/update", 0.0) for h in history]) if history else 0.0,
            **{k: statistics.mean([h.get(f"work/{k}", 0.0) for h in history]) if history else 0.0
               for k in ("prompts", "prompt_tokens", "response_tokens")}}


def work(cost: Dict[str, float]) -> float:
    """Tokens a step pushes through the model: every distinct (media, prompt) once, every response once."""
    return cost.get("prompt_tokens", 0.0) + cost.get("response_tokens", 0.0)


def summarize(res: Dict, n_per_qtype: Dict[str, int]) -> Dict[str, float]:
    vm = res.get("view_metrics", {})
    pq = res["per_qtype"]
    n_t = sum(n_per_qtype.get(q, 0) for q in TEMPORAL if q in pq)
    temporal = sum(pq[q] * n_per_qtype[q] for q in TEMPORAL if q in pq) / n_t if n_t else float("nan")
    return {"macro": res["macro_accuracy"], "accuracy": res["accuracy"], "temporal": temporal,
            "abstain_f1": vm.get("abstain_f1", float("nan")), "abstain_precision": vm.get("abstain_precision", float("nan")),
            "abstain_recall": vm.get("abstain_recall", float("nan")), "stability": vm.get("stability_rate", float("nan")),
            "sensitivity": vm.get("sensitivity_rate", float("nan")), "no_look": vm.get("answer_without_looking", float("nan")),
            "per_qtype": pq, "view_acc": {k[len("view_acc/"):]: v for k, v in vm.items() if k.startswith("view_acc/")}}


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
    info = make_video_world(str(world), args.n_train, args.n_test, seed=seed, **WORLD)  # the demo's world
    ensure_tiny_model()
    base = load_config([str(DEMO)], list(args.overrides))
    abst = base.data.prompt.abstain_text
    train, test = world / "train_abst.json", world / "test_abst.json"
    add_abstain_option(info["train"], str(train), abst)
    add_abstain_option(info["test"], str(test), abst)
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
        arms[name] = Arm(name, cfg)
    one_per_qtype = list({s.qtype: s for s in arms["grpo"].trainer.samples}.values())
    budgets = {n: rollout_budget(a, one_per_qtype) for n, a in arms.items()}
    for n, a in arms.items():
        if a.cfg.algorithm.name == "bpo" and budgets[n] != budgets["grpo"]:
            raise RuntimeError(f"arm {n} (BPO) and GRPO budgets differ: {budgets}")
    log(f"[seed {seed}] generations per prompt: " + ", ".join(f"{n} {sorted(set(b.values()))}" for n, b in budgets.items()))
    order = list(arms)
    for step in range(args.rl_steps):
        rot = order[step % len(order):] + order[: step % len(order)]  # rotate who goes first
        for name in rot:
            arms[name].step()
        if (step + 1) % max(1, args.rl_steps // 5) == 0:
            log(f"[seed {seed}] RL step {step + 1}/{args.rl_steps}: " + ", ".join(
                f"{n} {arms[n].history[-1].get('time/step', 0):.1f}s acc {arms[n].history[-1].get('reward/accuracy', float('nan')):.2f}"
                for n in order))
    costs = {n: step_costs(a.history) for n, a in arms.items()}
    paths = {n: a.finish() for n, a in arms.items()}
    rl_min = (time.time() - t) / 60

    t = time.time()
    data_cfg = sft_cfg.data
    viewset = ViewSet.load(str(EVAL_VIEWS), abstain_text=abst)
    n_per_qtype = info["counts"]["test"]
    evals = {}
    for name, path in [("sft", sft_path)] + list(paths.items()):
        res = evaluate_checkpoint(path, str(test), data_cfg, out_dir=str(out / f"eval_{name}"), viewset=viewset)
        evals[name] = summarize(res, n_per_qtype)
    eval_min = (time.time() - t) / 60
    minutes = (time.time() - t_seed) / 60
    log(f"[seed {seed}] done in {minutes:.1f} min (SFT {sft_min:.1f}, RL {rl_min:.1f}, eval {eval_min:.1f}): "
        + ", ".join(f"{n} macro {100 * e['macro']:.1f} F1 {100 * e['abstain_f1']:.1f}" for n, e in evals.items()))
    result = {"seed": seed, "eval": evals, "costs": costs, "budgets": budgets,
              "algos": {n: a.cfg.algorithm.name for n, a in arms.items()}, "minutes": {"total": minutes, "sft": sft_min, "rl": rl_min,
                                                                        "eval": eval_min}}
    (out / "seed_result.json").write_text(json.dumps(result, indent=2))
    return result


# ---- the table ------------------------------------------------------------------------------------------------
def _ms(xs: List[float], scale: float = 100.0, signed: bool = False) -> str:
    xs = [scale * x for x in xs]
    m = statistics.mean(xs)
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{m:+.1f} ± {sd:.1f}" if signed else f"{m:.1f} ± {sd:.1f}"


def _label(arm: str) -> str:
    return ARM_LABEL.get(arm, arm)


def _budget(arm: str, results: List[Dict]) -> str:
    if arm in BUDGET:
        return BUDGET[arm]
    return "/".join(str(v) for v in sorted({v for r in results for v in r["budgets"][arm].values()}))


def render(results: List[Dict], args, wall_min: float) -> str:
    seeds = [r["seed"] for r in results]
    arms = list(results[0]["costs"])
    bpo_like = [a for a in arms if results[0].get("algos", {}).get(a, a) == "bpo"]
    extra = [args.argv[i + 1] for i, x in enumerate(args.argv[:-1]) if x == "--arm"]  # as typed
    lines = [f"# BPO vs GRPO vs T-GRPO, miniature (seeds {seeds})", "",
             "Command: `.venv/bin/python bench/bpo_vs_grpo.py " + shlex.join(args.argv) + "`", "",
             f"World: synthetic video (`make_video_world`), {args.n_train} train / {args.n_test} held-out clips per seed, "
             f"5 question types. SFT {args.sft_steps} steps (configs/demo.yaml SFT settings) on the train split plus "
             f"{100 * args.sft_null_share:.0f}% empty-scene clips answered with the abstention option; RL {args.rl_steps} steps x "
             f"{args.prompts_per_step} prompts, same lr for every arm. Rollouts per prompt: "
             + "; ".join(f"{_label(a)}: {_budget(a, results)}" for a in arms) + ".",
             *([f"Extra arms (`--arm`): " + "; ".join(f"`{x}`" for x in extra) + "."] if extra else []),
             "Eval: greedy, held-out split, BPO view set (views/bpo_video.yaml) for every arm; the abstention option "
             "is in every prompt of every stage. Percent, mean ± std over seeds.", ""]
    head = "| arm | " + " | ".join(h for _, h in COLUMNS) + " |"
    lines += [head, "|" + "---|" * (len(COLUMNS) + 1)]
    for arm in ["sft"] + arms:
        cells = [_ms([r["eval"][arm][k] for r in results]) for k, _ in COLUMNS]
        lines.append(f"| {_label(arm)} | " + " | ".join(cells) + " |")
    pairs = [(a, "grpo") for a in arms if a != "grpo"]
    pairs += [(a, ref) for a in bpo_like for ref in arms if ref not in bpo_like and ref != "grpo"]  # BPO vs the rest
    for arm, ref in pairs:
        cells = [_ms([r["eval"][arm][k] - r["eval"][ref][k] for r in results], signed=True) for k, _ in COLUMNS]
        lines.append(f"| {_label(arm).split(' (')[0]} − {_label(ref).split(' (')[0]} (pp) | " + " | ".join(cells) + " |")
    paper = [f"+{PAPER[k]:.1f}" if k in PAPER else "" for k, _ in COLUMNS]
    lines.append("| paper: BPO − budget-matched GRPO (pp) | " + " | ".join(paper) + " |")
    lines.append("")
    lines.append("Per-seed held-out accuracy per question type (original clips):")
    lines.append("")
    qtypes = sorted(results[0]["eval"]["sft"]["per_qtype"])
    lines += ["| seed | arm | " + " | ".join(qtypes) + " | macro | abst. P | abst. R |", "|" + "---|" * (len(qtypes) + 5)]
    for r in results:
        for arm in ["sft"] + arms:
            e = r["eval"][arm]
            lines.append(f"| {r['seed']} | {arm} | " + " | ".join(f"{100 * e['per_qtype'].get(q, 0):.1f}" for q in qtypes)
                         + f" | {100 * e['macro']:.1f} | {100 * e['abstain_precision']:.1f} | {100 * e['abstain_recall']:.1f} |")
    lines.append("")
    lines.append("Per-step cost. Arms are stepped round-robin in one process, so each seed's ratios are measured side by "
                 "side under the same load; s/step is the median step, rollout = decode + views + processor + generation, "
                 "update = teacher-forced forward/backward + AdamW. Work = tokens pushed through the model per step "
                 "(mean): every distinct (media, prompt) is prefilled and scored once, every response decoded and scored "
                 "once; the work ratio (prompt + response tokens vs GRPO) is what the step-time ratio approaches where "
                 "compute dominates, and step ratio / work ratio below 1 means the arm's extra work costs less per token "
                 "than GRPO's.")
    lines.append("")
    lines.append("| seed | arm | s/step | / GRPO | rollout / GRPO | update / GRPO | view share | prompts | prompt tok "
                 "| response tok | work ratio | step ratio / work ratio |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ratio: Dict[str, List[float]] = {a: [] for a in arms}
    wratio: Dict[str, List[float]] = {a: [] for a in arms}
    for r in results:
        g = r["costs"]["grpo"]
        for arm in arms:
            c = r["costs"][arm]
            q, w = c["median_step_s"] / g["median_step_s"], work(c) / max(work(g), 1e-9)
            ratio[arm].append(q)
            wratio[arm].append(w)
            lines.append(f"| {r['seed']} | {arm} | {c['median_step_s']:.3f} | {q:.2f} | {c['rollout_s'] / g['rollout_s']:.2f} | "
                         f"{c['update_s'] / g['update_s']:.2f} | {100 * c['view_share']:.2f}% | {c.get('prompts', 0):.0f} | "
                         f"{c.get('prompt_tokens', 0):.0f} | {c.get('response_tokens', 0):.0f} | {w:.2f} | {q / w:.2f} |")
    lines.append("")
    sd = lambda xs: statistics.stdev(xs) if len(xs) > 1 else 0.0  # noqa: E731
    for arm in arms:
        if arm == "grpo":
            continue
        rs, ws = ratio[arm], wratio[arm]
        line = (f"{_label(arm)} step time / GRPO step time: {statistics.mean(rs):.3f} ± {sd(rs):.3f} "
                f"(work ratio {statistics.mean(ws):.2f}; step ratio / work ratio {statistics.mean([a / b for a, b in zip(rs, ws)]):.2f})")
        if arm in bpo_like:
            line += f"; matched budget, {'within' if statistics.mean(rs) <= 1.1 else 'ABOVE'} the issue's 1.1 bound"
        lines.append(line)
    for arm in bpo_like:
        share = [r["costs"][arm]["view_share"] for r in results]
        lines.append(f"View construction share of {_label(arm)}'s step time: {100 * statistics.mean(share):.2f}% "
                     f"(max {100 * max(share):.2f}%; {'below' if max(share) < 0.05 else 'NOT below'} the 5% bound)")
    lines.append("")
    mins = [r["minutes"]["total"] for r in results]
    lines.append(f"Wall time: {wall_min:.1f} min in all ({statistics.mean(mins):.1f} min per seed: "
                 f"SFT {statistics.mean(r['minutes']['sft'] for r in results):.1f}, "
                 f"RL {statistics.mean(r['minutes']['rl'] for r in results):.1f} for the {len(arms)} arms, "
                 f"eval {statistics.mean(r['minutes']['eval'] for r in results):.1f}).")
    return "\n".join(lines) + "\n"


def run_seeds_in_processes(args, out: Path) -> List[Dict]:
    """Each seed in a child process of this script (``--jobs`` at a time); their ``seed_result.json`` files are the
    results. The step-time ratios stay side by side: a seed's arms share one process, so one load."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    def one(seed: int) -> Dict:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--seeds", str(seed), "--out", str(out),
               "--sft-steps", str(args.sft_steps), "--rl-steps", str(args.rl_steps), "--n-train", str(args.n_train),
               "--n-test", str(args.n_test), "--prompts-per-step", str(args.prompts_per_step),
               "--sft-null-share", str(args.sft_null_share)]
        for name, items in args.arms.items():
            if name not in ARMS:
                cmd += ["--arm", shlex.join([name, *items])]
        cmd += list(args.overrides)
        log(f"[seed {seed}] child process: {shlex.join(cmd)}")
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"seed {seed} failed (exit {proc.returncode}); its log is above")
        return json.loads((out / f"seed{seed}" / "seed_result.json").read_text())

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        return list(pool.map(one, args.seeds))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--sft-steps", type=int, default=None, help="default: configs/demo.yaml's sft.steps")
    ap.add_argument("--rl-steps", type=int, default=None, help="default: configs/demo.yaml's train.steps")
    ap.add_argument("--n-train", type=int, default=None, help="default: the demo's world (mmrl.demo.N_TRAIN)")
    ap.add_argument("--n-test", type=int, default=None, help="default: mmrl.demo.N_TEST")
    ap.add_argument("--prompts-per-step", type=int, default=None, help="default: configs/demo.yaml's")
    ap.add_argument("--sft-null-share", type=float, default=0.05,
                    help="empty-scene items answered with the abstention option, as a share of the SFT data")
    ap.add_argument("--jobs", type=int, default=1,
                    help="seeds run at once, each in its own process (one torch thread each: 2 fit the 2-core box)")
    ap.add_argument("--arm", action="append", default=[], metavar="'NAME ITEM ...'",
                    help="an extra arm, one quoted string: NAME, then config files (over configs/demo.yaml) and dotted "
                         "overrides k=v, e.g. --arm 'bpo_paired configs/bpo_demo.yaml algorithm.params.anchor_mode=paired' "
                         "(repeatable)")
    ap.add_argument("--out", default="runs/bpo_vs_grpo")
    ap.add_argument("--report", default=None, help="also write the markdown table here")
    ap.add_argument("--render-only", action="store_true",
                    help="no training: print the table again from OUT/seed<S>/seed_result.json of an earlier run")
    ap.add_argument("overrides", nargs="*", help="dotted config overrides applied to SFT and every arm")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.arms = dict(ARMS)
    for spec in args.arm:
        name, *items = shlex.split(spec)
        if name in args.arms:
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
        args.argv, wall_min = run.get("argv", args.argv), run.get("wall_min", 0.0)
    else:
        if args.jobs > 1 and len(args.seeds) > 1:
            results = run_seeds_in_processes(args, out)
        else:
            results = [run_seed(s, args, out / f"seed{s}") for s in args.seeds]
        wall_min = (time.time() - t0) / 60
    table = render(results, args, wall_min)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(table)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    # after any child process wrote its own: the command that trained and its wall time, for --render-only
    (out / "run.json").write_text(json.dumps({"argv": args.argv, "wall_min": wall_min}))
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(table)
    print(table, end="", flush=True)


if __name__ == "__main__":
    main()
