"""Which modules ``model.lora.target_modules`` names, known before any weight loads.

The adapters go on the language model only: peft matches each module name against
``lora_pattern(targets) = .*language_model.*\\.(t1|t2|...)$`` (``re.fullmatch``, peft's rule for a string
``target_modules``). ``check_lora_targets`` builds the checkpoint's model on the ``meta`` device from its
``config.json`` (module tree only, no memory, no weights) and refuses, in one line naming the key, every target that
matches no module peft can adapt (``nn.Linear``, ``nn.Embedding``), listing the names that would. Without it peft
raises its own error after the weights have loaded.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import List, Sequence, Tuple

from mmrl.errors import ConfigError


def lora_pattern(targets: Sequence[str]) -> str:
    """peft's ``target_modules`` regex: the named modules inside the language model (Qwen's vision blocks also have
    q/k/v- and mlp-like names)."""
    return r".*language_model.*\.(" + "|".join(targets) + r")$"


@lru_cache(maxsize=8)
def adaptable_modules(path: str) -> Tuple[str, ...]:
    """Full names of the language model's ``nn.Linear`` / ``nn.Embedding`` modules of the checkpoint at ``path``
    (a resolved folder), from a model built on the ``meta`` device."""
    import torch
    from transformers import AutoConfig

    from mmrl.models.families import model_class

    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = model_class(path)(config)
    kinds = (torch.nn.Linear, torch.nn.Embedding)
    return tuple(n for n, m in model.named_modules() if isinstance(m, kinds) and re.fullmatch(lora_pattern([".*"]), n))


def check_lora_targets(path: str, targets: Sequence[str], key: str = "model.lora.target_modules") -> None:
    """``ConfigError`` naming ``key`` and each target that matches no adaptable module of the language model of the
    checkpoint at ``path`` (a resolved folder), with the valid choices."""
    names = adaptable_modules(str(path))
    bad: List[str] = []
    for t in targets:
        try:
            pattern = re.compile(lora_pattern([t]))
        except re.error as e:
            raise ConfigError(f"config key '{key}': {t!r} is not a valid regular expression ({e})") from None
        if not any(pattern.fullmatch(n) for n in names):
            bad.append(t)
    if bad:
        choices = sorted({n.rsplit(".", 1)[-1] for n in names})
        raise ConfigError(f"config key '{key}': no linear or embedding layer of the language model of {path} matches "
                          f"{', '.join(map(repr, bad))}; choose from {', '.join(choices)}")
