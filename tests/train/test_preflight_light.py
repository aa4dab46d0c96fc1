"""``mmrl train`` / ``mmrl sft`` check the config's keys, the run directory, the machine's packages and the data
before torch, transformers, qwen-vl-utils or DeepSpeed are imported: a bad input costs neither a heavy import nor a
weight load (the timing: bench/fail_fast.py, docs/recipes.md "Fails before it loads")."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mmrl.cli import main
from support import load_bench

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "qwen_vl_utils", "deepspeed", "peft", "vllm")

# each bad input in its own run of the CLI, in one fresh interpreter; prints the heavy modules imported after each
_SCRIPT = """
import json, sys
from mmrl.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    rc = main(argv)
    out.append([rc, [m for m in {heavy!r} if m in sys.modules]])
print(json.dumps(out))
"""


# each bad file the fail-fast bench times (bench/fail_fast.py) and what its one-line error must name
CULPRITS = {"missing video": "gone.mp4", "missing field": "'answer': missing", "empty file": "empty",
            "corrupt MP4": "broken.mp4"}


def _bad_files(video_world, root: Path) -> dict:
    """``{case: (annotation file, what the error names)}`` of ``bench/fail_fast.py``'s bad files."""
    files = load_bench("fail_fast").bad_data(video_world, root)
    return {case: (files[case], culprit) for case, culprit in CULPRITS.items()}


def test_bad_data_stops_before_any_heavy_import(video_world, tmp_path):
    cases = _bad_files(video_world, tmp_path)
    argvs = [[cmd, "--config", "configs/demo.yaml", f"data.train={path}", f"train.out_dir={tmp_path / 'run'}"]
             for cmd in ("train", "sft") for path, _ in cases.values()]
    proc = subprocess.run([sys.executable, "-c", _SCRIPT.format(heavy=HEAVY), json.dumps(argvs)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    errors = [x for x in proc.stderr.splitlines() if x.startswith("mmrl: error: ")]
    assert len(errors) == len(argvs), proc.stderr
    for (rc, heavy), line, (path, culprit) in zip(results, errors, list(cases.values()) * 2):
        assert rc == 2 and heavy == [], (rc, heavy, line)
        assert str(path) in line and culprit in line, line


def test_the_light_layer_imports_nothing_heavy():
    code = ("import sys, mmrl.cli, mmrl.config, mmrl.validate, mmrl.train.preflight, mmrl.media.container, "
            "mmrl.data.annotations, mmrl.train.run_dir; print([m for m in %r if m in sys.modules])" % (HEAVY,))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_good_config_still_gets_every_check(video_world, tmp_path, capsys, monkeypatch, tiny_model_path):
    """The checks that need the registries run after the pre-flight, still before any weight: a bad algorithm
    parameter, and LoRA targets that name no module of the checkpoint (a meta-device model from its config)."""
    import mmrl.train.rl_trainer as rl

    del tiny_model_path  # built first (its progress lines are not the error line); model.path=tiny resolves to it
    monkeypatch.setattr(rl, "load_model_and_processor", lambda *a, **k: pytest.fail("weights loaded"))
    base = ["train", "--config", "configs/demo.yaml", f"data.train={video_world / 'train.json'}",
            f"train.out_dir={tmp_path / 'run'}"]
    for extra, culprits in ((["algorithm.params.nope=1"], ["algorithm.params", "nope"]),
                            (["model.lora.enabled=true", "model.lora.target_modules=[q_proj,qkv]"],
                             ["'model.lora.target_modules'", "'qkv'", "choose from", "q_proj", "down_proj"])):
        assert main(base + extra) == 2
        err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert len(err) == 1 and all(c in err[0] for c in culprits), err


def test_the_launcher_stops_bad_data_before_the_deepspeed_launcher(video_world, tmp_path):
    """scripts/train_*.sh run ``mmrl train --preflight-only`` before ``deepspeed`` (which imports torch and DeepSpeed
    before any rank starts): bad data stops there; good data reaches the launcher (a stand-in that records it).

    The pre-flight looks DeepSpeed up (``find_spec``, before the data: the instant machine check first) and must not
    import it, so the run sees a stand-in package that fails on import: the test needs no DeepSpeed installed, and
    an import of it in the pre-flight would fail it."""
    import os
    import stat

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    marker = tmp_path / "launched"
    for name, body in (("python", f'exec {sys.executable} "$@"'), ("deepspeed", f'echo "$@" > {marker}; exit 99')):
        (bin_ / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / name).chmod((bin_ / name).stat().st_mode | stat.S_IEXEC)
    stand_in = tmp_path / "site" / "deepspeed"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text('raise ImportError("the pre-flight imported deepspeed")\n')
    bad = _bad_files(video_world, tmp_path)["missing field"][0]

    def launch(data):
        env = dict(os.environ, PY=str(bin_ / "python"), MODEL_PATH="tiny", DATA_PATH=str(data),
                   OUT_DIR=str(tmp_path / "out"), PYTHONPATH=os.pathsep.join([str(stand_in.parent), str(ROOT)]))
        return subprocess.run(["bash", "scripts/train_grpo_qwen2_5_vl_3b.sh", "rollout.engine=hf", "model.device=cpu",
                               "data.preflight=sample 2", "data.on_error=raise",
                               "data.nframes=4"],  # the world's clips hold 8 frames: the recipe's 16 would stop it
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)

    p = launch(bad)
    errors = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2 and len(errors) == 1 and "'train-00005'" in errors[0], p.stderr
    assert not marker.exists()
    p = launch(video_world / "train.json")
    assert p.returncode == 99 and "--module mmrl train" in marker.read_text(), p.stdout + p.stderr
    assert "mmrl: data pre-flight: 24 usable items" in p.stdout


def test_gpus_are_counted_only_where_the_config_needs_them(monkeypatch):
    """torch is imported for its GPU count only when the config places work on a GPU (after the data check)."""
    import mmrl.train.preflight as pf
    from mmrl.config import load_config
    from mmrl.errors import ConfigError

    calls = []
    monkeypatch.setattr(pf, "_cuda_count", lambda: calls.append(1) or 0)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    cfg = load_config(["configs/demo.yaml"], registries=False)
    pf.check_gpus(cfg)  # CPU demo, device auto, one rank: nothing to count
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    pf.check_gpus(cfg)  # two ranks on auto: counted (none here, so they run on CPU)
    assert calls == [1]
    cfg.model.device = "cuda"
    with pytest.raises(ConfigError, match="'model.device'"):
        pf.check_gpus(cfg)
    assert calls == [1, 1]
