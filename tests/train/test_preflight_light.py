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


def _bad_files(video_world, root: Path) -> dict:
    items = json.loads((video_world / "train.json").read_text())
    for it in items:
        it["video"] = str(video_world / it["video"])

    def write(name, edit):
        copy = json.loads(json.dumps(items))
        edit(copy)
        (root / name).write_text(json.dumps(copy))
        return root / name

    data = open(items[3]["video"], "rb").read()
    (root / "broken.mp4").write_bytes(data[: len(data) // 2])
    (root / "empty.json").write_text("")
    return {"missing-video": (write("a.json", lambda c: c[2].update(video=str(root / "gone.mp4"))), "gone.mp4"),
            "missing-field": (write("b.json", lambda c: c[5].pop("answer")), "'answer': missing"),
            "empty": (root / "empty.json", "empty"),
            "corrupt-mp4": (write("c.json", lambda c: c[3].update(video=str(root / "broken.mp4"))), "broken.mp4")}


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


def test_a_good_config_still_gets_every_check(video_world, tmp_path, capsys, monkeypatch, mmrl_cache):
    """The checks that need the registries run after the pre-flight, still before any weight: a bad algorithm
    parameter, and LoRA targets that name no module of the checkpoint (a meta-device model from its config)."""
    import mmrl.train.rl_trainer as rl

    monkeypatch.setattr(rl, "load_model_and_processor", lambda *a, **k: pytest.fail("weights loaded"))
    base = ["train", "--config", "configs/demo.yaml", f"data.train={video_world / 'train.json'}",
            f"train.out_dir={tmp_path / 'run'}"]
    for extra, culprits in ((["algorithm.params.nope=1"], ["algorithm.params", "nope"]),
                            (["model.lora.enabled=true", "model.lora.target_modules=[q_proj,qkv]"],
                             ["'model.lora.target_modules'", "'qkv'", "choose from", "q_proj", "down_proj"])):
        assert main(base + extra) == 2
        err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert len(err) == 1 and all(c in err[0] for c in culprits), err
