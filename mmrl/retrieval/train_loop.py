"""The router stages' optimisation loop (specs/algorithms.md §6), on the trainer's run-directory and checkpoint
rules (``mmrl.train.run_dir``, ``mmrl.train.checkpoint``).

A stage is ``loss(router, queries, step, generator) -> (loss, metrics)``; the loop owns the rest. Each checkpoint
(``out_dir/checkpoints/step_NNNNNN/state.pt``, written atomically and owned by its run) holds the trainable weights
(embedder and the special embeddings), the optimizer, the stage's torch.Generator and the global RNGs, and the
corpus embeddings the index was built from, so a resumed run takes exactly the steps the uninterrupted one would
have. ``--overwrite`` deletes only a previous run's artifacts (``run_dir.ARTIFACTS``), never other files.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Dict

import torch
from omegaconf import OmegaConf

from mmrl.retrieval.train_common import build_router, evaluate_router, load_data, save_router, trainable_state
from mmrl.train.checkpoint import load_state, rng_state, set_rng_state, write_checkpoint
from mmrl.train.run_dir import open_run


def run_stage(cfg, stage_loss: Callable, resume: bool = False, overwrite: bool = False, quiet: bool = False,
              data=None) -> Dict[str, float]:
    """Train one stage; returns the held-out evaluation (``final/eval.json``) when ``data.eval`` is set."""
    out = Path(cfg.train.out_dir)
    rd = open_run(str(out), f"router_{cfg.STAGE}", resume=resume, overwrite=overwrite, check_only=True)
    corpus, train_q, held = data or load_data(cfg)  # bad data fails before the folder is touched
    rd = open_run(str(out), f"router_{cfg.STAGE}", resume=resume, overwrite=overwrite,
                  say=(lambda *_: None) if quiet else print)
    router = build_router(cfg, corpus)
    params = [p for p in router.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.train.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.train.seed)
    ctx = stage_loss.setup(cfg, router, corpus) if hasattr(stage_loss, "setup") else None
    ckpt, start = rd.checkpoint, 0
    if ckpt is not None:
        st = load_state(ckpt / "state.pt")
        with torch.no_grad():
            named = dict(router.named_parameters())
            for n, t in st["router"].items():
                named[n].copy_(t)
        opt.load_state_dict(st["optimizer"])
        gen.set_state(st["generator"])
        set_rng_state(st["rng"])
        router.index = None
        router.refresh_index_from(st["index_embs"])
        start = st["step"]
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
            state = {"step": step + 1, "router": trainable_state(router), "optimizer": opt.state_dict(),
                     "generator": gen.get_state(), "rng": rng_state(), "index_embs": router.index[1]}
            write_checkpoint(str(out), step + 1, {"state.pt": state}, cfg.train.keep)
    log.close()
    save_router(router, out / "final" / "router.pt")
    router.embedder.save(str(out / "final" / "embedder"))  # the trained embedder alone (e.g. for single_step)
    result = evaluate_router(router, held[1], held[0]) if held else {}
    (out / "final" / "eval.json").write_text(json.dumps(result, indent=2))
    return result
