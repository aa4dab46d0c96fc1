"""DSPO against GRPO and its two ablations on the tiny base that sees, under the miniature protocol (issue 29 item 2,
``docs/miniatures.md``): one process per protocol seed, then one render of ``docs/results/dspo.md``.

    python bench/dspo_protocol.py --seeds 0 1 2 --only S [--rl-steps 100] [--prompts-per-step 4] [--n 4]
        [--sft-steps 450] [--n-test 400] [--n-val 128] [--lr-grid ...] [--kl-grid 0.01] [--until preflight|grid|arms]
        [--deadline HH:MM] [--out runs/dspo_protocol] [--seed-dir bench/results/dspo_protocol] [--smoke] [overrides ...]
    python bench/dspo_protocol.py --seeds 0 1 2 --render [--report docs/results/dspo.md] [--notes FILE]

Per seed (``seed_plan``: its own mood world, SFT and RL seed), each stage resumable (a rerun keeps finished stages):

1. **pre-flight** (``bench/dspo_preflight.run_seed``) at 112 px (16 merged visual tokens): the world with a
   validation split, SFT from ``model.path=base`` on the short four-step responses, the SFT start's greedy
   ``mmrl eval emotion`` scoring on the test images and its sampled groups on the validation prompts with CVIG's
   spread across boxes; the seed stops there (no RL) when CVIG cannot act (``dspo_preflight.can_act``) or more than
   5% of the sampled or greedy responses are cut at max new tokens (a smoke run records why and goes on);
2. **grid**: the GRPO arm at every ``(lr, KL)`` for ``--rl-steps`` steps, scored by greedy top-1 on the validation
   split; ``pooled_selection`` over every seed's grid picks one setting for every arm and seed; the chosen run IS
   the ``grpo`` arm;
3. **arms** from the same SFT start, steps, prompts, responses, lr and KL, in this order (``--deadline`` drops the
   later ones first): ``dspo`` (CVIG + DEDR, ``configs/dspo_mood.yaml``), ``coin_flip`` (GRPO whose
   ``dspo_accuracy`` is a coin of the batch's mean, ``dspo_coin_flip``), ``no_cvig``, ``no_dedr``; each evaluated on
   the test images right after it trains (``evaluate_dir``: top-1, KL to the annotators, top-k overlap, candidate
   diversity, box IoU with the cue, well-formed and truncated shares).

The seed record (``--seed-dir``/seed<S>.json: settings, the pre-flight record, grid, selection, evaluations, step
costs, the DSPO arms' algorithm metrics, minutes) is small and committed; ``--render`` builds the results file from
the records (``bench/dspo_protocol_table.py``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
from _arms import log  # noqa: E402
from _preflight import truncation_reasons, truncation_share  # noqa: E402
from _protocol import (Clock, SeedArms, SeedState, Selection, add_protocol_args, add_seed_process_args,  # noqa: E402
                       add_stage_args, apply_setting, arm_val_score, coin_flip_config, grid_todo, seed_main, seed_plan,
                       seed_preflight, seed_process, write_seed_record)
from dspo import ARMS as OLD_ARMS  # noqa: E402
from dspo_preflight import CONFIG, data_overrides, preflight_of, start_overrides  # noqa: E402

SCRIPT = "bench/dspo_protocol.py"
SIZE = 112  # 4 x 4 merged visual tokens: a box can zero 1-16 of 16 (the pre-flight's coverage table)
ARMS: Dict[str, List[str]] = {**OLD_ARMS, "coin_flip": OLD_ARMS["grpo"]}
# After grpo (the grid's chosen run): the claim's arm, its control, then the ablations, so that a --deadline drops the
# arms the main claim (DSPO - GRPO) needs least.
GRPO_ARMS = ("grpo", "coin_flip")  # algorithm grpo: no DSPO parameters (the candidates' tokenizer)
LATER = ("dspo", "coin_flip", "no_cvig", "no_dedr")
STEP_RATIO = {"dspo": 1.3, "coin_flip": 1.0, "no_cvig": 1.1, "no_dedr": 1.3}  # predicted step / GRPO's step
EVAL_MARGIN_MIN = 1.0  # an arm's predicted evaluation minutes (400 greedy test responses)
EVAL_KEYS = ("top1", "kl_to_annotators", "topk_overlap", "candidate_diversity", "box_iou", "well_formed")


def arm_config(name: str, sd: Path, args, seed: int, sel: Optional[Selection] = None):
    """The arm's config: ``configs/dspo_mood.yaml`` on the seed's world at 112 px and SFT start, the RL schedule, the
    arm's overrides; with ``sel`` the chosen lr and KL; ``coin_flip`` with ``dspo_coin_flip``."""
    from mmrl.config import load_config

    start = start_overrides(sd / "sft" / "final", seed_plan(seed).rl_seed, dspo=name not in GRPO_ARMS)
    cfg = load_config([str(CONFIG)], data_overrides(sd / "world", SIZE, args.max_new_tokens, args.overrides)
                      + ARMS[name] + start + [
        f"train.steps={args.rl_steps}", f"train.prompts_per_step={args.prompts_per_step}", f"rollout.n={args.n}",
        f"train.out_dir={sd / ('grid' if name == 'grpo' else name)}"])
    if sel is not None:
        cfg = apply_setting(cfg, sel)
    return coin_flip_config(cfg) if name == "coin_flip" else cfg


def scored(model, processor, cfg, items: Path, preds: Path, max_new_tokens: int) -> Dict[str, float]:
    """``mmrl eval emotion``'s scoring (``bench/dspo.evaluate``) of greedy responses to ``items``, with the share of
    responses cut at max new tokens."""
    from dspo import evaluate

    ev = evaluate(model, processor, cfg, str(items), max_new_tokens, preds)
    out = {k: float(v) for k, v in ev.items() if isinstance(v, (int, float))}
    out["truncated"] = truncation_share([bool(json.loads(x).get("truncated", False))
                                         for x in preds.read_text().splitlines() if x.strip()])
    return out


def evaluate_dir(model_dir: str, sd: Path, cfg, name: str, max_new_tokens: int) -> Dict[str, float]:
    """The exported model of arm ``name`` on the seed's test images (predictions to ``OUT/seed<S>/preds_<name>``)."""
    from mmrl.models.loading import load_model, load_processor

    return scored(load_model(model_dir), load_processor(model_dir), cfg, sd / "world" / "test.json",
                  sd / f"preds_{name}.jsonl", max_new_tokens)


def grid_point(cfg, seed: int, lr: float, kl: float, steps: int, val_json: Path, max_new_tokens: int) -> float:
    """The GRPO arm at ``(lr, kl)`` for ``steps`` steps (``_protocol.arm_val_score``; history and model kept under
    ``<out_dir>/select_lr<lr>_kl<kl>``), then its greedy top-1 on the validation split."""
    def top1(trainer) -> Dict[str, float]:
        preds = Path(trainer.cfg.train.out_dir) / "val_preds.jsonl"
        preds.parent.mkdir(parents=True, exist_ok=True)
        with trainer.backend.rollout_context():
            ev = scored(trainer.model, trainer.processor, trainer.cfg, val_json, preds, max_new_tokens)
        return {"eval/accuracy": ev["top1"]}

    return arm_val_score({seed: cfg}, steps, {seed: str(val_json)}, keep=True, evaluate=top1)(lr, kl)


def algo_means(history: List[Dict[str, float]]) -> Dict[str, float]:
    """Mean over steps of the algorithm's and the DSPO rewards' logged metrics (CVIG's R_cf and gate, DEDR)."""
    keys = sorted({k for h in history for k in h if k.startswith(("algo/", "reward/dspo"))})
    return {k: statistics.mean([h[k] for h in history if k in h]) for k in keys}


def preflight_args(args) -> SimpleNamespace:
    return SimpleNamespace(n_train=args.n_train, n_test=args.n_test, n_val=args.n_val, sft_steps=args.sft_steps,
                           sft_batch=args.sft_batch, sft_lr=args.sft_lr, model=args.model,
                           max_new_tokens=args.max_new_tokens, group_size=args.group_size, overrides=args.overrides)


def preflight_stage(seed: int, args, sd: Path, st: SeedState) -> Dict:
    """The pre-flight record (reused when present) and the stop: ``st.data['stopped']`` names why RL is not spent."""
    from dspo_preflight import run_seed as preflight_seed

    return seed_preflight(seed, sd, st, lambda: preflight_seed(seed, SIZE, preflight_args(args), sd), stop_reasons,
                          args.smoke)


def stop_reasons(rec: Dict) -> List[str]:
    """Why RL is not spent on the seed: CVIG cannot act, or over 5% of the sampled (groups) or greedy test
    responses are cut at max new tokens."""
    pf = preflight_of(rec)
    return ([] if pf.can_act else [f"CVIG cannot act: {pf.reason}"]) + truncation_reasons(
        [([x for g in rec["groups"]["truncated"] for x in g], "sampled responses (groups)"),
         (rec["greedy_truncated"], "greedy test responses")], rec["max_new_tokens"])


def run_one(seed: int, args, proto) -> Dict:
    return seed_process(seed, args, proto, lambda sd, st: preflight_stage(seed, args, sd, st),
                        lambda sd, st, rec: grid_stage(seed, args, proto, sd, st, rec),
                        lambda sd, st, sel: arms_stage(seed, args, sd, st, sel),
                        lambda rec, state: write_record(seed, rec, state, args, proto))


def grid_stage(seed: int, args, proto, sd: Path, st: SeedState, rec: Dict) -> None:
    """The SFT start's test evaluation (from its pre-flight record), then the grid (``grid_point``)."""
    st.data["evals"].setdefault("sft", dict(rec["eval"], truncated=truncation_share(rec["greedy_truncated"])))
    grpo_cfg = arm_config("grpo", sd, args, seed)
    for lr, kl, k in grid_todo(st, proto, sd / "grid"):
        with Clock(st, f"grid_{k}"):
            st.data["grid"][k] = grid_point(grpo_cfg, seed, lr, kl, args.rl_steps, sd / "world" / "val.json",
                                            args.max_new_tokens)
        st.save()
        log(f"[seed {seed}] grid {k}: validation top-1 {100 * st.data['grid'][k]:.1f} "
            f"({st.data['minutes'][f'grid_{k}']:.1f} min)")


def arms_stage(seed: int, args, sd: Path, st: SeedState, sel: Selection) -> None:
    """The grid's chosen run is the GRPO arm; then ``LATER`` in order, each while ``--deadline`` allows."""
    arms = SeedArms(seed, st, args.rl_steps, lambda n: arm_config(n, sd, args, seed, sel),
                    lambda n, path, cfg: evaluate_dir(path, sd, cfg, n, args.max_new_tokens), algo_means,
                    lambda e: f"top-1 {100 * e['top1']:.1f}, box IoU {e['box_iou']:.3f}")
    arms.adopt("grpo", sd / "grid" / f"select_lr{sel.lr:g}_kl{sel.kl:g}", arm_config("grpo", sd, args, seed))
    arms.run_later(LATER, "grpo", STEP_RATIO, EVAL_MARGIN_MIN, args.deadline)


def write_record(seed: int, rec: Dict, state: Dict, args, proto) -> Dict:
    """``SEED_DIR/seed<S>.json``: the command, settings, the pre-flight record and the seed's state."""
    record = {"seed": seed, "command": proto.command, "plan": vars(seed_plan(seed)),
              "settings": {k: getattr(args, k) for k in (
                  "n_train", "n_test", "n_val", "sft_steps", "sft_lr", "rl_steps", "prompts_per_step", "n",
                  "group_size", "max_new_tokens", "lr_grid", "kl_grid", "model", "overrides")},
              "preflight": rec, **state}
    return write_seed_record(args.seed_dir, seed, record)


def own_args(ap: argparse.ArgumentParser) -> None:
    add_stage_args(ap)
    ap.add_argument("--n-train", type=int, default=512)
    ap.add_argument("--sft-steps", type=int, default=450, help="150 steps left CVIG unable to act on every seed")
    ap.add_argument("--sft-batch", type=int, default=16)
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--rl-steps", type=int, default=100)
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--n", type=int, default=4, help="responses per prompt (G)")
    ap.add_argument("--group-size", type=int, default=4, help="the pre-flight's sampled group size")
    ap.add_argument("--max-new-tokens", type=int, default=176, help="above the 145-token short responses")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_protocol_args(ap, n_test=400, n_val=128)
    ap.set_defaults(lr_grid=[1e-5, 3e-5], kl_grid=[0.01])  # issue 29: KL 0.01 (the paper's beta), lr validated
    add_seed_process_args(ap, "dspo", own_args)
    return ap


def main(argv=None) -> None:
    from dspo_protocol_table import render_main

    return seed_main(argv, build_parser(), SCRIPT, render_main, run_one)


if __name__ == "__main__":
    main()
