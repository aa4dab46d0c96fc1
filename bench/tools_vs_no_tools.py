"""Tools against no tools on the seek world (issue 11): held-out accuracy of
(a) GRPO without tools on the overview, (b) GRPO with ``tools/video_seek.yaml``, (c) rectified bootstrapping
(``mmrl rectify``: (b)'s run, then rectify -> multi-turn SFT -> RL, the SFT setting (lr x steps x teacher mix)
chosen by accuracy on a validation split of training clips no stage trains on, ``rectify.val``,
``mmrl.tools.rectify_select``), (b') its control (``rectify.control``: the same SFT grid, choice and RL from (b)'s
run on the teacher scripts of the samples (c) rewrote, no rectification; (c) - (b') isolates rectification), each
from an SFT warm-up of the same budget
(teacher episodes for the tool arms, the overview's answers for (a)), with tool-call validity, calls per
episode, seek IoU and tokens per episode, per seed and mean ± 95% CI. The overview alone is checked against
chance (mean 1 / number of options of the test questions).

    OMP_NUM_THREADS=1 .venv/bin/python bench/tools_vs_no_tools.py [--seeds 0 1 2] [--out runs/tools_vs_no_tools]

Writes ``bench/results/tools_vs_no_tools.md`` (with this command line) and ``<out>/results_seed<S>.json``; a seed
whose results file exists is read instead of rerun, so seeds can run as separate processes (``--seeds 1``) and
one last call with all of them prints the table.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
REPO = Path(__file__).resolve().parent.parent
SUITE = str(REPO / "tools" / "video_seek.yaml")
ARMS = ("a", "b", "b2", "c")
ARM_LABEL = {"a": "(a) GRPO, no tools (overview)", "b": "(b) GRPO + video_seek",
             "b2": "(b') control: (c)'s SFT grid on teacher scripts, no rectification", "c": "(c) rectified bootstrapping"}


def base_overrides(args, world: dict, out: Path, seed: int) -> list:
    from mmrl.models.tiny import ensure_tiny_model

    return [f"model.path={args.model or ensure_tiny_model()}", f"data.train={world['train']}", f"data.test={world['test']}",
            "data.nframes=4", "data.max_pixels=3136", f"train.seed={seed}", "train.num_threads=1",
            f"train.out_dir={out}", f"train.steps={args.rl_steps}", f"train.prompts_per_step={args.prompts}",
            f"rollout.n={args.n}", "train.micro_batch=16", f"train.lr={args.rl_lr}", f"sft.batch_size={args.sft_batch}",
            f"sft.lr={args.sft_lr}", "train.eval_every=0"]


TOOL_TOKENS = 96  # a turn: the teacher's seek call is about 80 tokens of the tiny tokenizer
PLAIN = ["rollout.max_new_tokens=4"]


def suite_file(prompt: str, out: Path) -> str:
    """``tools/video_seek.yaml`` with its system-turn tool list rendered as ``prompt`` (``full`` or ``compact``):
    the file itself if it already says so, else a copy under ``out`` with only ``prompt`` changed."""
    from omegaconf import OmegaConf

    raw = OmegaConf.load(SUITE)
    if raw.get("prompt", "full") == prompt:
        return SUITE
    raw.prompt = prompt
    path = out / f"video_seek_{prompt}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(raw, path)
    return str(path)


def tool_cfg(ov, suite: str, *extra):
    from mmrl.config import RewardConfig, load_config

    tools = ["rollout.agent_loop=multi_turn", f"rollout.tools={suite}", f"rollout.max_new_tokens={TOOL_TOKENS}"]
    cfg = load_config([], ov + tools + list(extra))
    cfg.rewards = [RewardConfig("accuracy", 1.0), RewardConfig("seek_iou", 0.5), RewardConfig("tool_format", 0.1)]
    return cfg


def eval_tools(model_path, cfg) -> dict:
    from mmrl.data.annotations import load_samples
    from mmrl.models.loading import load_model, load_processor
    from mmrl.tools.evaluate import evaluate_tool_episodes

    samples, errors = load_samples(cfg.data.test, cfg.data.media_root, on_error="skip")
    model = load_model(model_path).eval()
    return evaluate_tool_episodes(model, load_processor(model_path), samples, cfg.data, cfg.rollout.tools, TOOL_TOKENS,
                                  load_errors=errors)


def eval_plain(model_path, cfg, out: Path) -> dict:
    """Greedy single-turn accuracy (``mmrl.eval.synthetic``) and tokens per episode (prompt + answer)."""
    from mmrl.data.annotations import load_samples
    from mmrl.eval.synthetic import evaluate_samples
    from mmrl.models.loading import load_model, load_processor
    from mmrl.rollout.step_inputs import build_step_inputs

    samples, errors = load_samples(cfg.data.test, cfg.data.media_root, on_error="skip")
    proc = load_processor(model_path)
    preds = out / "predictions.jsonl"
    res = evaluate_samples(load_model(model_path).eval(), proc, samples, cfg.data, max_new_tokens=4,
                           predictions_path=str(preds), load_errors=errors)
    si = build_step_inputs(samples, proc, cfg.data, lambda role, n_views: 1, None, seed=0)
    rows = [json.loads(x) for x in preds.read_text().splitlines()]
    answer = sum(len(proc.tokenizer.encode(r.get("response", ""), add_special_tokens=False)) + 1 for r in rows)
    prompt = sum(r.inputs.num_tokens for r in si.requests)
    return {**res, "call_validity": float("nan"), "calls_per_episode": 0.0, "seek_iou": 0.0, "seek_hit": 0.0,
            "tokens_per_episode": (prompt + answer) / max(len(rows), 1)}


def teacher_tokens(world: Path, model: str, limit: int = 32) -> dict:
    """Tokens per episode (prompt, model turns, tool responses) of the first ``limit`` train teacher scripts
    replayed through the suite's loop (``mmrl.tools.turn_sft.replay``, no model) with the full and the compact
    tool list: what ``prompt`` changes, on the same episodes."""
    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples
    from mmrl.models.loading import load_processor
    from mmrl.rollout.step_inputs import build_step_inputs
    from mmrl.tools.suite import load_suite
    from mmrl.tools.turn_sft import read_scripts, replay

    proc = load_processor(model)
    samples = load_samples(str(world / "train.json"))[0][:limit]
    scripts = {r["id"]: r["turns"] for r in read_scripts(str(world / "teacher.jsonl"))}
    data = load_config([], ["data.nframes=4", "data.max_pixels=3136"]).data
    si = build_step_inputs(samples, proc, data, lambda role, n_views: 1, None, seed=0)
    out = {}
    for prompt in ("full", "compact"):
        trajs = replay(proc, load_suite(suite_file(prompt, world)), si.requests, [scripts[r.sample_id] for r in si.requests])
        out[prompt] = sum(t.prompt_ids.numel() + t.response_ids.numel() for t in trajs) / len(trajs)
    return out


def run_seed(args, seed: int) -> dict:
    from mmrl.config import load_config
    from mmrl.data.synth_seek import make_seek_world
    from mmrl.tools.rectify_pipeline import run_pipeline
    from mmrl.train.rl_trainer import RLTrainer
    from mmrl.train.sft import run_sft

    root = Path(args.out) / f"seed{seed}"
    t0 = time.time()
    # deterministic given the seed; the val clips continue the train stream (train and test do not depend on n_val)
    world = make_seek_world(str(root / "world"), args.n_train, args.n_test, seed=seed, n_val=args.n_val,
                            teacher_seek=args.teacher_seek, time_in_question=args.time_in_question,
                            fixed_options=args.fixed_options)
    suite = suite_file(args.prompt, Path(args.out))
    ov = lambda name: base_overrides(args, world, root / name, seed)  # noqa: E731
    warm = f"sft.steps={args.sft_steps}"
    # a stage whose final model exists is kept (an interrupted seed continues where it stopped)
    if not (root / "sft_tools" / "final").exists():
        run_sft(tool_cfg(ov("sft_tools"), suite, warm, f"sft.turns={world['teacher']}"), quiet=True, overwrite=True)
    if not (root / "sft_plain" / "final").exists():
        run_sft(load_config([], ov("sft_plain") + PLAIN + [warm]), quiet=True, overwrite=True)
    out = {"seed": seed, "chance": None}
    out["sft_plain"] = eval_plain(str(root / "sft_plain" / "final"), load_config([], ov("x") + PLAIN), root / "sft_plain")
    out["sft_tools"] = eval_tools(str(root / "sft_tools" / "final"), tool_cfg(ov("x"), suite))
    a = load_config([], ov("a") + PLAIN + [f"model.path={root / 'sft_plain' / 'final'}"])
    if not (root / "a" / "final").exists():
        RLTrainer(a, quiet=True).run(overwrite=True)
    out["a"] = eval_plain(str(root / "a" / "final"), a, root / "a")
    # (b) is the pipeline's first RL stage: (c) continues from it (rectify -> SFT -> RL)
    c = tool_cfg(ov("c"), suite, f"model.path={root / 'sft_tools' / 'final'}", f"sft.steps={args.rectify_sft_steps}",
                 *select_overrides(args, world))
    out["rectify"] = run_pipeline(c, quiet=True, say=lambda _: None, seek=args.teacher_seek)
    out["b"] = eval_tools(out["rectify"]["rl1"] + "/final", c)
    out["c"] = eval_tools(out["rectify"]["final"], c)
    if "control" in out["rectify"]:
        out["b2"] = eval_tools(out["rectify"]["control"]["final"], c)
    from mmrl.data.annotations import load_samples

    test, _ = load_samples(world["test"])
    out["chance"] = sum(1 / len(s.candidates) for s in test) / len(test)
    out["minutes"] = (time.time() - t0) / 60
    return out


def select_overrides(args, world: dict) -> list:
    """The ``rectify.*`` keys of (c) and (b'): candidates chosen on the world's val split (none without
    ``--n-val``), and the control (b') unless ``--no-control``."""
    control = [f"rectify.teacher={world['teacher']}", "rectify.control=true"] if args.control else []
    if not args.n_val:
        return control
    grid = [f"rectify.val={world['val']}", f"rectify.lr=[{','.join(map(str, args.rectify_lrs))}]",
            f"rectify.steps=[{','.join(map(str, args.rectify_steps))}]",
            f"rectify.teacher_mix=[{','.join(map(str, args.rectify_mix))}]"]
    mix = any(m > 0 for m in args.rectify_mix) and not args.control
    return grid + control + ([f"rectify.teacher={world['teacher']}"] if mix else [])


def fmt_num(xs: list) -> str:
    """Mean [95% t-interval] with two decimals (counts and IoUs), ``bpo_table.fmt_ci`` on the raw scale."""
    from bpo_table import fmt_ci

    return fmt_ci(xs, scale=1.0, digits=2)


def table(results: list, cmd: str, args) -> str:
    from bpo_table import fmt_ci

    rect = (f"SFT setting chosen by accuracy on {args.n_val} validation clips (the train stream's next clips; no stage "
            f"trains on them) among lr {args.rectify_lrs} x steps {args.rectify_steps} x teacher scripts per "
            f"rectified sample {args.rectify_mix}" if args.n_val else f"{args.rectify_sft_steps} SFT steps")
    cols = [("accuracy", "held-out acc %", 100), ("call_validity", "call validity %", 100),
            ("calls_per_episode", "calls / episode", 1), ("seek_iou", "seek IoU", 1), ("seek_hit", "IoU > 0 %", 100),
            ("tokens_per_episode", "tokens / episode", 1)]
    rows = ["| arm | " + " | ".join(c[1] for c in cols) + " | per-seed acc % |", "|" + "---|" * (len(cols) + 2)]
    for arm, lab in [("sft_plain", "SFT warm-up, overview (no RL)"), ("sft_tools", "SFT warm-up, teacher episodes (no RL)")] + \
            [(a, ARM_LABEL[a]) for a in arms_of(results)]:
        cells = []
        for key, _, scale in cols:
            xs = [r[arm][key] for r in results]
            cells.append(fmt_ci(xs, scale=100.0) if scale == 100 else fmt_num(xs))
        per = ", ".join(f"{100 * r[arm]['accuracy']:.1f}" for r in results)
        rows.append(f"| {lab} | " + " | ".join(cells) + f" | {per} |")
    chance = [100 * r["chance"] for r in results]
    lines = [f"Command: `{cmd}`", "",
             f"Scale: tiny Qwen2.5-VL (random init), seek world {args.n_train} train / {args.n_test} test clips of 32 s "
             f"at 4 fps (flash 0.5 s), overview 4 frames; question "
             f"{'naming the 2 s window that holds the flash' if args.time_in_question else 'without a time'}, "
             f"{'all 4 colours as options in fixed order' if args.fixed_options else 'balanced options'}; tool list "
             f"`prompt: {args.prompt}`, teacher and rectified seeks `{args.teacher_seek}`; SFT warm-up {args.sft_steps} steps x {args.sft_batch}; "
             f"GRPO {args.rl_steps} steps x {args.prompts} prompts x {args.n}; (c): (b)'s run, rectify, {rect}, "
             f"{args.rl_steps} more GRPO steps" + ("; (b'): the same from (b)'s run on the teacher scripts of the samples "
                                                   "(c) rewrote, no rectification" if "b2" in arms_of(results) else "") +
             f". Seeds {args.seeds}; mean with 95% "
             f"t-interval over seeds. Chance (1 / options, test): " + ", ".join(f"{x:.1f}%" for x in chance) + ".", ""]
    tt = {k: [r["teacher_tokens"][k] for r in results] for k in ("full", "compact")}
    lines += rows + ["", "Tokens per teacher episode (32 train scripts replayed, no model), tool list `prompt: full` "
                     f"{fmt_num(tt['full'])} against `prompt: compact` {fmt_num(tt['compact'])}.", ""]
    for r in results:
        diff_b, diff_c = 100 * (r["b"]["accuracy"] - r["a"]["accuracy"]), 100 * (r["c"]["accuracy"] - r["a"]["accuracy"])
        rc = r["rectify"]
        lines.append(f"- seed {r['seed']}: (b) - (a) {diff_b:+.1f} pp, (c) - (a) {diff_c:+.1f} pp; rectify rewrote "
                     f"{rc['rewritten']} of {rc['episodes']} episodes (wrong answer {rc['wrong_answer']}, IoU 0 "
                     f"{rc['no_evidence']}, both {rc['both']}, duplicates {rc['duplicates']}, turns kept "
                     f"{rc['turns_kept']}, dropped {rc['turns_dropped']}); {r['minutes']:.1f} min")
    lines += selection_lines(results)
    return "\n".join(lines)


def arms_of(results: list) -> list:
    """The arms every seed's results hold ((b') only where the control ran)."""
    return [a for a in ARMS if all(a in r for r in results)]


def selection_lines(results: list) -> list:
    """(c) - (a) and (c) - (b) per seed with the 95% interval over seeds, and the setting each seed's validation
    split chose (``select.json``: every candidate's validation accuracy, and (b)'s own as the reference)."""
    from bpo_table import fmt_ci

    ca = [r["c"]["accuracy"] - r["a"]["accuracy"] for r in results]
    cb = [r["c"]["accuracy"] - r["b"]["accuracy"] for r in results]
    lines = ["", f"(c) - (a): {fmt_ci(ca, signed=True)} pp (per seed " + ", ".join(f"{100 * x:+.1f}" for x in ca) +
             f"); (c) - (b): {fmt_ci(cb, signed=True)} pp (per seed " + ", ".join(f"{100 * x:+.1f}" for x in cb) + ")."]
    if "b2" in arms_of(results):
        cc = [r["c"]["accuracy"] - r["b2"]["accuracy"] for r in results]
        lines.append(f"(c) - (b'), what rectification adds over the same SFT grid on teacher scripts: "
                     f"{fmt_ci(cc, signed=True)} pp (per seed " + ", ".join(f"{100 * x:+.1f}" for x in cc) + ").")
    for r in results:
        for arm, sel in (("(c)", r["rectify"].get("selection")), ("(b')", r["rectify"].get("control", {}).get("selection"))):
            if not sel:
                continue
            cands = ", ".join(f"{c['tag']} {100 * c['val']['accuracy']:.1f}" for c in sel["candidates"])
            lines.append(f"- seed {r['seed']}: {arm} chose `{sel['chosen']}` on {sel['n_val']} validation clips; "
                         f"validation acc %: (b) {100 * sel['reference']['val']['accuracy']:.1f}; candidates {cands}")
    return lines


def main(argv=None) -> str:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="initial checkpoint (default: the embedded tiny model)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="runs/tools_vs_no_tools")
    ap.add_argument("--n-train", type=int, default=256)
    ap.add_argument("--n-test", type=int, default=96)
    ap.add_argument("--sft-steps", type=int, default=600)
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--rl-steps", type=int, default=4)
    ap.add_argument("--rl-lr", type=float, default=1e-4)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--rectify-sft-steps", type=int, default=10, help="(c)'s SFT steps without --n-val")
    ap.add_argument("--n-val", type=int, default=64,
                    help="validation clips (the train stream's next clips, no stage trains on them) choosing (c)'s "
                         "SFT setting; 0: --rectify-sft-steps at --sft-lr on the rectified scripts alone")
    ap.add_argument("--rectify-lrs", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3])
    ap.add_argument("--rectify-steps", type=int, nargs="+", default=[10, 30])
    ap.add_argument("--rectify-mix", type=float, nargs="+", default=[0.0, 1.0],
                    help="teacher scripts per rectified sample mixed into (c)'s SFT set")
    ap.add_argument("--control", action=argparse.BooleanOptionalAction, default=True,
                    help="run (b'): (c)'s SFT grid and RL on the teacher scripts of the samples (c) rewrote")
    ap.add_argument("--prompt", choices=["full", "compact"], default="compact",
                    help="the suite's system-turn tool list (tools/video_seek.yaml's `prompt`)")
    ap.add_argument("--teacher-seek", choices=["whole", "exact"], default="whole",
                    help="how the teacher's and rectify's seeks name the interval (mmrl.data.seek_script)")
    ap.add_argument("--time-in-question", action=argparse.BooleanOptionalAction, default=True,
                    help="the question names the 2 s window holding the flash (make_seek_world(time_in_question=))")
    ap.add_argument("--fixed-options", action=argparse.BooleanOptionalAction, default=True,
                    help="every question lists all 4 colours in canonical order (make_seek_world(fixed_options=))")
    ap.add_argument("--results", default=str(REPO / "bench" / "results" / "tools_vs_no_tools.md"))
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    cmd = "OMP_NUM_THREADS=1 .venv/bin/python bench/tools_vs_no_tools.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    results = []
    for seed in args.seeds:  # a seed whose results file exists is read, not rerun (seeds may run as separate processes)
        done = Path(args.out) / f"results_seed{seed}.json"
        if not done.exists():
            Path(args.out).mkdir(parents=True, exist_ok=True)
            done.write_text(json.dumps(run_seed(args, seed), indent=2, default=str))
        results.append(json.loads(done.read_text()))
        if "teacher_tokens" not in results[-1]:  # cheap (no model): measured again on the seed's world
            from mmrl.models.tiny import ensure_tiny_model

            results[-1]["teacher_tokens"] = teacher_tokens(Path(args.out) / f"seed{seed}" / "world",
                                                           args.model or ensure_tiny_model())
        r = results[-1]
        print(f"seed {seed}: " + ", ".join(f"{k} {100 * r[k]['accuracy']:.1f}%" for k in ("sft_plain", "sft_tools") + ARMS
                                           if k in r)
              + f" ({r['minutes']:.1f} min)", flush=True)
    text = table(results, cmd, args)
    print(text)
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text("# Tools vs no tools (bench/tools_vs_no_tools.py)\n\n" + text + "\n")
    return text


if __name__ == "__main__":
    main()
