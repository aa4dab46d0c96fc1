"""The Stream-GDPO offline diagnostic (issue 29 item 3): before any RL, can Stream-GDPO's decoupled advantage differ
from GRPO's on the summed reward at all, on the masked-SFT start of the tiny base?

    OMP_NUM_THREADS=1 .venv/bin/python bench/stream_gdpo_diag.py [--seeds 0 1 2] [--n-train 64] [--n-test 32]
        [--sft-steps 200] [--group-size 4] [--out runs/stream_gdpo_diag] [--report docs/results/stream.md]
        [--render-only] [--smoke]   (seeds may run as separate processes into one --out, then --render-only)

Per protocol seed (``_protocol.seed_plan``: its own world, SFT and sampling seed):

1. the stream world (``mmrl data synth --kind stream``: 16-s streams of 1-s chunks at 2 fps, 56x56, the base's
   frame size; EPM, ATR, CRR and REC items in OVO-Bench's format, 4 blocks per stream) with ``--n-train`` training
   and ``--n-test`` held-out streams;
2. masked SFT on the oracle's turns from ``model.path=base`` (``configs/stream_gdpo.yaml``'s SFT, lr ``--sft-lr``);
3. the start vs chance per task: greedy streaming evaluation on the held-out streams (official scorer), against
   1 / options for EPM and ATR and against the no-model reference (each forward question answered once with its
   first probe's gold, never updated: ``stream_gdpo.no_tracking_row``'s agent) for CRR and REC;
4. ``--group-size`` sampled episodes per block of every training stream (``configs/stream_gdpo.yaml``'s rollout,
   temperature 1), with their four reward components; pass@k with "correct" = R_out = 1;
5. the mechanism (``bench/stream_gdpo_stats.py``): zero-spread share and within-group std per component, and the
   Spearman correlation between Stream-GDPO's advantages and GRPO's on the sum. When it is >= 0.98 (pooled and per
   group) and no group is moved by one estimator only, the bench writes that no effect can exist and stops.

No RL is run by this bench. The results go on top of ``--report``; what the file held before stays below a marker.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
from _preflight import Groups, Mechanism, build_preflight, preflight_lines  # noqa: E402
from _protocol import MIN_SEEDS, Protocol, ProtocolError, Results, seed_plan  # noqa: E402
from stream_gdpo_stats import NO_EFFECT_CORR, advantages, component_spread, no_effect, rank_agreement  # noqa: E402

CFG = REPO / "configs" / "stream_gdpo.yaml"
ROLES = ("out", "fmt", "tool", "mem")
MARKER = "<!-- earlier runs below: written before the diagnostic; kept as they were -->"
EARLIER = ("# Earlier runs (before the diagnostic above; not from its command, kept as they were)")
CHOICE_TASKS = ("EPM", "ATR")
CHUNK = 16  # blocks per rollout call


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- one seed -----------------------------------------------------------------------------------------------------
def run_seed(seed: int, args, out: Path) -> Dict:
    import torch

    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples
    from mmrl.stream.dataset import make_stream_dataset
    from mmrl.train.rl_trainer import RLTrainer
    from mmrl.train.sft import run_sft

    torch.set_num_threads(1)
    t0, plan = time.time(), seed_plan(seed)
    world = make_stream_dataset(str(out / "world"), args.n_train, args.n_test, seed=plan.world_seed)
    log(f"[seed {seed}] world: {world['train_blocks']} train / {world['test_blocks']} test blocks")
    sft_dir = out / "sft"
    common = ["train.num_threads=1", f"data.train={world['train']}", "train.save_every=0"]
    t = time.time()
    if not (args.reuse_sft and (sft_dir / "final").is_dir()):
        cfg = load_config([str(CFG)], common + [f"model.path={args.model}", f"train.seed={plan.sft_seed}",
                                                f"train.out_dir={sft_dir}", f"sft.steps={args.sft_steps}",
                                                f"sft.batch_size={args.sft_batch}", f"train.micro_batch={args.sft_batch}",
                                                f"sft.lr={args.sft_lr}"])
        run_sft(cfg, quiet=True, overwrite=True)
    minutes = {"sft": (time.time() - t) / 60}
    log(f"[seed {seed}] SFT done ({minutes['sft']:.1f} min)")

    t = time.time()
    start = greedy_start(sft_dir / "final", world, out / "eval_sft")
    minutes["eval"] = (time.time() - t) / 60
    log(f"[seed {seed}] greedy eval done ({minutes['eval']:.1f} min): {start['acc']}")

    t = time.time()
    trainer = RLTrainer(load_config([str(CFG)], common + [f"model.path={sft_dir / 'final'}", f"train.seed={plan.rl_seed}",
                                                          f"train.out_dir={out / 'rollouts'}",
                                                          f"rollout.n={args.group_size}"]), quiet=True)
    samples, _ = load_samples(world["train"])
    samples = [x for x in samples if x.id in set(pick_blocks([x.id for x in samples], args.blocks_per_stream, plan.rl_seed))]
    comps: Dict[str, List[float]] = {r: [] for r in ROLES}
    total: List[float] = []
    gids: List[int] = []
    for lo in range(0, len(samples), CHUNK):
        si, trajs = trainer.rollout(samples[lo:lo + CHUNK], group_offset=lo)
        c, tot = trainer.rewards(si, trajs)
        for r in ROLES:
            comps[r] += [float(v) for v in c[f"stream_{r}"]]
        total += [float(v) for v in tot]
        gids += [int(x.group_id) for x in trajs]
        log(f"[seed {seed}] rollouts {min(lo + CHUNK, len(samples))}/{len(samples)} blocks")
    p = trainer.spec.params
    minutes["rollout"] = (time.time() - t) / 60
    rec = {"seed": seed, "plan": [plan.world_seed, plan.sft_seed, plan.rl_seed], "start": start,
           "components": comps, "total": total, "group_ids": gids, "block_ids": [x.id for x in samples], "weights": dict(p.weights), "eps": p.eps,
           "n_train_streams": args.n_train, "n_test_streams": args.n_test, "n_blocks": len(samples),
           "group_size": args.group_size, "sft_batch": args.sft_batch, "sft_steps": args.sft_steps, "sft_lr": args.sft_lr, "model": args.model,
           "minutes": dict(minutes, total=(time.time() - t0) / 60)}
    (out / "diag.json").write_text(json.dumps(rec))
    return rec


def pick_blocks(ids: Sequence[str], per_stream: int, seed: int) -> List[str]:
    """``per_stream`` blocks of each stream (ids ``<video>@<first chunk>``), drawn with ``seed``; all when it is
    at least the stream's block count. The order of ``ids`` is kept."""
    import random

    by: Dict[str, List[str]] = {}
    for i in ids:
        by.setdefault(i.rsplit("@", 1)[0], []).append(i)
    rng, keep = random.Random(seed), set()
    for video in sorted(by):
        keep.update(by[video] if per_stream >= len(by[video]) else rng.sample(by[video], per_stream))
    return [i for i in ids if i in keep]


def subset_record(rec: Dict, keep: Sequence[str]) -> Dict:
    """``rec`` with only the groups of the blocks ``keep`` (group ids index ``rec["block_ids"]``)."""
    keep_idx = {j for j, b in enumerate(rec["block_ids"]) if b in set(keep)}
    rows = [i for i, g in enumerate(rec["group_ids"]) if g in keep_idx]
    out = dict(rec, group_ids=[rec["group_ids"][i] for i in rows], total=[rec["total"][i] for i in rows],
               components={k: [v[i] for i in rows] for k, v in rec["components"].items()},
               block_ids=[b for j, b in enumerate(rec["block_ids"]) if j in keep_idx], n_blocks=len(keep_idx))
    out["minutes"] = dict(rec["minutes"], rollout=rec["minutes"]["rollout"] * len(keep_idx) / rec["n_blocks"])
    return out


def load_record(path: Path, per_stream: int) -> Dict:
    """A seed's ``diag.json``, cut to ``per_stream`` blocks per stream by ``pick_blocks``'s rule when it sampled
    more (its rollout minutes scaled by the share kept). Records written before ``block_ids`` was stored index the
    blocks of their world's ``train.json``, in order."""
    from mmrl.data.annotations import load_samples

    rec = json.loads(path.read_text())
    if "block_ids" not in rec:
        rec["block_ids"] = [x.id for x in load_samples(str(path.parent / "world" / "train.json"))[0]]
    keep = pick_blocks(rec["block_ids"], per_stream, seed_plan(rec["seed"]).rl_seed)
    return subset_record(rec, keep) if len(keep) < len(rec["block_ids"]) else rec


def greedy_start(model: Path, world: Dict, out: Path) -> Dict:
    """Greedy streaming evaluation of ``model`` on the held-out streams (official scorer): per task accuracy and
    count, chance per task (1 / options for EPM and ATR; the no-model reference for CRR and REC)."""
    from mmrl.eval.benchmark_def import load_benchmark
    from mmrl.eval.benchmarks.ovobench.stream import streaming_eval
    from mmrl.eval.cli_bench import load_for_eval
    from mmrl.stream.config import DEFAULT_PATH, load_stream_config
    from stream_gdpo import no_tracking_scores

    items = json.loads(Path(world["ovo_test"]).read_text())
    _, processor, engine = load_for_eval(str(model), "cpu")
    summ = streaming_eval(items, world["video_root"], load_benchmark("ovobench"), load_stream_config(DEFAULT_PATH),
                          processor, engine, out)
    ref = no_tracking_scores(Path(world["ovo_test"]))["tasks"]
    tasks = summ["scores"]["tasks"]
    chance = {}
    for t in tasks:
        opts = [len(it["options"]) for it in items if it["task"] == t and it.get("options")]
        chance[t] = sum(1 / k for k in opts) / len(opts) if t in CHOICE_TASKS and opts else ref.get(t, {}).get("acc", 0) / 100
    return {"acc": {t: v["acc"] / 100 for t, v in tasks.items()}, "n": {t: v["n"] for t, v in tasks.items()},
            "chance": chance, "overall": summ["scores"]["weighted_overall"] / 100,
            "invalid_frac": summ["invalid_frac"]}


# ---- the pre-flight and the verdict -------------------------------------------------------------------------------
def mechanism_stats(rec: Dict) -> Dict[str, float]:
    spread = component_spread(rec["components"], rec["group_ids"])
    a, b = advantages(rec["components"], rec["group_ids"], rec["weights"], rec["eps"])
    agree = rank_agreement(a, b, rec["group_ids"])
    stats = {f"zero_{r}": spread[r]["zero_share"] for r in ROLES}
    stats.update({f"std_{r}": spread[r]["std"] for r in ROLES})
    stats.update(agree)
    stats["zero_sum"] = component_spread({"sum": rec["total"]}, rec["group_ids"])["sum"]["zero_share"]
    multi = multi_varying(rec)
    stats["multi_varying"] = sum(multi) / len(multi) if multi else float("nan")
    from stream_gdpo_stats import by_group, spearman

    rhos = [spearman(x, y) for x, y, m in zip(by_group(a, rec["group_ids"]), by_group(b, rec["group_ids"]), multi) if m]
    rhos = [r for r in rhos if r == r]
    stats["rho_multi_mean"] = sum(rhos) / len(rhos) if rhos else float("nan")
    out = by_group(rec["components"]["out"], rec["group_ids"])
    for name, adv in (("gdpo", a), ("grpo", b)):  # how closely each advantage follows the outcome where it varies
        rs = [spearman(x, o) for x, o in zip(by_group(adv, rec["group_ids"]), out) if max(o) - min(o) > 1e-9]
        rs = [r for r in rs if r == r]
        stats[f"out_follow_{name}"] = sum(rs) / len(rs) if rs else float("nan")
    return stats


def multi_varying(rec: Dict) -> List[bool]:
    """Per group: do two or more components vary in it (only there can decoupling reorder responses)?"""
    from stream_gdpo_stats import by_group

    per = [by_group(rec["components"][r], rec["group_ids"]) for r in ROLES]
    return [sum(max(p[j]) - min(p[j]) > 1e-9 for p in per) >= 2 for j in range(len(per[0]))]


def can_act(stats: Dict[str, float]):
    none, why = no_effect(stats)
    return (not none), ("ok: " + why if not none else why)


def preflight_of(rec: Dict):
    from stream_gdpo_stats import by_group

    gids = rec["group_ids"]
    out = by_group(rec["components"]["out"], gids)
    groups = Groups(rewards=by_group(rec["total"], gids), correct=[[float(v >= 1 - 1e-9) for v in g] for g in out],
                    qtypes=["block"] * len(out))
    pf = build_preflight(rec["seed"], {}, [], groups, ks=(1, rec["group_size"]),
                         mechanism=Mechanism("Stream-GDPO", lambda ctx: mechanism_stats(rec), can_act))
    st = rec["start"]
    for t, acc in sorted(st["acc"].items()):  # the harness's rule: above chance by two binomial standard errors
        c, n = st["chance"][t], st["n"][t]
        se = math.sqrt(max(c * (1 - c), 1e-12) / n) if n else float("inf")
        pf.per_type[t] = {"acc": acc, "chance": c, "n": n, "above_chance": float(acc > c + 2 * se)}
    return pf


def render(recs: Sequence[Dict], command: str, smoke: bool, note: str = "") -> str:
    n_q = min(sum(r["start"]["n"].values()) for r in recs)
    proto = Protocol(command=command, seeds=[r["seed"] for r in recs], n_test=n_q, smoke=smoke)
    res = Results(proto, "Stream-GDPO: the offline diagnostic on the tiny base (no RL)")
    r0 = recs[0]
    res.add([note, ""] if note else [])
    res.add([f"Per seed: {r0['n_train_streams']} training and {r0['n_test_streams']} held-out 16-s streams of its own "
             f"world (4 blocks each, 1-s chunks at 2 fps, 56x56 frames: the base's frame size), masked SFT "
             f"{r0['sft_steps']} steps x {r0.get('sft_batch', 8)} blocks at lr {r0['sft_lr']:g} from `model.path="
             f"{r0.get('model', 'base')}`, then {r0['group_size']} sampled "
             f"episodes per block on {r0['n_blocks']} blocks ({r0['n_blocks'] / r0['n_train_streams']:g} of 4 per "
             f"training stream, drawn with the seed) = {r0['n_blocks']} groups (`configs/stream_gdpo.yaml`'s "
             f"rollout, temperature 1). The test counts are OVO queries (items for EPM/ATR, probes for CRR/REC); "
             f"0 validation items (no RL setting is chosen here). Minutes per seed (SFT / greedy eval / rollouts): "
             + ", ".join(f"seed {r['seed']} {r['minutes']['sft']:.1f} / {r['minutes']['eval']:.1f} / "
                         f"{r['minutes']['rollout']:.1f}" for r in recs) + ".", "",
             "Chance: 1 / options for EPM and ATR; for CRR and REC the no-model reference (each forward question "
             "answered once, when asked, with its first probe's gold, never updated). Greedy weighted overall of the "
             "start: " + ", ".join(f"seed {r['seed']} {100 * r['start']['overall']:.1f}% (invalid decisions "
                                   f"{100 * r['start']['invalid_frac']:.1f}%)" for r in recs) + ".", ""])
    pfs = [preflight_of(r) for r in recs]
    short = [dataclasses.replace(pf, mechanism={k: pf.mechanism[k] for k in ("rho_pooled", "rho_group_mean")})
             for pf in pfs]  # the harness's table: the verdict's two numbers; the rest in the component table
    res.add(preflight_lines(short, "Stream-GDPO")[:-1] + [
        "", "pass@k: \"correct\" = R_out = 1 (every scored question of the block answered right and on time); "
        "zero-spread groups: the summed reward.", ""])
    res.add(component_lines(pfs))
    verdicts = [no_effect(pf.mechanism) for pf in pfs]
    if all(v[0] for v in verdicts):
        res.add(["## Verdict: no effect can exist here; stopped before RL", "",
                 f"On every seed the decoupled advantage either ranks the sampled responses as GRPO on the sum does "
                 f"(Spearman >= {NO_EFFECT_CORR}, no group moved by one estimator only) or neither is ever non-zero, "
                 f"so Stream-GDPO and GRPO-on-the-sum would push the policy the same way and no RL difference "
                 f"between them could be attributed to decoupling:", ""]
                + [f"- seed {pf.seed}: {why}" for pf, (_, why) in zip(pfs, verdicts)] + ["", why_lines(pfs), ""])
    else:
        res.add(["## Verdict: decoupling changes the advantage on the start", "",
                 "On at least one seed Stream-GDPO's advantage ranks the responses differently from GRPO on the sum:",
                 ""] + [f"- seed {pf.seed}: {'no effect: ' if none else ''}{why}" for pf, (none, why) in zip(pfs, verdicts)]
                + ["", why_lines(pfs), "", POOLED_NOTE, ""])
        res.add(rl_needs_lines(recs, pfs))
    return res.render()


def rl_needs_lines(recs: Sequence[Dict], pfs, steps: int = 100, blocks: int = 64) -> List[str]:
    """What the RL arms (Stream-GDPO vs GRPO on the sum, under the protocol) would need; not run here. The cost is
    this run's own rollout rate (sampled episodes per minute, niced on the shared CPU), rollouts only."""
    from _protocol import DEFAULT_KL_GRID, DEFAULT_LR_GRID

    g = recs[0]["group_size"]
    rate = [r["n_blocks"] * r["group_size"] / r["minutes"]["rollout"] for r in recs if r["minutes"]["rollout"] > 0]
    per_step = blocks * g / max(rate) if rate else float("nan")  # the least contended seed's rate: a lower bound
    grid = len(DEFAULT_LR_GRID) * len(DEFAULT_KL_GRID)
    # per seed: the grid on GRPO on the sum (its chosen run IS that arm), then Stream-GDPO and the coin flip
    runs = len(recs) * (2 + grid)
    small_runs, small_blocks = len(recs) * (2 + 2), 16  # the least the issue allows: 2 lr points at KL 0, 16 blocks
    small_step = small_blocks * g / max(rate) if rate else float("nan")
    n_q = min(sum(r["start"]["n"].values()) for r in recs)
    low = sorted({t for pf in pfs for t, r in pf.per_type.items() if not r["above_chance"]})
    start = ([f"- A start above chance first: the masked-SFT start is not above chance on {', '.join(low)} on at "
              f"least one seed (table above), and the protocol does not spend RL on a start at chance (more SFT "
              f"steps or streams, or a base pre-trained on the stream grammar and its colour questions)."]
             if low else [])
    return ["## What the RL arms would need (not run)", ""] + start + [
            f"- Arms per seed: Stream-GDPO and GRPO on the sum from the same masked-SFT start, same prompts, rollouts, "
            f"steps and seed (action-branch weight 1 so that they differ only in the advantage), plus a coin-flip "
            f"control (R_out replaced by a Bernoulli draw of its batch mean and R_tool credited by it, R_fmt and R_mem "
            f"kept: `coin_flip_config` turns the `stream` reward into `stream_coin_flip`).",
            f"- Setting: lr {', '.join(f'{x:g}' for x in DEFAULT_LR_GRID)} x KL {', '.join(f'{x:g}' for x in DEFAULT_KL_GRID)} "
            f"({grid} points) chosen by GRPO on the sum on a validation split of streams (`select_setting`), then the "
            f"same for both arms; >= {steps} RL steps of {blocks} blocks x {g} episodes (the paper's 64 prompts x 4).",
            f"- Test: {n_q} OVO queries per seed on {recs[0]['n_test_streams']} held-out streams here (>= 400 needed; "
            f"EPM and ATR have one item per stream, so per-task intervals stay wide); >= 3 seeds, 5 if the effect is small.",
            f"- Cost: this run's rollout rates were {', '.join(f'{x:.0f}' for x in rate)} episodes / min per seed "
            f"(niced; they follow the shared machine's load). At the fastest, about "
            f"{per_step:.1f} min of rollouts per RL step, {steps * per_step / 60:.1f} h per {steps}-step run, "
            f"{runs} runs ({len(recs)} seeds x ({grid} grid points, the chosen one being GRPO on the sum, + "
            f"Stream-GDPO + the coin flip), the grid at full length) = about "
            f"{runs * steps * per_step / 60:.0f} h before the policy updates and evaluations. The least the issue "
            f"allows ({steps} steps of {small_blocks} blocks x {g} episodes, 2 lr points at KL 0): {small_runs} runs "
            f"= about {small_runs * steps * small_step / 60:.1f} h of rollouts alone, on one core, before the "
            f"policy updates and evaluations (not measured here). The first is out of reach of this shared 2-core "
            f"CPU; the second would take most of a session's CPU, on a start at chance on the choice tasks.", ""]


def component_lines(pfs) -> List[str]:
    lines = ["## Reward components within groups", "",
             "Share of groups where the component is constant (it then contributes 0 to Stream-GDPO's advantage), "
             "mean within-group std (unbiased; Stream-GDPO's σ_c(G)), share of groups where >= 2 components vary:", "",
             "| seed | " + " | ".join(f"zero {r}" for r in ROLES) + " | zero sum | " + " | ".join(f"std {r}" for r in ROLES)
             + " | >= 2 vary |", "|---|" + "---:|" * 10]
    for pf in pfs:
        m = pf.mechanism
        lines.append(f"| {pf.seed} | " + " | ".join(f"{100 * m[f'zero_{r}']:.1f}%" for r in ROLES)
                     + f" | {100 * m['zero_sum']:.1f}% | " + " | ".join(f"{m[f'std_{r}']:.3f}" for r in ROLES)
                     + f" | {100 * m['multi_varying']:.1f}% |")
    lines += ["", "Stream-GDPO's advantage vs GRPO's on the sum (the project's `stream_gdpo_advantages` and "
              "`grpo_advantages`, ε 1e-4, weights out 1, fmt 1, tool 0.5, mem 0.5):", "",
              "| seed | Spearman pooled | Spearman per group (mean) | per group, where >= 2 components vary | groups "
              "ranked | ranking differs | non-zero only under Stream-GDPO | only under GRPO |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for pf in pfs:
        m = pf.mechanism
        lines.append(f"| {pf.seed} | {m['rho_pooled']:.3f} | {m['rho_group_mean']:.3f} | {m['rho_multi_mean']:.3f} | "
                     f"{m['groups_ranked']:.0f} / "
                     f"{pf.n_groups} | {100 * m['rank_differs']:.1f}% | {100 * m['only_a']:.1f}% | {100 * m['only_b']:.1f}% |")
    lines += ["", "How closely each advantage follows the outcome: mean over the groups where R_out varies of the "
              "Spearman correlation between the advantage and R_out (1: the advantage orders the responses by "
              "outcome; the other components can pull it away):", "",
              "| seed | groups where R_out varies | Stream-GDPO | GRPO on the sum |", "|---|---:|---:|---:|"]
    for pf in pfs:
        m = pf.mechanism
        lines.append(f"| {pf.seed} | {100 * (1 - m['zero_out']):.1f}% | {m['out_follow_gdpo']:.3f} | "
                     f"{m['out_follow_grpo']:.3f} |")
    return lines + [""]


POOLED_NOTE = ("Pooled vs per group: both advantages are centred in each group, but GRPO's has unit spread in every "
               "group while Stream-GDPO's (no batch step) is a sum of standardised components, so a group where "
               "several components vary gets a larger advantage: a pooled correlation below the per-group one "
               "means decoupling re-weights groups more than it reorders responses within them.")


def why_lines(pfs) -> str:
    closer = [pf.seed for pf in pfs if pf.mechanism["out_follow_gdpo"] > pf.mechanism["out_follow_grpo"]]
    above = [f"seed {pf.seed}: {sum(r['above_chance'] > 0 for r in pf.per_type.values())} of {len(pf.per_type)}"
             for pf in pfs]
    return ("Why: decoupling can reorder a group's responses only where two or more components vary in it with "
            "different spreads (or cancel in the sum); that share is "
            + ", ".join(f"{100 * pf.mechanism['multi_varying']:.1f}% (seed {pf.seed})" for pf in pfs)
            + " of the groups here. Stream-GDPO's advantage follows R_out more closely than GRPO's on the sum on "
            f"{len(closer)} of {len(pfs)} seeds. Tasks on which the start is above chance: " + ", ".join(above) + ".")


def write_report(path: Path, text: str) -> None:
    """``text`` on top of ``path``; what followed ``MARKER`` (or the whole old file) kept below the marker and the
    ``EARLIER`` label."""
    old = path.read_text() if path.exists() else ""
    if MARKER in old:
        old = old.split(MARKER, 1)[1].lstrip("\n")
        old = old[len(EARLIER):].lstrip("\n") if old.startswith(EARLIER) else old
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip() + "\n\n" + MARKER + "\n\n" + EARLIER + "\n\n" + old)


def main(argv: List[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--n-train", type=int, default=64)
    p.add_argument("--n-test", type=int, default=32)
    p.add_argument("--sft-steps", type=int, default=200)
    p.add_argument("--sft-batch", type=int, default=8)
    p.add_argument("--sft-lr", type=float, default=3e-4, help="the base's own SFT lr (1e-3 collapsed its vision)")
    p.add_argument("--blocks-per-stream", type=int, default=4,
                   help="blocks sampled per training stream (of 4), drawn with the seed's RL seed; a record with more "
                        "is cut to these at render")
    p.add_argument("--model", default="base", help="the SFT's start (the tiny base; tests pass the tiny model)")
    p.add_argument("--group-size", type=int, default=4, help="sampled episodes per block (the paper's 4)")
    p.add_argument("--out", default="runs/stream_gdpo_diag")
    p.add_argument("--report", default=str(REPO / "docs/results/stream.md"))
    p.add_argument("--render-only", action="store_true")
    p.add_argument("--reuse-sft", action="store_true", help="keep a seed's finished SFT checkpoint in --out")
    p.add_argument("--note", default="", help="a line printed under the command (how the seeds were run)")
    p.add_argument("--smoke", action="store_true", help="fewer seeds than the protocol's (labelled SMOKE RUN)")
    args = p.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    recs = []
    for s in args.seeds:
        d = Path(args.out) / f"seed{s}"
        f = d / "diag.json"
        recs.append(load_record(f, args.blocks_per_stream) if (args.render_only or f.exists()) else run_seed(s, args, d))
    if args.render_only or len(args.seeds) > 1 or args.smoke:
        if not args.smoke and len(recs) < MIN_SEEDS:
            raise ProtocolError(f"protocol: {len(recs)} seed(s); the diagnostic's table needs >= {MIN_SEEDS} (--smoke)")
        shown = [a for i, a in enumerate(argv) if a != "--note" and (i == 0 or argv[i - 1] != "--note")]
        cmd = shlex.join(["OMP_NUM_THREADS=1", ".venv/bin/python", "bench/stream_gdpo_diag.py", *shown]
                         + (["--note", "(the paragraph below)"] if args.note else []))
        text = render(recs, cmd, args.smoke, args.note)
        print(text)
        write_report(Path(args.report), text)


if __name__ == "__main__":
    main()
