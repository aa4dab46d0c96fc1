"""The pre-flight of the PACG miniature (issue 29 item 1) on the tiny base that sees, under the miniature protocol
(``docs/miniatures.md``): no RL, only the statistics that say whether PACG's gate could act.

    .venv/bin/python bench/pacg_preflight.py [--seeds 0 1 2] [--n-test 512] [--n-val 64] [--n-train 1024]
        [--sft-steps 300] [--max-new-tokens 128] [--group-size 8] [--out runs/pacg_preflight] [--render-only]
        [--smoke] [--report FILE] [overrides ...]

Per protocol seed (``seed_plan``: its own world and SFT seed): the claims world with prior-driven unsupported claims
(``synth_claims``, ``unsupported_source="prior"``) at the base's resolution (56 px), SFT on its traces from
``model.path=base``, then on the SFT start:

- greedy responses, and one response sampled at temperature 1 (what RL trains on), on each of the ``--n-test``
  held-out images (``mmrl.diagnose``), re-scored under VPPO's 14 px patch blackening and under ``full_mask``; per claim the persistence of the whole sentence (``persistence: claim``, the
  paper's) and of its content word (``persistence: content``, ``synth_claims.claim_content``), labelled supported
  or not by the world;
- PACG's z-gate (``pacg_gate.persistence_gate``, κ = 1, γ = η = 0.5, statistics over all claims of the split) on
  each of the four (persistence, intervention) pairs: the flagged share, the mean gain of flagged claims, the
  flagged share among supported and among unsupported claims; the mean persistence of unsupported vs supported
  claims with 95% intervals over claims;
- sampled groups (``--group-size`` responses per validation prompt, temperature 1, the DAPO+PACG trainer) for
  pass@k, the zero-spread share and the truncation share, which must stay <= 5% (``_preflight.check_truncation``;
  the greedy responses too). ``--max-new-tokens`` must exceed the longest SFT trace (``check_trace_room``).

PACG "can act" on a seed when its gate on the sampled responses' claims under ``--persistence`` / ``--intervention`` (default content / full_mask,
the pair the RL arms would use) flags at least ``MIN_FLAGGED`` of the claims at a mean gain of at most
``MAX_GAIN``. Each seed writes ``OUT/seed<S>/preflight.json``; ``--render-only`` renders the saved seeds.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
from _arms import log  # noqa: E402
from _preflight import Groups, Mechanism, build_preflight, check_truncation, preflight_lines, sample_groups  # noqa: E402
from _protocol import ProtocolError, Results, add_protocol_args, protocol_from_args, seed_plan  # noqa: E402
from bpo_table import ci95, t975  # noqa: E402

INSTRUCTION = "Describe what you see in <think></think>, then answer with the option's letter in <answer></answer>."
EXTRACTOR = "mmrl.data.synth_claims:claim_content"
PERSISTENCES, INTERVENTIONS = ("claim", "content"), ("patch", "full")
MIN_FLAGGED, MAX_GAIN = 0.05, 0.95
_DAPO = "dynamic_sampling: true, max_resample_rounds: 1"


def check_trace_room(max_new_tokens: int, trace_tokens: Sequence[int]) -> int:
    """The longest SFT trace (tokens, its end token included); a one-line ``ValueError`` when ``max_new_tokens``
    does not exceed it (every well-formed response would be cut)."""
    longest = max(trace_tokens)
    if max_new_tokens <= longest:
        raise ValueError(f"max_new_tokens = {max_new_tokens} does not exceed the longest SFT trace ({longest} tokens "
                         f"with its end token): every well-formed response would be cut; raise --max-new-tokens")
    return longest


def trace_lengths(train_json: Path, tokenizer) -> List[int]:
    items = json.loads(Path(train_json).read_text())
    return [len(tokenizer.encode(it["meta"]["sft_response"], add_special_tokens=False)) + 1 for it in items]


def data_overrides(world: Path, args) -> List[str]:
    return [f"data.train={world / 'train.json'}", f"data.test={world / 'test.json'}", f"data.media_root={world}",
            "data.max_pixels=3136", f"data.prompt.instruction={INSTRUCTION}",
            f"rollout.max_new_tokens={args.max_new_tokens}", "train.micro_batch=32", "train.num_threads=1",
            "train.save_every=0", "rewards=[{name: accuracy, weight: 1.0}]"] + list(args.overrides)


def make_world(world: Path, args, world_seed: int) -> None:
    """The prior-driven claims world; the last ``n_val`` train items become ``val.json`` (never trained on)."""
    from mmrl.data.synth_claims import make_claims_world

    make_claims_world(str(world), args.n_train + args.n_val, args.n_test, seed=world_seed, size=56,
                      unsupported_source="prior")
    items = json.loads((world / "train.json").read_text())
    (world / "train.json").write_text(json.dumps(items[: args.n_train], indent=1) + "\n")
    (world / "val.json").write_text(json.dumps(items[args.n_train:], indent=1) + "\n")


def claim_rows(records: Sequence[Dict]) -> List[Dict]:
    """One row per claim: supported (True / False / None) and the four persistences (content: NaN without one)."""
    out = []
    for r in records:
        for c in r["claims"]:
            out.append({"supported": c["supported"], "claim_patch": c["persistence"], "claim_full": c["persistence_full"],
                        "content_patch": c["persistence_content"], "content_full": c["persistence_content_full"]})
    return out


def gate_stats(rows: Sequence[Dict], key: str) -> Dict[str, float]:
    """PACG's batch z-gate (defaults) over the claims with a value under ``key``: flagged share, mean gain of the
    flagged, flagged share among supported and unsupported claims."""
    import torch

    from mmrl.algos.pacg_gate import persistence_gate

    rs = [r for r in rows if not math.isnan(r[key])]
    if not rs:
        return {"claims": 0.0}
    g = persistence_gate(torch.tensor([r[key] for r in rs], dtype=torch.float64))
    fl = g.flagged.tolist()
    def share(sel):  # flagged share among the claims ``sel`` picks; nan when there are none
        n = sum(1 for r in rs if sel(r))
        return sum(f for f, r in zip(fl, rs) if sel(r)) / n if n else float("nan")
    return {"claims": float(len(rs)), "flagged": sum(fl) / len(rs), "at_one": sum(r[key] >= 0.999 for r in rs) / len(rs),
            "gain_flagged": float(g.gain[g.flagged].mean()) if any(fl) else float("nan"),
            "flagged_supported": share(lambda r: r["supported"] is True),
            "flagged_unsupported": share(lambda r: r["supported"] is False)}


def mean_ci(xs: Sequence[float]) -> Tuple[float, float, float]:
    return ci95([x for x in xs if not math.isnan(x)])


def diff_ci(a: Sequence[float], b: Sequence[float]) -> Tuple[float, float, float]:
    """mean(a) − mean(b) with a 95% Welch interval (two independent samples of claims)."""
    a, b = [x for x in a if not math.isnan(x)], [x for x in b if not math.isnan(x)]
    if len(a) < 2 or len(b) < 2:
        return float("nan"), float("nan"), float("nan")
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    d, se = statistics.mean(a) - statistics.mean(b), math.sqrt(va + vb)
    dof = (va + vb) ** 2 / max(va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1), 1e-300)
    h = t975(max(math.floor(dof + 1e-9) + 1, 2)) * se  # t975(n) has n - 1 degrees of freedom (dof floored)
    return d, d - h, d + h


def run_seed(seed: int, args, out: Path) -> Dict:
    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples
    from mmrl.data.synth_claims import claim_content, claim_support
    from mmrl.diagnose.core import diagnose_samples
    from mmrl.models.loading import load_model, load_processor
    from mmrl.train.rl_trainer import RLTrainer
    from mmrl.train.sft import run_sft
    from mmrl.views.patch_transforms import FULL_MASK, VPPO_PATCH

    t0, plan, world = time.time(), seed_plan(seed), out / "world"
    if not (world / "val.json").exists():
        make_world(world, args, plan.world_seed)
    data = data_overrides(world, args)
    sft_cfg = load_config(None, data + [f"model.path={args.model}", f"train.seed={plan.sft_seed}", f"train.out_dir={out / 'sft'}",
                                        f"sft.steps={args.sft_steps}", "sft.batch_size=32", f"sft.lr={args.sft_lr}"])
    longest = check_trace_room(args.max_new_tokens, trace_lengths(world / "train.json", load_processor(args.model).tokenizer))
    sft_path = out / "sft" / "final"
    t = time.time()
    if not (sft_path / "config.json").exists():
        log(f"[seed {seed}] SFT {args.sft_steps} steps from base on {args.n_train} traces (longest {longest} tokens)")
        run_sft(sft_cfg, quiet=True, overwrite=True)
        sft_min = (time.time() - t) / 60
    else:  # reused: the earlier run's SFT minutes
        prev = out / "preflight.json"
        sft_min = json.loads(prev.read_text())["minutes"]["sft"] if prev.exists() else float("nan")
    log(f"[seed {seed}] SFT ready ({sft_min:.1f} min)")

    t = time.time()
    samples, _ = load_samples(str(world / "test.json"), str(world))
    model, proc = load_model(str(sft_path)), load_processor(str(sft_path))
    kw = dict(max_new_tokens=args.max_new_tokens, labeler=claim_support, extractor=claim_content,
              also={"full": FULL_MASK})
    recs = diagnose_samples(model, proc, samples, sft_cfg.data, VPPO_PATCH, seed=plan.rl_seed, **kw)
    # what RL trains on: one response per test image sampled at temperature 1 (the rollout's), same re-scoring
    sampled = diagnose_samples(model, proc, samples, sft_cfg.data, VPPO_PATCH, seed=plan.rl_seed + 1, greedy=False,
                               temperature=float(sft_cfg.rollout.temperature), **kw)
    del model
    diag_min = (time.time() - t) / 60
    per_type: Dict[str, List[float]] = {}
    for r in recs:
        per_type.setdefault(r["qtype"], []).append(float(r["correct"]))
    rows, rows_s = claim_rows(recs), claim_rows(sampled)
    log(f"[seed {seed}] diagnosis of {len(recs)} greedy and {len(sampled)} sampled responses, {len(rows)} and "
        f"{len(rows_s)} claims ({diag_min:.1f} min)")

    t = time.time()
    val, _ = load_samples(str(world / "val.json"), str(world))
    rl_cfg = load_config(None, data + [
        f"model.path={sft_path}", f"train.seed={plan.rl_seed}", f"train.out_dir={out / 'rl'}", f"rollout.n={args.group_size}",
        f"train.prompts_per_step={len(val)}", "algorithm.name=pacg", "algorithm.clip_high=0.28",
        f"algorithm.params={{persistence: {args.persistence}, claim_extractor: '{EXTRACTOR}', "
        f"intervention: {'full_mask' if args.intervention == 'full' else 'patch_mask'}, "
        f"base: {{name: dapo, params: {{{_DAPO}}}}}}}"])
    groups = sample_groups(RLTrainer(rl_cfg, quiet=True), val)
    roll_min = (time.time() - t) / 60
    rec = {"seed": seed, "plan": [plan.world_seed, plan.sft_seed, plan.rl_seed], "test": str(world / "test.json"),
           "per_qtype": {q: sum(v) / len(v) for q, v in sorted(per_type.items())},
           "claims": {"greedy": rows, "sampled": rows_s}, "sampled_accuracy": sum(r["correct"] for r in sampled) / len(sampled),
           "truncated": {"greedy": [r["truncated"] for r in recs], "sampled": [r["truncated"] for r in sampled]},
           "lengths": {"greedy": [r["length"] for r in recs], "sampled": [r["length"] for r in sampled]},
           "groups": vars(groups), "longest_trace": longest, "sft_steps": args.sft_steps, "sft_lr": args.sft_lr,
           "max_new_tokens": args.max_new_tokens, "minutes": {"sft": sft_min, "diagnose": diag_min, "rollout": roll_min,
                                                               "total": (time.time() - t0) / 60}}
    (out / "preflight.json").write_text(json.dumps(rec, indent=1))
    log(f"[seed {seed}] done ({rec['minutes']['total']:.1f} min)")
    return rec


def mechanism_stats(rec: Dict, persistence: str, intervention: str) -> Dict[str, float]:
    """The gate on the sampled responses' claims (what RL trains on) and the truncation shares."""
    g = gate_stats(rec["claims"]["sampled"], f"{persistence}_{intervention}")
    flat = [x for grp in rec["groups"]["truncated"] for x in grp]
    share = lambda xs: sum(xs) / max(len(xs), 1)  # noqa: E731
    return {"flagged": g.get("flagged", float("nan")), "gain_flagged": g.get("gain_flagged", float("nan")),
            "flagged_unsup": g.get("flagged_unsupported", float("nan")),
            "flagged_sup": g.get("flagged_supported", float("nan")),
            "trunc_groups": share(flat), "trunc_sampled": share(rec["truncated"]["sampled"]),
            "trunc_greedy": share(rec["truncated"]["greedy"])}


def can_act(s: Dict[str, float]) -> Tuple[bool, str]:
    if math.isnan(s["flagged"]):
        return False, "no claim to gate"
    if not s["flagged"] >= MIN_FLAGGED:
        return False, f"the gate flags {100 * s['flagged']:.1f}% of the claims (< {100 * MIN_FLAGGED:.0f}%)"
    if not s["gain_flagged"] <= MAX_GAIN:
        return False, f"flagged claims keep {s['gain_flagged']:.3f} of their credit (> {MAX_GAIN})"
    return True, "ok"


def pacg_lines(recs: Sequence[Dict], source: str) -> List[str]:
    """The gate on each (persistence, intervention) pair and the persistence of unsupported vs supported claims, on
    the claims of the ``source`` responses (``sampled`` or ``greedy``)."""
    what = {"sampled": "one response per test image sampled at temperature 1, what RL trains on",
            "greedy": "greedy test responses"}[source]
    lines = [f"## PACG's gate on the SFT start: {source} ({what}; κ = 1, γ = η = 0.5, statistics over all claims)",
             "", "Claims per seed: " + ", ".join(
                 f"seed {r['seed']} {len(r['claims'][source])} ({sum(c['supported'] is False for c in r['claims'][source])} "
                 f"unsupported)" for r in recs) + ".", "",
             "| seed | persistence | intervention | claims | P >= 0.999 % | flagged % | gain of flagged "
             "| flagged % of supported | flagged % of unsupported |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    agg: Dict[Tuple[str, str], Dict[str, List[float]]] = {}
    for rec in recs:
        for p in PERSISTENCES:
            for iv in INTERVENTIONS:
                g = gate_stats(rec["claims"][source], f"{p}_{iv}")
                for k, v in g.items():
                    agg.setdefault((p, iv), {}).setdefault(k, []).append(v)
                c = lambda k, sc=100.0, d=1: "—" if math.isnan(g.get(k, math.nan)) else f"{sc * g[k]:.{d}f}"  # noqa: E731
                lines.append(f"| {rec['seed']} | {p} | {iv} | {g.get('claims', 0):.0f} | {c('at_one')} | {c('flagged')} "
                             f"| {c('gain_flagged', 1.0, 3)} | {c('flagged_supported')} | {c('flagged_unsupported')} |")
    if len(recs) > 1:
        for (p, iv), g in agg.items():
            def f(k, sc=100.0, d=1):
                m, lo, hi = ci95([x for x in g[k] if not math.isnan(x)])
                return "—" if math.isnan(m) else (f"{sc * m:.{d}f}" if math.isnan(lo) else
                                                  f"{sc * m:.{d}f} [{sc * lo:.{d}f}, {sc * hi:.{d}f}]")
            lines.append(f"| mean [95% CI over seeds] | {p} | {iv} | {statistics.mean(g['claims']):.0f} | {f('at_one')} | "
                         f"{f('flagged')} | {f('gain_flagged', 1.0, 3)} | {f('flagged_supported')} | "
                         f"{f('flagged_unsupported')} |")
    lines += ["", "Persistence of unsupported vs supported claims (mean [95% CI over claims]; difference: Welch):", "",
              "| seed | persistence | intervention | unsupported (n) | supported (n) | unsupported − supported |",
              "|---|---|---|---|---|---|"]
    fm = lambda t: "{:.3f} [{:.3f}, {:.3f}]".format(*t)  # noqa: E731
    per_seed: Dict[Tuple[str, str], List[Tuple[float, float]]] = {}
    for rec in recs:
        for p in PERSISTENCES:
            for iv in INTERVENTIONS:
                k = f"{p}_{iv}"
                u = [r[k] for r in rec["claims"][source] if r["supported"] is False and not math.isnan(r[k])]
                s = [r[k] for r in rec["claims"][source] if r["supported"] is True and not math.isnan(r[k])]
                per_seed.setdefault((p, iv), []).append((mean_ci(u)[0], mean_ci(s)[0]))
                lines.append(f"| {rec['seed']} | {p} | {iv} | {fm(mean_ci(u))} ({len(u)}) | {fm(mean_ci(s))} ({len(s)}) "
                             f"| {fm(diff_ci(u, s))} |")
    if len(recs) > 1:  # the seeds' means: a t-interval over seeds (each its own world and SFT start)
        for (p, iv), ms in per_seed.items():
            lines.append(f"| mean [95% CI over seeds] | {p} | {iv} | {fm(ci95([m[0] for m in ms]))} | "
                         f"{fm(ci95([m[1] for m in ms]))} | {fm(ci95([m[0] - m[1] for m in ms]))} |")
    return lines + [""]


def test_items(rec: Dict) -> List[Tuple[str, int]]:
    """(question type, number of candidates) per test item: kept in the record (``test_items``) or read from the
    world's ``test.json``."""
    if "test_items" in rec:
        return [tuple(x) for x in rec["test_items"]]
    return [(it["qtype"], len(it["candidates"])) for it in json.loads(Path(rec["test"]).read_text())]


def preflight_of(rec: Dict, mech: Mechanism):
    """``build_preflight`` of one seed's record (chance per type from its test items)."""
    from types import SimpleNamespace

    samples = [SimpleNamespace(qtype=q, is_choice=True, candidates=[None] * k) for q, k in test_items(rec)]
    return build_preflight(rec["seed"], rec["per_qtype"], samples, Groups(**rec["groups"]), ks=(1, 4, 8),
                           mechanism=mech, context={"rec": rec})


def mechanism(persistence: str, intervention: str) -> Mechanism:
    return Mechanism(f"PACG ({persistence}, {intervention})",
                     lambda ctx: mechanism_stats(ctx["rec"], persistence, intervention), can_act)


def render(recs: Sequence[Dict], proto, args) -> Results:
    res = Results(proto, "PACG pre-flight on the base (no RL)")
    if args.render_only:
        res.add([f"Rendered from the per-seed records `{args.out}/seed<S>/preflight.json`, written by this command "
                 "without `--render-only`.", ""])
    res.add([f"Per seed: the claims world with prior-driven unsupported claims (56 px, {args.n_train} train traces, "
             f"{proto.n_val} validation prompts, {proto.n_test} test images), SFT {recs[0]['sft_steps']} steps at lr "
             f"{recs[0]['sft_lr']:g} from `model.path={args.model}`; max new tokens {recs[0]['max_new_tokens']} (longest SFT "
             f"trace: " + ", ".join(f"seed {r['seed']} {r['longest_trace']}" for r in recs) + " tokens). Minutes per "
             "seed (SFT / diagnosis, greedy and sampled / sampled groups): " + ", ".join(
                 f"seed {r['seed']} {r['minutes']['sft']:.1f} / {r['minutes']['diagnose']:.1f} / "
                 f"{r['minutes']['rollout']:.1f}" for r in recs) + ".", ""])
    mech = mechanism(args.persistence, args.intervention)
    pfs = [preflight_of(r, mech) for r in recs]
    res.add(preflight_lines(pfs, mech.name))
    res.add(["Sampled accuracy (temperature 1, one response per test image): " + ", ".join(
        f"seed {r['seed']} {100 * r['sampled_accuracy']:.1f}%" for r in recs) + "; truncated responses (greedy / "
        "sampled / groups) are in the mechanism table (`trunc_*`).", ""])
    res.add(pacg_lines(recs, "sampled"))
    res.add(pacg_lines(recs, "greedy"))
    blocked = [pf for pf in pfs if not pf.can_act]
    res.add(["## Can PACG act?", "", f"{mech.name}: can act on seed(s) {[pf.seed for pf in pfs if pf.can_act]}"
             + (f"; cannot on {[pf.seed for pf in blocked]}: " + "; ".join(f"seed {pf.seed}: {pf.reason}"
                                                                          for pf in blocked) if blocked else "")
             + f" (rule: flagged >= {100 * MIN_FLAGGED:.0f}% of the claims at a mean gain <= {MAX_GAIN}).", ""])
    return res


MARK = "<!-- end of the section written by bench/pacg_preflight.py; everything below is earlier -->"


def write_top(path: Path, text: str, mark: str = MARK) -> Path:
    """Write ``text`` as the top section of ``path``: it replaces the section an earlier run wrote (above ``mark``)
    and keeps everything below; a file without the mark is kept whole below it."""
    path = Path(path)
    old = path.read_text() if path.exists() else ""
    rest = old.split(mark, 1)[1].lstrip("\n") if mark in old else old
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n\n" + mark + ("\n\n" + rest if rest else "\n"))
    return path


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_protocol_args(ap, n_test=512, n_val=64)
    ap.add_argument("--model", default="base", help="the SFT's start (model.path; tests use the tiny model)")
    ap.add_argument("--n-train", type=int, default=1024)
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--sft-lr", type=float, default=3e-4)
    ap.add_argument("--max-new-tokens", type=int, default=128,
                    help="above the 50-token traces; at 64 and 96, 5.7%% (seed 0) and 5.3%% (seed 2) of the sampled "
                         "responses were cut")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--persistence", choices=PERSISTENCES, default="content")
    ap.add_argument("--intervention", choices=INTERVENTIONS, default="full")
    ap.add_argument("--out", default="runs/pacg_preflight")
    ap.add_argument("--render-only", action="store_true", help="render OUT/seed<S>/preflight.json of every seed")
    ap.add_argument("--report", help="write the results as the top section of this file (docs/results/pacg.md), "
                                     "replacing an earlier run's section and keeping what is below it")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    proto = protocol_from_args(args, "bench/pacg_preflight.py", argv)
    out = Path(args.out)
    recs = [json.loads((out / f"seed{s}" / "preflight.json").read_text()) if args.render_only
            else run_seed(s, args, out / f"seed{s}") for s in proto.seeds]
    failed = []  # the 5% rule, on the sampled groups and on the diagnosed responses
    for r in recs:
        checks = [([x for g in r["groups"]["truncated"] for x in g], "sampled responses (groups)")]
        checks += [(r["truncated"][src], f"{src} test responses") for src in ("sampled", "greedy")]
        for flags, what in checks:
            try:
                check_truncation(flags, r["max_new_tokens"], what=what)
            except ProtocolError as e:
                failed.append(f"seed {r['seed']}: {e}")
    res = render(recs, proto, args)
    if failed:  # the pre-flight is still written, under the failure, as stop_if_cannot_act does
        res.sections.insert(0, ["## FAILED: the 5% truncation rule (`_preflight.check_truncation`)", ""]
                            + [f"- {f}" for f in failed] + [""])
    text = res.render()
    print(text, end="", flush=True)
    if args.report:
        write_top(Path(args.report), text)
    if failed:
        raise ProtocolError(failed[0])
    return text


if __name__ == "__main__":
    main()
