"""Every registry is filled one way (mmrl/registry.py): the decorator returns what it decorates and records its
metadata; each registry names the module of every built-in and loads it on first lookup."""
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "mmrl"
REGISTRIES = {  # module: registry variable (all 12; a new one belongs here)
    "mmrl.views.transforms": "VIEW_TRANSFORMS", "mmrl.rollout.base": "ENGINES", "mmrl.rollout.agent_loop": "AGENT_LOOPS",
    "mmrl.rewards.base": "REWARDS", "mmrl.rewards.verifiers": "VERIFIERS", "mmrl.retrieval.retriever": "RETRIEVERS",
    "mmrl.algos.base": "POLICY_LOSSES", "mmrl.algos.spec": "ALGORITHMS", "mmrl.eval.parsers": "PARSERS",
    "mmrl.eval.hooks": "BENCHMARKS", "mmrl.eval.frame_rules": "FRAME_RULES", "mmrl.tools.registry": "TOOLS",
}
_REGISTERS = re.compile(r"^@(\w+\.register\(|view_transform\(|tool\(|frame_rule\(|register_algorithm\()"
                        r"|register_benchmark\(BenchmarkHooks", re.M)


def _registries():
    return {var: getattr(importlib.import_module(mod), var) for mod, var in REGISTRIES.items()}


def test_every_registry_is_listed_here():
    found = set()
    for path in PKG.rglob("*.py"):
        found |= set(re.findall(r"^(\w+) = Registry\(", path.read_text(), re.M))
    assert found == set(REGISTRIES.values())


def test_every_built_in_is_declared_by_its_registry():
    """Import every module that registers something: each name it registers (from mmrl code) is one its registry
    declares, with that module; and every declared name loads."""
    regs = _registries()
    for path in sorted(PKG.rglob("*.py")):
        if _REGISTERS.search(path.read_text()):
            mod = ".".join(path.relative_to(PKG.parent).with_suffix("").parts)
            if mod != "mmrl.rollout.vllm_engine" or importlib.util.find_spec("vllm"):
                importlib.import_module(mod)
    undeclared = []
    for var, reg in regs.items():
        for name in reg.builtin_names():
            if name == "vllm" and not importlib.util.find_spec("vllm"):
                continue
            assert reg.get(name) is not None
        for name in reg.names():
            obj = reg.get(name)
            module = getattr(obj.load if hasattr(obj, "load") else obj, "__module__", "") or ""  # hooks: their load
            if module.startswith("mmrl.") and reg.builtin_module(name) != module:
                undeclared.append(f"{var}: '{name}' from {module} (declared: {reg.builtin_module(name)})")
    assert not undeclared, "built-ins their registry does not name:\n" + "\n".join(undeclared)


def _entry(*a, **k):
    """A test entry."""


def test_the_decorator_returns_what_it_decorates_and_records_metadata():
    from mmrl.eval.frame_rules import FRAME_RULES, frame_rule, frame_rule_info
    from mmrl.tools import TOOLS, resolve_tool, tool
    from mmrl.views.transforms import VIEW_TRANSFORMS, transform_info, view_transform

    f = _entry
    for reg, name in ((VIEW_TRANSFORMS, "t_shape"), (TOOLS, "t_shape"), (FRAME_RULES, "t_shape")):
        reg._items.pop(name, None)  # the test may run twice in one process (mutation testing)
    assert view_transform("t_shape", effect="destroyed", needs=("boxes",), kinds=("image",))(f) is f
    assert tool("t_shape", {"type": "object"}, "seek")(f) is f
    assert frame_rule("t_shape", uses=("fps",), needs=(), source="here")(f) is f
    info = transform_info("t_shape")
    assert (info.fn, info.effect, info.needs, info.kinds) == (f, "destroyed", ("boxes",), ("image",))
    spec = resolve_tool("t_shape")
    assert (spec.name, spec.fn, spec.schema, spec.description) == ("t_shape", f, {"type": "object"}, "seek")
    assert frame_rule_info("t_shape") == frame_rule_info(f"{__name__}:_entry")
    assert frame_rule_info("t_shape").source == "here"


def test_a_registered_class_keeps_its_identity_and_the_spec_its_name():
    from mmrl.algos.spec import ALGORITHMS, AlgorithmSpec, build_spec, register_algorithm

    class Mine(AlgorithmSpec):
        """A test spec."""

    ALGORITHMS._items.pop("t_mine", None)
    assert register_algorithm("t_mine")(Mine) is Mine and "name" not in vars(Mine)
    assert build_spec("t_mine", {}, None).name == "t_mine"
    assert build_spec("grpo", {}, None).name == "grpo"


def test_built_ins_load_on_first_lookup(tmp_path, monkeypatch):
    (tmp_path / "zz_reg_def.py").write_text("from mmrl.registry import Registry\nREG = Registry('thing', builtins="
                                            "{'zz_reg_builtin': ('b',), 'zz_reg_missing': ('c',)})\n")
    (tmp_path / "zz_reg_builtin.py").write_text("from zz_reg_def import REG\n@REG.register('b', note=1)\n"
                                                "def b():\n    'B.'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = importlib.import_module("zz_reg_def").REG
    assert reg.names() == ["b", "c"] and "b" in reg and "b" not in reg._items  # listed without importing
    assert reg.get("b").__doc__ == "B." and reg.meta("b") == {"note": 1}
    with pytest.raises(ModuleNotFoundError):
        reg.get("c")
    with pytest.raises(KeyError, match=r"unknown thing 'bb'; did you mean 'b'\? known: b, c"):
        reg.get("bb")
