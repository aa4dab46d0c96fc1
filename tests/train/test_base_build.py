"""``mmrl base build`` at micro scale: bit-identical rebuilds from the seed, the cache reused, the per-attribute
table produced (the full build is the docs' command, not a test)."""
import json

import pytest
import torch
from safetensors.torch import load_file

from mmrl.models.base_recipe import PERCEPTION_ATTRS, BaseRecipe, recipe_hash

MICRO = dict(text_hidden=32, text_layers=1, text_heads=2, text_kv_heads=1, text_intermediate=64, vision_hidden=32,
             vision_layers=1, vision_heads=2, vision_intermediate=64, size=56, n_frames=8, n_train=16, n_test=11,
             steps=4, batch_size=4, lr=1e-3, warmup_steps=0, eval_every=2, num_threads=1)


def _weights(path):
    return load_file(str(path / "model.safetensors"))


@pytest.mark.slow
def test_micro_build_is_bit_identical_cached_and_tabled(tmp_path, monkeypatch, capsys):
    from mmrl.train.base_build import build_base

    monkeypatch.setenv("MMRL_CACHE", str(tmp_path / "a"))
    recipe = BaseRecipe(**MICRO)
    first = build_base(recipe, quiet=True)
    assert first.name == f"base-{recipe_hash(recipe)}"
    out = capsys.readouterr().out
    assert "after step 2/4" in out and "after step 4/4" in out  # an eval after every stage
    table = json.loads((first / "perception.json").read_text())
    rows = table["evals"][-1]["rows"]
    assert set(rows) == set(PERCEPTION_ATTRS) | {"macro"}
    assert all(0.0 <= r["acc"] <= 1.0 and r["n"] == 1 for q, r in rows.items() if q != "macro")
    assert "| time |" in (first / "perception.md").read_text()
    env = json.loads((first / "mmrl_base_recipe.json").read_text())["environment"]  # what identical weights need
    assert env["torch"] == torch.__version__ and env["cpu"] == torch.backends.cpu.get_cpu_capability()
    assert {"cpu model", "transformers", "numpy", "intra-op threads"} <= set(env)

    mtime = (first / "model.safetensors").stat().st_mtime_ns
    assert build_base(recipe, quiet=True) == first  # the cache is reused: nothing rebuilt
    assert (first / "model.safetensors").stat().st_mtime_ns == mtime
    assert "cached at" in capsys.readouterr().out

    from mmrl.train.base_build import build_progress

    prog = build_progress(recipe, per_type=1)  # the build folder's latest checkpoint, evaluated on a subset
    assert prog["step"] == 4 and set(prog["rows"]) == set(PERCEPTION_ATTRS) | {"macro"}
    assert "progress, checkpoint of step 4/4" in capsys.readouterr().out

    monkeypatch.setenv("MMRL_CACHE", str(tmp_path / "b"))
    second = build_base(recipe, quiet=True)  # a fresh cache: rebuilt from the seed alone
    a, b = _weights(first), _weights(second)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    init = load_file(str(tmp_path / "b" / f"base-{recipe_hash(recipe)}.build" / "init" / "model.safetensors"))
    assert any(not torch.equal(a[k], init[k]) for k in a if k in init)  # and it did train


@pytest.mark.slow
def test_a_resumed_build_skips_finished_stages_and_matches_a_fresh_one(tmp_path, monkeypatch, capsys):
    """A build stopped after its first stage (here: the work folder of the same recipe cut at that stage) continues
    from the checkpoint without running that stage or its evaluation again, and ends on the fresh build's weights."""
    import shutil

    from mmrl.models.base_recipe import base_path
    from mmrl.train.base_build import build_base

    monkeypatch.setenv("MMRL_CACHE", str(tmp_path / "a"))
    full, cut = BaseRecipe(**MICRO), BaseRecipe(**dict(MICRO, steps=2))  # constant lr: the first 2 steps are equal
    build_base(cut, quiet=True)
    work = base_path(recipe_hash(full)).with_name(f"base-{recipe_hash(full)}.build")
    shutil.copytree(base_path(recipe_hash(cut)).with_name(f"base-{recipe_hash(cut)}.build"), work)
    capsys.readouterr()
    resumed = build_base(full, quiet=True)
    out = capsys.readouterr().out
    assert "after step 4/4" in out and "after step 2/4" not in out  # stage 1 and its evaluation not run again
    assert [e["step"] for e in json.loads((resumed / "perception.json").read_text())["evals"]] == [2, 4]
    monkeypatch.setenv("MMRL_CACHE", str(tmp_path / "b"))
    a, b = _weights(resumed), _weights(build_base(full, quiet=True))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_an_interrupted_build_resumed_under_more_steps_equals_one_uninterrupted_stage(tmp_path, monkeypatch):
    """The documented build's path at micro scale: a staged build SIGTERM'd mid-stage inside the warm-up (a step
    that is neither a stage end nor a SAVE_EVERY multiple), its work folder renamed to a recipe with more ``steps``
    and resumed, ends on the weights of one uninterrupted stage (``eval_every`` 0): stages, the signal's
    checkpoint, the resume and the recipe's total ``steps`` change nothing (scheduler, AdamW, RNGs, data order)."""
    import os
    import signal

    from mmrl.models.base_recipe import base_path
    from mmrl.train.base_build import build_base
    from mmrl.train.interrupt import Interrupted
    from mmrl.train.metrics import MetricsLogger

    monkeypatch.setenv("MMRL_CACHE", str(tmp_path))
    short, longer = (BaseRecipe(**dict(MICRO, steps=s, warmup_steps=4)) for s in (4, 6))
    log = MetricsLogger.log

    def log_then_signal(self, step, metrics):
        log(self, step, metrics)
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(MetricsLogger, "log", log_then_signal)
    with pytest.raises(Interrupted, match="stopped after step 3"):
        build_base(short, quiet=True)
    monkeypatch.setattr(MetricsLogger, "log", log)
    work = lambda r: base_path(recipe_hash(r)).with_name(f"base-{recipe_hash(r)}.build")  # noqa: E731
    os.replace(work(short), work(longer))
    resumed = _weights(build_base(longer, quiet=True))
    straight = _weights(build_base(BaseRecipe(**dict(MICRO, steps=6, warmup_steps=4, eval_every=0)), quiet=True))
    assert resumed.keys() == straight.keys() and all(torch.equal(resumed[k], straight[k]) for k in resumed)
