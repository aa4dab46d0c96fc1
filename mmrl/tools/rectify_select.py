"""The rectify-SFT setting of ``mmrl rectify``'s pipeline, chosen on a validation split (``rectify.*`` config).

Each candidate is one point of the grid ``rectify.lr x rectify.steps x rectify.teacher_mix`` (an empty list is
``sft.lr``, ``sft.steps``, or 0): the RL stage's final model fine-tuned (multi-turn SFT, ``mmrl.tools.turn_sft``)
for ``steps`` steps at ``lr`` on the rectified scripts plus ``round(teacher_mix x R)`` teacher scripts of other
training samples (R = samples with a rectified script; drawn with ``train.seed``), so the model keeps seeing the
original episodes and drifts less. Every candidate is scored by greedy tool-episode accuracy on ``rectify.val``
(``mmrl.tools.evaluate``), never on ``data.test``; the best wins, ties going to the earlier candidate in grid order
(lr, then steps, then teacher_mix, each in the order listed). The RL stage's own model is scored too, as the
reference the candidates are read against (it is not a candidate).
"""
from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Dict, List, Optional

from mmrl.config import Config
from mmrl.errors import ConfigError


def candidates(cfg: Config) -> List[Dict]:
    r = cfg.rectify
    grid = itertools.product(r.lr or [cfg.sft.lr], r.steps or [cfg.sft.steps], r.teacher_mix or [0.0])
    return [{"tag": f"lr{lr:g}_steps{steps}_mix{mix:g}", "lr": float(lr), "steps": int(steps), "teacher_mix": float(mix)}
            for lr, steps, mix in grid]


def mix_scripts(rectified: str, teacher: str, mix: float, train_ids: set, seed: int, out: Path) -> int:
    """Write the rectified scripts plus ``round(mix x R)`` teacher scripts of training samples without a rectified
    script to ``out``; returns the number of teacher scripts added (all there are if fewer)."""
    from mmrl.tools.turn_sft import read_scripts

    lines = [x for x in Path(rectified).read_text().splitlines() if x.strip()]
    have = {json.loads(x)["id"] for x in lines}
    pool = [r for r in read_scripts(teacher) if r["id"] in train_ids and r["id"] not in have]
    k = min(len(pool), round(mix * len(have)))
    picked = random.Random(seed).sample(pool, k) if k else []
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(x + "\n" for x in lines) + "".join(json.dumps({"id": r["id"], "turns": r["turns"]}) + "\n"
                                                               for r in picked))
    return k


def split_ids(cfg: Config) -> Dict[str, set]:
    """The sample ids of ``data.train`` and ``data.test``."""
    from mmrl.data.annotations import load_samples

    return {key: {s.id for s in load_samples(getattr(cfg.data, key), cfg.data.media_root, on_error="skip")[0]}
            for key in ("train", "test")}


def load_val(cfg: Config, ids_of: Optional[Dict[str, set]] = None):
    """The validation samples; a clip shared with data.train or data.test is a ConfigError naming rectify.val.
    ``ids_of``: ``split_ids(cfg)`` when the caller has it already."""
    from mmrl.data.annotations import load_samples

    val, errors = load_samples(cfg.rectify.val, cfg.data.media_root, on_error="skip")
    if not val:
        raise ConfigError(f"config key 'rectify.val' = {cfg.rectify.val!r}: no loadable sample ({len(errors)} skipped)")
    ids = {s.id for s in val}
    ids_of = ids_of if ids_of is not None else split_ids(cfg)
    for key, other in ids_of.items():
        if ids & other:
            raise ConfigError(f"config key 'rectify.val': {len(ids & other)} samples (e.g. {sorted(ids & other)[0]!r}) "
                              f"are also in data.{key}; a validation split shares no clip with training or test")
    return val, errors


def val_score(model_path: str, cfg: Config, val, errors) -> Dict:
    from mmrl.models.loading import load_model, load_processor
    from mmrl.tools.evaluate import evaluate_tool_episodes

    model = load_model(model_path).eval()
    res = evaluate_tool_episodes(model, load_processor(model_path), val, cfg.data, cfg.rollout.tools,
                                 cfg.rollout.max_new_tokens, load_errors=errors)
    keys = ("accuracy", "call_validity", "calls_per_episode", "seek_iou", "model_tokens_per_episode", "n")
    return {k: res[k] for k in keys if k in res}


def select(cfg: Config, root: Path, start: str, scripts: str, stage, quiet: bool, say=print) -> Dict:
    """Fine-tune ``start`` with every candidate under ``root/sft/<tag>``, score each on ``rectify.val``, write
    ``root/select.json`` and return it (``chosen``: the winning candidate, ``path``: its final model).
    ``stage(cfg, out_dir, **changes)`` makes a stage's config (``rectify_pipeline._stage``). Candidates whose
    ``final/`` exists are not trained again and scores already in ``select.json`` are kept."""
    from mmrl.train.sft import run_sft

    done_path = root / "select.json"
    done = json.loads(done_path.read_text()) if done_path.exists() else {}
    scored = {c["tag"]: c for c in done.get("candidates", []) if "val" in c}
    ids_of = split_ids(cfg)
    val, errors = load_val(cfg, ids_of)
    train_ids = ids_of["train"]
    reference = done.get("reference") or {"model": start, "val": val_score(start, cfg, val, errors)}
    out = []
    for c in candidates(cfg):
        d = root / "sft" / c["tag"]
        if c["tag"] in scored and (d / "final").exists():
            out.append(scored[c["tag"]])
            continue
        turns = scripts
        if c["teacher_mix"] > 0:
            turns = str(root / "sft" / f"{c['tag']}.jsonl")
            c["teacher_added"] = mix_scripts(scripts, cfg.rectify.teacher, c["teacher_mix"], train_ids,
                                             cfg.train.seed, Path(turns))
        if not (d / "final").exists():
            say(f"mmrl rectify: candidate {c['tag']}: SFT in {d}")
            run_sft(stage(cfg, d, model__path=start, sft__turns=turns, sft__lr=c["lr"], sft__steps=c["steps"]),
                    quiet=quiet, resume="auto")
        c["val"] = val_score(str(d / "final"), cfg, val, errors)
        say(f"mmrl rectify: candidate {c['tag']}: validation accuracy {c['val']['accuracy']:.3f}")
        out.append(c)
    best = max(range(len(out)), key=lambda i: (out[i]["val"]["accuracy"], -i))
    result = {"val": cfg.rectify.val, "n_val": len(val), "reference": reference, "candidates": out,
              "chosen": out[best]["tag"], "path": str(root / "sft" / out[best]["tag"] / "final")}
    done_path.write_text(json.dumps(result, indent=2))
    return result
