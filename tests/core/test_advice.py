"""Every config change mmrl suggests (mmrl.advice.ADVICE) is a valid override of the config it is given to, and no
module spells a `section.key=value` suggestion outside that registry."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from mmrl.advice import ADVICE, advice
from mmrl.algos.spec import build_algorithm
from mmrl.config import load_config
from mmrl.validate import validate

PKG = Path(__file__).resolve().parents[2] / "mmrl"
SECTIONS = "model|data|rollout|algorithm|train|sft|rectify|rewards"
SUGGESTION = re.compile(rf"\b((?:{SECTIONS})\.[a-z_0-9.]+)=([^\s,;)'\"]+)")


@pytest.mark.parametrize("name", sorted(ADVICE))
def test_every_suggestion_validates(name):
    entry = ADVICE[name]
    overrides = list(entry.given) + advice(name, **entry.example).split()
    cfg = load_config(None, overrides)
    validate(cfg, "train", data_paths=False)
    for o in advice(name, **entry.example).split():  # the suggestion took effect
        key, value = o.split("=", 1)
        obj = cfg
        for part in key.split("."):
            obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
        assert str(obj).lower() == value.lower(), (o, obj)


def test_the_no_signal_advice_is_not_the_old_missing_key():
    from mmrl.train.report import no_signal_warning

    text = no_signal_warning([{"adv/zero_frac": 0.9}] * 8)
    found = SUGGESTION.findall(text)
    assert found == [("algorithm.name", "dapo")], text
    cfg = load_config(["configs/grpo_qwen2_5_vl_3b.yaml"], ["=".join(found[0])])
    assert cfg.algorithm.name == "dapo" and build_algorithm(cfg.algorithm, cfg).max_resample_rounds() > 0


def test_no_module_spells_its_own_suggestion():
    """A `section.key=value` inside a string of any module (help texts aside) is one of ADVICE's overrides."""
    known = {o.split("=", 1)[0] for a in ADVICE.values() for o in a.overrides}
    known_values = {o for a in ADVICE.values() for o in a.overrides}
    stray = []
    for path in sorted(PKG.rglob("*.py")):
        if path.name == "advice.py":
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if "help=" in line or line.lstrip().startswith("#"):
                continue
            for key, value in SUGGESTION.findall(line):
                if f"{key}={value}" in known_values or (key in known and "{" in value):
                    continue
                if re.search(r"(use|set|or|e\.g\.|try|give)\s+" + re.escape(f"{key}={value}"), line):
                    stray.append(f"{path.relative_to(PKG.parent)}:{lineno}: {key}={value}")
    assert not stray, "suggestions outside mmrl.advice.ADVICE:\n" + "\n".join(stray)
