"""The pre-flight of the BPO / T-GRPO miniature (issue 28 item 3) on the tiny base that sees, under the miniature
protocol (``docs/miniatures.md``): no RL, only the statistics that say whether RL could show anything.

    .venv/bin/python bench/bpo_preflight.py [--seeds 0 1 2] [--n-test 400] [--n-train 1024] [--sft-steps 150]
        [--group-size 8] [--out runs/bpo_preflight] [--render-only] [overrides ...]

Per protocol seed (``seed_plan``: its own world and SFT seed): the tint-prior video world at the base's resolution
(56 px, 8 frames at 4 fps, fixed option order; train split biased, ``test.json`` debiased), the abstention option
appended to every question, SFT from ``model.path=base`` with ``configs/demo.yaml``'s SFT settings plus 5%
"nothing to see" items (``bpo_world.add_null_sft_items``), then on the debiased test split:

- greedy accuracy per question type vs chance, and the greedy abstention rate on the null canvases of
  ``views/bpo_eval.yaml`` (``abstain_recall``: no stage trained on them);
- the T-GRPO rollout of ``configs/tgrpo_demo.yaml`` (G ordered + G/2 shuffled-frame responses per prompt): the
  ordered responses are the G = 8 groups of pass@k and of the zero-spread share, and the temporal bonus is
  computed as T-GRPO computes it (``mmrl.algos.tgrpo.tgrpo_temporal_bonus``: ordered vs shuffled accuracy per group);
  ``bonus_differs`` = share of groups whose ordered responses get different bonuses (only those change an advantage);
- the BPO rollout of ``configs/bpo_demo.yaml`` (2 packs x 4 views): the sampled abstention rate on its training null
  view (``blank``), and the share of prompts whose null-view responses disagree.

Mechanisms (``bench/_preflight.Mechanism``): T-GRPO can act when ``bonus_differs >= MIN_SHARE`` of the groups;
BPO's null view can act when the sampled null abstention rate is above 0 (else the null view's reward never varies)
and the greedy null abstention is below 1 (else there is nothing left to teach). Each seed runs in its own process
(``--seeds S``) and writes ``OUT/seed<S>/preflight.json``; ``--render-only`` prints the tables of all seeds.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
from _arms import log  # noqa: E402
from _preflight import Groups, Mechanism, Preflight, build_preflight, preflight_lines  # noqa: E402
from _protocol import MIN_TEST, ProtocolError, seed_plan, standard_error_points  # noqa: E402
from bpo_arms import BPO_CFG, DEMO  # noqa: E402
from bpo_world import add_abstain_option, add_null_sft_items  # noqa: E402

TGRPO_CFG = str(REPO / "configs" / "tgrpo_demo.yaml")
EVAL_VIEWS = REPO / "views" / "bpo_eval.yaml"
CLIP_WORLD = dict(size=56, n_frames=8, fps=4.0)  # the base's clips (docs/base_model.md)
MIN_SHARE = 0.05  # T-GRPO: at least 5% of the groups must have a bonus that differs within the group
CHUNK = 25  # prompts per rollout call


def temporal_bonus_spread(acc, group_ids, is_shuffled, mu: float = 0.8, bonus: float = 0.3,
                          acc_threshold: float = 0.1) -> Dict[str, float]:
    """Per group, T-GRPO's temporal bonus (``tgrpo_temporal_bonus``) on its ordered responses: the share of groups
    where it differs within the group (``bonus_differs``), where its condition ``p >= mu p~`` holds with shuffled
    responses present (``bonus_on``), and where the group has shuffled responses at all (``has_shuffled``)."""
    import torch

    from mmrl.algos.grpo import group_index
    from mmrl.algos.tgrpo import tgrpo_temporal_bonus

    acc, gid = torch.as_tensor(acc, dtype=torch.float64), torch.as_tensor(group_ids)
    shuf = torch.as_tensor(is_shuffled, dtype=torch.bool)
    b, cond = tgrpo_temporal_bonus(acc, gid, shuf, mu, bonus, acc_threshold)
    inv, g = group_index(gid)
    differs, on, has = [False] * g, [False] * g, [False] * g
    for j in range(g):
        m = inv == j
        ordered = b[m & ~shuf]
        differs[j] = bool(ordered.numel() and ordered.max() - ordered.min() > 1e-12)
        has[j] = bool(shuf[m].any())
        on[j] = bool(cond[m].any()) and has[j]
    return {"bonus_differs": sum(differs) / g, "bonus_on": sum(on) / g, "has_shuffled": sum(has) / g} if g else {}


def bonus_spread_by_qtype(acc, group_ids, is_shuffled, qtypes, **kw) -> Dict[str, Dict[str, float]]:
    """``temporal_bonus_spread`` within each question type (``qtypes``: one per response; a group has one type)."""
    out = {}
    for q in sorted(set(qtypes)):
        idx = [i for i, t in enumerate(qtypes) if t == q]
        out[q] = temporal_bonus_spread([acc[i] for i in idx], [group_ids[i] for i in idx],
                                       [is_shuffled[i] for i in idx], **kw)
    return out


def _trainer(files: Sequence[str], overrides: List[str]):
    from mmrl.config import load_config
    from mmrl.train.rl_trainer import RLTrainer

    return RLTrainer(load_config([str(DEMO)] + list(files), overrides), quiet=True)


def _rollout(trainer, samples) -> Tuple[list, Dict[str, list], list]:
    """All trajectories of ``samples`` (in chunks), their reward components and totals; group ids are global."""
    trajs, comps, total = [], {}, []
    for lo in range(0, len(samples), CHUNK):
        si, tr = trainer.rollout(samples[lo:lo + CHUNK], group_offset=lo)
        c, t = trainer.rewards(si, tr)
        for x in tr:
            x.qtype = si.samples[x.sample_id].qtype
        trajs += tr
        total += [float(v) for v in t]
        for k, v in c.items():
            comps.setdefault(k, []).extend(float(u) for u in v)
    return trajs, comps, total


def biased_macro(out: Path, overrides: Sequence[str]) -> float:
    """Greedy macro accuracy of the seed's SFT start on ``test_biased.json`` (the train split's tint kept): with the
    debiased split's, the size of the prior the start leans on."""
    from mmrl.config import load_config
    from mmrl.eval.synthetic import evaluate_checkpoint

    cfg = load_config([str(DEMO)], [f"data.nframes={CLIP_WORLD['n_frames']}",
                                    f"data.max_pixels={CLIP_WORLD['size'] ** 2}"] + list(overrides))
    dst = out / "world" / "test_biased_abst.json"
    add_abstain_option(str(out / "world" / "test_biased.json"), str(dst), cfg.data.prompt.abstain_text)
    return evaluate_checkpoint(str(out / "sft" / "final"), str(dst), cfg.data)["macro_accuracy"]


def split_validation(test: Path, val: Path, n_test: int) -> None:
    """Move every item of ``test`` after the first ``n_test`` into ``val``: clips no stage trains on, drawn like the
    debiased test split, for the RL setting's choice (``bench/bpo_protocol.py``)."""
    items = json.loads(test.read_text())
    if len(items) <= n_test:
        raise ValueError(f"{test}: {len(items)} items, none left for a validation split after {n_test} test items")
    test.write_text(json.dumps(items[:n_test], indent=1) + "\n")
    val.write_text(json.dumps(items[n_test:], indent=1) + "\n")


def run_seed(seed: int, args, out: Path) -> Dict:
    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples
    from mmrl.data.synth_video import make_video_world
    from mmrl.eval.synthetic import evaluate_checkpoint
    from mmrl.train.sft import run_sft
    from mmrl.views import ViewSet

    t0, plan = time.time(), seed_plan(seed)
    world = out / "world"
    abst = load_config([str(DEMO)], list(args.overrides)).data.prompt.abstain_text
    train, test, sft_train = world / "train_abst.json", world / "test_abst.json", world / "sft_train.json"
    reuse = args.reuse_sft and (out / "sft" / "final").is_dir()
    if reuse:  # the world and the SFT start of an earlier run of this seed (same settings assumed)
        n_null = sum(1 for it in json.loads(sft_train.read_text()) if (it.get("meta") or {}).get("null"))
    else:
        n_val = getattr(args, "n_val", 0)  # a validation split: n_val more debiased clips, after the test split's
        info = make_video_world(str(world), args.n_train, args.n_test + n_val, seed=plan.world_seed, prior="tint",
                                prior_strength=args.prior_strength, fixed_options=True, **CLIP_WORLD)
        add_abstain_option(info["train"], str(train), abst)
        add_abstain_option(info["test"], str(test), abst)
        if n_val:
            split_validation(test, world / "val_abst.json", args.n_test)
            biased = Path(info["test_biased"])  # as many biased clips as test clips
            biased.write_text(json.dumps(json.loads(biased.read_text())[:args.n_test], indent=1) + "\n")
        n_null = add_null_sft_items(str(train), str(sft_train), args.sft_null_share, abst, world, plan.world_seed,
                                    clip_world=CLIP_WORLD)
    data = [f"data.nframes={CLIP_WORLD['n_frames']}", f"data.max_pixels={CLIP_WORLD['size'] ** 2}",
            f"data.train={train}", f"data.test={test}", "train.save_every=0"]
    log(f"[seed {seed}] world {args.n_train}/{args.n_test} ready ({time.time() - t0:.0f} s); SFT {args.sft_steps} steps "
        f"from base on {args.n_train} + {n_null} empty-scene items")
    t = time.time()
    sft_cfg = load_config([str(DEMO)], data + ["model.path=base", f"train.seed={plan.sft_seed}",
                                               f"train.out_dir={out / 'sft'}", f"sft.steps={args.sft_steps}",
                                               f"data.train={sft_train}"] + list(args.overrides))
    if not reuse:
        run_sft(sft_cfg, quiet=True, overwrite=True)
    sft_path, sft_min = str(out / "sft" / "final"), (time.time() - t) / 60
    if reuse:  # keep the earlier run's SFT minutes
        old = out / "preflight.json"
        sft_min = json.loads(old.read_text())["minutes"]["sft"] if old.exists() else float("nan")
    log(f"[seed {seed}] SFT done ({sft_min:.1f} min)")

    t = time.time()
    viewset = ViewSet.load(str(EVAL_VIEWS), abstain_text=abst)
    res = evaluate_checkpoint(sft_path, str(test), sft_cfg.data, viewset=viewset)
    eval_min = (time.time() - t) / 60
    log(f"[seed {seed}] greedy eval done ({eval_min:.1f} min): macro {100 * res['macro_accuracy']:.1f}")

    t = time.time()
    samples, _ = load_samples(str(test), sft_cfg.data.media_root)
    rl = data + [f"model.path={sft_path}", f"train.seed={plan.rl_seed}", f"train.out_dir={out / 'rl'}",
                 f"rollout.n={args.group_size}"] + list(args.overrides)
    tg = _trainer([TGRPO_CFG], rl)
    trajs, comps, total = _rollout(tg, samples)
    p = tg.spec.params
    groups, by = Groups(), {}
    for i, x in enumerate(trajs):
        by.setdefault(x.group_id, []).append(i)
    for gid in sorted(by):
        ordered = [i for i in by[gid] if trajs[i].role != "shuffled"]
        groups.rewards.append([total[i] for i in ordered])
        groups.correct.append([comps["accuracy"][i] for i in ordered])
        groups.qtypes.append(trajs[ordered[0]].qtype)
    targs = (comps["accuracy"], [x.group_id for x in trajs], [x.role == "shuffled" for x in trajs])
    kw = dict(mu=p.mu, bonus=p.bonus, acc_threshold=p.acc_threshold)
    tstats = temporal_bonus_spread(*targs, **kw)
    by_q = bonus_spread_by_qtype(*targs, [x.qtype for x in trajs], **kw)
    del tg
    bp = _trainer([BPO_CFG], rl)
    btrajs, bcomps, _ = _rollout(bp, samples)
    null = [(x.group_id, bcomps["accuracy"][i]) for i, x in enumerate(btrajs) if x.role == "abstain"]
    per: Dict[int, List[float]] = {}
    for g, a in null:
        per.setdefault(g, []).append(a)
    roll_min = (time.time() - t) / 60
    vm = res.get("view_metrics", {})
    mech = {"tgrpo": tstats,
            "bpo": {"null_abstain_greedy": vm.get("abstain_recall", float("nan")),
                    "null_abstain_sampled": sum(a for _, a in null) / max(len(null), 1),
                    "null_mixed": sum(1 for v in per.values() if max(v) != min(v)) / max(len(per), 1)}}
    log(f"[seed {seed}] rollouts done ({roll_min:.1f} min): {mech}")
    rec = {"tgrpo_by_qtype": by_q, "seed": seed, "plan": vars(plan) if hasattr(plan, "__dict__") else list(plan), "per_qtype": res["per_qtype"],
           "macro": res["macro_accuracy"], "accuracy": res["accuracy"], "groups": vars(groups), "mechanism": mech,
           "view_metrics": vm,
           "n_null_sft": n_null, "minutes": {"sft": sft_min, "eval": eval_min, "rollout": roll_min,
                                             "total": (time.time() - t0) / 60},
           "sft_steps": args.sft_steps, "test": str(test)}
    rec["macro_biased"] = biased_macro(out, args.overrides)
    (out / "preflight.json").write_text(json.dumps(rec, indent=1))
    return rec


def tgrpo_can_act(s: Dict[str, float]) -> Tuple[bool, str]:
    if s.get("bonus_differs", 0.0) >= MIN_SHARE:
        return True, "ok"
    return False, (f"the temporal bonus differs within only {100 * s.get('bonus_differs', 0.0):.1f}% of the groups "
                   f"(< {100 * MIN_SHARE:.0f}%): T-GRPO's advantages equal GRPO's elsewhere")


def bpo_can_act(s: Dict[str, float]) -> Tuple[bool, str]:
    if s.get("null_abstain_sampled", 0.0) <= 0.0:
        return False, "no sampled response abstains on the null view: its reward never varies"
    if s.get("null_abstain_greedy", 0.0) >= 1.0:
        return False, "the start already abstains on every null canvas: nothing left to teach"
    return True, "ok"


MECHS = {"tgrpo": tgrpo_can_act, "bpo": bpo_can_act}


def preflights(recs: Sequence[Dict], samples_of) -> Dict[str, List[Preflight]]:
    """One pre-flight per method and seed, from the seeds' records (``samples_of(rec)``: the test samples)."""
    out: Dict[str, List[Preflight]] = {}
    for name, can in MECHS.items():
        mech = Mechanism(name, lambda ctx, n=name: ctx["rec"]["mechanism"][n], can)
        out[name] = [build_preflight(r["seed"], r["per_qtype"], samples_of(r), Groups(**r["groups"]), ks=(1, 4, 8),
                                     mechanism=mech, context={"rec": r}) for r in recs]
    return out


def render(recs: Sequence[Dict], command: str) -> str:
    return "\n".join([f"Command: `{command}`", ""] + preflight_section(recs)) + "\n"


def kept_test_items(path: str) -> List[Dict]:
    """What the pre-flight's tables need of each test item (its type and number of candidates), small enough to keep
    in a committed record so the tables render without the world's files."""
    return [{"qtype": it["qtype"], "n_candidates": len(it["candidates"])} for it in json.loads(Path(path).read_text())]


def record_samples(rec: Dict) -> list:
    """The record's test items: from ``rec["test_items"]`` when kept (``kept_test_items``), else loaded from
    ``rec["test"]`` (the world's annotation file)."""
    if "test_items" in rec:
        from types import SimpleNamespace

        return [SimpleNamespace(qtype=t["qtype"], candidates=[None] * t["n_candidates"], is_choice=True)
                for t in rec["test_items"]]
    from mmrl.data.annotations import load_samples

    return load_samples(rec["test"])[0]


def preflight_section(recs: Sequence[Dict]) -> List[str]:
    """The pre-flight's lines (settings, start vs chance, groups, T-GRPO per type, BPO's mechanism) of the seeds'
    records; ``render`` and ``bench/bpo_protocol.py`` print them."""
    pfs = preflights(recs, record_samples)
    n = len(record_samples(recs[0]))
    lines = [f"Seeds {[r['seed'] for r in recs]} (each its own world and SFT checkpoint, `seed_plan`), {n} debiased "
             f"test items per seed (standard error <= {standard_error_points(n):.1f} points), SFT "
             f"{recs[0]['sft_steps']} steps from `model.path=base`; minutes per seed (SFT / greedy eval / rollouts): "
             + ", ".join(f"seed {r['seed']} {r['minutes']['sft']:.1f} / {r['minutes']['eval']:.1f} / "
                         f"{r['minutes']['rollout']:.1f}" for r in recs), ""]
    lines += ["Greedy macro accuracy of the SFT start, debiased test split / biased split (the train split's tint "
              "kept): " + ", ".join(f"seed {r['seed']} {100 * r['macro']:.1f}% / {100 * r['macro_biased']:.1f}%"
                                    for r in recs), ""]
    lines += preflight_lines(pfs["tgrpo"], "T-GRPO")[2:]
    qs = sorted({q for r in recs for q in r.get("tgrpo_by_qtype", {})})
    if qs:
        lines += ["T-GRPO's `bonus_differs` per question type (share of that type's groups):", "",
                  "| seed | " + " | ".join(qs) + " |", "|---|" + "---:|" * len(qs)]
        lines += [f"| {r['seed']} | " + " | ".join(f"{100 * r['tgrpo_by_qtype'].get(q, {}).get('bonus_differs', float('nan')):.1f}%"
                                                  for q in qs) + " |" for r in recs] + [""]
    lines += ["BPO's mechanism (greedy abstention on `views/bpo_eval.yaml`'s null canvases; sampled abstention on "
              "BPO's training null view `blank`; share of prompts whose null-view responses disagree):", "",
              "| seed | null abstain greedy | null abstain sampled | null mixed | can act |", "|---|---|---|---|---|"]
    for pf in pfs["bpo"]:
        m = pf.mechanism
        lines.append(f"| {pf.seed} | {100 * m['null_abstain_greedy']:.1f}% | {100 * m['null_abstain_sampled']:.1f}% | "
                     f"{100 * m['null_mixed']:.1f}% | " + ("yes" if pf.can_act else f"**no**: {pf.reason}") + " |")
    return lines + [""]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--n-test", type=int, default=MIN_TEST)
    ap.add_argument("--n-train", type=int, default=1024)
    ap.add_argument("--sft-steps", type=int, default=150)
    ap.add_argument("--sft-null-share", type=float, default=0.05)
    ap.add_argument("--prior-strength", type=float, default=0.8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--smoke", action="store_true", help="allow a test set under the protocol's minimum")
    ap.add_argument("--out", default="runs/bpo_preflight")
    ap.add_argument("--render-only", action="store_true", help="print the tables from OUT/seed<S>/preflight.json")
    ap.add_argument("--reuse-sft", action="store_true", help="reuse OUT/seed<S>'s world and SFT start if present")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    if args.n_test < MIN_TEST and not args.smoke:
        raise ProtocolError(f"protocol: --n-test {args.n_test} < {MIN_TEST} (--smoke to try)")
    out = Path(args.out)
    command = shlex.join(["python", "bench/bpo_preflight.py", *(sys.argv[1:] if argv is None else argv)])
    recs = [json.loads((out / f"seed{s}" / "preflight.json").read_text()) if args.render_only
            else run_seed(s, args, out / f"seed{s}") for s in args.seeds]
    for r in recs:  # a record written before the biased split was evaluated
        if "macro_biased" not in r:
            r["macro_biased"] = biased_macro(out / f"seed{r['seed']}", args.overrides)
            (out / f"seed{r['seed']}" / "preflight.json").write_text(json.dumps(r, indent=1))
    print(render(recs, command), end="", flush=True)


if __name__ == "__main__":
    main()
