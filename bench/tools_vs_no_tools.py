"""Tools against no tools on the seek world, under the miniature protocol (``docs/miniatures.md``, issues 11 and 28).

Per protocol seed (``seed_plan``: its own world, SFT warm-ups and RL seed), from the tiny base that sees
(``--model base``, ``docs/base_model.md``): a seek world (``make_seek_world``: train, >= 400 test clips, and a
validation split of the train stream's next clips that no stage trains on), two SFT warm-ups of the same budget
(teacher tool episodes; the overview's answers), the pre-flight on the tool warm-up (start vs chance, pass@k, zero
spread, and whether rectification has episodes to rewrite), then the RL setting (lr x KL) chosen on the validation
split by (b)'s true-reward run and used by every arm, and the arms:

- ``sft`` / ``sft_overview``: the two warm-ups, no RL;
- ``coin_flip``: (b) with the ``coin_flip`` reward in place of ``accuracy`` (seek IoU and tool format kept): the control;
- ``a``: GRPO without tools on the overview, from ``sft_overview``;
- ``b``: GRPO with ``tools/video_seek.yaml`` (accuracy, 0.5 seek IoU, 0.1 tool format), from ``sft``;
- ``c``: rectified bootstrapping (``mmrl rectify``: (b)'s run, rectify, multi-turn SFT with the setting (lr x steps x
  teacher mix) chosen on the validation split, ``mmrl.tools.rectify_select``, then as many RL steps again);
- ``b2``: (b'), its control (``rectify.control``): the same SFT grid, choice and RL from (b)'s run on the teacher
  scripts of the samples (c) rewrote, no rectification. (c) - (b') isolates rectification.

    OMP_NUM_THREADS=1 .venv/bin/python bench/tools_vs_no_tools.py [--seeds 0 1 2] [--out runs/tools_vs_no_tools]
        [--prepare-only]   # world, warm-ups and pre-flight of --seeds only (run seeds as separate processes)
        [--only S]         # seed S's selection grid and arms (one process per seed; waits for the others' grids)

Every stage whose output exists is read, not rerun (``<out>/seed<S>/...``, ``preflight_seed<S>.json``,
``selection.json``, ``results_seed<S>.json``), so seeds can be prepared in parallel processes and one last call
with all seeds runs the selection, the arms and writes the results file (default ``docs/results/tools.md``) whole.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
from _preflight import Mechanism, build_preflight, sample_groups, stop_if_cannot_act  # noqa: E402
from _protocol import (Results, SFT_ARM, COIN_ARM, Selection, add_protocol_args, apply_setting,  # noqa: E402
                       arm_val_score, coin_flip_config, pooled_selection, protocol_from_args, seed_plan, setting_lines)

REPO = Path(__file__).resolve().parent.parent
SUITE = str(REPO / "tools" / "video_seek.yaml")
ARM_LABEL = {SFT_ARM: "SFT warm-up, teacher episodes (no RL)", "sft_overview": "SFT warm-up, overview (no RL)",
             COIN_ARM: "coin-flip control: (b) with a coin-flip accuracy reward", "a": "(a) GRPO, no tools (overview)",
             "b": "(b) GRPO + video_seek", "b2": "(b') control: (c)'s SFT grid on teacher scripts, no rectification",
             "c": "(c) rectified bootstrapping"}
TOOL_ARMS = (SFT_ARM, COIN_ARM, "b", "b2", "c")  # the arms that answer with tools (call validity, seek IoU)
PAIRS = [("c", "b2"), ("c", "b"), ("b", "a"), ("b", COIN_ARM), ("b", SFT_ARM), ("a", "sft_overview")]


def base_overrides(args, world: dict, out: Path, seed: int) -> list:
    model = args.model
    if model == "tiny":
        from mmrl.models.tiny import ensure_tiny_model

        model = ensure_tiny_model()
    return [f"model.path={model}", f"data.train={world['train']}", f"data.test={world['test']}",
            "data.nframes=4", "data.max_pixels=3136", f"train.seed={seed}", "train.num_threads=1",
            f"train.out_dir={out}", f"train.steps={args.rl_steps}", f"train.prompts_per_step={args.prompts}",
            f"rollout.n={args.n}", "train.micro_batch=16", f"sft.batch_size={args.sft_batch}",
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


def world_of(args, seed: int) -> dict:
    """The seed's seek world (deterministic in ``seed_plan(seed).world_seed``; the val clips continue the train
    stream, so train and test do not depend on ``--n-val``)."""
    from mmrl.data.synth_seek import make_seek_world

    root = Path(args.out) / f"seed{seed}" / "world"
    if (root / "val.json").exists():
        return {k: str(root / f) for k, f in (("train", "train.json"), ("test", "test.json"), ("val", "val.json"),
                                             ("teacher", "teacher.jsonl"))}
    return make_seek_world(str(root), args.n_train, args.n_test, seed=seed_plan(seed).world_seed, n_val=args.n_val,
                           teacher_seek=args.teacher_seek, time_in_question=args.time_in_question,
                           fixed_options=args.fixed_options)


def warmups(args, seed: int, world: dict) -> dict:
    """The two SFT warm-ups of the same budget (``sft_seed``): teacher tool episodes, and the overview's answers."""
    from mmrl.config import load_config
    from mmrl.train.sft import run_sft

    root, sft_seed = Path(args.out) / f"seed{seed}", seed_plan(seed).sft_seed
    ov = lambda name: base_overrides(args, world, root / name, sft_seed)  # noqa: E731
    warm, suite = f"sft.steps={args.sft_steps}", suite_file(args.prompt, Path(args.out))
    if not (root / "sft_tools" / "final").exists():
        run_sft(tool_cfg(ov("sft_tools"), suite, warm, f"sft.turns={world['teacher']}"), quiet=True, overwrite=True)
    if not (root / "sft_plain" / "final").exists():
        run_sft(load_config([], ov("sft_plain") + PLAIN + [warm]), quiet=True, overwrite=True)
    return {"tools": str(root / "sft_tools" / "final"), "plain": str(root / "sft_plain" / "final")}


def rl_configs(args, seed: int, world: dict, start: dict, sel: Selection | None = None) -> dict:
    """The RL configs of one seed (``rl_seed``), at the selected lr and KL when ``sel`` is given: ``b`` (also the
    pipeline of (c) and (b'), with its rectify grid and control), ``coin_flip`` and ``a``."""
    from mmrl.config import load_config

    root, rl_seed = Path(args.out) / f"seed{seed}", seed_plan(seed).rl_seed
    ov = lambda name: base_overrides(args, world, root / name, rl_seed)  # noqa: E731
    suite = suite_file(args.prompt, Path(args.out))
    cfgs = {"b": tool_cfg(ov("c"), suite, f"model.path={start['tools']}", f"sft.steps={args.rectify_sft_steps}",
                          *select_overrides(args, world)),
            COIN_ARM: coin_flip_config(tool_cfg(ov("coin_flip"), suite, f"model.path={start['tools']}")),
            "a": load_config([], ov("a") + PLAIN + [f"model.path={start['plain']}"])}
    return {k: apply_setting(c, sel) for k, c in cfgs.items()} if sel is not None else cfgs


def rewrite_stats(ctx: dict) -> dict:
    """Rectification's mechanism on the start's sampled episodes: the share it would rewrite (wrong answer or seek
    IoU 0), and the share of groups whose seek IoU differs (where (b)'s seek reward can act)."""
    comps = ctx["groups"].components
    acc = [x for g in comps.get("accuracy", []) for x in g]
    iou_groups = comps.get("seek_iou", [])
    iou = [x for g in iou_groups for x in g]
    if not acc or len(acc) != len(iou):
        return {"rewrite_share": float("nan"), "wrong_share": float("nan"), "iou0_share": float("nan"),
                "iou_spread_groups": float("nan")}
    n = len(acc)
    return {"rewrite_share": sum(1 for a, i in zip(acc, iou) if a <= 0 or i <= 0) / n,
            "wrong_share": sum(1 for a in acc if a <= 0) / n, "iou0_share": sum(1 for i in iou if i <= 0) / n,
            "iou_spread_groups": sum(1 for g in iou_groups if max(g) - min(g) > 1e-9) / len(iou_groups)}


def rewrite_can_act(st: dict) -> tuple:
    share = st.get("rewrite_share", float("nan"))
    if not share == share:
        return False, "no accuracy / seek IoU components in the sampled episodes"
    if share < 0.02:
        return False, f"rectify would rewrite {100 * share:.1f}% of the start's episodes (< 2%): nothing to rectify"
    return True, f"rectify would rewrite {100 * share:.1f}% of the start's episodes"


def start_eval(args, seed: int, start: dict, cfg) -> dict:
    """Greedy tool-episode evaluation of the tool warm-up on the test split, run once per seed and kept in
    ``seed<S>/sft_tools/test_eval.json`` (the pre-flight and the ``sft`` arm both read it)."""
    path = Path(args.out) / f"seed{seed}" / "sft_tools" / "test_eval.json"
    if not path.exists():
        path.write_text(json.dumps(eval_tools(start["tools"], cfg), indent=2, default=str))
    return json.loads(path.read_text())


def preflight_seed(args, seed: int, world: dict, start: dict):
    """The seed's pre-flight (cached in ``preflight_seed<S>.json``): the tool warm-up's greedy test accuracy per type,
    and ``--preflight-groups`` groups of (b)'s rollout on validation prompts."""
    from _preflight import Preflight
    from mmrl.data.annotations import load_samples
    from mmrl.train.rl_trainer import RLTrainer

    path = Path(args.out) / f"preflight_seed{seed}.json"
    if path.exists():
        d = json.loads(path.read_text())
        return Preflight(**{**d, "pass_at": {int(k): v for k, v in d["pass_at"].items()}})
    b = rl_configs(args, seed, world, start)["b"]
    res = start_eval(args, seed, start, b)
    test, _ = load_samples(world["test"])
    val, _ = load_samples(world["val"])
    trainer = RLTrainer(b, quiet=True)
    groups = sample_groups(trainer, val[: args.preflight_groups])
    del trainer
    pf = build_preflight(seed, res["per_qtype"], test, groups, ks=(1, args.n),
                         mechanism=Mechanism("rectification", rewrite_stats, rewrite_can_act))
    path.write_text(json.dumps(pf.__dict__, indent=2))
    return pf


def selection(args, proto, worlds: dict, starts: dict) -> Selection:
    """lr x KL chosen on the validation split by (b)'s true-reward run (``--select-steps`` steps), each seed's score
    per setting cached in ``selection_seed<S>.json`` so an interrupted grid continues. With ``--only S`` this process
    scores seed S's grid, then waits (``--wait-min``) for the other seed processes' files
    (``_protocol.pooled_selection``); the choice is the best mean over seeds, the same for every seed and arm."""
    from _protocol import arm_val_score as score_of

    def cfg_of(s: int):
        c = rl_configs(args, s, worlds[s], starts[s])["b"]
        c.train.out_dir = str(Path(args.out) / f"seed{s}" / "select")
        return c

    def seed_scores(s: int) -> dict:
        path = Path(args.out) / f"selection_seed{s}.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def key(lr: float, kl: float) -> str:
        return f"{lr:g},{kl:g}"

    for s in ([args.only] if args.only is not None else proto.seeds):
        done, path = seed_scores(s), Path(args.out) / f"selection_seed{s}.json"
        if done.get("_select_steps", args.select_steps) != args.select_steps:
            raise SystemExit(f"tools bench: {path} scored the grid after {done['_select_steps']} RL steps, not "
                             f"--select-steps {args.select_steps}: remove it or use another --out")
        done["_select_steps"] = args.select_steps
        for lr in proto.lr_grid:
            for kl in proto.kl_grid:
                if key(lr, kl) not in done:
                    done[key(lr, kl)] = score_of({s: cfg_of(s)}, args.select_steps, {s: worlds[s]["val"]})(lr, kl)
                    path.write_text(json.dumps(done, indent=2))
    return pooled_selection(proto, Path(args.out), args.wait_min, grid_of=seed_scores, key=key,
                            require_all="tools bench")


def run_arms(args, seed: int, world: dict, start: dict, sel: Selection) -> dict:
    """Every arm of one seed at the selected setting (a finished stage is kept); returns the seed's results."""
    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples
    from mmrl.tools.rectify_pipeline import run_pipeline
    from mmrl.train.rl_trainer import RLTrainer

    root, t0 = Path(args.out) / f"seed{seed}", time.time()
    cfgs = rl_configs(args, seed, world, start, sel)
    out = {"seed": seed, "lr": sel.lr, "kl": sel.kl}
    plain_eval = load_config([], base_overrides(args, world, root / "x", 0) + PLAIN)
    out["sft_overview"] = eval_plain(start["plain"], plain_eval, root / "sft_plain")
    out[SFT_ARM] = start_eval(args, seed, start, cfgs["b"])
    for arm in (COIN_ARM, "a"):
        if not (Path(cfgs[arm].train.out_dir) / "final").exists():
            RLTrainer(cfgs[arm], quiet=True).run(overwrite=True)
    out[COIN_ARM] = eval_tools(cfgs[COIN_ARM].train.out_dir + "/final", cfgs["b"])
    out["a"] = eval_plain(cfgs["a"].train.out_dir + "/final", cfgs["a"], root / "a")
    out["rectify"] = run_pipeline(cfgs["b"], quiet=True, say=lambda _: None, seek=args.teacher_seek)
    out["b"] = eval_tools(out["rectify"]["rl1"] + "/final", cfgs["b"])
    out["c"] = eval_tools(out["rectify"]["final"], cfgs["b"])
    if "control" in out["rectify"]:
        out["b2"] = eval_tools(out["rectify"]["control"]["final"], cfgs["b"])
    test, _ = load_samples(world["test"])
    out["chance"] = sum(1 / len(s.candidates) for s in test) / len(test)
    out["teacher_tokens"] = teacher_tokens(Path(world["train"]).parent, start["tools"])
    out["minutes"] = (time.time() - t0) / 60
    return out


def select_overrides(args, world: dict) -> list:
    """The ``rectify.*`` keys of (c) and (b'): candidates chosen on the world's val split, and the control (b')
    unless ``--no-control``."""
    control = [f"rectify.teacher={world['teacher']}", "rectify.control=true"] if args.control else []
    grid = [f"rectify.val={world['val']}", f"rectify.lr=[{','.join(map(str, args.rectify_lrs))}]",
            f"rectify.steps=[{','.join(map(str, args.rectify_steps))}]",
            f"rectify.teacher_mix=[{','.join(map(str, args.rectify_mix))}]"]
    mix = any(m > 0 for m in args.rectify_mix) and not args.control
    return grid + control + ([f"rectify.teacher={world['teacher']}"] if mix else [])


def direction(d: list, claim: str) -> str:
    """The paper's direction for one claim from the paired differences' 95% interval."""
    from bpo_table import ci95

    m, lo, hi = ci95([100 * x for x in d])
    if lo != lo:  # one seed: no interval
        return f"- {claim}: **not resolved** (mean {m:+.1f} points; one seed, no interval)"
    word = "reproduced" if lo > 0 else "reversed" if hi < 0 else "not resolved"
    return f"- {claim}: **{word}** (mean {m:+.1f} points, 95% CI [{lo:+.1f}, {hi:+.1f}])"


def train_curve(run: str | Path, window: int = 10) -> dict:
    """What an RL stage did on its own training prompts (``metrics.jsonl``): the true accuracy (``coin_flip``'s
    logged ``true_accuracy`` for the control) and the share of invalid tool calls, mean over the first and the last
    ``window`` steps; {} when the stage has no metrics."""
    path = Path(run) / "metrics.jsonl"
    if not path.exists():
        return {}
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    key = "reward/coin_flip/true_accuracy" if rows and "reward/coin_flip/true_accuracy" in rows[0] else "reward/accuracy"
    mean = lambda part, k: sum(r.get(k, 0.0) for r in part) / max(len(part), 1)  # noqa: E731
    head, tail = rows[:window], rows[-window:]
    return {"steps": len(rows), "acc_first": mean(head, key), "acc_last": mean(tail, key),
            "invalid_first": mean(head, "tools/invalid_frac"), "invalid_last": mean(tail, "tools/invalid_frac")}


def train_lines(args, results: list) -> list:
    """The RL stages' training curves per seed: did the true reward rise on the training prompts?"""
    stages = {COIN_ARM: "coin_flip", "a": "a", "b": "c/rl1", "c": "c/rl2", "b2": "c/control/rl2"}
    lines = ["## RL on the training prompts (mean of the first / last 10 steps)", "",
             "True accuracy of the sampled responses (the coin-flip arm's true accuracy, not its reward) and the "
             "share of invalid tool calls, per RL stage; (c) and (b') are their second RL stage, after their SFT.", "",
             "| arm | seed | accuracy first → last % | invalid calls first → last % |", "|---|---|---:|---:|"]
    for arm, sub in stages.items():
        for r in results:
            c = train_curve(Path(args.out) / f"seed{r['seed']}" / sub)
            if c:
                inv = "n/a" if arm == "a" else f"{100 * c['invalid_first']:.1f} → {100 * c['invalid_last']:.1f}"
                lines.append(f"| {arm} | {r['seed']} | {100 * c['acc_first']:.1f} → {100 * c['acc_last']:.1f} | {inv} |")
    return lines + [""]


def render(args, proto, results: list, sel: Selection, res: Results) -> None:
    seeds = [r["seed"] for r in results]
    arms = [a for a in ARM_LABEL if all(a in r for r in results)]
    acc = {a: {r["seed"]: r[a]["accuracy"] for r in results} for a in arms}
    chance = ", ".join(f"{100 * r['chance']:.1f}%" for r in results)
    res.add([f"Scale: `{args.model}` model; seek world {args.n_train} train / {args.n_test} test / {args.n_val} "
             f"validation clips of 32 s at 4 fps (a 0.5 s flash of colour the 4-frame overview never samples); the "
             f"question names the 2 s window holding the flash: {args.time_in_question}; fixed option order: "
             f"{args.fixed_options}; tool list `prompt: {args.prompt}`; SFT warm-ups {args.sft_steps} steps x "
             f"{args.sft_batch} at lr {args.sft_lr:g}; GRPO {args.rl_steps} steps x {args.prompts} prompts x {args.n} "
             f"per RL stage; rectify SFT grid lr {args.rectify_lrs} x steps {args.rectify_steps} x teacher mix "
             f"{args.rectify_mix}, chosen on the validation split (the same grid for (b')). Chance (1 / options, "
             f"test): {chance}. A seed's grid and arms run in this process or in its own with the same arguments "
             f"plus `--only S` (records `results_seed<S>.json` under `--out`, read here).", ""])
    res.add(setting_lines(sel))
    res.add(["Arms: " + "; ".join(f"`{a}` {ARM_LABEL[a]}" for a in arms) + ".", ""])
    res.add(res.arms_table("held-out accuracy % (greedy, with tools where the arm has them)", acc))
    tool_arms = [a for a in TOOL_ARMS if a in arms]
    for key, label, scale, which in (("call_validity", "call validity %", 100.0, tool_arms),
                                     ("seek_iou", "seek IoU x 100", 100.0, tool_arms),
                                     ("tokens_per_episode", "tokens per episode", 1.0, arms)):
        res.add(res.arms_table(label, {a: {r["seed"]: r[a][key] for r in results} for a in which}, scale=scale))
    pairs = [(x, y) for x, y in PAIRS if x in arms and y in arms]
    res.add(res.paired_table("held-out accuracy", acc, pairs))
    res.add(train_lines(args, results))
    claims = [("c", "b2", "rectification adds accuracy over the same SFT grid on teacher scripts (AdSeek's rectified "
                          "bootstrapping), (c) - (b')"),
              ("b", "a", "tools help where the overview misses the evidence, (b) - (a)"),
              ("b", COIN_ARM, "(b) learns from the accuracy reward, not from reward noise, (b) - coin flip")]
    res.add(["## The claims, direction per claim", ""]
            + [direction([acc[x][s] - acc[y][s] for s in seeds], claim) for x, y, claim in claims
               if x in acc and y in acc] + [""])
    if args.notes and Path(args.notes).exists():  # a hand-written reading of these tables, named as such
        res.add(["## Reading (written by hand from the tables above, `" + str(args.notes) + "`)", "",
                 Path(args.notes).read_text().strip(), ""])
    lines = ["## Per seed", ""]
    for r in results:
        rc = r["rectify"]
        lines.append(f"- seed {r['seed']}: rectify rewrote {rc['rewritten']} of {rc['episodes']} episodes (wrong "
                     f"answer {rc['wrong_answer']}, IoU 0 {rc['no_evidence']}, both {rc['both']}); (b') trained on "
                     f"{rc.get('control', {}).get('samples', 0)} teacher scripts of the same samples; "
                     f"{r['minutes']:.1f} min")
        for arm, s in (("(c)", rc.get("selection")), ("(b')", rc.get("control", {}).get("selection"))):
            if s:
                cands = ", ".join(f"{c['tag']} {100 * c['val']['accuracy']:.1f}" for c in s["candidates"])
                lines.append(f"  - {arm} chose `{s['chosen']}` on {s['n_val']} validation clips; validation acc %: "
                             f"(b) {100 * s['reference']['val']['accuracy']:.1f}; candidates {cands}")
    tt = {k: [r["teacher_tokens"][k] for r in results] for k in ("full", "compact")}
    from bpo_table import fmt_ci

    lines += ["", f"Tokens per teacher episode (32 train scripts replayed, no model): tool list `prompt: full` "
              f"{fmt_ci(tt['full'], scale=1.0, digits=1)}, `prompt: compact` {fmt_ci(tt['compact'], scale=1.0, digits=1)}.", ""]
    res.add(lines)


def main(argv=None) -> str:
    ap = argparse.ArgumentParser()
    add_protocol_args(ap, n_test=400, n_val=64)
    ap.add_argument("--model", default="base", help="initial checkpoint: base (default), tiny, or a path")
    ap.add_argument("--out", default="runs/tools_vs_no_tools")
    ap.add_argument("--n-train", type=int, default=256)
    ap.add_argument("--sft-steps", type=int, default=600)
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--sft-lr", type=float, default=3e-4)
    ap.add_argument("--rl-steps", type=int, default=20)
    ap.add_argument("--select-steps", type=int, default=10, help="RL steps of each grid point on validation")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--preflight-groups", type=int, default=32, help="validation prompts sampled in the pre-flight")
    ap.add_argument("--rectify-sft-steps", type=int, default=10)
    ap.add_argument("--rectify-lrs", type=float, nargs="+", default=[1e-4, 3e-4])
    ap.add_argument("--rectify-steps", type=int, nargs="+", default=[10, 30])
    ap.add_argument("--rectify-mix", type=float, nargs="+", default=[0.0, 1.0],
                    help="teacher scripts per rectified sample mixed into (c)'s and (b')'s SFT sets")
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
    ap.add_argument("--prepare-only", action="store_true", help="world, warm-ups and pre-flight of --seeds, then stop")
    ap.add_argument("--only", type=int, default=None,
                    help="run seed S's selection grid and arms only (one process per seed); a last call without it renders")
    ap.add_argument("--wait-min", type=float, default=120, help="--only: minutes to wait for the other seeds' grids")
    ap.add_argument("--results", default=str(REPO / "docs" / "results" / "tools.md"))
    ap.add_argument("--notes", help="a markdown file of hand-written reading, printed after the claims")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    proto = protocol_from_args(args, "bench/tools_vs_no_tools.py", argv)
    res = Results(proto, "Tools: video seek, rectified bootstrapping and its control (b')")
    if args.only is not None and args.only not in proto.seeds:
        raise SystemExit(f"tools bench: --only {args.only} is not one of --seeds {proto.seeds}")
    mine = [args.only] if args.only is not None else proto.seeds
    worlds = {s: world_of(args, s) for s in mine}
    starts = {s: warmups(args, s, worlds[s]) for s in mine}
    pfs = [preflight_seed(args, s, worlds[s], starts[s]) for s in mine]
    if args.prepare_only:
        return ""
    if stop_if_cannot_act(pfs, res, args.results, "rectification"):
        return res.render()
    sel = selection(args, proto, worlds, starts)
    results = []
    for s in ([args.only] if args.only is not None else proto.seeds):
        done = Path(args.out) / f"results_seed{s}.json"
        prev = json.loads(done.read_text()) if done.exists() else None
        if prev is None or (prev["lr"], prev["kl"]) != (sel.lr, sel.kl):
            done.write_text(json.dumps(run_arms(args, s, worlds[s], starts[s], sel), indent=2, default=str))
        results.append(json.loads(done.read_text()))
        r = results[-1]
        print(f"seed {s}: " + ", ".join(f"{k} {100 * r[k]['accuracy']:.1f}%" for k in ARM_LABEL if k in r), flush=True)
    if args.only is not None:  # one seed process: the last call without --only renders
        return ""
    render(args, proto, results, sel, res)
    res.write(args.results)
    text = res.render()
    print(text)
    return text


if __name__ == "__main__":
    main()
