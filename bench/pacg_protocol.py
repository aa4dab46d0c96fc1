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
from _preflight import truncation_reasons, truncation_share  # noqa: E402
from _protocol import (Clock, SeedArms, SeedState, Selection, add_protocol_args, add_seed_process_args,  # noqa: E402
                       add_stage_args, apply_setting, arm_val_score, coin_flip_config, grid_todo, seed_main, seed_plan,
                       seed_preflight, seed_process, write_seed_record)
from pacg import ARMS as OLD_ARMS  # noqa: E402
from pacg_preflight import _DAPO, EXTRACTOR, data_overrides, mechanism, preflight_of, test_items  # noqa: E402
from bpo_protocol_table import command_text  # noqa: E402
from pacg_protocol_table import load, protocol_of, render_records  # noqa: E402

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

    return seed_preflight(seed, sd, st, lambda: preflight_seed(seed, preflight_args(args), sd), stop_reasons,
                          args.smoke, lambda w: log(f"[seed {seed}] smoke run, not stopped: {w}"))


def stop_reasons(rec: Dict) -> List[str]:
    """Why RL is not spent on the seed: PACG's gate cannot act, or over 5% of the sampled (groups, test) or greedy
    responses are cut at max new tokens."""
    pf = preflight_of(rec, mechanism(PERSISTENCE, INTERVENTION))
    cut = [([x for g in rec["groups"]["truncated"] for x in g], "sampled responses (groups)"),
           (rec["truncated"]["sampled"], "sampled test responses"), (rec["truncated"]["greedy"], "greedy test responses")]
    why = [] if pf.can_act else [f"PACG ({PERSISTENCE}, {INTERVENTION}) cannot act: {pf.reason}"]
    return why + truncation_reasons(cut, rec["max_new_tokens"])


def preflight_args(args) -> SimpleNamespace:
    return SimpleNamespace(n_train=args.n_train, n_test=args.n_test, n_val=args.n_val, sft_steps=args.sft_steps,
                           sft_lr=args.sft_lr, model=args.model, max_new_tokens=args.max_new_tokens,
                           group_size=args.group_size, persistence=PERSISTENCE, intervention=INTERVENTION,
                           overrides=args.overrides)


def done_text(e: Dict) -> str:
    """The end of an arm's log line: its sampled pass."""
    return (f"sampled accuracy {100 * e['sampled']['accuracy']:.1f}, correct with an unsupported claim "
            f"{100 * e['sampled'].get('correct_with_unsupported', float('nan')):.1f}")


def run_one(seed: int, args, proto) -> Dict:
    return seed_process(seed, args, proto, lambda sd, st: preflight_stage(seed, args, sd, st),
                        lambda sd, st, rec: grid_stage(seed, args, proto, sd, st),
                        lambda sd, st, sel: arms_stage(seed, args, sd, st, sel),
                        lambda rec, state: write_record(seed, rec, state, args, proto))


def grid_stage(seed: int, args, proto, sd: Path, st: SeedState) -> None:
    """The SFT start's test diagnosis, then the grid (``grid_point``: both validation accuracies kept in
    ``grid_both``, the ``--select-on`` one in ``grid``)."""
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


def arms_stage(seed: int, args, sd: Path, st: SeedState, sel: Selection) -> None:
    """The grid's chosen run is the DAPO arm; then ``LATER`` in order, each while ``--deadline`` allows."""
    arms = SeedArms(seed, st, args.rl_steps, lambda n: arm_config(n, sd, args, seed, sel),
                    lambda n, path, cfg: evaluate(path, sd, cfg.data, seed, args.max_new_tokens), algo_means, done_text)
    arms.adopt("dapo", sd / "grid" / f"select_lr{sel.lr:g}_kl{sel.kl:g}", arm_config("dapo", sd, args, seed))
    arms.run_later(LATER, "dapo", STEP_RATIO, EVAL_MARGIN_MIN, args.deadline)


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
    add_stage_args(ap)
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
    return seed_main(argv, build_parser(), SCRIPT, render_main, run_one, instead=print_cost_probe)


def print_cost_probe(args) -> bool:
    """With ``--cost-probe K``: print ``cost_probe``'s seconds per step of every arm; True when it ran."""
    if not args.cost_probe:
        return False
    for n, c in cost_probe(args.only, args, args.cost_probe).items():
        print(f"{n}: {c['cpu_step_s']:.2f} CPU s / step ({c['wall_step_s']:.2f} wall), "
              f"{c['response_tokens']:.0f} response tokens / step, {c['resample_rounds']:.2f} resample rounds")
    return True


if __name__ == "__main__":
    main()
