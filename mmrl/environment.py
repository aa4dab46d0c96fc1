"""What CPU float results depend on besides the seed and the code: library versions, the CPU kernels torch picked
(``torch.backends.cpu.get_cpu_capability``: AVX-512 and AVX2 kernels round differently) and the thread counts.
Recorded next to artefacts that are meant to be rebuilt identically (the tiny base: ``mmrl base build``)."""
from __future__ import annotations

import platform
from pathlib import Path
from typing import Dict


def package_version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; ``platform.processor()`` where that file is absent)."""
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def float_environment() -> Dict[str, str]:
    """Python, torch and its CPU kernel capability, the CPU model, torch's thread counts, and the versions of the
    libraries that produce the numbers (transformers, numpy, decord, PyAV)."""
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__,
            "cpu": torch.backends.cpu.get_cpu_capability(), "cpu model": cpu_model(),
            "intra-op threads": str(torch.get_num_threads()), "inter-op threads": str(torch.get_num_interop_threads()),
            **{name: package_version(name) for name in ("transformers", "numpy", "decord", "av")}}
