"""Imports point one way: data/media/models -> views/rewards/algos/retrieval -> rollout/tools -> train/eval -> cli.

A module may import (at module level or inside a function) only modules of its own layer or below."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "mmrl"
LAYERS = {
    0: {"errors", "registry", "dist", "data", "media", "models", "advice", "__init__"},
    1: {"views", "rewards", "algos", "config", "retrieval"},
    2: {"rollout", "tools", "stream"},
    3: {"train", "eval", "diagnose"},
    4: {"cli", "demo", "__main__", "validate", "reference"},
}
LAYER_OF = {name: k for k, names in LAYERS.items() for name in names}


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "mmrl" else ""


def test_no_module_imports_a_higher_layer():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        own = path.relative_to(PKG).parts[0].removesuffix(".py")
        assert own in LAYER_OF, f"mmrl/{own} is in no layer: add it to LAYERS in {__file__}"
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names if node.module == "mmrl"]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                top = _top(name)
                if top and LAYER_OF.get(top, -1) > LAYER_OF[own]:
                    bad.append(f"{path.relative_to(PKG.parent)}:{node.lineno} imports {name}")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)
