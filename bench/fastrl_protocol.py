"""FastRL (MDAP + ARS, specs/algorithms.md §4) over GRPO / DAPO / GSPO on the tiny base that sees, under the
miniature protocol (issue 28, ``docs/miniatures.md``): one resumable process per protocol seed, then one render.

    OMP_NUM_THREADS=1 python bench/fastrl_protocol.py --seeds 0 1 2 --only S [--n-train 512] [--n-rl 64]
        [--sft-steps 300] [--rl-steps 40] [--eval-every 10] [--lr-grid 1e-5 3e-5] [--kl-grid 0]
        [--optional dapo gspo] [--deadline HH:MM] [--out runs/fastrl_protocol]
        [--seed-dir bench/results/fastrl_protocol] [overrides ...]          # one seed
    python bench/fastrl_protocol.py --seeds 0 1 2 --render [--report docs/results/fastrl.md]   # pool the records

Per seed (``seed_plan``: its own world, SFT and RL seed), each stage kept in ``OUT/seed<S>/state.json``:

1. the video world at the base's resolution (``bpo_preflight.CLIP_WORLD``: 56 px, 8 frames, fixed options), a
   validation split after the test split, reasoning SFT targets in ``--styles`` styles on the train split; SFT
   from ``model.path=base``;
2. the **pre-flight**: the start's greedy test accuracy per type vs chance, ``--preflight-groups`` GRPO groups
   sampled on validation prompts (pass@1, pass@G, zero spread, truncation: ``check_truncation`` stops the seed
   when more than 5% are cut), MDAP's prune share by advantage vs by similarity and ARS's predicted rollout count
   per epoch (``fastrl_protocol_table.mdap_stats``); the seed stops when MDAP cannot act;
3. the **grid**: GRPO at every ``(lr, KL)``, scored on the validation split, pooled over the seeds
   (``_protocol.pooled_selection``); the chosen grid run IS the ``grpo`` arm;
4. the **arms** at the chosen setting, stepped round-robin in pairs: ``grpo_fastrl`` with ``coin_flip`` (GRPO with
   the coin-flip accuracy reward), then the optional ``dapo``/``dapo_fastrl`` and ``gspo``/``gspo_fastrl``
   (``ppo_epochs: 2``), each pair started only when predicted to end before ``--deadline``.

Every arm is evaluated greedily on the test split every ``--eval-every`` steps and at the end (the coin-flip control
at the end only), outside its clock, its step-0 point being the start's evaluation from the pre-flight; its cost (process CPU seconds, wall seconds, generated and update-pass tokens) is recorded
at each point, so the time to the base's best held-out accuracy can be read per seed. The seed record
(``--seed-dir``/seed<S>.json) is written after every stage; ``--render`` builds the results file from the records.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
from _arms import log, step_round_robin  # noqa: E402
from _preflight import Groups, Mechanism, build_preflight, check_truncation  # noqa: E402
from _protocol import (COIN_ARM, SeedState, Selection, add_protocol_args, add_seed_process_args,  # noqa: E402
                       apply_setting, coin_flip_config, dropped_by_deadline, grid_key, pooled_selection,
                       protocol_from_args, seed_plan, write_seed_record)
from fastrl import BASES, DEMO, REWARDS, TimedArm  # noqa: E402
from fastrl_protocol_table import ars_predict, mdap_can_act, mdap_stats, render  # noqa: E402

SCRIPT = "bench/fastrl_protocol.py"
CLIP_WORLD = dict(size=56, n_frames=8, fps=4.0)  # the base's clips (docs/base_model.md, bpo_preflight.CLIP_WORLD)
PAIRS = {"core": ("grpo_fastrl", COIN_ARM), "dapo": ("dapo", "dapo_fastrl"), "gspo": ("gspo", "gspo_fastrl")}
END_ONLY = (COIN_ARM,)  # the control needs its final accuracy only: no evaluations on the way
PAIR_COST = {"core": 1.6, "dapo": 2.0, "gspo": 3.0}  # predicted step cost of a pair, in plain GRPO steps


class ProtoArm(TimedArm):
    """``TimedArm`` whose evaluation points also carry process CPU seconds and the generated and update-pass
    tokens so far (the wall clock of a shared machine measures the load as much as the method)."""

    def __init__(self, name, cfg):
        super().__init__(name, cfg, 0.0)
        self.cpu = self.gen = self.upd = 0.0
        self.points = []

    def step(self):
        c0 = time.process_time()
        m = super().step()
        self.cpu += time.process_time() - c0
        self.gen += self.steps[-1]["gen_tokens"]
        self.upd += self.steps[-1]["trained_tokens"]
        return m

    def evaluate(self) -> float:
        acc = float(self.on_own_stream(self.trainer.evaluate)["eval/accuracy"])
        self.points.append({"step": self.trainer.step, "acc": acc, "cpu": self.cpu, "wall": self.wall,
                            "gen": self.gen, "upd": self.upd})
        return acc

    def evaluate_on(self, path: str) -> float:
        """Greedy accuracy on another split (the validation file), not recorded as a point."""
        from mmrl.data.annotations import load_samples

        tr = self.trainer
        saved = (tr.test_samples, tr.test_errors)
        tr.test_samples, tr.test_errors = load_samples(path, tr.cfg.data.media_root, on_error="skip")
        try:
            return float(self.on_own_stream(tr.evaluate)["eval/accuracy"])
        finally:
            tr.test_samples, tr.test_errors = saved


def world(sd: Path, seed: int, args) -> Dict[str, str]:
    """Train / test / validation files of the seed's world (deterministic in its world seed), reasoning targets on
    the train split and the RL split (its first ``--n-rl`` clips)."""
    from bpo_preflight import split_validation

    from mmrl.data.reasoning import add_reasoning_targets
    from mmrl.data.synth_video import make_video_world

    w = sd / "world"
    paths = {k: str(w / f"{k}.json") for k in ("train", "test", "val", "rl")}
    if Path(paths["rl"]).exists():
        return paths
    ws = seed_plan(seed).world_seed
    make_video_world(str(w), args.n_train, args.n_test + args.n_val, seed=ws, fixed_options=True, **CLIP_WORLD)
    split_validation(w / "test.json", w / "val.json", args.n_test)
    add_reasoning_targets(paths["train"], answer_first=args.answer_first, styles=args.styles, seed=ws)
    items = json.loads(Path(paths["train"]).read_text())
    Path(paths["rl"]).write_text(json.dumps(items[: args.n_rl], indent=1))
    return paths


def common(w: Dict[str, str], args) -> List[str]:
    return [f"data.nframes={CLIP_WORLD['n_frames']}", f"data.max_pixels={CLIP_WORLD['size'] ** 2}",
            f"data.test={w['test']}", f"train.prompts_per_step={args.prompts_per_step}", f"rollout.n={args.n}",
            f"rollout.max_new_tokens={args.max_new_tokens}", "train.save_every=0", REWARDS]


def arm_config(name: str, sd: Path, w, args, seed: int, sel: Selection, tag: str = ""):
    """The arm's config from the seed's SFT start: ``<base>`` or ``<base>_fastrl`` (``fastrl.BASES``), ``coin_flip``
    (GRPO with the coin-flip accuracy reward); GSPO with ``ppo_epochs: 2``; the selected lr and KL."""
    from mmrl.config import load_config

    base = "grpo" if name == COIN_ARM else name.replace("_fastrl", "")
    ov = [f"algorithm.name={base}"] + BASES[base]
    if name.endswith("_fastrl"):
        ov = ["algorithm.name=fastrl", f"algorithm.params={{base: {base}, tau: {args.tau}, ngram: {args.ngram}, "
              f"total_steps: {args.rl_steps}}}"] + BASES[base]
    if base == "gspo":
        ov.append("algorithm.ppo_epochs=2")
    cfg = load_config([str(DEMO)], common(w, args) + [
        f"data.train={w['rl']}", f"model.path={sd / 'sft' / 'final'}", f"train.seed={seed_plan(seed).rl_seed}",
        f"train.steps={args.rl_steps}", f"train.out_dir={sd / (tag or name)}"] + ov + list(args.overrides))
    cfg = apply_setting(cfg, sel)
    return coin_flip_config(cfg) if name == COIN_ARM else cfg


def sft(sd: Path, w, args, seed: int) -> str:
    from mmrl.config import load_config
    from mmrl.train.sft import run_sft

    path, start = sd / "sft" / "final", args.model
    if start == "tiny":  # tests: the untrained tiny model
        from mmrl.models.tiny import ensure_tiny_model

        start = str(ensure_tiny_model())
    if not path.is_dir():
        run_sft(load_config([str(DEMO)], common(w, args) + [
            f"model.path={start}", f"data.train={w['train']}", f"train.seed={seed_plan(seed).sft_seed}",
            f"train.out_dir={sd / 'sft'}", f"sft.steps={args.sft_steps}", f"sft.lr={args.sft_lr}",
            f"model.freeze_vision={str(args.freeze_vision).lower()}"] + list(args.overrides)),
            quiet=True, overwrite=True)
    return str(path)


def preflight(sd: Path, w, args, seed: int) -> Dict:
    """Start's greedy test accuracy per type, sampled GRPO groups on validation prompts, truncation, MDAP / ARS."""
    from mmrl.data.annotations import load_samples
    from mmrl.train.checkpoint import rng_state, set_rng_state

    arm = ProtoArm("start", arm_config("grpo", sd, w, args, seed, Selection(1e-5, 0.0), tag="preflight"))
    ev = arm.on_own_stream(arm.trainer.evaluate)
    per_type = {k[len("eval/acc_"):]: v for k, v in ev.items() if k.startswith("eval/acc_")}
    val, _ = load_samples(w["val"], arm.cfg.data.media_root)
    saved = rng_state()
    try:
        si, trajs = arm.trainer.rollout(val[: args.preflight_groups])
        comps, total = arm.trainer.rewards(si, trajs)
    finally:
        set_rng_state(saved)
    by: Dict[int, List[int]] = {}
    for i, t in enumerate(trajs):
        by.setdefault(t.group_id, []).append(i)
    g = Groups()
    resp = []
    for gid in sorted(by):
        idx = by[gid]
        g.rewards.append([float(total[i]) for i in idx])
        g.correct.append([float(comps["accuracy"][i]) for i in idx])
        g.qtypes.append(si.samples[trajs[idx[0]].sample_id].qtype)
        g.truncated.append([bool(getattr(trajs[i], "truncated", False)) for i in idx])
        resp.append([trajs[i].response_ids.tolist() for i in idx])
    trunc = check_truncation([x for t in g.truncated for x in t], args.max_new_tokens,
                             limit=1.0 if args.smoke else 0.05)  # a smoke run's SFT is too short to stop
    spe = max(1, args.n_rl // args.prompts_per_step)
    stats = mdap_stats(g.rewards, resp, args.tau, args.ngram, args.prompts_per_step, args.n, spe, args.rl_steps,
                       max(1, args.rl_steps // spe))
    ars_n = stats.pop("ars_n")
    sizes = stats.pop("kept_sizes")
    other = {}  # the same split at the other n-gram size (1 or 2): what the choice of n does to MDAP
    for n in sorted({1, 2} - {args.ngram}):
        o = mdap_stats(g.rewards, resp, args.tau, n, args.prompts_per_step, args.n, spe, args.rl_steps, 1)
        other[n] = {k: o[k] for k in ("pruned_by_advantage", "kept_by_similarity", "partitions_similarity_acts")}
    test, _ = load_samples(w["test"], arm.cfg.data.media_root)
    pf = build_preflight(seed, per_type, test, g, ks=(1, args.n),
                         mechanism=Mechanism("FastRL", lambda ctx: stats, mdap_can_act))
    arm.trainer = None
    return {"pf": pf.__dict__, "start_acc": float(ev["eval/accuracy"]), "ars_n": ars_n, "kept_sizes": sizes,
            "mdap_other_ngram": other,
            "truncation": trunc,
            "mean_response_tokens": sum(len(r) for x in resp for r in x) / max(sum(len(x) for x in resp), 1)}


def style_rows(sd: Path, w, args, items: int = 200) -> List[List[float]]:
    """MDAP's similarity test offline (``fastrl_preflight.style_distances``, the tokenizer only): per n-gram size
    (1 and ``--ngram``) and pair of styles, [n, a, b, θ min, θ median, share θ >= τ] over the seed's first train
    items, each written in both styles."""
    import statistics

    from fastrl_preflight import style_distances
    from mmrl.models.loading import load_processor

    tok = load_processor(str(sd / "sft" / "final")).tokenizer
    its = json.loads(Path(w["train"]).read_text())[:items]
    dist = style_distances(lambda t: tok.encode(t, add_special_tokens=False), its, args.styles,
                           sorted({1, 2, args.ngram}), args.answer_first)
    return [[n, a, b, min(xs), statistics.median(xs), sum(1 for x in xs if x >= args.tau) / len(xs)]
            for (n, a, b), xs in sorted(dist.items())]


def run_arms(names, sd, w, args, seed, sel, tags=None, start_acc=None) -> Dict[str, ProtoArm]:
    """The arms stepped round-robin from the same start, evaluated every ``--eval-every`` steps and at the end
    (``END_ONLY`` arms, the control, at the end only); the step-0 point is the start's greedy test accuracy
    ``start_acc`` from the pre-flight (the same checkpoint and the same deterministic eval), or evaluated."""
    arms = {n: ProtoArm(n, arm_config(n, sd, w, args, seed, sel, (tags or {}).get(n, ""))) for n in names}
    for a in arms.values():
        if start_acc is None:
            a.evaluate()
        else:
            a.points.append({"step": 0, "acc": float(start_acc), "cpu": 0.0, "wall": 0.0, "gen": 0.0, "upd": 0.0})
    for i in range(args.rl_steps):
        step_round_robin(arms, i)
        last = i + 1 == args.rl_steps
        if (i + 1) % args.eval_every == 0 or last:
            accs = {n: a.evaluate() for n, a in arms.items() if last or n not in END_ONLY}
            log(f"[seed {seed}] step {i + 1}: " + ", ".join(f"{n} {100 * x:.1f}% ({arms[n].cpu:.0f} CPU s)"
                                                           for n, x in accs.items()))
    return arms


def summary(a: ProtoArm) -> Dict:
    s = a.summary()
    return {k: s[k] for k in ("kept_frac", "rollouts_per_prompt", "median_step_s")} | {"points": a.points}


def run_one(seed: int, args, proto) -> Dict:
    sd = Path(args.out) / f"seed{seed}"
    sd.mkdir(parents=True, exist_ok=True)
    st = SeedState(sd / "state.json")
    st.data.setdefault("arms", {})
    t0 = time.time()
    w = world(sd, seed, args)
    if "preflight" not in st.data:
        t = time.time()
        sft(sd, w, args, seed)
        st.data["minutes"]["sft"] = (time.time() - t) / 60
        log(f"[seed {seed}] SFT {args.sft_steps} steps: {st.data['minutes']['sft']:.1f} min")
        t = time.time()
        st.data["preflight"] = preflight(sd, w, args, seed)
        st.data["minutes"]["preflight"] = (time.time() - t) / 60
        st.save()
        write_record(seed, st.data, args, proto)
    pf = st.data["preflight"]
    spe = max(1, args.n_rl // args.prompts_per_step)  # ARS's prediction for this run's schedule (RL sizes may change)
    pf["ars_n"] = ars_predict(pf["kept_sizes"], args.n, spe, args.rl_steps, max(1, args.rl_steps // spe))
    pf["pf"]["mechanism"].update(ars_n_min=float(min(pf["ars_n"])),
                                 ars_epochs_below_G=float(sum(1 for n in pf["ars_n"] if n < args.n)))
    if pf["pf"]["can_act"]:
        pf["pf"]["reason"] = mdap_can_act(pf["pf"]["mechanism"])[1]
    if "style_distances" not in pf:
        pf["style_distances"] = style_rows(sd, w, args)
    if args.stop_after == "preflight":
        st.save()
        return write_record(seed, st.data, args, proto)
    log(f"[seed {seed}] pre-flight: start {100 * pf['start_acc']:.1f}%, {pf['pf']['reason']}; ARS n {pf['ars_n']}")
    if not pf["pf"]["can_act"]:
        st.data["dropped"] = {"all arms": f"the pre-flight says FastRL cannot act: {pf['pf']['reason']}"}
        st.save()
        return write_record(seed, st.data, args, proto)
    for lr in proto.lr_grid:  # the grid: GRPO at each setting, test points for its curve, validation at the end
        for kl in proto.kl_grid:
            k = grid_key(lr, kl)
            if k in st.data["grid"]:
                continue
            t = time.time()
            arm = run_arms(["grpo"], sd, w, args, seed, Selection(lr, kl), {"grpo": f"grid_{k}"})["grpo"]
            st.data["grid"][k] = arm.evaluate_on(w["val"])
            st.data.setdefault("grid_arms", {})[k] = summary(arm)
            st.data["minutes"][f"grid_{k}"] = (time.time() - t) / 60
            st.save()
            log(f"[seed {seed}] grid {k}: validation {100 * st.data['grid'][k]:.1f}% "
                f"({st.data['minutes'][f'grid_{k}']:.1f} min, median step {arm.summary()['median_step_s']:.2f} s)")
    if "selection" not in st.data:
        sel = pooled_selection(proto, Path(args.out), args.wait_min, seed_dir=Path(args.seed_dir))
        st.data["selection"] = {"lr": sel.lr, "kl": sel.kl, "seeds": sel.seeds,
                                "scores": {grid_key(*k): v for k, v in sel.scores.items()}}
    sel = Selection(st.data["selection"]["lr"], st.data["selection"]["kl"])
    st.data["arms"]["grpo"] = st.data["grid_arms"][grid_key(sel.lr, sel.kl)]
    st.save()
    write_record(seed, st.data, args, proto)
    grpo_step = st.data["arms"]["grpo"]["points"][-1]["wall"] / max(args.rl_steps, 1)
    grpo_eval = st.data["minutes"][f"grid_{grid_key(sel.lr, sel.kl)}"] * 60 - st.data["arms"]["grpo"]["points"][-1]["wall"]
    for pair in ["core"] + list(args.optional):
        names = PAIRS[pair]
        if all(n in st.data["arms"] for n in names):
            continue
        end = time.time() + PAIR_COST[pair] * args.rl_steps * grpo_step + 2 * grpo_eval
        if pair != "core" and dropped_by_deadline(st, names, end, args.deadline):
            continue
        t = time.time()
        arms = run_arms(list(names), sd, w, args, seed, sel, start_acc=pf["start_acc"])
        st.data["arms"].update({n: summary(a) for n, a in arms.items()})
        st.data["minutes"][f"rl_{pair}"] = (time.time() - t) / 60
        st.save()
        write_record(seed, st.data, args, proto)
    st.data["minutes"]["this_run"] = (time.time() - t0) / 60
    st.save()
    return write_record(seed, st.data, args, proto)


SETTINGS = ("model", "n_train", "sft_lr", "freeze_vision", "n_rl", "n_test", "n_val", "sft_steps", "rl_steps", "prompts_per_step", "n", "eval_every",
            "max_new_tokens", "tau", "ngram", "styles", "answer_first", "lr_grid", "kl_grid", "overrides")


def write_record(seed: int, state: Dict, args, proto) -> Dict:
    rec = {"seed": seed, "command": proto.command, "plan": vars(seed_plan(seed)),
           "settings": {k: getattr(args, k) for k in SETTINGS} | {"world": f"{CLIP_WORLD['size']} px, "
                                                                   f"{CLIP_WORLD['n_frames']} frames"},
           **{k: v for k, v in state.items() if k != "grid_arms"}}
    return write_seed_record(args.seed_dir, seed, rec)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_protocol_args(ap, n_val=128)
    ap.set_defaults(lr_grid=[1e-5, 3e-5], kl_grid=[0.0])
    add_seed_process_args(ap, "fastrl", own_args, wait_min=30.0, deadline_for="an optional pair",
                          record_only="with --only S: write the seed record of a stopped run from its state, the "
                                      "unfinished arms labelled (nothing is run)",
                          notes="--render: a markdown file appended after the tables (earlier runs)")
    return ap


def own_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--model", default="base", help="SFT start: base (docs/base_model.md); tiny only in tests")
    ap.add_argument("--n-train", type=int, default=512)
    ap.add_argument("--n-rl", type=int, default=64, help="first train clips used for RL (several ARS epochs)")
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--sft-lr", type=float, default=2e-4, help="SFT lr (3e-4 with the vision tower trained collapsed "
                    "every seed's start onto one letter)")
    ap.add_argument("--freeze-vision", action=argparse.BooleanOptionalAction, default=True,
                    help="SFT with the vision tower frozen (the base's perception kept)")
    ap.add_argument("--rl-steps", type=int, default=40)
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--n", type=int, default=8, help="rollout.n = G")
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=112, help="above the longest reasoning trace (~100)")
    ap.add_argument("--tau", type=float, default=0.8)
    ap.add_argument("--ngram", type=int, default=1, help="MDAP's n-gram size (on the base's start, sampled responses "
                    "differ so much in bigrams that MDAP at 2-grams kept ~98%% of them: the pre-flight prints both)")
    ap.add_argument("--styles", type=int, default=4, help="reasoning styles of the SFT targets")
    ap.add_argument("--answer-first", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--preflight-groups", type=int, default=32, help="validation prompts sampled in the pre-flight")
    ap.add_argument("--optional", nargs="*", default=["dapo", "gspo"], choices=["dapo", "gspo"])
    ap.add_argument("--stop-after", choices=["preflight"], help="stop the seed after its pre-flight (rerun to go on)")


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.render:
        recs = [json.loads((Path(args.seed_dir) / f"seed{s}.json").read_text()) for s in args.seeds]
        cmd = recs[0]["command"]
        proto = protocol_from_args(args, SCRIPT, argv)
        proto.command = cmd.replace(" --only " + str(recs[0]["seed"]), " --only S")
        notes = Path(args.notes).read_text() if args.notes else ""
        text = render(recs, proto, notes)
        Path(args.report).write_text(text)
        return print(text)
    if args.only is None or args.only not in args.seeds:
        raise SystemExit("give --only S (one of --seeds) to run a seed, or --render")
    if args.record_only:  # the record of a stopped run: what finished, the unfinished arms labelled
        st = SeedState(Path(args.out) / f"seed{args.only}" / "state.json")
        for pair in ["core"] + list(args.optional):
            for n in PAIRS[pair]:
                if n not in st.data.get("arms", {}) and n not in st.data["dropped"]:
                    st.data["dropped"][n] = f"not finished when the run was stopped at {time.strftime('%H:%M', time.gmtime())} UTC"
        st.save()
        run_argv = [a for a in argv if a != "--record-only"]
        write_record(args.only, st.data, args, protocol_from_args(args, SCRIPT, run_argv))
        return log(f"[seed {args.only}] record written from the state of the stopped run")
    import torch

    torch.set_num_threads(1)
    proto = protocol_from_args(args, SCRIPT, argv)
    rec = run_one(args.only, args, proto)
    log(f"[seed {args.only}] record written: {Path(args.seed_dir) / f'seed{args.only}.json'} (arms {list(rec.get('arms', {}))})")


if __name__ == "__main__":
    main()
