"""PACG over DAPO and VPPO on the tiny base that sees, under the miniature protocol (issue 29 item 1,
``docs/miniatures.md``): one process per protocol seed, then one render of ``docs/results/pacg.md``.

    python bench/pacg_protocol.py --seeds 0 1 2 --only S [--rl-steps 200] [--prompts-per-step 8] [--n 8]
        [--sft-steps 300] [--n-test 512] [--n-val 64] [--lr-grid ...] [--kl-grid ...] [--until preflight|grid|arms]
        [--deadline HH:MM] [--out runs/pacg_protocol] [--seed-dir bench/results/pacg_protocol] [--smoke] [overrides ...]
    python bench/pacg_protocol.py --seeds 0 1 2 --render [--report docs/results/pacg.md] [--notes FILE]

Per seed (``seed_plan``: its own world, SFT and RL seed), each stage resumable (a rerun keeps finished stages):

1. **pre-flight** (``bench/pacg_preflight.run_seed``): the `prior` claims world at 56 px with a validation split,
   SFT from ``model.path=base``, the SFT start's greedy and sampled diagnosis on the test images and its sampled
   groups on the validation prompts; the seed stops there (no RL) when PACG's gate (content persistence under
   ``full_mask``) cannot act, or when more than 5% of the sampled or greedy responses are cut at max new tokens
   (``_preflight.check_truncation``; a smoke run records the share and goes on);
2. **grid**: the DAPO arm at every ``(lr, KL)`` for ``--rl-steps`` steps, scored on the validation split
   (``grid_point``: sampled accuracy by default, ``--select-on greedy`` for greedy; the greedy SFT start sits at
   100%), model kept; ``select_setting`` over the mean of every seed's grid picks one setting for every arm and
   seed; the chosen run IS the ``dapo`` arm;
3. **arms** from the same SFT start, steps, prompts, responses, lr and KL, in this order: ``dapo+pacg``,
   ``coin_flip`` (DAPO with the coin-flip reward, without dynamic sampling: it filters on the true accuracy), ``vppo``,
   ``vppo+pacg``
   (PACG: ``persistence: content``, ``intervention: full_mask``); an arm starts only when its predicted end (the
   DAPO arm's median step x ``STEP_RATIO``) is before ``--deadline``. Each arm and the SFT start are diagnosed on
   the test images (``summary``): greedy, and one response per image sampled at temperature 1 (same seed for all).

The seed record (``--seed-dir``/seed<S>.json: settings, the pre-flight record, grid, selection, evaluations, step
costs, PACG's gate metrics, minutes) is small and committed; ``--render`` builds the results file from the records
(``bench/pacg_protocol_table.py``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
from _arms import Arm, log  # noqa: E402
from _preflight import check_truncation, truncation_share  # noqa: E402
from _protocol import (Clock, ProtocolError, SeedState, Selection, add_protocol_args,  # noqa: E402
                       add_seed_process_args, apply_setting, arm_val_score, coin_flip_config, dropped_by_deadline,
                       grid_todo, protocol_from_args, seed_plan, seed_selection, write_seed_record)
from bpo_arms import step_costs  # noqa: E402
from pacg import ARMS as OLD_ARMS  # noqa: E402
from pacg_preflight import _DAPO, EXTRACTOR, data_overrides, mechanism, preflight_of, test_items  # noqa: E402
from pacg_protocol_table import command_text, load, protocol_of, render_records  # noqa: E402

SCRIPT = "bench/pacg_protocol.py"
PERSISTENCE, INTERVENTION = "content", "full"  # where the pre-flight shows the gate acts


def pacg_over(base: str) -> List[str]:
    return ["algorithm.name=pacg", "algorithm.clip_high=0.28",
            f"algorithm.params={{persistence: {PERSISTENCE}, claim_extractor: '{EXTRACTOR}', intervention: full_mask, "
            f"base: {{name: {base}, params: {{{_DAPO}}}}}}}"]


ARMS: Dict[str, List[str]] = {"dapo": OLD_ARMS["dapo"], "vppo": OLD_ARMS["vppo"],
                              "coin_flip": ["algorithm.name=dapo", "algorithm.clip_high=0.28",
                                            "algorithm.params={dynamic_sampling: false}"],
                              "dapo+pacg": pacg_over("dapo"), "vppo+pacg": pacg_over("vppo")}
# After dapo (the grid's chosen run), in this order: the claim's arm first, then its control, then the VPPO pair, so
# that a --deadline drops the arms the main claim (DAPO + PACG - DAPO) needs least.
LATER = ("dapo+pacg", "coin_flip", "vppo", "vppo+pacg")
STEP_RATIO = {"coin_flip": 1.0, "dapo+pacg": 1.5, "vppo": 1.5, "vppo+pacg": 1.8}  # predicted step / DAPO's step
EVAL_MARGIN_MIN = 3.0  # an arm's predicted evaluation minutes (greedy and sampled diagnosis)


def arm_config(name: str, sd: Path, args, seed: int, sel: Optional[Selection] = None):
    """The arm's config on the seed's world and SFT start (``pacg_preflight.data_overrides``), the RL schedule, the
    arm's algorithm; with ``sel`` the chosen lr and KL; ``coin_flip`` with the coin-flip reward."""
    from mmrl.config import load_config

    out = sd / ("grid" if name == "dapo" else name.replace("+", "_"))
    cfg = load_config(None, data_overrides(sd / "world", args) + ARMS[name] + [
        f"model.path={sd / 'sft' / 'final'}", f"train.seed={seed_plan(seed).rl_seed}", f"train.steps={args.rl_steps}",
        f"train.prompts_per_step={args.prompts_per_step}", f"rollout.n={args.n}", f"train.out_dir={out}"])
    if sel is not None:
        cfg = apply_setting(cfg, sel)
    return coin_flip_config(cfg) if name == "coin_flip" else cfg


def summary(records: List[Dict]) -> Dict:
    """The test metrics of one diagnosis pass: ``summarize_all`` (patch, and ``_full`` under full_mask), the share
    of unsupported among the labelled claims, the truncation share and the accuracy per question type."""
    from mmrl.diagnose.core import summarize_all

    out = summarize_all(records, ["full"])
    n_sup, n_uns = out.get("n_supported", 0.0), out.get("n_unsupported", 0.0)
    out["unsupported_share"] = n_uns / (n_sup + n_uns) if n_sup + n_uns else float("nan")
    out["truncated"] = truncation_share([r["truncated"] for r in records])
    per: Dict[str, List[float]] = {}
    for r in records:
        per.setdefault(r["qtype"], []).append(float(r["correct"]))
    out["per_qtype"] = {q: sum(v) / len(v) for q, v in sorted(per.items())}
    return out


def evaluate(model_dir: str, sd: Path, data_cfg, seed: int, max_new_tokens: int) -> Dict:
    """Greedy and sampled (temperature 1, one per image, the same seed for every arm) diagnosis on the test images."""
    from mmrl.data.annotations import load_samples
    from mmrl.data.synth_claims import claim_content, claim_support
    from mmrl.diagnose.core import diagnose_samples
    from mmrl.models.loading import load_model, load_processor
    from mmrl.views.patch_transforms import FULL_MASK, VPPO_PATCH

    samples, _ = load_samples(str(sd / "world" / "test.json"), str(sd / "world"))
    model, proc = load_model(model_dir), load_processor(model_dir)
    kw = dict(max_new_tokens=max_new_tokens, labeler=claim_support, extractor=claim_content, also={"full": FULL_MASK})
    plan = seed_plan(seed)
    greedy = diagnose_samples(model, proc, samples, data_cfg, VPPO_PATCH, seed=plan.rl_seed, **kw)
    sampled = diagnose_samples(model, proc, samples, data_cfg, VPPO_PATCH, seed=plan.rl_seed + 7, greedy=False,
                               temperature=1.0, **kw)
    return {"greedy": summary(greedy), "sampled": summary(sampled)}


def grid_point(cfg, seed: int, lr: float, kl: float, steps: int, val_json: Path) -> Dict[str, float]:
    """The DAPO arm at ``(lr, kl)`` for ``steps`` steps (``_protocol.arm_val_score``, its history and model kept under
    ``<out_dir>/select_lr<lr>_kl<kl>``), then on the validation split: ``greedy`` accuracy and ``sampled`` accuracy
    (``rollout.n`` responses per prompt at the rollout's temperature, ``_preflight.sample_groups``; the greedy SFT
    start sits at 100%, so greedy accuracy cannot rank the grid)."""
    from _preflight import sample_groups

    from mmrl.data.annotations import load_samples

    out = {}

    def score(trainer) -> Dict[str, float]:
        out["greedy"] = float(trainer.evaluate()["eval/accuracy"])
        val, _ = load_samples(str(val_json), str(val_json.parent))
        flat = [x for g in sample_groups(trainer, val).correct for x in g]
        out["sampled"] = sum(flat) / len(flat)
        return {"eval/accuracy": out["greedy"]}

    arm_val_score({seed: cfg}, steps, {seed: str(val_json)}, keep=True, evaluate=score)(lr, kl)
    return out


def algo_means(history: List[Dict[str, float]]) -> Dict[str, float]:
    keys = sorted({k for h in history for k in h if k.startswith(("algo/pacg/", "algo/dapo/"))})
    return {k: statistics.mean([h[k] for h in history if k in h]) for k in keys}


def preflight_stage(seed: int, args, sd: Path, st: SeedState) -> Dict:
    """The pre-flight record (reused when present) and the stop: ``st.data['stopped']`` names why RL is not spent."""
    from pacg_preflight import run_seed as preflight_seed

    if (sd / "preflight.json").exists():
        rec = json.loads((sd / "preflight.json").read_text())
        log(f"[seed {seed}] pre-flight: reused {sd / 'preflight.json'}")
    else:
        with Clock(st, "preflight"):
            rec = preflight_seed(seed, preflight_args(args), sd)
        st.save()
    pf = preflight_of(rec, mechanism(PERSISTENCE, INTERVENTION))
    why = [] if pf.can_act else [f"PACG ({PERSISTENCE}, {INTERVENTION}) cannot act: {pf.reason}"]
    for flags, what in ([x for g in rec["groups"]["truncated"] for x in g], "sampled responses (groups)"), \
            (rec["truncated"]["sampled"], "sampled test responses"), (rec["truncated"]["greedy"], "greedy test responses"):
        try:
            check_truncation(flags, rec["max_new_tokens"], what=what)
        except ProtocolError as e:
            why.append(str(e))
    if args.smoke:  # a plumbing run goes on; what would have stopped a full run is kept in the record
        st.data["smoke_would_stop"] = "; ".join(why)
        for w in why:
            log(f"[seed {seed}] smoke run, not stopped: {w}")
        why = []
    st.data["stopped"] = "; ".join(why)
    st.save()
    return rec


def preflight_args(args) -> SimpleNamespace:
    return SimpleNamespace(n_train=args.n_train, n_test=args.n_test, n_val=args.n_val, sft_steps=args.sft_steps,
                           sft_lr=args.sft_lr, model=args.model, max_new_tokens=args.max_new_tokens,
                           group_size=args.group_size, persistence=PERSISTENCE, intervention=INTERVENTION,
                           overrides=args.overrides)


def run_arm(name: str, sd: Path, args, seed: int, sel: Selection, st: SeedState) -> None:
    with Clock(st, f"rl_{name}"):
        arm = Arm(name, arm_config(name, sd, args, seed, sel))
        c = time.process_time()
        for i in range(args.rl_steps):
            m = arm.step()
            if (i + 1) % max(1, args.rl_steps // 4) == 0:
                log(f"[seed {seed}] {name} step {i + 1}/{args.rl_steps}: {m.get('time/step', 0):.2f} s, "
                    f"reward {m.get('reward/total', float('nan')):.2f}")
        st.data["costs"][name] = dict(step_costs(arm.history), cpu_step_s=(time.process_time() - c) / args.rl_steps)
        st.data["algo_means"][name] = algo_means(arm.history)
        data_cfg = arm.cfg.data
        path = arm.finish()
    with Clock(st, f"eval_{name}"):
        st.data["evals"][name] = evaluate(path, sd, data_cfg, seed, args.max_new_tokens)
    st.save()


def run_one(seed: int, args, proto) -> Dict:
    sd = Path(args.out) / f"seed{seed}"
    sd.mkdir(parents=True, exist_ok=True)
    st = SeedState(sd / "state.json")
    st.data.setdefault("algo_means", {})
    t0, c0 = time.time(), time.process_time()
    rec = preflight_stage(seed, args, sd, st)
    if st.data["stopped"] or args.until == "preflight":
        log(f"[seed {seed}] " + (f"stopped: {st.data['stopped']}" if st.data["stopped"] else "pre-flight done"))
        return write_record(seed, rec, st.data, args, proto)
    sft_cfg = arm_config("dapo", sd, args, seed)
    if "sft" not in st.data["evals"]:
        with Clock(st, "eval_sft"):
            st.data["evals"]["sft"] = evaluate(str(sd / "sft" / "final"), sd, sft_cfg.data, seed, args.max_new_tokens)
        st.save()

    st.data.setdefault("grid_both", {})
    for lr, kl, k in grid_todo(st, proto, sd / "grid"):
        with Clock(st, f"grid_{k}"):
            both = grid_point(sft_cfg, seed, lr, kl, args.rl_steps, sd / "world" / "val.json")
        st.data["grid_both"][k], st.data["grid"][k] = both, both[args.select_on]
        st.save()
        log(f"[seed {seed}] grid {k}: validation accuracy greedy {100 * both['greedy']:.1f}, sampled "
            f"{100 * both['sampled']:.1f} ({st.data['minutes'][f'grid_{k}']:.1f} min)")
    if args.until == "grid":
        return write_record(seed, rec, st.data, args, proto)
    sel = seed_selection(st, proto, Path(args.out), args.wait_min, seed_dir=Path(args.seed_dir))
    log(f"[seed {seed}] setting: lr {sel.lr:g}, KL {sel.kl:g} (from seeds {st.data['selection']['seeds']})")

    chosen = sd / "grid" / f"select_lr{sel.lr:g}_kl{sel.kl:g}"
    if "dapo" not in st.data["evals"]:
        hist = json.loads((chosen / "history.json").read_text())
        st.data["costs"]["dapo"], st.data["algo_means"]["dapo"] = step_costs(hist), algo_means(hist)
        with Clock(st, "eval_dapo"):
            st.data["evals"]["dapo"] = evaluate(str(chosen / "final"), sd, sft_cfg.data, seed, args.max_new_tokens)
        st.save()
    for name in LATER:
        if name in st.data["evals"]:
            continue
        end = time.time() + args.rl_steps * st.data["costs"]["dapo"]["median_step_s"] * STEP_RATIO[name] \
            + 60 * EVAL_MARGIN_MIN
        if dropped_by_deadline(st, [name], end, args.deadline, lambda msg: log(f"[seed {seed}] {msg}")):
            continue
        run_arm(name, sd, args, seed, sel, st)
        e = st.data["evals"][name]["sampled"]
        log(f"[seed {seed}] {name} done: sampled accuracy {100 * e['accuracy']:.1f}, correct with an unsupported "
            f"claim {100 * e.get('correct_with_unsupported', float('nan')):.1f}")
    st.data["minutes"]["this_run"] = (time.time() - t0) / 60
    st.data.setdefault("cpu_minutes", {})["this_run"] = (time.process_time() - c0) / 60
    st.save()
    return write_record(seed, rec, st.data, args, proto)


def cost_probe(seed: int, args, steps: int) -> Dict[str, Dict[str, float]]:
    """CPU seconds per RL step of every arm (``time.process_time``, one torch thread), the arms stepped round-robin
    for ``steps`` steps from the seed's SFT start (its pre-flight must exist) at the grid's first lr and KL, so they
    share the machine's load; with the response tokens per step, to predict a full run's cost. Written to
    ``OUT/seed<S>/cost_probe.json``."""
    sd = Path(args.out) / f"seed{seed}"
    if not (sd / "sft" / "final" / "config.json").exists():
        raise SystemExit(f"--cost-probe: no SFT start in {sd} (run the pre-flight first: --until preflight)")
    sel = Selection(args.lr_grid[0], args.kl_grid[0])
    arms = {n: Arm(n, arm_config(n, sd, args, seed, sel)) for n in ARMS}
    cpu: Dict[str, List[float]] = {n: [] for n in arms}
    for i in range(steps):
        order = list(arms)[i % len(arms):] + list(arms)[:i % len(arms)]
        for n in order:
            c = time.process_time()
            arms[n].step()
            cpu[n].append(time.process_time() - c)
    out = {n: {"cpu_step_s": statistics.mean(cpu[n]), "cpu_steps": cpu[n],
               "wall_step_s": statistics.mean(h["time/step"] for h in arms[n].history),
               "response_tokens": statistics.mean(h.get("work/response_tokens", 0.0) for h in arms[n].history),
               "resample_rounds": statistics.mean(h.get("resample_rounds", 0.0) for h in arms[n].history)}
           for n in arms}
    (sd / "cost_probe.json").write_text(json.dumps(out, indent=1))
    return out


def compact_preflight(rec: Dict) -> Dict:
    """The pre-flight record without the world on disk: its test items kept as (type, candidates), the claim rows'
    persistences rounded to 5 decimals."""
    out = dict(rec, test_items=test_items(rec))
    out["claims"] = {src: [{k: (round(v, 5) if isinstance(v, float) else v) for k, v in row.items()} for row in rows]
                     for src, rows in rec["claims"].items()}
    for k in ("lengths",):
        out.pop(k, None)
    return out


def write_record(seed: int, rec: Dict, state: Dict, args, proto) -> Dict:
    """``SEED_DIR/seed<S>.json``: the command, settings, the pre-flight record and the seed's state."""
    record = {"seed": seed, "command": proto.command, "plan": vars(seed_plan(seed)),
              "settings": {k: getattr(args, k) for k in ("n_train", "n_test", "n_val", "sft_steps", "sft_lr", "rl_steps",
                                                         "prompts_per_step", "n", "group_size", "max_new_tokens", "select_on",
                                                         "lr_grid", "kl_grid", "model", "overrides")},
              "preflight": compact_preflight(rec), **state}
    return write_seed_record(args.seed_dir, seed, record)


def render_main(args, argv: List[str]) -> Path:
    import shlex

    from pacg_preflight import render as preflight_render

    recs = load(Path(args.seed_dir), args.seeds)
    if not recs:
        raise SystemExit(f"--render: no seed record in {args.seed_dir} for seeds {args.seeds}")
    proto = protocol_of(recs, args.seeds, command_text(recs, shlex.join(["python", SCRIPT, *argv])))
    st = next(iter(recs.values()))["settings"]
    pf_args = SimpleNamespace(render_only=False, out=args.out, n_train=st["n_train"], model=st["model"],
                              persistence=PERSISTENCE, intervention=INTERVENTION)
    pf = preflight_render([r["preflight"] for r in recs.values()], proto, pf_args)
    res = render_records(recs, proto, pf.sections, args.notes)
    path = res.write(args.report)
    print(res.render(), end="", flush=True)
    return path


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_protocol_args(ap, n_test=512, n_val=64)
    add_seed_process_args(ap, "pacg", own_args)
    return ap


def own_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--until", choices=["preflight", "grid", "arms"], default="arms", help="stop after this stage")
    ap.add_argument("--model", default="base", help="the SFT's start (model.path)")
    ap.add_argument("--n-train", type=int, default=1024)
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--sft-lr", type=float, default=3e-4)
    ap.add_argument("--rl-steps", type=int, default=200)
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--n", type=int, default=8, help="responses per prompt (8 x 8 = 64 per step)")
    ap.add_argument("--group-size", type=int, default=8, help="the pre-flight's sampled group size")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="above the 50-token SFT traces")
    ap.add_argument("--select-on", choices=["sampled", "greedy"], default="sampled",
                    help="the grid's validation accuracy: sampled (temperature 1, rollout.n per prompt) or greedy")
    ap.add_argument("--cost-probe", type=int, default=0, metavar="K",
                    help="with --only S: step every arm K times round-robin from the seed's SFT start and print CPU "
                         "seconds per step (the cost of a full run); nothing else is run")


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.render:
        return render_main(args, argv)
    if args.only is None or args.only not in args.seeds:
        raise SystemExit("give --only S (one of --seeds) to run a seed, or --render")
    proto = protocol_from_args(args, SCRIPT, argv)
    torch_threads()
    if args.cost_probe:
        for n, c in cost_probe(args.only, args, args.cost_probe).items():
            print(f"{n}: {c['cpu_step_s']:.2f} CPU s / step ({c['wall_step_s']:.2f} wall), "
                  f"{c['response_tokens']:.0f} response tokens / step, {c['resample_rounds']:.2f} resample rounds")
        return None
    rec = run_one(args.only, args, proto)
    log(f"[seed {args.only}] record written: {Path(args.seed_dir) / f'seed{args.only}.json'} "
        f"(evals: {', '.join(rec.get('evals', {}))})")


def torch_threads() -> None:
    import torch

    torch.set_num_threads(1)


if __name__ == "__main__":
    main()
