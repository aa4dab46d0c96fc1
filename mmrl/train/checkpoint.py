"""Atomic checkpoints (model, optimizer, scheduler, RNG states, data position) and exact resume.

Every file holds tensors and plain containers only (numpy's RNG state is stored as a tensor), and is read back with
``torch.load(weights_only=True)`` (``load_state``): a checkpoint folder someone hands over cannot run code on load.
"""
from __future__ import annotations

import os
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import torch

from mmrl.errors import MMRLError
from mmrl.train.run_dir import mark_owner, prune


def rng_state() -> Dict[str, Any]:
    """torch's, numpy's, Python's and CUDA's RNG states in types ``weights_only=True`` loads: numpy's legacy
    ``(name, uint32 keys, pos, has_gauss, cached_gaussian)`` tuple becomes a dict with the keys as an int64 tensor."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    numpy_state = {"name": str(name), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                   "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
    return {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: Dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    random.setstate(state["python"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def write_checkpoint(out_dir: str, step: int, files: Dict[str, Any], keep: int = 2) -> Path:
    """Write ``files`` (file name -> object for ``torch.save``) as ``out_dir/checkpoints/step_{step:06d}`` through a
    temporary folder and an atomic rename, marked as the current run's; then prune this run's older ones."""
    root = Path(out_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp_step_{step:06d}_{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name, obj in files.items():
        torch.save(obj, tmp / name)
    mark_owner(tmp, out_dir)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    prune(out_dir, keep, final)  # only this run's older checkpoints, never for a foreign one (mmrl.train.run_dir)
    return final


def save_checkpoint(out_dir: str, step: int, model, optimizer, scheduler, extra: Dict[str, Any], keep: int = 2) -> Path:
    """The trainer's checkpoint: ``model.pt`` (the state dict) and ``trainer_state.pt`` (optimizer, scheduler, RNG
    states, step and ``extra``)."""
    trainable = {k: v for k, v in model.state_dict().items()}
    state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict() if scheduler else None,
             "rng": rng_state(), "step": step, **extra}
    return write_checkpoint(out_dir, step, {"model.pt": trainable, "trainer_state.pt": state}, keep)


def latest_checkpoint(out_dir: str) -> Optional[Path]:
    found = sorted((Path(out_dir) / "checkpoints").glob("step_*"))
    return found[-1] if found else None


def load_state(path: Path) -> Any:
    """``torch.load(path, weights_only=True)``: tensors and plain containers; a file holding any other object (a
    pickle that could run code, or a checkpoint of an mmrl older than this format) is an ``MMRLError`` naming it."""
    try:
        return torch.load(path, weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        what = (f"holds {found.group(1)}, which is not a tensor or a plain container" if found
                else "is not a file of tensors and plain containers")
        raise MMRLError(f"checkpoint file {path} {what}: refused (torch.load weights_only=True); use checkpoints "
                        "written by this version of mmrl") from None


def load_checkpoint(path: Path, model, optimizer, scheduler) -> Dict[str, Any]:
    model.load_state_dict(load_state(path / "model.pt"))
    state = load_state(path / "trainer_state.pt")
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])
    set_rng_state(state["rng"])
    return state
