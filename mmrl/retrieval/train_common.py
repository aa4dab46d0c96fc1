"""What the three router stages share: their YAML config, building the router, the optimisation loop with
checkpoints and exact resume, and the per-level evaluation (specs/algorithms.md §6).

A stage is ``loss(router, queries, step, generator) -> (loss, metrics)``; the loop owns the rest. Each
checkpoint (``out_dir/checkpoints/step_NNNNNN/state.pt``) holds the trainable weights (embedder and the special
embeddings), the optimizer, the stage's torch.Generator and the global RNGs, and the corpus embeddings the index
was built from, so a resumed run takes exactly the steps the uninterrupted one would have. ``out_dir/final/
router.pt`` is the stage's result (``init_from`` of the next stage, ``ref_from`` of RL; ``retriever: router`` reads
it with ``config.yaml``); ``final/embedder/`` is its embedder alone (``Embedder.save``: a ``single_step`` model).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mmrl.config import LoraConfig
from mmrl.errors import ConfigError
from mmrl.retrieval.router import Query, Router
from mmrl.retrieval.router_chain import contains_chain
from mmrl.retrieval.train_data import check_spec, load_data

STAGES = ("sft", "imitate", "rl")


@dataclass
class StageData:
    # a query file (mmrl-vhop-queries JSON; it names its corpus), a glob pattern or a list of them: many worlds as
    # one set, each query over its own corpus (mmrl.retrieval.train_data)
    train: Any = ""
    eval: Any = None  # held-out queries (same forms) over their own corpus, evaluated at the end (and every eval_every)
    skip_bad: bool = False  # leave out missing/corrupt images and the queries naming them (counted), else an error


@dataclass
class StageModel:
    path: str = "tiny"  # a Qwen2.5-VL / Qwen2-VL checkpoint, or "tiny" (the embedded tiny model)
    dim: Optional[int] = None  # embedding size of the linear head (None = the backbone's hidden size)
    pooling: str = "mean"  # mean | last
    freeze_vision: bool = False
    max_pixels: int = 112 * 112  # pixel budget per corpus image
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class StageTrain:
    out_dir: str = ""
    steps: int = 100
    batch_size: int = 8  # queries (imitation, RL) or gold states (SFT) per step
    lr: float = 1e-4
    max_grad_norm: float = 1.0
    seed: int = 0
    save_every: int = 50
    keep: int = 2  # checkpoints kept
    index_refresh: int = 10  # re-embed the corpus and rebuild the index every this many steps
    eval_every: int = 0  # 0 = only at the end
    init_from: Optional[str] = None  # a previous stage's out_dir (its final/router.pt)


def _stage_config(stage: str):
    from mmrl.retrieval import train_imitate, train_rl, train_sft

    return {"sft": train_sft.SFTStageConfig, "imitate": train_imitate.ImitateStageConfig,
            "rl": train_rl.RLStageConfig}[stage]


def load_stage_config(stage: str, files: Sequence[str], overrides: Sequence[str] = ()):
    """The stage's typed config from YAML files plus dotted overrides; unknown keys or bad values are a
    ``ConfigError`` naming the key."""
    if stage not in STAGES:
        raise ConfigError(f"router stage {stage!r}: expected one of {', '.join(STAGES)}")
    schema = OmegaConf.structured(_stage_config(stage))
    try:
        layers = [OmegaConf.load(f) for f in files] + [OmegaConf.from_dotlist(list(overrides))]
        cfg = OmegaConf.to_object(OmegaConf.merge(schema, *layers))
    except FileNotFoundError as e:
        raise ConfigError(f"config file not found: {e.filename}") from None
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        raise ConfigError((f"config key '{key}': " if key else "") + str(e).splitlines()[0]) from None
    check_spec(cfg.data.train, "data.train")
    if cfg.data.eval is not None:
        check_spec(cfg.data.eval, "data.eval")
    for key, val in (("model.path", cfg.model.path), ("train.out_dir", cfg.train.out_dir)):
        if not val:
            raise ConfigError(f"config key '{key}' is required")
    if cfg.model.pooling not in ("mean", "last"):
        raise ConfigError(f"config key 'model.pooling' must be 'mean' or 'last', got {cfg.model.pooling!r}")
    for key, val in (("train.steps", cfg.train.steps), ("train.batch_size", cfg.train.batch_size),
                     ("train.save_every", cfg.train.save_every), ("train.index_refresh", cfg.train.index_refresh),
                     ("train.keep", cfg.train.keep), ("router.top_k", cfg.router.top_k),
                     ("router.max_hops", cfg.router.max_hops)):
        if val < 1:
            raise ConfigError(f"config key '{key}' must be >= 1, got {val}")
    if cfg.router.temperature <= 0 or cfg.train.lr <= 0:
        raise ConfigError("config keys 'router.temperature' and 'train.lr' must be > 0")
    cfg.check()
    return cfg


# -- building ----------------------------------------------------------------------------------------------
def load_embedder(m: StageModel):
    from mmrl.retrieval.embedder import Embedder

    return Embedder.from_pretrained(m.path, dim=m.dim, pooling=m.pooling, lora=m.lora,
                                    freeze_vision=m.freeze_vision, max_pixels=m.max_pixels)


def build_router(cfg, corpus) -> Router:
    torch.manual_seed(cfg.train.seed)
    router = Router(load_embedder(cfg.model), corpus, cfg.router, seed=cfg.train.seed)
    if cfg.train.init_from:
        load_router_weights(router, cfg.train.init_from, "train.init_from")
    return router


def trainable_state(router: Router) -> Dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in router.named_parameters() if p.requires_grad}


def save_router(router: Router, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(trainable_state(router), path)


def load_router_weights(router: Router, where: str, key: str) -> None:
    """Load ``final/router.pt`` of the stage run in ``where`` (or a ``router.pt`` file) into ``router``."""
    p = Path(where)
    p = p if p.is_file() else p / "final" / "router.pt"
    if not p.is_file():
        raise ConfigError(f"config key '{key}': no router weights at {p} (run that stage first)")
    state = torch.load(p, weights_only=True)
    missing = [n for n, q in router.named_parameters() if q.requires_grad and n not in state]
    if missing:
        raise ConfigError(f"config key '{key}': {p} lacks {len(missing)} trainable tensors (e.g. {missing[0]}); "
                          "was it trained with another model.* setting?")
    params = dict(router.named_parameters())
    with torch.no_grad():
        for n, t in state.items():
            if n not in params:
                raise ConfigError(f"config key '{key}': {p} holds '{n}', which this router does not have")
            params[n].copy_(t)
    router.index = None


# -- evaluation --------------------------------------------------------------------------------------------
@torch.no_grad()
def evaluate_router(router: Router, queries: Sequence[Query], corpus=None, batch: int = 16) -> Dict[str, float]:
    """Greedy chains on ``queries`` (over ``corpus``, e.g. the held-out split; the router's own corpus and index
    are restored afterwards): success (the chain contains the gold chain) overall and by level, mean hops."""
    kept = (router.corpus, router.index, router._images, router._scoped)
    was_training = router.training
    router.eval()
    try:
        if corpus is not None:
            router.set_corpus(corpus)
        router.refresh_index()
        eps = []
        for s in range(0, len(queries), batch):
            eps += router.rollout(queries[s:s + batch], mode="greedy")
    finally:
        router.corpus, router.index, router._images, router._scoped = kept
        router.train(was_training)
    return success_by_level(queries, [e.chain for e in eps], [e.hops for e in eps])


def success_by_level(queries: Sequence[Query], chains: Sequence[Sequence[str]],
                     hops: Optional[Sequence[int]] = None) -> Dict[str, float]:
    ok = [contains_chain(c, q.chain) for q, c in zip(queries, chains)]
    out = {"success": float(np.mean(ok)) if ok else float("nan"), "n": float(len(ok))}
    for lvl in sorted({q.level for q in queries}):
        sel = [o for o, q in zip(ok, queries) if q.level == lvl]
        out[f"success/L{lvl}"] = float(np.mean(sel))
    if hops is not None:
        out["hops"] = float(np.mean(hops)) if hops else float("nan")
    return out


# -- the loop ----------------------------------------------------------------------------------------------
def _checkpoints(out: Path) -> List[Path]:
    return sorted((out / "checkpoints").glob("step_*"))


def _open_out_dir(out: Path, resume: bool, overwrite: bool) -> Optional[Path]:
    """Resume: the latest checkpoint (an error when there is none); else the folder must be empty or
    ``overwrite`` given."""
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite exclude each other")
    if resume:
        found = _checkpoints(out)
        if not found:
            raise ConfigError(f"--resume: train.out_dir '{out}' holds no checkpoint")
        return found[-1]
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ConfigError(f"train.out_dir '{out}' already holds a run; pass --resume to continue it, "
                              "--overwrite to replace it, or choose another train.out_dir")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return None


def _rng() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def _set_rng(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])


def _save(out: Path, step: int, router: Router, opt, gen: torch.Generator, keep: int) -> None:
    root = out / "checkpoints"
    tmp, final = root / f".tmp_{step:06d}", root / f"step_{step:06d}"
    tmp.mkdir(parents=True, exist_ok=True)
    torch.save({"step": step, "router": trainable_state(router), "optimizer": opt.state_dict(),
                "generator": gen.get_state(), "rng": _rng(), "index_embs": router.index[1]}, tmp / "state.pt")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in _checkpoints(out)[:-keep]:
        shutil.rmtree(old)


def run_stage(cfg, stage_loss: Callable, resume: bool = False, overwrite: bool = False, quiet: bool = False,
              data=None) -> Dict[str, float]:
    """Train one stage; returns the held-out evaluation (``final/eval.json``) when ``data.eval`` is set."""
    out = Path(cfg.train.out_dir)
    ckpt = _open_out_dir(out, resume, overwrite)
    corpus, train_q, held = data or load_data(cfg)
    router = build_router(cfg, corpus)
    params = [p for p in router.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.train.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.train.seed)
    ctx = stage_loss.setup(cfg, router, corpus) if hasattr(stage_loss, "setup") else None
    start = 0
    if ckpt is not None:
        st = torch.load(ckpt / "state.pt", weights_only=False)
        with torch.no_grad():
            named = dict(router.named_parameters())
            for n, t in st["router"].items():
                named[n].copy_(t)
        opt.load_state_dict(st["optimizer"])
        gen.set_state(st["generator"])
        _set_rng(st["rng"])
        router.index = None
        router.refresh_index_from(st["index_embs"])
        start = st["step"]
        if not quiet:
            print(f"mmrl: resuming router {cfg.STAGE} in {out} from step {start}")
    OmegaConf.save(OmegaConf.structured(cfg), out / "config.yaml")
    log = open(out / "metrics.jsonl", "a")
    t0 = time.time()
    for step in range(start, cfg.train.steps):
        if step % cfg.train.index_refresh == 0 and not (ckpt is not None and step == start):
            router.refresh_index()
        router.train()
        loss, metrics = stage_loss(router, train_q, step, gen, ctx)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.train.max_grad_norm)
        opt.step()
        rec = {"step": step + 1, "loss": loss.item(), "grad_norm": float(gnorm), **metrics}
        if held and cfg.train.eval_every and (step + 1) % cfg.train.eval_every == 0 and step + 1 < cfg.train.steps:
            rec.update({f"eval/{k}": v for k, v in evaluate_router(router, held[1], held[0]).items()})
        log.write(json.dumps(rec) + "\n")
        log.flush()
        if not quiet:
            print(f"[{cfg.STAGE}] step {step + 1}/{cfg.train.steps} loss {rec['loss']:.4f} "
                  + " ".join(f"{k} {v:.3g}" for k, v in metrics.items()) + f" ({time.time() - t0:.0f}s)", flush=True)
        if (step + 1) % cfg.train.save_every == 0 or step + 1 == cfg.train.steps:
            _save(out, step + 1, router, opt, gen, cfg.train.keep)
    log.close()
    save_router(router, out / "final" / "router.pt")
    router.embedder.save(str(out / "final" / "embedder"))  # the trained embedder alone (e.g. for single_step)
    result = evaluate_router(router, held[1], held[0]) if held else {}
    (out / "final" / "eval.json").write_text(json.dumps(result, indent=2))
    return result
