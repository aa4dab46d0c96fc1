"""The pre-flight of the DSPO miniature (issue 29 item 2) on the tiny base that sees, under the miniature protocol
(``docs/miniatures.md``): no RL, only the statistics that say whether CVIG can tell boxes apart.

    .venv/bin/python bench/dspo_preflight.py [--seeds 0 1 2] [--sizes 112] [--n-test 400] [--n-val 32]
        [--n-train 512] [--sft-steps 150] [--max-new-tokens 176] [--group-size 4] [--out runs/dspo_preflight]
        [--render-only] [--smoke] [--report docs/results/dspo.md] [overrides ...]

Per protocol seed (``seed_plan``: its own world and SFT seed) and image size: the mood world
(``make_mood_world``) at that size, SFT from ``model.path=base`` on the world's four-step responses shortened by
``short_response`` (the colour words of step 1 dropped: the box, the VAD reflection, the 5 candidates and the choice
stay), with ``configs/dspo_mood.yaml``'s prompt and rewards; then on the SFT start:

- greedy held-out responses scored by ``mmrl eval emotion`` (top-1 vs chance 1/6, well-formed, box IoU, truncation);
- ``--group-size`` responses per validation prompt sampled by the DSPO trainer (temperature 1): pass@k, zero-spread
  share, truncation share (at most 5%, ``_preflight.check_truncation``, also on the greedy responses);
- **CVIG's spread across candidate boxes** on the well-formed sampled responses: the response's log-prob (all its
  tokens, and the candidates' tokens CVIG's p_k reads) re-scored with the visual tokens inside the GOLD box (the
  cue's) zeroed and inside a RANDOM box of the same size zeroed (``random_box``), by the code path of DSPO's CVIG
  (``mmrl.models.feature_mask.score_with_masked_boxes`` over the trainer's ``backend.score``, as
  ``mmrl.train.step.rescore``); drop = lp(original) − lp(masked), per response ``gold drop − random drop``.

CVIG "can act" on a seed (``can_act``) when at least ``MIN_BOXED`` of the sampled responses are well-formed with a box
(CVIG scores no other) and, on the candidates' tokens (what CVIG's p_k reads), the gold-minus-random drop has a 95%
interval over prompts above 0 and the gold drop exceeds the random one in more than ``MIN_GOLD_WINS`` of responses. Each (size, seed) writes
``OUT/px<size>/seed<S>/preflight.json``; ``--render-only`` renders the saved records (a missing one is listed as not
run).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
from _arms import log  # noqa: E402
from _preflight import Groups, Mechanism, build_preflight, check_truncation, preflight_lines, sample_groups  # noqa: E402
from _protocol import ProtocolError, Results, add_protocol_args, protocol_from_args, seed_plan  # noqa: E402
from bpo_table import ci95  # noqa: E402

CONFIG = REPO / "configs" / "dspo_mood.yaml"
MIN_BOXED, MIN_GOLD_WINS = 0.5, 0.6
MARK = "<!-- end of the section written by bench/dspo_preflight.py; everything below is earlier -->"


def short_response(reference: str) -> str:
    """The world's gold four-step response without step 1's colour words (``colour R G B``): the box, the VAD
    reflection, the candidates and the choice stay, so the response still parses (``parse_dspo``)."""
    return re.sub(r"<step1>colour \d+ \d+ \d+ ", "<step1>", reference)


def random_box(box: Sequence[float], rng: random.Random) -> Tuple[float, float, float, float]:
    """A box of the same height and width as the normalised (ymin, xmin, ymax, xmax) ``box``, placed uniformly
    inside the image."""
    h, w = box[2] - box[0], box[3] - box[1]
    y0, x0 = rng.uniform(0.0, 1.0 - h), rng.uniform(0.0, 1.0 - w)
    return (y0, x0, y0 + h, x0 + w)


def spread_stats(gold: Sequence[float], rand: Sequence[float], groups: Sequence[int]) -> Dict[str, float]:
    """Per response ``d = gold drop − random drop``: the share with d > 0 (ties count half); the mean of the prompt
    groups' mean d with its 95% t-interval over groups (responses of one prompt are not independent)."""
    if not gold:
        return {"n": 0.0, "gold_wins": float("nan"), "diff": float("nan"), "diff_lo": float("nan"),
                "diff_hi": float("nan"), "gold_drop": float("nan"), "rand_drop": float("nan")}
    d = [g - r for g, r in zip(gold, rand)]
    per: Dict[int, List[float]] = {}
    for gid, x in zip(groups, d):
        per.setdefault(gid, []).append(x)
    m, lo, hi = ci95([sum(v) / len(v) for v in per.values()])
    wins = sum(1.0 if x > 0 else 0.5 if x == 0 else 0.0 for x in d) / len(d)
    return {"n": float(len(d)), "prompts": float(len(per)), "gold_wins": wins, "diff": m, "diff_lo": lo,
            "diff_hi": hi, "gold_drop": sum(gold) / len(gold), "rand_drop": sum(rand) / len(rand)}


def can_act(s: Dict[str, float]) -> Tuple[bool, str]:
    """CVIG tells the gold box from a random one: at least ``MIN_BOXED`` of the sampled responses boxed (CVIG scores
    no other), and on the candidates' tokens (CVIG's p_k) the gold − random drop has a 95% CI over prompts above 0
    and the gold drop is larger in more than ``MIN_GOLD_WINS`` of the responses."""
    if not s.get("boxed", 0.0) >= MIN_BOXED:
        return False, (f"{100 * s.get('boxed', 0.0):.0f}% of the sampled responses are well-formed with a box to "
                       f"zero (< {100 * MIN_BOXED:.0f}%)")
    if not s["cand_lo"] > 0:
        return False, (f"candidates' gold − random drop {s['cand_diff']:.3g} nats, 95% CI [{s['cand_lo']:.3g}, "
                       f"{s['cand_hi']:.3g}] not above 0")
    if not s["cand_wins"] > MIN_GOLD_WINS:
        return False, (f"the gold box drops the candidates more than a random one in {100 * s['cand_wins']:.0f}% of "
                       f"responses (<= {100 * MIN_GOLD_WINS:.0f}%)")
    return True, "ok"


def box_coverage(boxes: Sequence[Sequence[float]], grid: Sequence[int], rng: random.Random) -> Dict[str, float]:
    """Merged visual tokens (``box_token_mask``, CVIG's box -> token rule) that each normalised box and a random box
    of the same size cover on an image of patch ``grid`` (t, h, w): means, the tokens both share, and the share of
    random boxes that zero exactly the gold box's tokens (CVIG cannot tell those two apart)."""
    import torch

    from mmrl.models.feature_mask import box_token_mask

    g = [box_token_mask(b, grid) for b in boxes]
    r = [box_token_mask(random_box(b, rng), grid) for b in boxes]
    n = max(len(g), 1)
    return {"tokens": float(g[0].numel()) if g else float("nan"), "gold": sum(float(m.sum()) for m in g) / n,
            "random": sum(float(m.sum()) for m in r) / n, "shared": sum(float((a & b).sum()) for a, b in zip(g, r)) / n,
            "same": sum(bool(torch.equal(a, b)) for a, b in zip(g, r)) / n}


def world_coverage(seeds: Sequence[int], sizes: Sequence[int], n_test: int, tmp: Path) -> List[Dict]:
    """``box_coverage`` of each seed's held-out cue boxes (its mood world, re-drawn at each size; no model)."""
    from mmrl.data.synth_mood import make_mood_world
    from mmrl.rewards.dspo_rewards import evidence_box
    from types import SimpleNamespace

    out = []
    for size in sizes:
        for seed in seeds:
            w = make_mood_world(str(tmp / f"px{size}_seed{seed}"), 0, n_test, seed=seed_plan(seed).world_seed, size=size)
            boxes = []
            for it in json.loads(Path(w["test"]).read_text()):
                ev = SimpleNamespace(boxes=it["evidence"]["boxes"], source_size=it["evidence"]["source_size"])
                boxes.append(evidence_box(SimpleNamespace(id=it["id"], evidence=ev), None))
            out.append(dict(box_coverage(boxes, (1, size // 14, size // 14), random.Random(seed)), size=size, seed=seed))
    return out


def coverage_lines(cov: Sequence[Dict]) -> List[str]:
    lines = ["### Visual tokens a cue box covers (the held-out cue boxes of each seed's world; geometry only, no model)",
             "", "| size | seed | merged visual tokens | gold box covers | random box covers | shared | random box "
             "zeroes exactly the gold's tokens |", "|---|---|---:|---:|---:|---:|---:|"]
    for c in cov:
        lines.append(f"| {c['size']} px | {c['seed']} | {c['tokens']:.0f} | {c['gold']:.2f} | {c['random']:.2f} | "
                     f"{c['shared']:.2f} | {100 * c['same']:.1f}% |")
    return lines + [""]


def candidate_lp(text: str, ids: List[int], lp, tokenizer) -> float:
    """Sum of the log-probs over the step-3 candidates' tokens (what CVIG's p_k multiplies; ``dspo.cvig_row``)."""
    from mmrl.algos.dspo import token_offsets
    from mmrl.algos.dspo_math import char_to_token_span
    from mmrl.rewards.dspo_format import parse_dspo

    spans = parse_dspo(text).candidate_spans
    offs = token_offsets(tokenizer, ids, max(b for _, b in spans))
    return sum(float(lp[a:b].double().sum()) for a, b in (char_to_token_span(offs, s) for s in spans))


def cvig_records(trainer, si, trajs, seed: int) -> List[Dict]:
    """Per well-formed, not truncated sampled response: its group, the visual tokens its gold and random box cover,
    and the log-prob (whole response, candidates) unmasked, with the gold box zeroed and with the random box
    zeroed (``score_with_masked_boxes``, DSPO's CVIG re-scoring)."""
    from mmrl.models.feature_mask import box_token_mask, score_with_masked_boxes, vision_encoder
    from mmrl.rewards.dspo_format import parse_dspo
    from mmrl.rewards.dspo_rewards import evidence_box

    todo = [t for t in trajs if not t.truncated and parse_dspo(t.text, k=5).ok]
    if not todo:
        return []
    rng = random.Random(seed)
    gold = [evidence_box(si.samples[t.sample_id], None) for t in todo]
    rand = [random_box(b, rng) for b in gold]
    items = [(si.requests[t.inputs_key].inputs, t.response_ids) for t in todo]
    score = lambda its: trainer.backend.score(its, fallback=items[0])  # noqa: E731
    model = trainer.backend.model
    merge = int(getattr(vision_encoder(model), "spatial_merge_size", 2))
    lp0 = [lp for i in range(0, len(items), 16) for lp in score(items[i: i + 16])]
    lpg = score_with_masked_boxes(model, score, items, gold)
    lpr = score_with_masked_boxes(model, score, items, rand)
    tok = trainer.processor.tokenizer
    out = []
    for t, it, g, r, a, b, c in zip(todo, items, gold, rand, lp0, lpg, lpr):
        grid = it[0].vision["image_grid_thw"][0].tolist()
        mg, mr = box_token_mask(g, grid, merge), box_token_mask(r, grid, merge)
        ids = t.response_ids.tolist()
        out.append({"group": int(t.group_id), "tokens": int(mg.numel()), "gold_tokens": int(mg.sum()),
                    "rand_tokens": int(mr.sum()), "shared_tokens": int((mg & mr).sum()),
                    "lp": float(a.sum()), "lp_gold": float(b.sum()), "lp_rand": float(c.sum()),
                    "cand": candidate_lp(t.text, ids, a, tok), "cand_gold": candidate_lp(t.text, ids, b, tok),
                    "cand_rand": candidate_lp(t.text, ids, c, tok)})
    return out


def make_world(world: Path, n_train: int, n_val: int, n_test: int, seed: int, size: int) -> None:
    """The mood world; the last ``n_val`` train items become ``val.json``; ``sft.json`` holds the train items with
    their short gold response as a text answer (what ``run_sft`` trains on)."""
    from mmrl.data.synth_mood import make_mood_world

    make_mood_world(str(world), n_train + n_val, n_test, seed=seed, size=size)
    items = json.loads((world / "train.json").read_text())
    (world / "train.json").write_text(json.dumps(items[:n_train], indent=1) + "\n")
    (world / "val.json").write_text(json.dumps(items[n_train:], indent=1) + "\n")
    sft = [dict(it, answer=short_response(it["meta"]["reference_response"]), answer_type="text") for it in items[:n_train]]
    (world / "sft.json").write_text(json.dumps(sft) + "\n")


def data_overrides(world: Path, size: int, max_new_tokens: int, overrides: Sequence[str] = ()) -> List[str]:
    """The world's splits and media at ``size`` px, the response budget, no checkpoints or periodic evaluation."""
    return [f"data.train={world / 'train.json'}", f"data.test={world / 'test.json'}", f"data.media_root={world}",
            f"data.max_pixels={size * size}", f"rollout.max_new_tokens={max_new_tokens}", "train.save_every=0",
            "train.eval_every=0"] + list(overrides)


def start_overrides(sft_path: Path, rl_seed: int, dspo: bool = True) -> List[str]:
    """RL from the SFT start: its weights, the seed's RL seed and (``dspo``) its tokenizer for DSPO's candidate spans."""
    tok = [f"algorithm.params.tokenizer={sft_path}"] if dspo else []
    return [f"model.path={sft_path}", f"train.seed={rl_seed}"] + tok


def run_seed(seed: int, size: int, args, out: Path) -> Dict:
    from dspo import evaluate

    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples
    from mmrl.models.loading import load_model, load_processor
    from mmrl.train.rl_trainer import RLTrainer
    from mmrl.train.sft import run_sft

    t0, plan, world = time.time(), seed_plan(seed), out / "world"
    if not (world / "sft.json").exists():
        make_world(world, args.n_train, args.n_val, args.n_test, plan.world_seed, size)
    tok = load_processor(args.model).tokenizer
    traces = [len(tok.encode(it["answer"], add_special_tokens=False)) + 1
              for it in json.loads((world / "sft.json").read_text())]
    if args.max_new_tokens <= max(traces):
        raise ValueError(f"max_new_tokens = {args.max_new_tokens} does not exceed the longest SFT trace "
                         f"({max(traces)} tokens): every well-formed response would be cut; raise --max-new-tokens")
    data = data_overrides(world, size, args.max_new_tokens, args.overrides)
    sft_path = out / "sft" / "final"
    t = time.time()
    if not (sft_path / "config.json").exists():
        log(f"[{size} px seed {seed}] SFT {args.sft_steps} steps from {args.model} on {len(traces)} traces "
            f"(longest {max(traces)} tokens)")
        run_sft(load_config([str(CONFIG)], data + [
            f"data.train={world / 'sft.json'}", f"model.path={args.model}", f"train.seed={plan.sft_seed}",
            f"train.out_dir={out / 'sft'}", f"sft.steps={args.sft_steps}", f"sft.batch_size={args.sft_batch}",
            f"sft.lr={args.sft_lr}"]), quiet=True, overwrite=True)
    sft_min = (time.time() - t) / 60
    t = time.time()
    rl_cfg = load_config([str(CONFIG)], data + start_overrides(sft_path, plan.rl_seed) + [
        f"train.out_dir={out / 'rl'}", f"rollout.n={args.group_size}", f"train.prompts_per_step={args.n_val}"])
    model, proc = load_model(str(sft_path)), load_processor(str(sft_path))
    ev = evaluate(model, proc, rl_cfg, str(world / "test.json"), args.max_new_tokens, out / "greedy.jsonl")
    greedy_trunc = [bool(json.loads(line).get("truncated", False)) for line in (out / "greedy.jsonl").read_text().splitlines()]
    del model
    eval_min = (time.time() - t) / 60
    t = time.time()
    val, _ = load_samples(str(world / "val.json"), str(world))
    trainer, keep = RLTrainer(rl_cfg, quiet=True), {}
    groups = sample_groups(trainer, val, correct_key="dspo_accuracy", keep=keep)
    roll_min = (time.time() - t) / 60
    t = time.time()
    cvig = cvig_records(trainer, keep["si"], keep["trajs"], plan.rl_seed)
    cvig_min = (time.time() - t) / 60
    test_items = [(it["qtype"], len(it["candidates"])) for it in json.loads((world / "test.json").read_text())]
    rec = {"command": shlex.join(["python", "bench/dspo_preflight.py", *sys.argv[1:]]), "seed": seed, "size": size, "plan": [plan.world_seed, plan.sft_seed, plan.rl_seed], "test_items": test_items,
           "eval": {k: v for k, v in ev.items() if isinstance(v, (int, float))}, "greedy_truncated": greedy_trunc,
           "groups": vars(groups), "n_sampled": len(keep["trajs"]), "cvig": cvig, "longest_trace": max(traces),
           "mean_trace": sum(traces) / len(traces), "sft_steps": args.sft_steps, "sft_lr": args.sft_lr,
           "n_train": args.n_train, "max_new_tokens": args.max_new_tokens,
           "minutes": {"sft": sft_min, "eval": eval_min, "rollout": roll_min, "cvig": cvig_min,
                       "total": (time.time() - t0) / 60}}
    (out / "preflight.json").write_text(json.dumps(rec, indent=1))
    log(f"[{size} px seed {seed}] done: " + ", ".join(f"{k} {v:.1f}" for k, v in rec["minutes"].items()) + " min")
    return rec


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def mechanism_stats(rec: Dict) -> Dict[str, float]:
    """CVIG's spread (response and candidates' log-prob), the boxed share and the tokens a box covers."""
    c = rec["cvig"]
    drop = lambda key: [r["lp"] - r[key] for r in c] if key.startswith("lp") else [r["cand"] - r[key] for r in c]  # noqa: E731
    gids = [r["group"] for r in c]
    s = spread_stats(drop("lp_gold"), drop("lp_rand"), gids)
    cand = spread_stats(drop("cand_gold"), drop("cand_rand"), gids)
    n = max(len(c), 1)
    s.update(boxed=len(c) / max(rec["n_sampled"], 1), cand_diff=cand["diff"], cand_lo=cand["diff_lo"],
             cand_hi=cand["diff_hi"], cand_wins=cand["gold_wins"], tokens=c[0]["tokens"] if c else float("nan"),
             gold_tokens=sum(r["gold_tokens"] for r in c) / n, shared=sum(r["shared_tokens"] for r in c) / n,
             trunc=sum(x for g in rec["groups"]["truncated"] for x in g) / max(rec["n_sampled"], 1),
             own_iou=_mean([x for g in rec["groups"]["components"].get("dspo_evidence", []) for x in g]))
    return s


SHOWN = ("boxed", "cand_diff", "cand_lo", "cand_hi", "cand_wins", "trunc")  # in the generic pre-flight table


def shown_stats(rec: Dict) -> Dict[str, float]:
    return {k: v for k, v in mechanism_stats(rec).items() if k in SHOWN}


MECHANISM = Mechanism("CVIG (gold vs random box)", lambda ctx: shown_stats(ctx["rec"]), can_act)


def preflight_of(rec: Dict):
    from types import SimpleNamespace

    samples = [SimpleNamespace(qtype=q, is_choice=True, candidates=[None] * k) for q, k in rec["test_items"]]
    return build_preflight(rec["seed"], {"emotion": rec["eval"]["top1"]}, samples, Groups(**rec["groups"]),
                           ks=(1, 4), mechanism=MECHANISM, context={"rec": rec})


def cvig_lines(recs: Sequence[Dict], pfs) -> List[str]:
    """The mechanism table: per seed the gold and random drops, their difference with its CI, the share of gold
    wins, for the response and for the candidates' tokens, and the visual tokens a box covers."""
    f = lambda x: "—" if x != x else f"{x:.3f}"  # noqa: E731
    lines = ["| size | seed | boxed responses | visual tokens | gold box covers (shared with random) | gold drop | "
             "random drop | gold − random [95% CI] | gold > random | candidates: gold − random [95% CI] | "
             "candidates: gold > random | own box IoU with the cue | CVIG can act |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---|"]
    for rec, pf in zip(recs, pfs):
        s = mechanism_stats(rec)
        lines.append(f"| {rec['size']} px | {rec['seed']} | {s['n']:.0f} ({100 * s['boxed']:.0f}%), {s.get('prompts', 0):.0f} prompts | "
                     f"{s['tokens']:.0f} | "
                     f"{s['gold_tokens']:.2f} ({s['shared']:.2f}) | {f(s['gold_drop'])} | {f(s['rand_drop'])} | "
                     f"{f(s['diff'])} [{f(s['diff_lo'])}, {f(s['diff_hi'])}] | {100 * s['gold_wins']:.0f}% | "
                     f"{f(s['cand_diff'])} [{f(s['cand_lo'])}, {f(s['cand_hi'])}] | {100 * s['cand_wins']:.0f}% | "
                     f"{f(s['own_iou'])} | "
                     + ("yes" if pf.can_act else f"**no**: {pf.reason}") + " |")
    return lines + [""]


def render(recs: Sequence[Dict], proto, args) -> Results:
    res = Results(proto, "DSPO pre-flight on the base (no RL)")
    r0 = recs[0]
    if args.render_only:
        cmds = sorted({r.get("command", "?") for r in recs})
        res.add(["Rendered from the per-run records `OUT/px<size>/seed<S>/preflight.json`, written by: "
                 + "; ".join(f"`{c}`" for c in cmds) + ".", ""])
    res.add([f"Per seed and image size: the mood world ({r0['n_train']} SFT traces, {proto.n_val} validation prompts, "
             f"{proto.n_test} held-out test images), SFT {r0['sft_steps']} steps at lr {r0['sft_lr']:g} from "
             f"`model.path={args.model}` on the short four-step responses (`short_response`: mean "
             + ", ".join(f"{r['mean_trace']:.0f}" for r in recs) + " tokens, longest "
             + ", ".join(str(r["longest_trace"]) for r in recs) + f"); max new tokens {r0['max_new_tokens']}; "
             f"{args.group_size} responses sampled per validation prompt (temperature 1, the DSPO trainer). Minutes "
             "per run (SFT / greedy eval / sampling / CVIG re-scoring): " + ", ".join(
                 f"{r['size']} px seed {r['seed']} " + " / ".join(f"{r['minutes'][k]:.1f}" for k in
                                                                  ("sft", "eval", "rollout", "cvig")) for r in recs)
             + ".", ""])
    for size in sorted({r["size"] for r in recs}, reverse=True):
        rs = [r for r in recs if r["size"] == size]
        pfs = [preflight_of(r) for r in rs]
        res.add([f"### {size} px images", ""] + preflight_lines(pfs, MECHANISM.name)[1:])
        res.add(["Greedy held-out responses (`mmrl eval emotion`): " + "; ".join(
            f"seed {r['seed']}: top-1 {100 * r['eval']['top1']:.1f}% (chance 16.7%), well-formed "
            f"{100 * r['eval']['well_formed']:.1f}%, box IoU with the cue {r['eval']['box_iou']:.3f}, truncated "
            f"{100 * sum(r['greedy_truncated']) / max(len(r['greedy_truncated']), 1):.1f}%" for r in rs) + ".", "",
            f"**CVIG's spread across candidate boxes** ({size} px): drop = log-prob of the sampled response (nats, "
            "summed over its tokens; `candidates`: over the step-3 candidates' tokens, CVIG's p_k) unmasked minus "
            "with the box's merged visual tokens zeroed (`score_with_masked_boxes`, DSPO's CVIG path); gold = the "
            "cue's box, random = a box of the same size placed uniformly; CI: 95% t over prompts; own box IoU: the mean IoU of the "
            "sampled responses' step-1 box (the box DSPO's CVIG zeroes) with the cue (`dspo_evidence`, 0 unparsed).", ""]
            + cvig_lines(rs, pfs))
        blocked = [pf.seed for pf in pfs if not pf.can_act]
        res.add([f"**Can CVIG act at {size} px?** " + ("yes, on every seed" if not blocked else
                 f"no on seed(s) {blocked}") + f" (rule, `can_act`: >= {100 * MIN_BOXED:.0f}% of sampled responses "
                 f"well-formed with a box; on the candidates' tokens, CVIG's p_k, gold − random drop with a 95% CI over "
                 f"prompts above 0 and gold > random in > {100 * MIN_GOLD_WINS:.0f}% of responses).", ""])
    return res


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_protocol_args(ap, n_test=400, n_val=32)
    ap.add_argument("--sizes", type=int, nargs="+", default=[112], help="image sides in pixels (112: 4x4 merged tokens)")
    ap.add_argument("--model", default="base", help="the SFT's start (model.path; tests use the tiny model)")
    ap.add_argument("--n-train", type=int, default=512)
    ap.add_argument("--sft-steps", type=int, default=150)
    ap.add_argument("--sft-batch", type=int, default=16)
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--max-new-tokens", type=int, default=176)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--out", default="runs/dspo_preflight")
    ap.add_argument("--render-only", action="store_true", help="render OUT/px<size>/seed<S>/preflight.json")
    ap.add_argument("--coverage", type=int, nargs="*", default=[],
                    help="also tabulate the tokens the seeds' held-out cue boxes cover at these sizes (no model)")
    ap.add_argument("--report", help="write the results as the top section of this file (docs/results/dspo.md)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    proto = protocol_from_args(args, "bench/dspo_preflight.py", argv)
    import torch

    torch.set_num_threads(1)
    out = Path(args.out)
    recs, missing = [], []
    for size in args.sizes:
        for s in proto.seeds:
            d = out / f"px{size}" / f"seed{s}"
            if not args.render_only:
                recs.append(run_seed(s, size, args, d))
            elif (d / "preflight.json").exists():
                recs.append(json.loads((d / "preflight.json").read_text()))
            else:
                missing.append(f"{size} px seed {s}")
    if not recs:
        raise ProtocolError(f"--render-only: no record under {out}/px<size>/seed<S>/preflight.json")
    failed = []
    for r in recs:
        flags = [([x for g in r["groups"]["truncated"] for x in g], "sampled responses (groups)"),
                 (r["greedy_truncated"], "greedy test responses")]
        for fl, what in flags:
            try:
                check_truncation(fl, r["max_new_tokens"], what=f"{what}, {r['size']} px seed {r['seed']}")
            except ProtocolError as e:
                failed.append(str(e))
    res = render(recs, proto, args)
    if args.coverage:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            res.add(coverage_lines(world_coverage(proto.seeds, args.coverage, proto.n_test, Path(tmp))))
    if missing:
        res.sections.insert(0, ["**Not run** (no record under `" + str(out) + "`): " + ", ".join(missing) + ".", ""])
    if failed:
        res.sections.insert(0, ["## FAILED: the 5% truncation rule (`_preflight.check_truncation`)", ""]
                            + [f"- {f}" for f in failed] + [""])
    text = res.render()
    print(text, end="", flush=True)
    if args.report:
        from pacg_preflight import write_top

        write_top(Path(args.report), text, MARK)
    if failed:
        raise ProtocolError(failed[0])
    return text


if __name__ == "__main__":
    main()
