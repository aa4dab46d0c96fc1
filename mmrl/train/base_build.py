"""``mmrl base build``: the tiny base that can see, built once per recipe and cached under the recipe's hash.

Steps (``BaseRecipe``, ``mmrl.models.base_recipe``): write the perception corpus (``mmrl.data.synth_perception``),
initialise a Qwen2.5-VL at the recipe's sizes (``mmrl.models.tiny.make_tiny_model``), train it with the SFT trainer
(``mmrl.train.sft.run_sft``) in stages of ``eval_every`` steps, each stage resuming the last one exactly (model,
AdamW, scheduler, RNGs, data position; the learning rate is warm-up then constant, so the stages change nothing),
and print the held-out accuracy per attribute after every stage (``mmrl.eval.perception``). The export lands in
``$MMRL_CACHE/base-<hash>`` with the recipe (``mmrl_base_recipe.json``) and the table (``perception.{json,md}``).

Rebuilt identically from its seed: one seed seeds the corpus, the init and the SFT order; the torch thread count is
pinned (``num_threads``) because CPU kernels sum in a thread-dependent order. An interrupted build resumes from its
work folder (``base-<hash>.build``) on the next call: finished stages (their evaluations in ``evals.json``) are not
run again, the current stage continues from its latest checkpoint.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from mmrl.environment import float_environment
from mmrl.models.base_recipe import (
    RECIPE_FILE,
    BaseRecipe,
    base_path,
    is_built,
    recipe_hash,
)

SAVE_EVERY = 20  # checkpoint period of the build's SFT (not part of the recipe: it changes no weight)


def sft_config(recipe: BaseRecipe, work: Path, steps: int):
    """The SFT run config of a recipe (``steps`` = the end of the current stage)."""
    from mmrl.config import Config

    cfg = Config()
    cfg.model.path = str(work / "init")
    cfg.model.device = "cpu"
    cfg.data.train = str(work / "corpus" / "train.json")
    cfg.data.test = str(work / "corpus" / "test.json")
    cfg.data.nframes = recipe.n_frames
    cfg.data.max_pixels = recipe.size * recipe.size
    cfg.sft.steps, cfg.sft.batch_size, cfg.sft.lr = steps, recipe.batch_size, recipe.lr
    cfg.train.warmup_steps = recipe.warmup_steps
    cfg.train.seed, cfg.train.num_threads = recipe.seed, recipe.num_threads
    cfg.train.micro_batch = recipe.batch_size
    cfg.train.out_dir = str(work / "sft")
    cfg.train.keep_checkpoints = 1
    cfg.train.save_every = SAVE_EVERY  # an interrupted build resumes from here (exact resume: same weights)
    return cfg


def stage_ends(recipe: BaseRecipe) -> List[int]:
    every = recipe.eval_every if 0 < recipe.eval_every < recipe.steps else recipe.steps
    return list(range(every, recipe.steps, every)) + [recipe.steps]


def _eval(path: Path, work: Path, data_cfg) -> Dict[str, Dict]:
    from mmrl.eval.perception import evaluate_perception
    from mmrl.models.loading import load_model, load_processor

    model, processor = load_model(str(path)), load_processor(str(path))
    return evaluate_perception(model, processor, str(work / "corpus" / "test.json"), data_cfg)


def build_base(recipe: BaseRecipe, force: bool = False, quiet: bool = False,
               log: Callable[[str], None] = print) -> Path:
    """Build (or reuse) the base of ``recipe``; returns its checkpoint folder."""
    import torch

    from mmrl.data.synth_perception import make_perception_corpus
    from mmrl.eval.perception import perception_table
    from mmrl.models.tiny import make_tiny_model
    from mmrl.train.sft import run_sft

    recipe.validate()
    digest = recipe_hash(recipe)
    final = base_path(digest)
    if is_built(final) and not force:
        log(f"base {digest}: cached at {final} (recipe unchanged; --force rebuilds)")
        table = final / "perception.md"
        if table.is_file():
            log(table.read_text())
        return final
    work = final.with_name(final.name + ".build")
    if force and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / RECIPE_FILE).write_text(json.dumps({"hash": digest, "recipe": recipe.to_dict()}, indent=2))
    torch.set_num_threads(recipe.num_threads)
    t0 = time.perf_counter()
    if not (work / "corpus" / "test.json").is_file():
        make_perception_corpus(str(work / "corpus"), recipe.n_train, recipe.n_test, recipe.mix, seed=recipe.seed,
                               size=recipe.size, n_frames=recipe.n_frames,
                               abstain_option_rate=recipe.abstain_option_rate, codec="mpeg4",
                               direct_rate=recipe.direct_rate, fixed_options=recipe.fixed_options)
        log(f"base {digest}: corpus written ({recipe.n_train} train, {recipe.n_test} held-out items) "
            f"in {time.perf_counter() - t0:.0f} s")
    if not (work / "init" / "config.json").is_file():
        make_tiny_model(work / "init", recipe.tiny_spec())
    evals = work / "evals.json"
    history = [h for h in (json.loads(evals.read_text()) if evals.is_file() else []) if h["step"] <= recipe.steps]
    done = {h["step"] for h in history}
    t0 -= history[-1]["seconds"] if history else 0.0  # a resumed build's clock continues (an unfinished stage's part is lost)
    for end in stage_ends(recipe):
        if end in done:  # a resumed build: this stage and its evaluation are finished (its checkpoint is gone)
            continue
        cfg = sft_config(recipe, work, end)
        run_sft(cfg, quiet=quiet, resume="auto")  # continues the previous stage (or an interrupted build)
        rows = _eval(Path(cfg.train.out_dir) / "final", work, cfg.data)
        history.append({"step": end, "rows": rows, "seconds": time.perf_counter() - t0})
        log(perception_table(rows, title=f"base {digest}: held-out perception after step {end}/{recipe.steps} "
                                         f"({(time.perf_counter() - t0) / 60:.1f} min)"))
        evals.write_text(json.dumps(history, indent=1))
    export = Path(sft_config(recipe, work, recipe.steps).train.out_dir) / "final"
    tmp = final.with_name(final.name + f".tmp{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(export, tmp)
    last = history[-1]
    (tmp / "perception.json").write_text(json.dumps({"hash": digest, "evals": history}, indent=1))
    (tmp / "perception.md").write_text(perception_table(last["rows"], title=f"base {digest}: held-out perception "
                                                                           f"after {recipe.steps} steps") + "\n")
    (tmp / RECIPE_FILE).write_text(json.dumps({"hash": digest, "recipe": recipe.to_dict(),
                                               "build_seconds": round(last["seconds"], 1),
                                               "environment": float_environment()}, indent=2))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    log(f"base {digest}: built in {last['seconds'] / 60:.1f} min -> {final}")
    return final


def build_progress(recipe: BaseRecipe, per_type: int = 10, log: Callable[[str], None] = print) -> Optional[Dict]:
    """An unfinished build's latest SFT checkpoint (saved every ``SAVE_EVERY`` steps) evaluated on the first
    ``per_type`` held-out items of each attribute, without touching the build; None when there is no checkpoint."""
    import torch

    from mmrl.eval.perception import evaluate_perception, perception_table
    from mmrl.models.loading import load_model, load_processor
    from mmrl.train.checkpoint import latest_checkpoint, load_state
    from mmrl.train.run_dir import checkpoint_step

    digest = recipe_hash(recipe)
    work = base_path(digest).with_name(f"base-{digest}.build")
    ckpt = latest_checkpoint(str(work / "sft")) if (work / "sft").is_dir() else None
    if ckpt is None:
        log(f"base {digest}: no SFT checkpoint yet in {work / 'sft'}")
        return None
    torch.set_num_threads(recipe.num_threads)
    items = json.loads((work / "corpus" / "test.json").read_text())
    subset, seen = [], {}
    for it in items:
        if seen.get(it["qtype"], 0) < per_type:
            subset.append(it)
            seen[it["qtype"]] = seen.get(it["qtype"], 0) + 1
    sub_path = work / "corpus" / f"test_first{per_type}.json"
    sub_path.write_text(json.dumps(subset, indent=1))
    model, processor = load_model(str(work / "init")), load_processor(str(work / "init"))
    model.load_state_dict(load_state(ckpt / "model.pt"))
    model.eval()
    cfg = sft_config(recipe, work, recipe.steps)
    rows = evaluate_perception(model, processor, str(sub_path), cfg.data)
    step = checkpoint_step(ckpt)
    log(perception_table(rows, title=f"base {digest}: progress, checkpoint of step {step}/{recipe.steps}, first "
                                     f"{per_type} held-out items per attribute"))
    return {"step": step, "rows": rows}


def load_table(path: Path) -> Optional[Dict]:
    f = Path(path) / "perception.json"
    return json.loads(f.read_text()) if f.is_file() else None
