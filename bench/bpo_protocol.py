"""BPO and T-GRPO against GRPO on the tiny base that sees, under the miniature protocol (issue 28 item 3,
``docs/miniatures.md``): one seed process per protocol seed, then one render of ``docs/results/bpo.md``.

    python bench/bpo_protocol.py --seeds 0 1 2 --only S [--rl-steps 200] [--prompts-per-step 16] [--sft-steps 300]
        [--n-val 200] [--lr-grid ...] [--kl-grid ...] [--deadline HH:MM] [--out runs/bpo_protocol]
        [--seed-dir bench/results/bpo_protocol] [overrides ...]          # one seed, resumable per stage
    python bench/bpo_protocol.py --seeds 0 1 2 --render [--report docs/results/bpo.md]   # pool the seed records

Per seed (``seed_plan``: its own world, SFT and RL seed), each stage resumable (a crash keeps finished stages):

1. **pre-flight** (``bench/bpo_preflight.run_seed``): the tint-prior world at the base's resolution with a
   validation split (``--n-val`` debiased clips no stage trains on), SFT from ``model.path=base``, the start's greedy
   eval and the T-GRPO / BPO rollouts; a method whose mechanism cannot act on the seed gets no RL arm there;
2. **grid**: the true-reward GRPO G=8 arm at every ``(lr, KL)`` of the grid for ``--rl-steps`` steps, scored on the
   validation split (``_protocol.arm_val_score``, its model kept); the seed waits for every seed's grid and
   ``select_setting`` picks one setting from the mean over seeds, the same for every seed and arm (T-GRPO's own
   KL 0.04 included); the chosen grid run IS the ``grpo`` arm (same config, seed and steps);
3. **arms** from the same SFT start, same steps, prompts per step, lr and KL: ``coin_flip`` (GRPO G=8 with the
   ``coin_flip`` reward), ``bpo`` (2 packs x 4 views), ``tgrpo`` (8 ordered + 4 shuffled), then the optional
   ``grpo_g32`` and ``bpo_p8`` (8 x 4), which start only when their predicted end is before ``--deadline``;
   each arm is evaluated right after it trains: the 400-item debiased test split with ``views/bpo_eval.yaml``'s
   held-out null canvases, and the biased split.

The seed record (``--seed-dir``/seed<S>.json: pre-flight, grid scores, selection, evaluations, step costs, minutes)
is small and committed; ``--render`` builds the results file from the records alone (``bench/bpo_protocol_table.py``).
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
from _arms import Arm, log, step_logged  # noqa: E402
from _protocol import (SeedState, Selection, add_protocol_args, add_seed_process_args, apply_setting,  # noqa: E402
                       arm_val_score, coin_flip_config, dropped_by_deadline, grid_todo,
                       protocol_from_args, seed_plan, seed_selection, write_seed_record)
from bpo_arms import ARMS, DEMO, step_costs  # noqa: E402
from bpo_preflight import CLIP_WORLD, EVAL_VIEWS, MECHS, preflights, record_samples  # noqa: E402
from bpo_preflight import run_seed as preflight_seed  # noqa: E402
from bpo_protocol_table import render_main  # noqa: E402

SCRIPT = "bench/bpo_protocol.py"
CORE = ("coin_flip", "bpo", "tgrpo")  # after grpo, the grid's chosen run
OPTIONAL = {"grpo_g32": ("grpo", 1.5), "bpo_p8": ("bpo", 3.0)}  # arm -> (arm whose step time predicts it, ratio)
ARM_FILES = {"coin_flip": [], **{a: ARMS[a] for a in ("bpo", "tgrpo", "grpo_g32", "bpo_p8")}}
NEEDS = {"bpo": "bpo", "bpo_p8": "bpo", "tgrpo": "tgrpo"}  # arm -> the pre-flight mechanism it needs
EVAL_MARGIN_MIN = 4.0  # an optional arm's predicted evaluation minutes (test split with views + biased split)


def data_overrides(sd: Path) -> List[str]:
    w = sd / "world"
    return [f"data.nframes={CLIP_WORLD['n_frames']}", f"data.max_pixels={CLIP_WORLD['size'] ** 2}",
            f"data.train={w / 'train_abst.json'}", f"data.test={w / 'test_abst.json'}", "train.save_every=0"]


def arm_config(name: str, sd: Path, args, seed: int, sel: Optional[Selection] = None):
    """The arm's config: ``configs/demo.yaml`` + its files, the seed's world and SFT start, the RL schedule; with
    ``sel``, the chosen lr and KL; ``coin_flip`` is GRPO G=8 with the coin-flip reward."""
    from mmrl.config import load_config

    items = ARM_FILES.get(name, [])
    files = [i for i in items if "=" not in i]
    cfg = load_config([str(DEMO)] + files, data_overrides(sd) + [
        f"model.path={sd / 'sft' / 'final'}", f"train.seed={seed_plan(seed).rl_seed}", f"train.steps={args.rl_steps}",
        f"train.prompts_per_step={args.prompts_per_step}", f"train.out_dir={sd / ('grid' if name == 'grpo' else name)}"]
        + list(args.overrides) + [i for i in items if "=" in i])
    if sel is not None:
        cfg = apply_setting(cfg, sel)
    return coin_flip_config(cfg) if name == "coin_flip" else cfg


def evaluate_arm(path: str, sd: Path, data_cfg, name: str) -> Dict:
    """Greedy eval on the debiased test split with the held-out null canvases, and on the biased split
    (``bpo_vs_grpo.summarize``: macro, temporal, abstention on unseen nulls, biased macro, ...)."""
    from bpo_vs_grpo import summarize

    from mmrl.eval.synthetic import evaluate_checkpoint
    from mmrl.views import ViewSet

    w = sd / "world"
    viewset = ViewSet.load(str(EVAL_VIEWS), abstain_text=data_cfg.prompt.abstain_text)
    res = evaluate_checkpoint(path, str(w / "test_abst.json"), data_cfg, out_dir=str(sd / f"eval_{name}"),
                              viewset=viewset)
    biased = evaluate_checkpoint(path, str(w / "test_biased_abst.json"), data_cfg)
    return summarize(res, qtype_counts(w / "test_abst.json"), biased)


def qtype_counts(path: Path) -> Dict[str, int]:
    return dict(Counter(it["qtype"] for it in json.loads(Path(path).read_text())))


def sft_summary(rec: Dict, sd: Path) -> Dict:
    """The SFT start's evaluation, from its pre-flight record (the same greedy eval the arms get)."""
    from bpo_vs_grpo import summarize

    res = {"macro_accuracy": rec["macro"], "accuracy": rec["accuracy"], "per_qtype": rec["per_qtype"],
           "view_metrics": rec["view_metrics"], "n": sum(qtype_counts(sd / "world" / "test_abst.json").values())}
    return summarize(res, qtype_counts(sd / "world" / "test_abst.json"), {"macro_accuracy": rec["macro_biased"]})


def predicted_end(state: Dict, arm: str, steps: int) -> float:
    """Epoch seconds at which an optional arm would end: its steps at the measured median step of the arm that
    predicts it times the ratio (``OPTIONAL``), plus ``EVAL_MARGIN_MIN``."""
    ref, ratio = OPTIONAL[arm]
    step_s = state["costs"].get(ref, {}).get("median_step_s", float("nan"))
    return time.time() + steps * step_s * ratio + 60 * EVAL_MARGIN_MIN


def run_one(seed: int, args, proto) -> Dict:
    out = Path(args.out)
    sd = out / f"seed{seed}"
    sd.mkdir(parents=True, exist_ok=True)
    st = SeedState(sd / "state.json")
    t0 = time.time()

    # 1. world, SFT, pre-flight
    if (sd / "preflight.json").exists():
        rec = json.loads((sd / "preflight.json").read_text())
        log(f"[seed {seed}] pre-flight: reused {sd / 'preflight.json'}")
    else:
        pf_args = SimpleNamespace(n_train=args.n_train, n_test=args.n_test, n_val=args.n_val, sft_steps=args.sft_steps,
                                  sft_null_share=0.05, prior_strength=0.8, group_size=8, overrides=args.overrides,
                                  reuse_sft=(sd / "sft" / "final").is_dir() and (sd / "world" / "val_abst.json").exists())
        t = time.time()
        rec = preflight_seed(seed, pf_args, sd)
        st.data["minutes"]["preflight"] = (time.time() - t) / 60
        st.save()
    pfs = preflights([rec], record_samples)
    blocked = {m: pfs[m][0].reason for m in MECHS if not pfs[m][0].can_act}
    sft_cfg = arm_config("grpo", sd, args, seed)
    if "sft" not in st.data["evals"]:
        st.data["evals"]["sft"] = sft_summary(rec, sd)
        st.save()

    # 2. the grid, on the validation split; then the setting chosen from every seed's grid
    val = {seed: str(sd / "world" / "val_abst.json")}
    score = arm_val_score({seed: sft_cfg}, args.rl_steps, val, keep=True)
    for lr, kl, k in grid_todo(st, proto, sd / "grid"):
        t = time.time()
        st.data["grid"][k] = score(lr, kl)
        st.data["minutes"][f"grid_{k}"] = (time.time() - t) / 60
        st.save()
        log(f"[seed {seed}] grid {k}: validation accuracy {100 * st.data['grid'][k]:.1f} "
            f"({st.data['minutes'][f'grid_{k}']:.1f} min)")
    sel = seed_selection(st, proto, out, args.wait_min, seed_dir=Path(args.seed_dir))
    log(f"[seed {seed}] setting: lr {sel.lr:g}, KL {sel.kl:g} (from seeds {st.data['selection']['seeds']})")

    # 3. the arms from the same start, each evaluated right after it trains
    chosen = sd / "grid" / f"select_lr{sel.lr:g}_kl{sel.kl:g}"
    if "grpo" not in st.data["evals"]:
        st.data["costs"]["grpo"] = step_costs(json.loads((chosen / "history.json").read_text()))
        t = time.time()
        st.data["evals"]["grpo"] = evaluate_arm(str(chosen / "final"), sd, sft_cfg.data, "grpo")
        st.data["minutes"]["eval_grpo"] = (time.time() - t) / 60
        st.save()
    for name in list(CORE) + [a for a in OPTIONAL if a in args.optional]:
        if name in st.data["evals"]:
            continue
        if NEEDS.get(name) in blocked:
            st.data["dropped"][name] = f"the pre-flight says {NEEDS[name]} cannot act: {blocked[NEEDS[name]]}"
            st.save()
            continue
        if name in OPTIONAL and dropped_by_deadline(st, [name], predicted_end(st.data, name, args.rl_steps),
                                                    args.deadline, lambda msg: log(f"[seed {seed}] {msg}")):
            continue
        st.data["dropped"].pop(name, None)
        t = time.time()
        arm = Arm(name, arm_config(name, sd, args, seed, sel))
        step_logged(arm, args.rl_steps, seed)
        st.data["costs"][name] = step_costs(arm.history)
        path = arm.finish()
        st.data["minutes"][f"rl_{name}"] = (time.time() - t) / 60
        t = time.time()
        st.data["evals"][name] = evaluate_arm(path, sd, sft_cfg.data, name)
        st.data["minutes"][f"eval_{name}"] = (time.time() - t) / 60
        st.save()
        e = st.data["evals"][name]
        log(f"[seed {seed}] {name} done: macro {100 * e['macro']:.1f}, null abstention "
            f"{100 * e['abstain_recall']:.1f}, biased {100 * e['macro_biased']:.1f} "
            f"({st.data['minutes'][f'rl_{name}']:.1f} + {st.data['minutes'][f'eval_{name}']:.1f} min)")
    st.data["minutes"]["this_run"] = (time.time() - t0) / 60
    st.save()
    return write_record(seed, rec, st.data, args, proto)


def write_record(seed: int, rec: Dict, state: Dict, args, proto) -> Dict:
    """``SEED_DIR/seed<S>.json``: the command, settings, the pre-flight record and the seed's state."""
    if "test" in rec and "test_items" not in rec and Path(rec["test"]).exists():  # tables without the world
        from bpo_preflight import kept_test_items

        rec = dict(rec, test_items=kept_test_items(rec["test"]))
    record = {"seed": seed, "command": proto.command, "plan": vars(seed_plan(seed)),
              "settings": {k: getattr(args, k) for k in ("n_train", "n_test", "n_val", "sft_steps", "rl_steps",
                                                         "prompts_per_step", "lr_grid", "kl_grid", "overrides")},
              "preflight": rec, **state}
    return write_seed_record(args.seed_dir, seed, record)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_protocol_args(ap, n_val=200)
    add_seed_process_args(ap, "bpo", own_args, deadline_for="an optional arm",
                          record_only="with --only S: write the seed record of a stopped run from its state (nothing "
                                      "is run)")
    return ap


def own_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--n-train", type=int, default=1024)
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--rl-steps", type=int, default=200)
    ap.add_argument("--prompts-per-step", type=int, default=16)
    ap.add_argument("--optional", nargs="*", default=list(OPTIONAL), help="optional arms to try after the core ones")


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    bad = [a for a in args.optional if a not in OPTIONAL]
    if bad:
        raise SystemExit(f"--optional: unknown arm(s) {bad}; known: {list(OPTIONAL)}")
    if args.render:
        return render_main(args, argv)
    if args.only is None or args.only not in args.seeds:
        raise SystemExit("give --only S (one of --seeds) to run a seed, or --render")
    if args.record_only:  # the seed record of a run that was stopped: what finished, the rest labelled
        sd = Path(args.out) / f"seed{args.only}"
        st = SeedState(sd / "state.json")
        for name in ("grpo", *CORE, *args.optional):
            if name not in st.data["evals"] and name not in st.data["dropped"]:
                st.data["dropped"][name] = f"not finished when the run was stopped ({time.strftime('%H:%M', time.gmtime())} UTC)"
        run_argv = argv[:argv.index("--record-only")] + argv[argv.index("--record-only") + 1:]
        write_record(args.only, json.loads((sd / "preflight.json").read_text()), st.data, args,
                     protocol_from_args(args, SCRIPT, run_argv))
        return log(f"[seed {args.only}] record written from {sd / 'state.json'}")
    proto = protocol_from_args(args, SCRIPT, [a for a in argv])
    rec = run_one(args.only, args, proto)
    log(f"[seed {args.only}] record written: {Path(args.seed_dir) / f'seed{args.only}.json'} "
        f"({shlex.join(['evals:', *rec['evals']])})")


if __name__ == "__main__":
    main()
